#!/usr/bin/env python3
"""Prints the engine benchmark as a Markdown table: per-read CPU time of the
engine against the direct backend call measured in the same run, from
criterion's estimates under target/criterion/."""
import json
import pathlib
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "target/criterion")


def median_ns(group, bench, batch):
    f = root / group / bench / str(batch) / "new" / "estimates.json"
    if not f.exists():
        return None
    return json.loads(f.read_text())["median"]["point_estimate"]


groups = sorted(p.name for p in root.iterdir() if p.is_dir() and p.name.startswith("read "))
baseline = "direct read_scatter"
benches = ["engine read_now", "floor of futures", "engine read", "engine scoped read", "engine read_into_owned"]
print("| reads of | batch | direct call, ns/read | engine's synchronous batch, ns/read | ratio | floor of futures, ns/read | ratio | engine, ns/read | ratio | engine (scoped buffer), ns/read | ratio | engine (owned buffer), ns/read | ratio |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for group in sorted(groups, key=lambda g: int(g.split()[1])):
    batches = sorted(int(p.name) for p in (root / group / baseline).iterdir() if p.name.isdigit())
    for batch in batches:
        base = median_ns(group, baseline, batch) / batch
        cells = []
        for bench in benches:
            t = median_ns(group, bench, batch)
            cells += ["–", "–"] if t is None else [f"{t / batch:.0f}", f"{t / batch / base:.2f}x"]
        print(f"| {group.split()[1]} B | {batch} | {base:.0f} | " + " | ".join(cells) + " |")
