#!/usr/bin/env bash
# Copies the built memflow plugin library (the connector `leechcore` and the
# OS plugin `linux_btf`) and LeechCore (leechcore.so, its device plugins
# and their libraries) into one folder, by default memflow's
# ~/.local/lib/memflow: memflow's Inventory::scan() finds both plugins
# there, and the connector finds leechcore.so beside itself.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:-$HOME/.local/lib/memflow}
plugin=target/release/libmemflow_leechcore.so
[ -f "$plugin" ] || { echo "install: $plugin is missing; run \`make plugin\`" >&2; exit 1; }
[ -f target/leechcore/leechcore.so ] || { echo "install: LeechCore is missing; run \`make deps\`" >&2; exit 1; }
mkdir -p "$dest"
install -m 0755 "$plugin" "$dest/"
install -m 0644 target/leechcore/*.so "$dest/"
echo "installed $(basename "$plugin") and LeechCore $(cat target/leechcore/VERSION) into $dest"
