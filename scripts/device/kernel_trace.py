#!/usr/bin/env python3
"""Summarize a kernel trace from libridge-cupti-trace.so (bench/trace/cupti_trace.cpp).

For every CUDA graph in the trace (a decode step's graph, say) it cuts the kernels into replays
(a replay starts where the graph's first node runs again) and prints, averaged over the replays:
the step's span on the GPU, the kernels' busy time, the idle time between consecutive kernels
(and the time they overlapped, under programmatic dependent launch), then per kernel family its
time and the idle time before it, and the costliest transitions (previous family -> family).
Kernels outside graphs are summarized by family. This is what says whether a step's time above
the sum of its ops alone is idle time between kernels or kernels running slower in the chain.

  kernel_trace.py trace.csv [--graph ID] [--min-nodes 8] [--top 12] [--skip 1] [--chain FAMILY]
"""
import argparse
import csv
import gzip
import re
import shutil
import subprocess
import sys
from collections import defaultdict


def family(name):
    """A kernel's short name: the function name without namespaces and template arguments."""
    base = name
    depth = 0
    out = []
    for ch in base:  # drop template arguments and parameter lists
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth = max(depth - 1, 0)
        elif depth == 0:
            out.append(ch)
    base = "".join(out).strip()
    base = base.split("::")[-1].strip()
    base = re.sub(r"^(void|auto)\s+", "", base)
    if not base:
        base = name[:40]
    return base[:48]


def demangle(names):
    """Itanium-mangled kernel names (CUPTI gives ridge's that way) made readable with c++filt."""
    names = sorted(set(names))
    if not shutil.which("c++filt"):
        return {n: n for n in names}
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout
    return dict(zip(names, out.split("\n")))


def load(path):
    rows = []
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        for r in csv.DictReader(f):
            rows.append({
                "kind": r["kind"],
                "start": int(r["start_ns"]),
                "end": int(r["end_ns"]),
                "stream": int(r["stream"]),
                "graph": int(r["graph"]),
                "node": int(r["node"]),
                "grid": (int(r["grid_x"]), int(r["grid_y"]), int(r["grid_z"])),
                "bytes": int(r["bytes"]),
                "name": r["name"],
            })
    readable = demangle(r["name"] for r in rows)
    for r in rows:
        r["name"] = readable.get(r["name"], r["name"])
    rows.sort(key=lambda r: r["start"])
    return rows


def replays(kernels):
    """Split one graph's kernels (sorted by start) where its first node comes round again."""
    if not kernels:
        return []
    first = kernels[0]["node"]
    out, cur = [], []
    for k in kernels:
        if k["node"] == first and cur:
            out.append(cur)
            cur = []
        cur.append(k)
    if cur:
        out.append(cur)
    n = max(len(r) for r in out)
    return [r for r in out if len(r) == n]  # a replay cut by the trace's end is left out


def step_account(rep):
    span = rep[-1]["end"] - rep[0]["start"]
    busy = sum(k["end"] - k["start"] for k in rep)
    idle = overlap = 0
    gaps = [0]
    for a, b in zip(rep, rep[1:]):
        g = b["start"] - a["end"]
        gaps.append(g)
        if g > 0:
            idle += g
        else:
            overlap -= g
    return span, busy, idle, overlap, gaps


def summarize_graph(gid, reps, top, skip):
    reps = reps[skip:] if len(reps) > skip else reps
    n = len(reps)
    nodes = len(reps[0])
    acc = [step_account(r) for r in reps]
    mean = lambda xs: sum(xs) / len(xs)
    span, busy, idle, overlap = (mean([a[i] for a in acc]) / 1e3 for i in range(4))
    print(f"graph {gid}: {n} replays of {nodes} kernels (first {skip} skipped): span {span:.1f} us, "
          f"kernels busy {busy:.1f} us, idle between kernels {idle:.1f} us "
          f"({100 * idle / span:.1f} %), overlapped {overlap:.1f} us")
    fam_time = defaultdict(float)
    fam_gap = defaultdict(float)
    fam_count = defaultdict(int)
    trans = defaultdict(float)
    for rep, a in zip(reps, acc):
        gaps = a[4]
        for i, k in enumerate(rep):
            f = family(k["name"])
            fam_time[f] += (k["end"] - k["start"]) / n
            fam_gap[f] += gaps[i] / n
            fam_count[f] += 1
            if i:
                trans[(family(rep[i - 1]["name"]), f)] += gaps[i] / n
    print(f"  {'kernel family':48s} {'per step':>10s} {'us':>10s} {'gap before':>11s}")
    for f in sorted(fam_time, key=lambda f: -fam_time[f]):
        print(f"  {f:48s} {fam_count[f] / n:10.0f} {fam_time[f] / 1e3:10.1f} {fam_gap[f] / 1e3:11.1f}")
    print(f"  costliest transitions (idle us a step; negative: overlapped):")
    for (a, b), g in sorted(trans.items(), key=lambda t: -t[1])[:top]:
        print(f"    {a} -> {b}: {g / 1e3:.1f}")


def chain_account(gid, reps, skip, anchor):
    """The step's critical path, kernel by kernel, in graph order: how much later each kernel ends
    than the one before it ("adds"), how long before that one's end it started ("lead", the PDL
    overlap) and how long it ran. Kernels are labelled by family and by their place after the last
    kernel of the `anchor` family (decode attention: @1 is o, @2 gate|up, @3 down, @4 the next
    q|k|v), so each of a layer's GEMVs gets a line of its own."""
    reps = reps[skip:] if len(reps) > skip else reps
    n = len(reps)
    adds = defaultdict(list)
    leads = defaultdict(list)
    runs = defaultdict(list)
    order = []
    for rep in reps:
        rep = sorted(rep, key=lambda k: k["node"])
        since = None
        prev_end = None
        for k in rep:
            f = family(k["name"])
            if anchor in f:
                since = 0
            elif since is not None:
                since += 1
            label = f if since is None else f"{f}@{since}"
            if label not in runs:
                order.append(label)
            if prev_end is not None:
                adds[label].append(k["end"] - prev_end)
                leads[label].append(prev_end - k["start"])
            runs[label].append(k["end"] - k["start"])
            prev_end = k["end"] if prev_end is None else max(prev_end, k["end"])
    med = lambda xs: sorted(xs)[len(xs) // 2] if xs else 0
    print(f"graph {gid}: the critical path in graph order ({n} replays; medians, us; @i: i-th "
          f"kernel after {anchor})")
    print(f"  {'kernel':52s} {'a step':>6s} {'adds':>8s} {'x count':>9s} {'lead':>7s} {'runs':>7s}")
    for label in order:
        c = len(runs[label]) / n
        a = med(adds[label]) / 1e3
        print(f"  {label:52s} {c:6.0f} {a:8.2f} {a * c:9.1f} {med(leads[label]) / 1e3:7.2f} "
              f"{med(runs[label]) / 1e3:7.2f}")


def summarize_eager(kernels, top):
    if not kernels:
        return
    t = defaultdict(float)
    c = defaultdict(int)
    for k in kernels:
        f = family(k["name"])
        t[f] += k["end"] - k["start"]
        c[f] += 1
    print(f"outside graphs: {len(kernels)} kernels, {sum(t.values()) / 1e6:.3f} ms busy")
    for f in sorted(t, key=lambda f: -t[f])[:top]:
        print(f"  {f:48s} {c[f]:8d} {t[f] / 1e6:10.3f} ms")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--graph", type=int, default=None, help="only this graph id")
    ap.add_argument("--min-nodes", type=int, default=8, help="graphs with fewer kernels left out")
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--skip", type=int, default=1, help="first replays left out (warm-up)")
    ap.add_argument("--chain", metavar="FAMILY", default=None,
                    help="also the critical path kernel by kernel, places counted from FAMILY "
                         "(e.g. paged_decode_kernel)")
    a = ap.parse_args()
    rows = load(a.trace)
    if not rows:
        sys.exit(f"{a.trace}: no records")
    kernels = [r for r in rows if r["kind"] == "kernel"]
    copies = [r for r in rows if r["kind"] == "memcpy"]
    by_graph = defaultdict(list)
    for k in kernels:
        by_graph[k["graph"]].append(k)
    for gid in sorted(g for g in by_graph if g):
        if a.graph is not None and gid != a.graph:
            continue
        reps = replays(by_graph[gid])
        if not reps or len(reps[0]) < a.min_nodes:
            continue
        summarize_graph(gid, reps, a.top, a.skip)
        if a.chain:
            chain_account(gid, reps, a.skip, a.chain)
    if a.graph is None:
        summarize_eager(by_graph.get(0, []), a.top)
        if copies:
            b = sum(c["bytes"] for c in copies)
            t = sum(c["end"] - c["start"] for c in copies)
            print(f"copies: {len(copies)}, {b / 1e6:.1f} MB, {t / 1e6:.3f} ms")


if __name__ == "__main__":
    main()
