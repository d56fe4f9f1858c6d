#!/usr/bin/env python3
"""Cuts a kernel's BTF down to a fuzzing seed: the structs, unions and
enums the Linux walks ask about, and every type they hold, with pointers
made `void *` (so nothing is reached through them). What is kept is
byte-for-byte the kernel's records, renumbered.

    scripts/btf-seed.py VMLINUX_BTF OUT

VMLINUX_BTF: a kernel's /sys/kernel/btf/vmlinux, or its .BTF section.
"""
import struct
import sys

# The structs, unions and enums the walks ask about (src/linux).
ROOTS = [
    b"task_struct", b"mm_struct", b"vm_area_struct", b"pid", b"upid",
    b"pid_namespace", b"xa_node", b"maple_tree", b"maple_range_64",
    b"maple_arange_64", b"maple_metadata", b"anon_vma_name", b"file",
    b"path", b"dentry", b"qstr", b"hlist_bl_node", b"mount", b"vfsmount",
    b"inode", b"super_block", b"vm_operations_struct",
    b"vm_special_mapping", b"rb_root", b"rb_node", b"pid_type",
    b"maple_type", b"module", b"module_layout", b"module_memory",
    b"mod_mem_type", b"module_state", b"list_head", b"kernel_symbol",
    b"module_sect_attrs", b"module_sect_attr", b"dentry_operations",
    b"files_struct", b"fdtable", b"socket", b"socket_alloc",
    # Credentials (task_details) and the module address tree.
    b"cred", b"mod_tree_root", b"mod_tree_node",
    # What the kernel says of itself (system.rs) and its log (log/).
    b"uts_namespace", b"new_utsname", b"seqcount_raw_spinlock",
    b"seqcount", b"tk_data", b"timekeeper", b"tk_read_base",
    b"printk_ringbuffer", b"prb_desc", b"printk_info", b"desc_state",
    b"printk_log",
    # What hides (views/): the run queues and thread groups.
    b"rq", b"cfs_rq", b"sched_entity", b"signal_struct", b"cpumask",
    b"rb_root_cached",
    # The network (net/): sockets, namespaces, devices and addresses.
    b"sock", b"sock_common", b"net", b"net_device", b"in_device",
    b"in_ifaddr", b"inet6_dev", b"inet6_ifaddr", b"ns_common",
    # Files from the page cache (page_cache/): a mapping, its page array
    # and the size of struct page.
    b"address_space", b"xarray", b"page",
    # The modules' integrity (modules/, hooks.rs): parameters, sysfs,
    # ftrace callbacks, the system calls' count.
    b"kernel_param", b"kparam_string", b"kset", b"kobject", b"kernfs_node",
    b"kernfs_node_type",
    b"kernfs_elem_dir", b"module_kobject", b"ftrace_ops", b"trace_array",
]
EXTRA = {1: lambda v: 4, 3: lambda v: 12, 4: lambda v: 12 * v,
         5: lambda v: 12 * v, 6: lambda v: 8 * v, 13: lambda v: 8 * v,
         14: lambda v: 4, 15: lambda v: 12 * v, 17: lambda v: 4,
         19: lambda v: 12 * v}
ALIASES = {8, 9, 10, 11, 18}


def main(src, out):
    blob = open(src, "rb").read()
    _, _, _, hdr, toff, tlen, soff, slen = struct.unpack_from("<HBBIIIII", blob)
    types = blob[hdr + toff:hdr + toff + tlen]
    strings = blob[hdr + soff:hdr + soff + slen]
    name = lambda o: strings[o:strings.index(b"\0", o)]
    records = [None]
    at = 0
    while at < len(types):
        info = struct.unpack_from("<I", types, at + 4)[0]
        kind, vlen = (info >> 24) & 0x1F, info & 0xFFFF
        end = at + 12 + EXTRA.get(kind, lambda v: 0)(vlen)
        records.append(bytearray(types[at:end]))
        at = end
    kind = lambda r: (struct.unpack_from("<I", r, 4)[0] >> 24) & 0x1F
    vlen = lambda r: struct.unpack_from("<I", r, 4)[0] & 0xFFFF

    def refs(r):
        """Offsets in the record of the type ids a lookup follows."""
        k = kind(r)
        if k in ALIASES:
            return [8]
        if k == 3:
            return [12, 16]
        if k in (4, 5):
            return [12 + 12 * i + 4 for i in range(vlen(r))]
        return []

    keep, todo = {}, [i for i in range(1, len(records))
                      if kind(records[i]) in (4, 5, 6)
                      and name(struct.unpack_from("<I", records[i])[0]) in ROOTS]
    while todo:
        i = todo.pop()
        if i in keep or i == 0:
            continue
        keep[i] = len(keep) + 1
        todo.extend(struct.unpack_from("<I", records[i], o)[0] for o in refs(records[i]))
    new_strings, offsets = bytearray(b"\0"), {0: 0}

    def restring(o):
        if o not in offsets:
            offsets[o] = len(new_strings)
            new_strings.extend(name(o) + b"\0")
        return offsets[o]

    new_types = bytearray()
    for i in sorted(keep, key=keep.get):
        r = records[i]
        if kind(r) == 2:
            struct.pack_into("<I", r, 8, 0)
        for o in refs(r):
            struct.pack_into("<I", r, o, keep[struct.unpack_from("<I", r, o)[0]])
        struct.pack_into("<I", r, 0, restring(struct.unpack_from("<I", r)[0]))
        step = {4: 12, 5: 12, 6: 8, 19: 12}.get(kind(r))
        for j in range(vlen(r) if step else 0):
            o = 12 + step * j
            struct.pack_into("<I", r, o, restring(struct.unpack_from("<I", r, o)[0]))
        new_types += r
    header = struct.pack("<HBBIIIII", 0xEB9F, 1, 0, 24, 0, len(new_types),
                         len(new_types), len(new_strings))
    open(out, "wb").write(header + new_types + new_strings)
    print(f"{out}: {len(keep)} types, {24 + len(new_types) + len(new_strings)} bytes")


if __name__ == "__main__":
    main(*sys.argv[1:])
