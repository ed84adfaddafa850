#!/usr/bin/env python3
"""Reads the per-unit stamps of the persistent decode kernel (RIDGE_DECODE_TRACE=1 with
RIDGE_DECODE_TRACE_FILE=path, eager steps: --no-cuda-graphs) and prints, per kind of phase and
averaged over layers and launches, where its time goes:

  release   first / median unit release after the previous phase's last unit ended (us)
  end       quantiles of the units' ends after that same moment: p10, p50, p90, p99, max (the
            phase's span)
  busy      median and max of a unit's end - release
  marks     medians after the release of the unit's two inner marks (GEMV: first step's weights
            ready, last step consumed; attention: q rotated, partials written) and of its end,
            over the units that reached the marks (attention units past the context do not)
  late SMs  the blocks whose units end last most often (a tail that sits on the same SMs every
            time is a load-path imbalance; one that moves is queueing)

Usage: decode-trace.py FILE [--json OUT] [--raw OUT.npy (the first launch's stamps)]
"""
import json
import struct
import sys

import numpy as np

KINDS = ["init", "q|k|v", "attention", "o", "gate|up", "down"]


def dumps(path):
    with open(path, "rb") as f:
        data = f.read()
    at = 0
    while at + 72 <= len(data):
        head = struct.unpack_from("<9q", data, at)
        at += 72
        if head[0] != 0x52445452:
            raise SystemExit(f"{path}: bad header at byte {at - 72}")
        warps, layers, counts = head[1], head[2], head[3:9]
        units = counts[0] + layers * sum(counts[1:])
        stamps = np.frombuffer(data, dtype=np.uint64, count=units * 5, offset=at).reshape(units, 5)
        at += units * 40
        yield warps, layers, counts, stamps.astype(np.float64)


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    path = sys.argv[1]
    rows = {k: [] for k in KINDS[1:]}
    late = {k: np.zeros(0) for k in KINDS[1:]}
    steps = []
    for warps, layers, counts, st in dumps(path):
        blocks = warps // 8
        f = 0
        phases = [(0, counts[0])]
        for _ in range(layers):
            for k in range(1, 6):
                phases.append((k, counts[k]))
        prev_end = None
        t0 = st[:, 0].min()
        for kind, n in phases:
            s = st[f:f + n]
            wid = np.arange(f, f + n) % warps
            f += n
            if prev_end is not None:
                name = KINDS[kind]
                rel = (s[:, 1] - prev_end) / 1e3
                end = (s[:, 4] - prev_end) / 1e3
                busy = (s[:, 4] - s[:, 1]) / 1e3
                inner = s[s[:, 2] > 0]
                marks = [np.median((inner[:, i] - inner[:, 1]) / 1e3) if len(inner) else np.nan
                         for i in (2, 3, 4)]
                rows[name].append([rel.min(), np.median(rel)] +
                                  list(np.percentile(end, [10, 50, 90, 99, 100])) +
                                  [np.median(busy), busy.max()] + marks + [len(inner)])
                # the 5 % of units that end last: their blocks
                cut = np.percentile(end, 95)
                blk = wid[end >= cut] % blocks
                if late[name].size == 0:
                    late[name] = np.zeros(blocks)
                np.add.at(late[name], blk, 1)
            prev_end = s[:, 4].max()
        steps.append((prev_end - t0) / 1e3)
        if "--raw" in sys.argv and len(steps) == 1:
            np.save(sys.argv[sys.argv.index("--raw") + 1], st)
    if not steps:
        raise SystemExit(f"{path}: no launches")
    out = {"launches": len(steps), "kernel_us": float(np.mean(steps)), "kinds": {}}
    print(f"{len(steps)} launches, kernel {np.mean(steps):.1f} us each (first arrival to last end)")
    print(f"{'phase':<10} {'rel min':>7} {'rel p50':>7} | {'end p10':>7} {'p50':>6} {'p90':>6} "
          f"{'p99':>6} {'max':>6} | {'busy p50':>8} {'max':>6} | {'mark1':>6} {'mark2':>6} {'end':>6} "
          f"{'n':>5} | blocks ending last most often")
    total = 0.0
    for name, r in rows.items():
        a = np.mean(np.array(r), axis=0)
        total += a[6]
        top = np.argsort(late[name])[::-1][:6]
        share = late[name][top] / max(late[name].sum(), 1)
        tops = " ".join(f"{b}:{x:.0%}" for b, x in zip(top, share))
        print(f"{name:<10} {a[0]:7.2f} {a[1]:7.2f} | {a[2]:7.2f} {a[3]:6.2f} {a[4]:6.2f} {a[5]:6.2f} "
              f"{a[6]:6.2f} | {a[7]:8.2f} {a[8]:6.2f} | {a[9]:6.2f} {a[10]:6.2f} {a[11]:6.2f} "
              f"{a[12]:5.0f} | {tops}")
        out["kinds"][name] = dict(zip(["release_min", "release_p50", "end_p10", "end_p50",
                                       "end_p90", "end_p99", "span", "busy_p50", "busy_max", "mark1_p50",
                                       "mark2_p50", "end_p50_marked", "marked_units"],
                                      map(float, a)))
    print(f"sum of the mean spans: {total:.2f} us a layer")
    if "--json" in sys.argv:
        with open(sys.argv[sys.argv.index("--json") + 1], "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
