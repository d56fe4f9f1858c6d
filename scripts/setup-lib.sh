# Shell functions scripts/deps.sh and scripts/setup.sh share (sourced, not
# run): messages, scratch folders removed on exit, and Debian packages
# installed only when missing.

say() { printf '[setup] %s\n' "$*"; }

scratch=()
trap 'rm -rf "${scratch[@]}"' EXIT

apt_updated=
apt_update_once() {
    [ -n "$apt_updated" ] && return 0
    say "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    apt_updated=1
}
apt_install() {
    local missing=()
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" -ne 0 ]; then
        say "missing Debian packages: ${missing[*]}; run this as root or: sudo apt-get install ${missing[*]}"
        exit 1
    fi
    apt_update_once
    say "installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" \
        2> >(grep -v 'since apt-utils is not installed' >&2) >/dev/null
}

