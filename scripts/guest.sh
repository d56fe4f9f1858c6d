#!/usr/bin/env bash
# Boots a small Linux guest under QEMU (TCG) whose RAM is a file in /dev/shm,
# so LeechCore's qemu device can read and write it live.
#
#   scripts/guest.sh [--memory SIZE] [--name NAME] [--dir DIR] [--append ARGS]
#                    [--kaslr] [--kernel FLAVOUR] [--processes N]
#
#   --memory SIZE  guest RAM, in QEMU's units (default 256M); from 3.5G on,
#                  RAM past 3 GiB sits above the PCI hole, from 4 GiB up
#   --name NAME    the RAM file is /dev/shm/NAME (default leechio-guest-PID)
#   --dir DIR      folder for the QMP sockets and the serial log (default
#                  /tmp/NAME); must not exist: created, and removed at the end
#   --append ARGS  extra kernel arguments, after the defaults; e.g.
#                  'memmap=2M$0xC000000' keeps the guest off 2 MiB of RAM at
#                  192 MiB (what `make bench` writes its pointer chains into)
#   --kaslr        boot without `nokaslr`: the kernel's physical load
#                  address, its virtual base and the direct map's base
#                  (page_offset_base) each move at random
#   --kernel FLAVOUR  `default` (target/guest/vmlinuz, Debian's
#                  linux-image-amd64) or `cloud` (target/guest/vmlinuz-cloud,
#                  linux-image-cloud-amd64: same version, another config, so
#                  other struct layouts); both from `make setup`
#   --cpu MODEL    QEMU's CPU model (default qemu64); `max` has LA57, so
#                  the kernel runs with 5-level paging (CR4.LA57 set)
#   --processes N  start N more processes (`sleep 300000+I`, I from 1 to N,
#                  at most 2000) with pids from 5000 up, so the pid table
#                  needs a third level; listed in the oracle like the rest
#
# It prints one `key=value` line each for: device (the LeechCore device
# string), monitor (a second QMP socket, for tools and tests: QMP serves one
# client at a time), serial (the console log), shm (the RAM file) and pid
# (QEMU's), then `ready` once the guest's /init has printed everything
# below (about 6 s).
#
# What the guest prints (its serial log), from inside, before `ready`:
#   leechio-guest: <kallsyms lines of _text and init_top_pgt, on one line>
#   leechio-oracle: pattern pid=PID start=HEX end=HEX
#       the pattern process (scripts/guest-pattern.c): START..END holds
#       pattern_word(VA) at each 8-byte VA; START..MID rw-p, MID..END r--p
#   leechio-oracle: version <line of /proc/version>
#   leechio-oracle: cmdline <the kernel's command line>
#   leechio-oracle: btf SIZE | btf none    (/sys/kernel/btf/vmlinux)
#   leechio-oracle: vmcoreinfo 0xADDRESS HEX | vmcoreinfo none
#       (/sys/kernel/vmcoreinfo: where the kernel's own VMCOREINFO ELF note
#       is, physical, and the room it has)
#   leechio-oracle: symbol NAME HEX TYPE   (one per /proc/kallsyms line of
#       _text, init_top_pgt, init_task, init_pid_ns, page_offset_base,
#       vmalloc_base, __pgtable_l5_enabled,
#       __start_BTF, __stop_BTF, linux_banner, vmcoreinfo_data,
#       vmcoreinfo_size and the kallsyms_* tables the kernel lists, of
#       init_uts_ns, tk_core, saved_command_line, saved_command_line_len,
#       prb, printk_rb_static, printk_rb_dynamic, log_buf and log_buf_len,
#       and of crc7_be and crc_itu_t, which the modules
#       below export)
#   leechio-oracle: module <line of /proc/modules>
#       the modules /init loads first: those `make setup` keeps for the
#       kernel booted (target/guest/modules/RELEASE/*.ko: crc7, crc-itu-t
#       and dummy where the kernel package has them)
#   leechio-oracle: task pid=N tgid=N ppid=N state=C kthread=0|1 sched=HEX cmdline=HEX
#           uid=R,E,S,F gid=R,E,S,F caps=INH,PRM,EFF,BND,AMB start=TICKS environ=HEX
#       one per thread of every process (/proc/*/task/*): stat, status'
#       Tgid, Uid, Gid and Cap* lines, PF_KTHREAD from stat's flags,
#       stat's start time (clock ticks since boot); the first 64 bytes of
#       sched, and cmdline and (but for kernel threads) environ, as bytes
#       in hex. sched's first line is
#       `COMM (PID, #threads: N)` with task_struct.comm as the kernel keeps
#       it (comm, stat and status show a kernel thread's full name and a
#       workqueue worker's current work instead); cmdline has its NULs:
#       arguments end in a NUL each
#   leechio-oracle: map PID <line of /proc/PID/maps>
#       for pid 1 (/init), `sleep 100001`, the shell `leechio-args ...`
#       and the pattern process
#   leechio-oracle: fd PID FD POS FLAGS INO NAME
#       one per open fd of every process but the --processes ones:
#       /proc/PID/fdinfo/FD's pos, flags (octal) and ino (- where the
#       kernel gives none), and readlink /proc/PID/fd/FD (the rest of the
#       line: a path, `socket:[INO]`, `anon_inode:[eventfd]`...)
#   leechio-oracle: uname KEY VALUE   (KEY sysname, nodename, release,
#       version, machine, domainname: /proc/sys/kernel's ostype, hostname,
#       osrelease, version, domainname, and `uname -m`; /init sets the host
#       name leechio-guest and the domain name leechio.test first)
#   leechio-oracle: btime N   (/proc/stat's)
#   leechio-oracle: clock uptime=S.HH now=N   (/proc/uptime's first
#       number, then `date +%s`, read one after the other)
#   leechio-oracle: dmesg HEX   (one per line busybox `dmesg` prints, its
#       bytes in hex, without the newline)
#   leechio-oracle: dmesg-end lines=N   (how many dmesg lines)
#   leechio-oracle: socket PROTO <line of /proc/net/PROTO>   (PROTO tcp,
#       tcp6, udp, udp6; every line but the header)
#   leechio-oracle: iface NAME INDEX ADDRESS MTU FLAGS TYPE   (one per
#       /sys/class/net/NAME: its ifindex, address, mtu, flags, type)
#   leechio-oracle: inet <line of `ip -o -4 addr`>
#   leechio-oracle: inet6 <line of /proc/net/if_inet6>
#   leechio-oracle: net-end sockets=N interfaces=N inet=N inet6=N   (how
#       many lines of each)
#   leechio-oracle: cache ino=N dev=N size=N links=N blocks=N sha256=HEX path=PATH
#       one per file of /leechio-cache (small.txt, pages.txt, holes.bin
#       with a hole of three pages, and deleted.log, which `sleep 100005`
#       holds open at fd 3 and which is then unlinked: PATH is its fd's
#       readlink, `... (deleted)`): stat's inode, device (st_dev, in
#       decimal), size, links and 512-byte blocks, and the SHA-256 of its
#       bytes
#   leechio-oracle: cache-end files=N   (how many cache lines)
#   leechio-oracle: tainted N   (/proc/sys/kernel/tainted)
#   leechio-oracle: module-taint NAME LETTERS   (/sys/module/NAME/taint of
#       each module of /proc/modules; crc7 is loaded unsigned: E)
#   leechio-oracle: param NAME PARAM VALUE   (/sys/module/NAME/parameters/*
#       of each module of /proc/modules)
#   leechio-oracle: parmtype NAME PARAM TYPE   (each parameter a module
#       file declares, from its .modinfo's parmtype=; sysfs shows only
#       those with permissions)
#   leechio-oracle: param-given NAME PARAM VALUE   (what /init gave insmod)
#   leechio-oracle: integrity-end taints=N params=N parmtypes=N sysmodule=N
#       (how many lines of each; sysmodule: the directories of /sys/module,
#       a module's or a built-in's)
#   leechio-oracle: end tasks=N maps=N symbols=N modules=N fds=N   (how
#       many lines of each)
#   leechio-guest: ready
# The processes it starts (children of /init; they run for ever): `sleep
# 100001`; the shell `sh -c 'while :; do sleep 100002; done' leechio-args
# ...` with a command line of 5 KiB (spaces, parentheses, UTF-8, a tab, an
# empty argument); the 32-bit process `leechio-32bit` (where the kernel
# runs 32-bit code); `sleep 100003` as user 1001 (group 1002); `sleep
# 100004` with the ambient capability CAP_NET_RAW and the environment
# LEECHIO_ENV=one, LEECHIO_SPACE=two words; `sleep 100005` holding the
# unlinked /leechio-cache/deleted.log open at fd 3; the pattern process, comm
# "leech (pat) x", with two threads (leechio-thr-1, -2), a stopped child
# and a zombie child, and open files of every kind (in /leechio-files/,
# pipes, sockets...). The
# oracle is printed by a subshell that leaves itself out, and /init then
# waits for its children: no user process starts or ends after the oracle,
# and /init's own state (S) is the same before and after.
#
# The guest runs until this script's standard input ends (Ctrl-D, or the
# process that started it dies) or a line `stop` comes, or the script gets
# SIGINT, SIGTERM or SIGHUP. Then QEMU is stopped and the RAM file and DIR
# are removed. QEMU also gets SIGKILL if this script dies (parent-death
# signal); when QEMU exits by itself, the script cleans up and exits 1.
#
# Needs what `make setup` installs: qemu-system-x86, busybox-static, cpio,
# gcc with static glibc, and the kernels in target/guest/.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
memory=256M
name=
dir=
append=
kaslr=nokaslr
flavour=default
cpu=qemu64
processes=0

die() { printf 'guest.sh: %s\n' "$*" >&2; exit 2; }

while [ $# -gt 0 ]; do
    case "$1" in
        --memory) memory=${2:?--memory needs a size}; shift 2 ;;
        --name) name=${2:?--name needs a name}; shift 2 ;;
        --dir) dir=${2:?--dir needs a folder}; shift 2 ;;
        --append) append=${2?--append needs kernel arguments}; shift 2 ;;
        --kaslr) kaslr=; shift ;;
        --kernel) flavour=${2:?--kernel needs a flavour}; shift 2 ;;
        --cpu) cpu=${2:?--cpu needs a model}; shift 2 ;;
        --processes) processes=${2:?--processes needs a count}; shift 2 ;;
        -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
        *) die "unknown argument $1 (see --help)" ;;
    esac
done
name=${name:-leechio-guest-$$}
dir=${dir:-/tmp/$name}
case "$name" in */* | *,* | .* | '') die "bad name '$name'" ;; esac
case "$dir" in *,*) die "the folder may not contain a comma (it goes into a device string)" ;; esac
case "$processes" in '' | *[!0-9]*) die "--processes needs a number" ;; esac
[ "$processes" -le 2000 ] || die "--processes: at most 2000"

guest=$here/target/guest
case "$flavour" in
    default) kernel=$guest/vmlinuz ;;
    cloud) kernel=$guest/vmlinuz-cloud ;;
    *) die "unknown kernel flavour '$flavour' (default or cloud)" ;;
esac
[ -f "$kernel" ] || die "no guest kernel at $kernel: run make setup"
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 not found: run make setup"
[ -x /bin/busybox ] || die "/bin/busybox not found: run make setup"

# The initramfs: busybox (with a link per applet, so processes have their
# applets' names), the pattern process (scripts/guest-pattern.c, linked
# statically), a 32-bit process (scripts/guest-32bit.S), the modules of each kernel in target/guest/modules/ (in
# /lib/modules/RELEASE/) and /init, which mounts proc, sys and dev, starts the test
# processes, prints the oracle and the marker lines and sleeps. Rebuilt when
# this script, the pattern process's source or busybox is newer; built under
# a temporary name and renamed, so guests starting at once never see half a
# file.
initramfs=$guest/initramfs.cpio.gz
pattern_source=$here/scripts/guest-pattern.c
compat_source=$here/scripts/guest-32bit.S
if [ ! -s "$initramfs" ] || [ "$0" -nt "$initramfs" ] || [ "$pattern_source" -nt "$initramfs" ] ||
    [ "$compat_source" -nt "$initramfs" ] ||
    [ /bin/busybox -nt "$initramfs" ] || [ "$guest/modules" -nt "$initramfs" ]; then
    command -v gcc >/dev/null || die "gcc not found (it builds the guest's pattern process): run make setup"
    build=$(mktemp -d "$guest/initramfs.XXXXXX")
    mkdir -p "$build/root/bin" "$build/root/proc" "$build/root/sys" "$build/root/dev"
    cp /bin/busybox "$build/root/bin/busybox"
    for applet in $(/bin/busybox --list); do
        [ "$applet" = busybox ] || ln -s busybox "$build/root/bin/$applet"
    done
    if [ -d "$guest/modules" ]; then
        mkdir -p "$build/root/lib"
        cp -r "$guest/modules" "$build/root/lib/modules"
        # crc7 without its signature: the kernel loads it (signatures are
        # not enforced) and taints it and itself with E (unsigned), so the
        # taint read has letters to match. The signature is appended:
        # the module, the signature, 12 bytes of `struct module_signature`
        # (whose last 4 are the signature's length, big-endian), then the
        # marker line.
        for ko in "$build"/root/lib/modules/*/crc7.ko; do
            [ -f "$ko" ] && [ "$(tail -c 28 "$ko")" = "~Module signature appended~" ] || continue
            sig=$(tail -c 32 "$ko" | head -c 4 | od -An -tu1 | awk '{ print $1 * 16777216 + $2 * 65536 + $3 * 256 + $4 }')
            keep=$(($(wc -c <"$ko") - 28 - 12 - sig))
            head -c "$keep" "$ko" >"$ko.unsigned" && mv "$ko.unsigned" "$ko"
        done
    fi
    gcc -static -O2 -pthread -o "$build/root/bin/leechio-pattern" "$pattern_source" ||
        { rm -rf "$build"; die "cannot build the pattern process (static glibc comes with libc6-dev)"; }
    { as --32 -o "$build/32bit.o" "$compat_source" &&
        ld -m elf_i386 -o "$build/root/bin/leechio-32bit" "$build/32bit.o"; } ||
        { rm -rf "$build"; die "cannot build the 32-bit process (binutils, with gcc)"; }
    cat >"$build/root/init" <<'INIT'
#!/bin/busybox sh
# The guest's /init: see "What the guest prints" in scripts/guest.sh.
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
exec </dev/console >/dev/console 2>&1
# A host name and domain name of the guest's own, for the kernel's names
# (`leechio system`) to be checked by.
hostname leechio-guest
echo leechio.test >/proc/sys/kernel/domainname
# Kernel messages would land inside the lines below; real addresses in
# /proc/kallsyms, whatever the kernel's default.
echo 1 >/proc/sys/kernel/printk
echo 0 >/proc/sys/kernel/kptr_restrict
# The modules of this kernel, so /proc/modules and kallsyms list some.
read -r release </proc/sys/kernel/osrelease
# dummy's one parameter (numdummies, not in sysfs) is given, as its
# default, for its value to be known.
for module in /lib/modules/"$release"/*.ko; do
    [ -e "$module" ] || continue
    args=
    case "$module" in */dummy.ko) args=numdummies=1 ;; esac
    insmod "$module" $args || echo "leechio-oracle: error cannot load $module"
done
# The network: the loopback device up (the pattern process's sockets are
# on it), and dummy0 (the dummy module's device, where the kernel has it)
# with a hardware address, an IPv4 and an IPv6 address of its own.
ip link set lo up
if [ -e /sys/class/net/dummy0 ]; then
    ip link set dummy0 address 02:00:5e:10:00:01
    ip addr add 192.0.2.1/24 dev dummy0
    ip addr add 2001:db8::1/64 dev dummy0
    ip link set dummy0 up
fi
# The kernel symbols the tests check, in one pass over /proc/kallsyms: awk
# looks each name up in a table (grep -w with many patterns takes seconds
# under TCG).
awk 'BEGIN {
    split("_text _stext init_top_pgt init_task init_pid_ns page_offset_base vmalloc_base " \
        "__pgtable_l5_enabled __start_BTF " \
        "__stop_BTF linux_banner kallsyms_num_syms kallsyms_names kallsyms_token_table " \
        "kallsyms_token_index kallsyms_offsets kallsyms_relative_base kallsyms_markers " \
        "kallsyms_addresses kallsyms_seqs_of_names vmcoreinfo_data vmcoreinfo_size " \
        "crc7_be crc_itu_t " \
        "init_uts_ns tk_core saved_command_line saved_command_line_len prb " \
        "printk_rb_static printk_rb_dynamic log_buf log_buf_len", names, " ")
    for (i in names) wanted[names[i]] = 1
} $3 in wanted' /proc/kallsyms >/symbols
echo "leechio-guest: $(grep -w -e _text -e init_top_pgt /symbols | tr '\n' ' ')"

# The test processes, children of this shell; they run for ever.
sleep 100001 &
sleep_pid=$!
# A command line longer than a page: spaces, UTF-8, an empty argument.
sh -c 'while :; do sleep 100002; done' leechio-args 'two words' '(paren) ) (' \
    'ünïcödé ✓ λ' '' "tab	and 'quotes'" $(seq 1000001 1000600) last-argument &
args_pid=$!
# A 32-bit process, where the kernel runs them (CONFIG_IA32_EMULATION).
leechio-32bit &
# Other credentials: a user's process (uid 1001, gid 1002, no
# capabilities), and root's with an inheritable and ambient capability
# and an environment of its own.
mkdir -p /etc
echo 'leech:x:1001:1002::/:/bin/sh' >>/etc/passwd
su -s /bin/sh leech -c 'exec sleep 100003' &
env -i LEECHIO_ENV=one 'LEECHIO_SPACE=two words' \
    setpriv --inh-caps +net_raw --ambient-caps +net_raw /bin/sleep 100004 &
# Files for the page cache (leechio cache), in the root file system,
# whose files live in the page cache alone: a short one, one of several
# pages, one whose first three pages are a hole (no page cached), and a
# log that a process holds open and that is then unlinked.
mkdir /leechio-cache
echo 'leechio: a file in the page cache' >/leechio-cache/small.txt
seq 1 6000 >/leechio-cache/pages.txt
echo 'after a hole of three pages' | dd of=/leechio-cache/holes.bin bs=4096 seek=3 2>/dev/null
seq 100000 103000 >/leechio-cache/deleted.log
# Opened here and inherited, so it is open before it is removed (a
# redirection of the background command would open it in the child,
# maybe after the rm).
exec 3</leechio-cache/deleted.log
sleep 100005 &
cache_pid=$!
exec 3<&-
rm /leechio-cache/deleted.log
mkfifo /pattern.fifo
leechio-pattern >/pattern.fifo &
pattern_pid=$!
if read -r pattern_start pattern_end </pattern.fifo; then
    echo "leechio-oracle: pattern pid=$pattern_pid start=$pattern_start end=$pattern_end"
else
    echo "leechio-oracle: error the pattern process did not start"
fi
rm -f /pattern.fifo
# More processes when the kernel's command line asks (guest.sh
# --processes), with pids from 5000 up.
extra=0
read -r kernel_cmdline </proc/cmdline
for word in $kernel_cmdline; do
    case "$word" in leechio.processes=*) extra=${word#*=} ;; esac
done
if [ "$extra" -gt 0 ]; then
    echo 4999 >/proc/sys/kernel/ns_last_pid
    i=1
    while [ "$i" -le "$extra" ]; do
        sleep $((300000 + i)) &
        i=$((i + 1))
    done
fi

# What /proc says: the kernel, its symbols, then every task and the maps of
# the user processes that start above. Counted, so a lost line shows. A
# subshell prints it, and leaves itself out: /init waits meanwhile, in the
# state it keeps afterwards. One group to the end of this file, so the
# shell has read all of it before the subshell looks: its position in the
# file (its fd 10, in the oracle) stays.
{
(
read -r self _ </proc/self/stat
read -r version </proc/version
echo "leechio-oracle: version $version"
read -r cmdline </proc/cmdline
echo "leechio-oracle: cmdline $cmdline"
if [ -e /sys/kernel/btf/vmlinux ]; then
    echo "leechio-oracle: btf $(wc -c </sys/kernel/btf/vmlinux)"
else
    echo "leechio-oracle: btf none"
fi
if [ -e /sys/kernel/vmcoreinfo ]; then
    read -r note </sys/kernel/vmcoreinfo
    echo "leechio-oracle: vmcoreinfo $note"
else
    echo "leechio-oracle: vmcoreinfo none"
fi
symbols=0
# (A module's symbol has its module's name, `[crc7]`, after it.)
while read -r address type name _; do
    echo "leechio-oracle: symbol $name $address $type"
    symbols=$((symbols + 1))
done </symbols
tasks=0
for task in /proc/[0-9]*/task/[0-9]*; do
    case "$task" in "/proc/$self/"*) continue ;; esac
    IFS= read -r stat <"$task/stat" || continue
    tgid=
    while read -r key value; do
        case "$key" in
            Tgid:) tgid=$value ;;
            Uid:) set -- $value; uid=$1,$2,$3,$4 ;;
            Gid:) set -- $value; gid=$1,$2,$3,$4 ;;
            CapInh:) caps=$value ;;
            CapPrm: | CapEff: | CapBnd: | CapAmb:) caps=$caps,$value ;;
        esac
    done <"$task/status"
    # "pid (comm) state ppid pgrp session tty_nr tpgid flags ...": comm may
    # hold spaces and parentheses, the fields after the last ") " do not.
    set -- ${stat##*) }
    kthread=0
    [ $(($7 & 0x200000)) -ne 0 ] && kthread=1 # PF_KTHREAD
    sched=$(hexdump -v -n 64 -e '1/1 "%02x"' "$task/sched" 2>/dev/null)
    [ -n "$sched" ] || continue # the thread ended
    cmdline=$(hexdump -v -e '1/1 "%02x"' "$task/cmdline")
    environ=
    [ "$kthread" = 0 ] && environ=$(hexdump -v -e '1/1 "%02x"' "$task/environ")
    echo "leechio-oracle: task pid=${stat%% *} tgid=$tgid ppid=$2 state=$1 kthread=$kthread sched=$sched cmdline=$cmdline uid=$uid gid=$gid caps=$caps start=${20} environ=$environ"
    tasks=$((tasks + 1))
done
maps=0
for pid in 1 $sleep_pid $args_pid $pattern_pid; do
    while IFS= read -r line; do
        echo "leechio-oracle: map $pid $line"
        maps=$((maps + 1))
    done <"/proc/$pid/maps"
done
modules=0
while IFS= read -r line; do
    echo "leechio-oracle: module $line"
    modules=$((modules + 1))
done </proc/modules
fds=0
for dir in /proc/[0-9]*; do
    pid=${dir#/proc/}
    [ "$pid" = "$self" ] && continue
    [ "$extra" -gt 0 ] && [ "$pid" -ge 5000 ] && continue
    for fd in "$dir"/fd/*; do
        link=$(readlink "$fd") || continue
        pos=- flags=- ino=-
        while read -r key value; do
            case "$key" in
                pos:) pos=$value ;;
                flags:) flags=$value ;;
                ino:) ino=$value ;;
            esac
        done <"$dir/fdinfo/${fd##*/}"
        echo "leechio-oracle: fd $pid ${fd##*/} $pos $flags $ino $link"
        fds=$((fds + 1))
    done
done
# The network: sockets, devices and their addresses.
sockets=0
for proto in tcp tcp6 udp udp6; do
    [ -e "/proc/net/$proto" ] || continue
    while read -r line; do
        case "$line" in sl*) continue ;; esac
        echo "leechio-oracle: socket $proto $line"
        sockets=$((sockets + 1))
    done <"/proc/net/$proto"
done
interfaces=0
for dir in /sys/class/net/*; do
    read -r index <"$dir/ifindex"
    read -r address <"$dir/address"
    read -r mtu <"$dir/mtu"
    read -r flags <"$dir/flags"
    read -r type <"$dir/type"
    echo "leechio-oracle: iface ${dir##*/} $index $address $mtu $flags $type"
    interfaces=$((interfaces + 1))
done
ip -o -4 addr >/inet.txt
inet=0
while IFS= read -r line; do
    echo "leechio-oracle: inet $line"
    inet=$((inet + 1))
done </inet.txt
rm -f /inet.txt
inet6=0
while IFS= read -r line; do
    echo "leechio-oracle: inet6 $line"
    inet6=$((inet6 + 1))
done <"$(if [ -e /proc/net/if_inet6 ]; then echo /proc/net/if_inet6; else echo /dev/null; fi)"
echo "leechio-oracle: net-end sockets=$sockets interfaces=$interfaces inet=$inet inet6=$inet6"
# What the kernel says of itself, and its log: each dmesg line in hex
# (od's 16 bytes a line, joined by awk up to each newline).
for key in ostype:sysname hostname:nodename osrelease:release version:version domainname:domainname; do
    IFS= read -r value </proc/sys/kernel/${key%%:*}
    echo "leechio-oracle: uname ${key#*:} $value"
done
echo "leechio-oracle: uname machine $(uname -m)"
while read -r key value; do
    [ "$key" = btime ] && echo "leechio-oracle: btime $value"
done </proc/stat
read -r uptime _ </proc/uptime
echo "leechio-oracle: clock uptime=$uptime now=$(date +%s)"
dmesg >/dmesg.txt
od -An -v -tx1 /dmesg.txt | awk '
    { for (i = 1; i <= NF; i++) if ($i == "0a") { print "leechio-oracle: dmesg " line; line = ""; n++ } else line = line $i }
    END { if (line != "") { print "leechio-oracle: dmesg " line; n++ } print "leechio-oracle: dmesg-end lines=" n + 0 }'
rm -f /dmesg.txt
# The page cache's files: each one's inode, size, links, 512-byte blocks
# (tmpfs counts a page cached as 8) and SHA-256, as the guest sees them;
# the deleted log through the fd that holds it.
cached=0
for file in /leechio-cache/small.txt /leechio-cache/pages.txt /leechio-cache/holes.bin /proc/$cache_pid/fd/3; do
    name=$file
    [ -h "$file" ] && name=$(readlink "$file")
    sum=$(sha256sum <"$file")
    echo "leechio-oracle: cache $(stat -L -c 'ino=%i dev=%d size=%s links=%h blocks=%b' "$file") sha256=${sum%% *} path=$name"
    cached=$((cached + 1))
done
echo "leechio-oracle: cache-end files=$cached"
# The modules' taint and parameters, and the kernel's taint.
# (cat: a sysctl number read a byte at a time, as `read` does, gives its
# first digit only.)
echo "leechio-oracle: tainted $(cat /proc/sys/kernel/tainted)"
taints=0 params=0 parmtypes=0 entries=0
while read -r name _; do
    IFS= read -r letters <"/sys/module/$name/taint" || letters=
    echo "leechio-oracle: module-taint $name $letters"
    taints=$((taints + 1))
    for file in /sys/module/"$name"/parameters/*; do
        [ -f "$file" ] || continue
        IFS= read -r value <"$file" || value=
        echo "leechio-oracle: param $name ${file##*/} $value"
        params=$((params + 1))
    done
done </proc/modules
for module in /lib/modules/"$release"/*.ko; do
    [ -e "$module" ] || continue
    name=$(basename "$module" .ko | tr - _)
    for word in $(strings "$module" | grep '^parmtype='); do
        word=${word#parmtype=}
        echo "leechio-oracle: parmtype $name ${word%%:*} ${word#*:}"
        parmtypes=$((parmtypes + 1))
    done
    case "$name" in dummy) echo "leechio-oracle: param-given dummy numdummies 1" ;; esac
done
# (Directories only: 6.12 keeps a file there too, `compression`.)
for entry in /sys/module/*; do
    if [ -d "$entry" ]; then entries=$((entries + 1)); fi
done
echo "leechio-oracle: integrity-end taints=$taints params=$params parmtypes=$parmtypes sysmodule=$entries"
echo "leechio-oracle: end tasks=$tasks maps=$maps symbols=$symbols modules=$modules fds=$fds"
)
echo "leechio-guest: ready"
# The test processes run for ever: `wait` returns only if they all end.
while :; do wait; sleep 3600; done
}
INIT
    chmod 0755 "$build/root/init"
    (cd "$build/root" && find . | cpio -o -H newc --quiet | gzip -6) >"$build/initramfs.cpio.gz"
    mv -f "$build/initramfs.cpio.gz" "$initramfs"
    rm -rf "$build"
fi

extra_processes=
[ "$processes" -gt 0 ] && extra_processes=" leechio.processes=$processes"
shm=/dev/shm/$name
[ -e "$shm" ] && die "$shm already exists (another guest of that name?)"
# The folder is removed with everything in it when the guest stops: only a
# new one is taken.
[ -e "$dir" ] && die "$dir already exists; give a --dir that does not (it is removed when the guest stops)"
mkdir -p "$dir"
serial=$dir/serial.log
qemu=

# Whether QEMU still runs (its zombie counts as gone).
running() {
    local s
    s=$(awk '{print $3}' "/proc/$qemu/stat" 2>/dev/null) || return 1
    [ -n "$s" ] && [ "$s" != Z ]
}
cleanup() {
    if [ -n "$qemu" ] && running; then
        kill -TERM "$qemu" 2>/dev/null || true
        for _ in $(seq 50); do running && sleep 0.1 || break; done
        running && kill -KILL "$qemu" 2>/dev/null || true
        for _ in $(seq 50); do running && sleep 0.1 || break; done
    fi
    rm -f "$shm"
    rm -rf "$dir"
}
trap cleanup EXIT
# A reader that went away (the process that started us died) must not kill
# this script before it cleans up: a failed echo then ends it through `set -e`.
trap '' PIPE
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# -nodefaults: no VGA, no network card; RAM is the backend `qemu-ram` (the
# id LeechCore's qemu device looks for to read the memory map).
setpriv --pdeathsig KILL -- qemu-system-x86_64 \
    -nodefaults -no-user-config -no-reboot \
    -machine pc,accel=tcg,memory-backend=qemu-ram -cpu "$cpu" \
    -object "memory-backend-file,id=qemu-ram,size=$memory,mem-path=$shm,share=on" \
    -kernel "$kernel" -initrd "$initramfs" \
    -append "console=ttyS0${kaslr:+ $kaslr} pti=off panic=-1${extra_processes}${append:+ $append}" \
    -display none -serial "file:$serial" \
    -qmp "unix:$dir/leechcore.qmp,server=on,wait=off" \
    -qmp "unix:$dir/monitor.qmp,server=on,wait=off" \
    </dev/null >"$dir/qemu.log" 2>&1 &
qemu=$!
# Not a job of this shell any more: bash would report its death by a signal
# ("Killed") on stderr. It still reaps it.
disown "$qemu"

echo "device=qemu://shm=$name,qmp=$dir/leechcore.qmp"
echo "monitor=$dir/monitor.qmp"
echo "serial=$serial"
echo "shm=$shm"
echo "pid=$qemu"

ready=
while :; do
    if [ -z "$ready" ] && grep -qs '^leechio-guest: ready' "$serial"; then
        echo ready
        ready=1
    fi
    if ! running; then
        qemu=
        echo "qemu exited"
        sed 's/^/qemu: /' "$dir/qemu.log" >&2 || true
        exit 1
    fi
    if read -r -t 0.2 line; then
        [ "$line" = stop ] && exit 0
    elif [ $? -le 128 ]; then
        exit 0 # end of standard input
    fi
done
