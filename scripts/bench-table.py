#!/usr/bin/env python3
"""Prints the engine benchmark as Markdown tables: per-read CPU time of the
engine against the direct backend call measured in the same run, from
criterion's estimates; first on the in-memory backend, then, where the run
has them, on LeechCore's file device.

    scripts/bench-table.py [DIR ...]

Each DIR is a criterion output folder (default: target/criterion) holding
one run. With several runs, each cell is the median over the runs, and each
ratio the median of the runs' own ratios (a run's rows against that run's
baseline), so that a noisy run moves a cell less."""
import json
import pathlib
import statistics
import sys

roots = [pathlib.Path(d) for d in sys.argv[1:]] or [pathlib.Path("target/criterion")]
baseline = "direct read_scatter"
benches = [
    ("engine read_now", "engine's synchronous batch"),
    ("floor of futures", "floor of futures"),
    ("engine read_val", "engine (`read_val`)"),
    ("engine read", "engine"),
    ("engine scoped read", "engine (scoped buffer)"),
    ("engine read_into_owned", "engine (owned buffer)"),
]


def per_read_ns(root, group, bench, batch):
    f = root / group / bench / str(batch) / "new" / "estimates.json"
    if not f.exists():
        return None
    return json.loads(f.read_text())["median"]["point_estimate"] / batch


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def table(prefix):
    groups = sorted(
        {p.name for root in roots for p in root.iterdir() if p.is_dir() and p.name.startswith(prefix)},
        key=lambda g: int(g[len(prefix):].split()[0]),
    )
    if not groups:
        return
    rows = [(b, n) for b, n in benches if any((root / g / b).exists() for root in roots for g in groups)]
    header = ["reads of", "batch", "direct call, ns/read"]
    for _, name in rows:
        header += [f"{name}, ns/read", "ratio"]
    print("| " + " | ".join(header) + " |")
    print("|---|" + "---:|" * (len(header) - 1))
    for group in groups:
        batches = sorted(
            {int(p.name) for root in roots for p in (root / group / baseline).iterdir() if p.name.isdigit()}
        )
        for batch in batches:
            bases = [per_read_ns(root, group, baseline, batch) for root in roots]
            cells = []
            for bench, _ in rows:
                times = [per_read_ns(root, group, bench, batch) for root in roots]
                ratios = [t / b for t, b in zip(times, bases) if t is not None and b is not None]
                t = median(times)
                cells += ["–", "–"] if t is None else [f"{t:.0f}", f"{median(ratios):.2f}x"]
            size = group[len(prefix):].split()[0]
            print(f"| {size} B | {batch} | {median(bases):.0f} | " + " | ".join(cells) + " |")


table("read ")
if any(p.name.startswith("file device") for root in roots for p in root.iterdir()):
    print()
    print("On LeechCore's file device:")
    print()
    table("file device, read ")
