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

With --units it also splits two phases by what their units do (the query heads and the o
projection's K splits come from the trace's header; traces from before the header carried them
need --units HEADS,SPLIT_O, e.g. 32,4 for Llama-2-7B on 132 SMs), quantiles p50/p90/max in
us over every layer and launch:
  attention  the unit holding the step's own position (loads k and v, stores them), the head's
             merging unit (the one whose partials came last: it merges after its own), the rest;
             columns: release, q (mark1 - release), loop (mark2 - mark1), tail (end - mark2), end
  o          the tile's last K split (it adds the residual after its ticket), the other splits;
             columns: release, first step (mark1 - release), consume (mark2 - mark1), tail, end
  (release and end after the previous phase's last unit)

Usage: decode-trace.py FILE [--json OUT] [--raw OUT.npy (the first launch's stamps)]
                            [--units [HEADS,SPLIT_O]]
"""
import json
import re
import struct
import sys

import numpy as np

KINDS = ["init", "q|k|v", "attention", "o", "gate|up", "down"]


def dumps(path):
    with open(path, "rb") as f:
        data = f.read()
    at = 0
    while at + 72 <= len(data):
        magic = struct.unpack_from("<q", data, at)[0]
        fields = {0x52445452: 9, 0x32445452: 11}.get(magic)  # "RTDR", "RTD2" (+ heads, o splits)
        if fields is None:
            raise SystemExit(f"{path}: bad header at byte {at}")
        head = struct.unpack_from(f"<{fields}q", data, at)
        at += 8 * fields
        warps, layers, counts = head[1], head[2], head[3:9]
        roles = head[9:11] if fields == 11 else None
        units = counts[0] + layers * sum(counts[1:])
        stamps = np.frombuffer(data, dtype=np.uint64, count=units * 5, offset=at).reshape(units, 5)
        at += units * 40
        # %globaltimer counts ns from the epoch (~1.7e18): as float64 that is a 256 ns grain, so
        # the stamps are made relative (as integers) first; 0 (a mark not taken) stays 0.
        base = stamps[stamps > 0].min() - np.uint64(1) if (stamps > 0).any() else np.uint64(0)
        rel = np.where(stamps > 0, stamps - base, np.uint64(0))
        yield warps, layers, counts, roles, rel.astype(np.float64)


def quant(x):
    return f"{np.median(x):6.2f}/{np.percentile(x, 90):6.2f}/{x.max():6.2f}"


def units_breakdown(path, heads, split_o):
    """The per-unit classes of the attention and o phases (see the module's docstring)."""
    attn = {"own position": [], "merging": [], "other": []}
    o = {"last split": [], "other splits": []}
    for warps, layers, counts, roles, st in dumps(path):
        if heads is None:
            if roles is None:
                raise SystemExit("--units: this trace's header has no heads and o splits; "
                                 "give them: --units HEADS,SPLIT_O")
            heads, split_o = roles
        per_layer = sum(counts[1:])
        if heads < 1 or counts[2] % heads or split_o < 1 or counts[3] % split_o:
            raise SystemExit(f"--units {heads},{split_o}: the trace has {counts[2]} attention units "
                             f"and {counts[3]} o units, not multiples of those")
        chunks = counts[2] // heads
        for layer in range(layers):
            base = counts[0] + layer * per_layer
            q = st[base:base + counts[1]]
            a = st[base + counts[1]:base + counts[1] + counts[2]]
            ob = base + counts[1] + counts[2]
            ou = st[ob:ob + counts[3]]
            t0 = q[:, 4].max()
            active = a[:, 2] > 0
            idx = np.nonzero(active)[0]
            aa = a[active]
            h, c = idx // chunks, idx % chunks
            n_active = np.bincount(h, minlength=heads)
            merging = np.zeros(len(idx), bool)
            for hh in range(heads):
                j = np.nonzero(h == hh)[0]
                if len(j):
                    merging[j[np.argmax(aa[j, 3])]] = True
            own = c == n_active[h] - 1
            cols = np.stack([aa[:, 1] - t0, aa[:, 2] - aa[:, 1], aa[:, 3] - aa[:, 2],
                             aa[:, 4] - aa[:, 3], aa[:, 4] - t0], axis=1) / 1e3
            attn["own position"].append(cols[own])
            attn["merging"].append(cols[merging & ~own])
            attn["other"].append(cols[~merging & ~own])
            t1 = aa[:, 4].max()
            last = np.zeros(len(ou), bool)
            m2 = ou[:, 3].reshape(-1, split_o)
            last[np.arange(m2.shape[0]) * split_o + np.argmax(m2, axis=1)] = True
            cols = np.stack([ou[:, 1] - t1, ou[:, 2] - ou[:, 1], ou[:, 3] - ou[:, 2],
                             ou[:, 4] - ou[:, 3], ou[:, 4] - t1], axis=1) / 1e3
            o["last split"].append(cols[last])
            o["other splits"].append(cols[~last])
    for title, groups, names in [
            ("attention", attn, ["release", "q", "loop", "tail", "end"]),
            ("o", o, ["release", "first step", "consume", "tail", "end"])]:
        print(f"{title} units (p50/p90/max us): " + ", ".join(names))
        for name, parts in groups.items():
            x = np.concatenate(parts) if parts else np.zeros((0, 5))
            if len(x):
                print(f"  {name:<13} n={len(x):6d}  " +
                      "  ".join(f"{n} {quant(x[:, k])}" for k, n in enumerate(names)))


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    path = sys.argv[1]
    rows = {k: [] for k in KINDS[1:]}
    late = {k: np.zeros(0) for k in KINDS[1:]}
    steps = []
    for warps, layers, counts, _, st in dumps(path):
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
    if "--units" in sys.argv:
        i = sys.argv.index("--units") + 1
        given = i < len(sys.argv) and re.fullmatch(r"\d+,\d+", sys.argv[i])
        heads, split_o = map(int, sys.argv[i].split(",")) if given else (None, None)
        units_breakdown(path, heads, split_o)
    if "--json" in sys.argv:
        with open(sys.argv[sys.argv.index("--json") + 1], "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
