#!/usr/bin/env python3
"""QPS at fixed recall targets from `chimera bench` (or bench/peers) CSV rows.

usage: pareto.py results.csv [--targets 0.90,0.95,0.99]

For each (system, k): the Pareto front of (recall, qps) over the swept settings, then
the QPS at each target recall, interpolated log-linearly between the two front points
that bracket it ('-' when the sweep never reached the target). The exact-search row, if
present, is the reference: the last column is the ratio to it.
"""
import csv
import math
import sys
from collections import defaultdict


def front(points):
    out, best = [], -1.0
    for r, q in sorted(points, key=lambda p: (-p[0], -p[1])):
        if q > best:
            out.append((r, q))
            best = q
    return sorted(out)


def qps_at(fr, target):
    """Highest QPS reaching `target`, interpolating between bracketing front points."""
    above = [p for p in fr if p[0] >= target]
    if not above:
        return None
    hi = min(above, key=lambda p: p[0])  # least recall >= target: the fastest such point
    below = [p for p in fr if p[0] < target]
    if not below:
        return hi[1]
    lo = max(below, key=lambda p: p[0])
    t = (target - lo[0]) / (hi[0] - lo[0])
    return math.exp(math.log(lo[1]) + t * (math.log(hi[1]) - math.log(lo[1])))


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    targets = [0.90, 0.95, 0.99]
    if "--targets" in sys.argv:
        targets = [float(x) for x in sys.argv[sys.argv.index("--targets") + 1].split(",")]
    rows = list(csv.DictReader(open(sys.argv[1])))
    pts = defaultdict(list)
    exact = {}
    for r in rows:
        if not r.get("recall") or not r.get("qps"):
            continue
        key = (r["system"], int(r["k"]))
        if r["system"] == "exact":
            exact[int(r["k"])] = float(r["qps"])
        else:
            pts[key].append((float(r["recall"]), float(r["qps"])))
    head = "system        k   " + "".join(f"QPS@R={t:<6} " for t in targets) + "  x exact at each"
    print(head)
    for (name, k), p in sorted(pts.items()):
        fr = front(p)
        vals = [qps_at(fr, t) for t in targets]
        cells = "".join(f"{v:<13.1f}" if v else f"{'-':<13}" for v in vals)
        ratios = ""
        if k in exact:
            ratios = " ".join(f"{v / exact[k]:.1f}x" if v else "-" for v in vals)
        print(f"{name:<13} {k:<3} {cells}  {ratios}")
    for k, q in sorted(exact.items()):
        print(f"{'exact':<13} {k:<3} {q:.2f} queries/s (recall 1.0)")


if __name__ == "__main__":
    main()
