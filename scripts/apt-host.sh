# What the host's apt uses to reach Debian: its mirror and its proxy, for
# scripts/fresh-debian.sh (sourced, not run). Everything comes from the
# host's own apt configuration, as apt-config reports it, so a machine
# behind a local mirror or a proxy gets the same mirror and proxy in the
# chroot. APT_CONFIG (apt's own variable) points it at another
# configuration, which is how tests/apt_host.rs gives it sample files.

# Prints the URI of the first enabled `deb` source of the host whose suite
# is $1 (e.g. bookworm) and that has component main, from sources.list and
# sources.list.d's *.list (one-line) and *.sources (deb822) files. Failing
# that, the first such source of another release (a suite without a `-`,
# so not -updates or -security): a Debian mirror serves every release.
# Only http, https, ftp and file URIs count: debootstrap takes no other.
# Returns 1, printing nothing, when there is none.
debian_mirror() {
    local suite=$1 sources uri
    # One "URI SUITE" line per suite of every enabled deb source with main.
    sources=$(
        apt_source_files | while IFS= read -r f; do
            case $f in
            *.sources) deb822_sources "$f" ;;
            *) one_line_sources "$f" ;;
            esac
        done | awk '$1 ~ /^(https?|ftp|file):/'
    )
    uri=$(awk -v s="$suite" '$2 == s { print $1; exit }' <<<"$sources")
    [ -n "$uri" ] || uri=$(awk '$2 !~ /-/ { print $1; exit }' <<<"$sources")
    [ -n "$uri" ] || return 1
    printf '%s\n' "$uri"
}

# The host's source files, as apt-config locates them: sources.list, then
# sources.list.d's *.list and *.sources in name order (apt's own order).
apt_source_files() {
    local list= parts=
    eval "$(apt-config shell list Dir::Etc::sourcelist/f parts Dir::Etc::sourceparts/d)"
    [ -f "$list" ] && printf '%s\n' "$list"
    if [ -d "$parts" ]; then
        # No match leaves the pattern itself: the test keeps real files only.
        for f in "${parts%/}"/*.list "${parts%/}"/*.sources; do
            [ -f "$f" ] && printf '%s\n' "$f"
        done | LC_ALL=C sort
    fi
    return 0
}

# "URI SUITE" of each `deb URI SUITE main…` line of a one-line file
# (`[options]` after the type are skipped).
one_line_sources() {
    sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$1" |
        awk '$1 == "deb" && NF >= 4 {
            for (i = 4; i <= NF; i++) if ($i == "main") { print $2, $3; break }
        }'
}

# "URI SUITE" for each URI and suite of each enabled deb822 stanza whose
# Types has deb and Components has main.
deb822_sources() {
    awk '
        function flush(   n, m, i, j, us, ss) {
            if (types ~ /(^| )deb( |$)/ && comps ~ /(^| )main( |$)/ && tolower(enabled) != "no") {
                n = split(uris, us, " "); m = split(suites, ss, " ")
                for (i = 1; i <= n; i++) for (j = 1; j <= m; j++) print us[i], ss[j]
            }
            types = uris = suites = comps = enabled = ""; field = ""
        }
        /^[ \t]*#/ { next }
        /^[ \t]*$/ { flush(); next }
        # A continuation line adds to the field above it.
        /^[ \t]/ { value = $0; sub(/^[ \t]+/, "", value); add(value); next }
        {
            field = tolower($0); sub(/:.*/, "", field)
            value = $0; sub(/^[^:]*:[ \t]*/, "", value); add(value)
        }
        function add(v) {
            if (field == "types") types = types " " v
            else if (field == "uris") uris = uris " " v
            else if (field == "suites") suites = suites " " v
            else if (field == "components") comps = comps " " v
            else if (field == "enabled") enabled = v
        }
        END { flush() }
    ' "$1" | awk 'NF == 2'
}

# Prints the host's apt proxy for scheme $1 (http or https):
# Acquire::$1::Proxy, nothing when none is set or it says DIRECT/false.
apt_proxy() {
    local proxy
    eval "$(apt-config shell proxy "Acquire::$1::Proxy")"
    case ${proxy:-} in
    "" | DIRECT | [Ff]alse) ;;
    *) printf '%s\n' "$proxy" ;;
    esac
}
