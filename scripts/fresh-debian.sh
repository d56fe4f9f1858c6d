#!/usr/bin/env bash
# Runs `make install` (which must install the product and nothing of the
# test set-up), `cargo test` (which must pass without the set-up, ignoring
# the tests that need it), then the README's two commands, `make test` then
# `make demo`, on a fresh
# Debian in a chroot: the minimal base system plus make, git and
# ca-certificates, no Rust, no Python, nothing the project installs. It
# catches what a green run on a machine that already has it all hides: an
# install step the set-up forgot. On another release, it also catches
# tests that hold only for one release's kernels: `make setup` in the
# chroot fetches that release's guest kernels.
#
# usage (as root): scripts/fresh-debian.sh [--release NAME] [DIR]
#   NAME: the Debian release, bookworm (12, the default), trixie (13), ...
#   DIR: default /var/tmp/leechio-fresh
#
# DIR is created anew (an existing one is removed first); the committed
# HEAD is cloned into it. The host's /proc, /sys and /dev are bind-mounted
# (QEMU needs them) and unmounted on exit. Debian comes from the mirror
# the host's own apt uses for that release (or for its own), through
# the host's apt proxy if it has one, which the chroot's apt then uses
# too (scripts/apt-host.sh); DEBIAN_MIRROR=URI chooses another. The
# host's proxy variables (http_proxy, https_proxy, no_proxy) are passed
# in, and its extra CA certificates (/usr/local/share/ca-certificates)
# are trusted inside, for machines that reach the package registries
# through a proxy.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '[fresh] %s\n' "$*"; }
release=bookworm
if [ "${1:-}" = --release ]; then
    release=${2:?--release needs a Debian release name, such as trixie}
    shift 2
fi
case $release in
    '' | *[!a-z]*) say "--release: a Debian release name such as bookworm or trixie, not '$release'"; exit 2 ;;
esac
root=${1:-/var/tmp/leechio-fresh}

[ "$(id -u)" -eq 0 ] || { say "run as root (debootstrap and chroot need it)"; exit 1; }
command -v debootstrap >/dev/null || {
    say "installing debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
}

mounts=(proc sys dev dev/pts dev/shm)
unmount() {
    for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do
        if mountpoint -q "$root/${mounts[i]}"; then
            # A process of the chroot still exiting (the demo's QEMU) can
            # hold one a moment: then it is detached, and goes when freed.
            umount "$root/${mounts[i]}" 2>/dev/null || umount -l "$root/${mounts[i]}"
        fi
    done
    return 0
}
trap unmount EXIT
if [ -e "$root" ]; then
    unmount
    rm -rf --one-file-system "$root"
fi

. scripts/apt-host.sh
mirror=${DEBIAN_MIRROR:-$(debian_mirror "$release")} || {
    say "no Debian source with component main in the host's apt configuration; give one: DEBIAN_MIRROR=URI $0"
    exit 1
}
# The host's apt proxy, for debootstrap (whose wget takes it from the
# environment) and for the chroot's apt.
apt_proxy_vars=() apt_proxy_conf=
for scheme in http https; do
    proxy=$(apt_proxy "$scheme")
    if [ -n "$proxy" ]; then
        apt_proxy_vars+=("${scheme}_proxy=$proxy")
        apt_proxy_conf+="Acquire::$scheme::Proxy \"$proxy\";"$'\n'
    fi
done
# The host's proxy variables, passed into the chroot's commands.
proxy_vars=()
for v in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
    if [ -n "${!v:-}" ]; then proxy_vars+=("$v=${!v}"); fi
done

say "debootstrap $release (minbase) from $mirror into $root${apt_proxy_vars:+ (${apt_proxy_vars[*]})}"
env "${apt_proxy_vars[@]}" debootstrap --variant=minbase "$release" "$root" "$mirror" >/dev/null
cp /etc/resolv.conf "$root/etc/resolv.conf"
if [ -n "$apt_proxy_conf" ]; then
    printf '%s' "$apt_proxy_conf" >"$root/etc/apt/apt.conf.d/01host-proxy"
fi
for m in "${mounts[@]}"; do mount --bind "/$m" "$root/$m"; done

in_root() {
    chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb "${proxy_vars[@]}" \
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"
}
say "installing make, git and ca-certificates"
in_root bash -c 'DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq make git ca-certificates >/dev/null'
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
    in_root update-ca-certificates >/dev/null
fi
git clone -q "$PWD" "$root/root/leechio"

say "make install (the product alone)"
in_root bash -c 'cd /root/leechio && make install'
# The product, and nothing of the test set-up.
for pkg in qemu-system-x86 valgrind gdb busybox-static; do
    if in_root dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
        say "make install installed $pkg, which only the tests need"
        exit 1
    fi
done
in_root bash -c 'leechio --version >/dev/null && test -f /usr/local/share/man/man1/leechio-ps.1 &&
    test -f /usr/local/lib/libleechio.so && test -f /root/.local/lib/memflow/libmemflow_leechcore.so' ||
    { say "make install left out the command line, its man pages, libleechio or the plugin"; exit 1; }
# Before the set-up, `cargo test` passes, counting the tests that need it
# as ignored, and says once what is missing.
say "cargo test, with no set-up"
bare_log=$root/root/cargo-test-no-setup.log
in_root bash -c 'cd /root/leechio && PATH=$HOME/.cargo/bin:$PATH cargo test --workspace' >"$bare_log" 2>&1 ||
    { tail -n 80 "$bare_log"; say "cargo test failed with no set-up (log: $bare_log)"; exit 1; }
grep -q 'ignored, needs `make setup`' "$bare_log" && grep -q 'the test set-up is missing' "$bare_log" ||
    { say "cargo test with no set-up ignored no test, or did not say what is missing (log: $bare_log)"; exit 1; }
say "make test"
in_root bash -c 'cd /root/leechio && make test'
say "make demo"
in_root bash -c 'cd /root/leechio && make demo'
say "both commands ran through on a fresh Debian $release ($(cat "$root/etc/debian_version"))"
