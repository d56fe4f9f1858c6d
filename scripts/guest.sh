#!/usr/bin/env bash
# Boots a small Linux guest under QEMU (TCG) whose RAM is a file in /dev/shm,
# so LeechCore's qemu device can read and write it live.
#
#   scripts/guest.sh [--memory SIZE] [--name NAME] [--dir DIR] [--append ARGS]
#
#   --memory SIZE  guest RAM, in QEMU's units (default 256M); from 3.5G on,
#                  RAM past 3 GiB sits above the PCI hole, from 4 GiB up
#   --name NAME    the RAM file is /dev/shm/NAME (default leechio-guest-PID)
#   --dir DIR      folder for the QMP sockets and the serial log (default
#                  /tmp/NAME); must not exist: created, and removed at the end
#   --append ARGS  extra kernel arguments, after the defaults; e.g.
#                  'memmap=2M$0xC000000' keeps the guest off 2 MiB of RAM at
#                  192 MiB (what `make bench` writes its pointer chains into)
#
# It prints one `key=value` line each for: device (the LeechCore device
# string), monitor (a second QMP socket, for tools and tests: QMP serves one
# client at a time), serial (the console log), shm (the RAM file) and pid
# (QEMU's), then `ready` once the guest's /init runs (about 5 s). The guest
# prints `leechio-guest: ... init_top_pgt` (its kernel page table's virtual
# address, from /proc/kallsyms) to the serial log just before.
#
# The guest runs until this script's standard input ends (Ctrl-D, or the
# process that started it dies) or a line `stop` comes, or the script gets
# SIGINT, SIGTERM or SIGHUP. Then QEMU is stopped and the RAM file and DIR
# are removed. QEMU also gets SIGKILL if this script dies (parent-death
# signal); when QEMU exits by itself, the script cleans up and exits 1.
#
# Needs what `make setup` installs: qemu-system-x86, busybox-static, cpio,
# and the kernel in target/guest/vmlinuz.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
memory=256M
name=
dir=
append=

die() { printf 'guest.sh: %s\n' "$*" >&2; exit 2; }

while [ $# -gt 0 ]; do
    case "$1" in
        --memory) memory=${2:?--memory needs a size}; shift 2 ;;
        --name) name=${2:?--name needs a name}; shift 2 ;;
        --dir) dir=${2:?--dir needs a folder}; shift 2 ;;
        --append) append=${2?--append needs kernel arguments}; shift 2 ;;
        -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
        *) die "unknown argument $1 (see --help)" ;;
    esac
done
name=${name:-leechio-guest-$$}
dir=${dir:-/tmp/$name}
case "$name" in */* | *,* | .* | '') die "bad name '$name'" ;; esac
case "$dir" in *,*) die "the folder may not contain a comma (it goes into a device string)" ;; esac

guest=$here/target/guest
kernel=$guest/vmlinuz
[ -f "$kernel" ] || die "no guest kernel at $kernel: run make setup"
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 not found: run make setup"
[ -x /bin/busybox ] || die "/bin/busybox not found: run make setup"

# The initramfs: busybox and an /init that mounts proc, sys and dev, prints
# the marker lines and sleeps. Rebuilt when this script or busybox is newer;
# built under a temporary name and renamed, so guests starting at once never
# see half a file.
initramfs=$guest/initramfs.cpio.gz
if [ ! -s "$initramfs" ] || [ "$0" -nt "$initramfs" ] || [ /bin/busybox -nt "$initramfs" ]; then
    build=$(mktemp -d "$guest/initramfs.XXXXXX")
    mkdir -p "$build/root/bin" "$build/root/proc" "$build/root/sys" "$build/root/dev"
    cp /bin/busybox "$build/root/bin/busybox"
    cat >"$build/root/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sys /sys
/bin/busybox mount -t devtmpfs dev /dev
exec </dev/console >/dev/console 2>&1
echo "leechio-guest: $(/bin/busybox grep -w -e _text -e init_top_pgt /proc/kallsyms | /bin/busybox tr '\n' ' ')"
echo "leechio-guest: ready"
while :; do /bin/busybox sleep 3600; done
EOF
    chmod 0755 "$build/root/init"
    (cd "$build/root" && find . | cpio -o -H newc --quiet | gzip -6) >"$build/initramfs.cpio.gz"
    mv -f "$build/initramfs.cpio.gz" "$initramfs"
    rm -rf "$build"
fi

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
    -machine pc,accel=tcg,memory-backend=qemu-ram \
    -object "memory-backend-file,id=qemu-ram,size=$memory,mem-path=$shm,share=on" \
    -kernel "$kernel" -initrd "$initramfs" \
    -append "console=ttyS0 nokaslr pti=off panic=-1${append:+ $append}" \
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
