# Shared by scripts/demo.sh and scripts/bench.sh (sourced, not run): boot a
# guest with scripts/guest.sh, talk to its QEMU monitor, stop it.
# The caller defines die() and calls guest_session first.

guest_pid=
guest_in=

# Starts a session of PROG: sets $name (the guest's, leechio-PROG-PID) and
# $work (a new temporary folder), and on exit, Ctrl-C, TERM or HUP stops
# the guest and removes its files and $work.
guest_session() {
    session=$1
    name=leechio-$session-$$
    work=$(mktemp -d "${TMPDIR:-/tmp}/leechio-$session.XXXXXX")
    trap end_guest_session EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    trap 'exit 129' HUP
    # guest.sh's pipe may close first on Ctrl-C; writing "stop" must not kill us.
    trap '' PIPE
}

end_guest_session() {
    local rc=$?
    # Runs to the end whatever fails: after a hang-up (an SSH session
    # dropped) the messages below cannot be written, and under `set -e` the
    # first would end the script before the guest and $work are gone.
    set +e
    trap - EXIT INT TERM HUP
    if [ -n "$guest_pid" ]; then
        printf '\n%s: stopping the guest\n' "$session" >&2
        stop_guest
    fi
    # What guest.sh removes itself, in case it could not.
    rm -f "/dev/shm/$name"
    rm -rf "$work"
    [ "$rc" -eq 0 ] || printf '%s: stopped (exit %d); the guest and its files are gone\n' "$session" "$rc" >&2
    exit "$rc"
}

# One QMP command on the guest's monitor socket: `qmp SOCKET hmp 'info registers'`
# (a human monitor command; prints its text) or `qmp SOCKET COMMAND JSON-ARGS`.
qmp() {
    python3 - "$@" <<'EOF'
import json, socket, sys
path, command, arg = sys.argv[1:4]
s = socket.socket(socket.AF_UNIX)
s.settimeout(300)
s.connect(path)
f = s.makefile("rw")
def reply():
    while True:
        line = f.readline()
        if not line:
            sys.exit("QMP: connection closed")
        msg = json.loads(line)
        if "event" not in msg:
            return msg
def execute(name, args):
    f.write(json.dumps({"execute": name, "arguments": args}) + "\n")
    f.flush()
    msg = reply()
    if "error" in msg:
        sys.exit("QMP %s: %s" % (name, msg["error"].get("desc", msg["error"])))
    return msg["return"]
reply()  # greeting
execute("qmp_capabilities", {})
if command == "hmp":
    sys.stdout.write(execute("human-monitor-command", {"command-line": arg}).replace("\r\n", "\n"))
else:
    execute(command, json.loads(arg))
EOF
}

# Boots a guest (arguments go to guest.sh after --name and --dir) and waits
# for it; sets $device, $monitor and $serial from what guest.sh prints.
boot_guest() {
    coproc GUEST { exec scripts/guest.sh --name "$name" --dir "$work/guest" "$@"; }
    guest_pid=$GUEST_PID
    guest_in=${GUEST[1]}
    local out=${GUEST[0]} line
    device= monitor= serial=
    while :; do
        IFS= read -r -t 180 line <&"$out" || die "the guest did not start"
        case $line in
            device=*) device=${line#device=} ;;
            monitor=*) monitor=${line#monitor=} ;;
            serial=*) serial=${line#serial=} ;;
            ready) break ;;
            "qemu exited"*) die "QEMU exited during boot" ;;
        esac
    done
}

# Asks guest.sh to stop QEMU (it removes the RAM file and sockets), waiting
# up to 15 s before a TERM.
stop_guest() {
    [ -n "$guest_pid" ] || return 0
    echo stop >&"$guest_in" 2>/dev/null || true
    for _ in $(seq 150); do kill -0 "$guest_pid" 2>/dev/null || break; sleep 0.1; done
    kill -TERM "$guest_pid" 2>/dev/null || true
    wait "$guest_pid" 2>/dev/null || true
    guest_pid=
}
