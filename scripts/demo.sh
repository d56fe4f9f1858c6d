#!/usr/bin/env bash
# `make demo`: a tour of leechio for someone who has never used LeechCore.
# Installs what is missing (scripts/setup.sh), builds the command line and
# the memflow plugin, boots a small Linux guest under QEMU
# (scripts/guest.sh) and looks at its memory live: `leechio info`, the
# guest's processes with no profile (`ps`, `maps`, `sockets`, `dump
# --pid`), `spaces`, `translate`, `dump` (with its progress bar) and a
# short `bench` through an emulated FPGA board. The guest is stopped at the end,
# on Ctrl-C and on failure; nothing is left in /dev/shm or /tmp.
# Takes about a minute once built.
set -euo pipefail
cd "$(dirname "$0")/.."

# The FPGA emulation of LeechCore's qemu device: 150 µs per call and 21 µs
# per page, about what a USB3 PCILeech board does (~190 MB/s).
FPGA=delay-latency-ns=150000,delay-readpage-ns=21000
# 2 MiB of guest RAM the guest kernel is told to leave alone (memmap=),
# where the benchmark may write its pointer chains.
CHAINS_AT=0xC000000

if [ -t 1 ]; then bold=$'\e[1m' dim=$'\e[2m' off=$'\e[0m'; else bold= dim= off=; fi
step=0
steps=12
# A step: its title, then what it is about, in plain words.
announce() {
    step=$((step + 1))
    printf '\n%s== [%d/%d] %s ==%s\n' "$bold" "$step" "$steps" "$1" "$off"
    shift
    [ $# -eq 0 ] || printf '%s\n' "$@" | fold -s -w "${COLUMNS:-80}"
}
# Shows a command, then runs it.
show() {
    printf '%s$ %s%s\n' "$dim" "$*" "$off"
    "$@"
}
die() { printf 'demo: %s\n' "$*" >&2; exit 1; }

# shellcheck source=scripts/guest-lib.sh
. scripts/guest-lib.sh

guest_session demo

printf '%sleechio demo: reading the memory of a running computer from outside it%s\n' "$bold" "$off"
fold -s -w "${COLUMNS:-80}" <<'EOF'

LeechCore (by Ulf Frisk, the library behind PCILeech and MemProcFS) reads and writes the physical memory, the RAM, of another computer: through a PCILeech FPGA board in its PCIe slot (DMA, direct memory access: no help from the target's operating system), from a memory dump file, or from a virtual machine. leechio sits on top of it and batches reads: every call to a real board costs 100-500 µs whatever its size, so what decides speed is how many calls you make, not how many bytes you read.

There is no board here, so the demo boots a small Linux virtual machine under QEMU and reads its RAM live through LeechCore's qemu:// device. The virtual machine is stopped at the end.
EOF

announce "Set-up" \
    "Installs what is missing (LeechCore 2.23.3 into target/leechcore/, QEMU, busybox, a Linux kernel for the guest into target/guest/); silent when everything is there."
show scripts/setup.sh

announce "Build" "The leechio command line and the memflow plugin, release builds."
show cargo build --release -p memflow-leechcore
show cargo build --release -p leechio-cli
leechio=target/release/leechio

announce "Boot a Linux guest" \
    "A 256 MiB virtual machine (scripts/guest.sh): Debian's kernel and a shell that sleeps. Its RAM is the file /dev/shm/$name, which LeechCore's qemu device maps to read and write it live; QEMU's monitor, a control socket, is our independent check. The kernel is told to leave 2 MiB at $CHAINS_AT alone (memmap=) so the benchmark can write there."
boot_guest --append "memmap=2M\$$CHAINS_AT"
echo "The guest runs. LeechCore device string: $device"

announce "leechio info: what LeechCore sees" \
    "The device, LeechCore's version, and the memory map: which physical addresses hold RAM. Physical addresses are what the memory chips see; 256 MiB of RAM are addresses 0x0 to 0x10000000, minus two small holes below 1 MiB where a PC keeps its BIOS ROM."
show "$leechio" --device "$device" info

announce "leechio ps: the guest's processes, with no profile" \
    "Memory tools usually need a profile of the exact kernel (its debug symbols) to make sense of its memory. leechio needs none: it finds the kernel in RAM, reads the type information the kernel carries itself (BTF) and its symbol table (kallsyms), then walks the kernel's table of processes a level at a time, every process of a level in one device call. No DTB, no symbol file, no agent on the guest:"
show "$leechio" --device "$device" ps
# The pattern process: a test program of the guest (scripts/guest-pattern.c).
pattern=$("$leechio" --device "$device" ps --json | grep -F '"name":"leech (pat) x"' |
    grep -o '"pid":[0-9]*' | head -n 1 | cut -d: -f2)
[ -n "$pattern" ] || die "the guest's pattern process is not in the list"

announce "leechio maps and sockets: what one process holds" \
    "The memory maps of process $pattern, a test program of the guest, as /proc/$pattern/maps would show them inside the guest (each range, its permissions and the file it maps), read from the kernel's own tree of them; then every TCP and UDP socket of the guest's processes, as ss -tuanp would show them."
show "$leechio" --device "$device" maps "$pattern"
show "$leechio" --device "$device" sockets

announce "leechio dump --pid: one process to a core file" \
    "Process $pattern's memory, each mapped range with its permissions, into an ELF core file that gdb, readelf and other tools open, with a note naming the files it mapped."
show "$leechio" --device "$device" dump --pid "$pattern" -o "$work/pattern.core"
ls -l "$work/pattern.core"

announce "Find the kernel's page tables" \
    "Programs and the kernel do not use physical addresses but virtual ones, which the CPU translates through page tables, a four-level tree in RAM. The CPU register CR3 holds the physical address of the tree's root; memory tools call that value the DTB (directory table base). Every process has its own tree; all of them share the kernel's half. QEMU's monitor tells us the CPU's registers:"
regs=$(qmp "$monitor" hmp "info registers")
cr3hex=$(grep -o 'CR3=[0-9a-fA-F]*' <<<"$regs" | head -n 1 | cut -d= -f2)
[ -n "$cr3hex" ] || die "no CR3 in the monitor's 'info registers'"
cr3=$(printf '%#x' "$((16#$cr3hex))")
grep -o 'CR[0234]=[0-9a-fA-F]*' <<<"$regs" | tr '\n' ' '
printf '\n-> the kernel DTB used below: %s\n' "$cr3"
echo
echo "With a real board there is no monitor. 'leechio spaces' scans all RAM for pages that look like the root of a page-table tree and lists the candidates (DTB, bytes mapped in the user and kernel halves):"
show "$leechio" --device "$device" spaces
# (Captured first: grep -q would stop reading early, and under pipefail
# leechio's SIGPIPE would read as a missing CR3.)
roots=$("$leechio" --device "$device" spaces --json 2>/dev/null || true)
if grep -q "\"dtb\":\"$cr3\"" <<<"$roots"; then
    echo "-> The CPU's CR3, $cr3, is in the list."
else
    echo "-> The CPU's CR3, $cr3, is not in this list, so the scan missed it; the monitor's value is used below."
fi

announce "leechio translate: virtual to physical" \
    "The walk the CPU does, done by reading the guest's memory, for three kernel addresses: 0xffffffff81000000, the start of the kernel's code; 0xffff888000000000, the 'direct map', where Linux maps all of RAM from physical 0 up; and 0xffff888010000000, 256 MiB into the direct map, past the end of RAM, so nothing is mapped there. For each, the physical address, the page size, and the entry read at each level of the tree (PML4E, PDPTE, PDE, PTE)."
show "$leechio" --device "$device" translate --dtb "$cr3" 0xffffffff81000000 0xffff888000000000 0xffff888010000000 ||
    echo "-> exit code $?: one address did not translate, as expected."

announce "leechio dump: save memory to a file" \
    "The kernel's direct map (all 256 MiB of RAM, seen through the kernel's page tables) into an ELF core file: a PT_LOAD per mapped run with the permissions its page tables give, the kernel's VMCOREINFO note, and no segment over a byte that could not be read (gdb reads it at its virtual addresses; Volatility, crash and drgn want the physical dump, leechio dump -o FILE). It goes through an emulated FPGA board: LeechCore's qemu device slowed to the speed of a USB3 PCILeech board, about 190 MB/s (,$FPGA), so the progress bar has something to show. Pages that cannot be read (the BIOS holes) are listed beside the file, never shown as data."
show "$leechio" --device "$device,$FPGA" dump --dtb "$cr3" \
    --range 0xffff888000000000-0xffff888010000000 -o "$work/kernel-direct-map.elf"
ls -l "$work/kernel-direct-map.elf"
sed -n '2,$p' "$work/kernel-direct-map.elf.failed"

announce "leechio bench: why batching matters" \
    "The same reads done several ways on the emulated FPGA board: 'limit' is LeechCore called directly with ideal batches; 'engine' is leechio's async API (code written with async/await and join, batched by the engine); 'plugin' is leechio's memflow plugin; 'memflow' is memflow's own stack, read by read (how most memflow code is written) and batched by hand. 'device calls' are counted by LeechCore itself: each one costs 150 µs here, plus 21 µs per page. One run each (--runs 1), so the times are rough; 'make bench' measures properly and writes BENCHMARKS.md. About a minute."
show "$leechio" --device "$device,$FPGA" bench --runs 1 --dtb "$cr3" --chains-at "$CHAINS_AT"
fold -s -w "${COLUMNS:-80}" <<'EOF'

What to look at: 'device calls'. Following 64 chains of 8 pointers, code that reads one pointer at a time makes 512 calls; the engine makes 8, the depth of the chains, with code as simple (each chain an async function, all of them joined). 4096 reads of kernel virtual memory, page tables not yet read, cost the engine 5 calls: 4 levels of page tables, then the data. On this emulated board each page still costs 21 µs, so batching gains at most about 8x here; on a board whose per-call cost dominates more, the gain grows with it.
EOF

announce "Stop the guest" "QEMU stops; its RAM file and sockets are removed."
stop_guest
echo "Done. Next: docs/cli.md for every command, docs/plugin.md for the memflow plugins, docs/rust.md for the Rust API (README.md links them all); 'make bench' for the full benchmark table."
