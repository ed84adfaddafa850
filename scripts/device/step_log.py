#!/usr/bin/env python3
"""Summarize an engine step log (RIDGE_STEP_LOG=FILE, one CSV line per step).

The log's columns: t_ms (when the step's scheduling began, since the engine started), seqs,
decodes, prefill_tokens, sampled (tokens the step produced), running, waiting (after the step),
forward_ms, sample_ms, output_ms, wall_ms (the step's start, ms since the Unix epoch).

Steps are cut into runs where the engine drained (nothing running or waiting after a step) or
idled for --gap seconds: a warm-up and the measured run come out apart. For each run it prints where the wall time went: pure decode steps by batch
size, steps that carry prefill tokens, sampling and output, and the time between steps.

  step_log.py steps.csv [--gap 0.3] [--run N]
"""
import argparse
import csv
import sys


def load(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    out = []
    for r in rows:
        out.append({k: float(v) for k, v in r.items()})
    return out


def runs(steps, gap_s):
    """A run ends where the engine drained (nothing running or waiting after a step) or idled."""
    cur, prev_end = [], None
    for s in steps:
        start = s["t_ms"]
        if cur and start - prev_end > gap_s * 1e3:
            yield cur
            cur = []
        cur.append(s)
        prev_end = start + s["forward_ms"] + s["sample_ms"] + s["output_ms"]
        if s["running"] == 0 and s["waiting"] == 0:
            yield cur
            cur = []
    if cur:
        yield cur


def bucket(b):
    for lo in (512, 448, 384, 256, 128, 64, 16, 1):
        if b >= lo:
            return lo
    return 0


def summarize(run, index):
    t0 = run[0]["t_ms"]
    last = run[-1]
    wall = last["t_ms"] + last["forward_ms"] + last["sample_ms"] + last["output_ms"] - t0
    fwd = sum(s["forward_ms"] for s in run)
    smp = sum(s["sample_ms"] for s in run)
    outp = sum(s["output_ms"] for s in run)
    dec = [s for s in run if s["prefill_tokens"] == 0]
    mix = [s for s in run if s["prefill_tokens"] > 0]
    tokens_out = sum(s["sampled"] for s in run)
    print(f"run {index}: {len(run)} steps over {wall / 1e3:.3f} s "
          f"(forward {fwd / 1e3:.3f} s, sample {smp / 1e3:.3f}, output {outp / 1e3:.3f}, "
          f"between {(wall - fwd - smp - outp) / 1e3:.3f})")
    dsum = sum(s["forward_ms"] for s in dec)
    print(f"  decode-only steps: {len(dec)}, {dsum / 1e3:.3f} s, "
          f"{sum(s['decodes'] for s in dec)} tokens")
    by = {}
    for s in dec:
        k = bucket(s["decodes"])
        e = by.setdefault(k, [0, 0.0, 0])
        e[0] += 1
        e[1] += s["forward_ms"]
        e[2] += s["decodes"]
    for k in sorted(by, reverse=True):
        n, ms, toks = by[k]
        print(f"    batch >= {k:4d}: {n:5d} steps, {ms / 1e3:7.3f} s, {ms / n:8.3f} ms each, "
              f"mean batch {toks / n:6.1f}, {toks / ms * 1e3:9.0f} tok/s")
    msum = sum(s["forward_ms"] for s in mix)
    if mix:
        pt = sum(s["prefill_tokens"] for s in mix)
        dd = sum(s["decodes"] for s in mix)
        print(f"  steps with prefill: {len(mix)}, {msum / 1e3:.3f} s, {pt:.0f} prefill tokens "
              f"({pt / msum * 1e3:.0f} tok/s of forward), {dd:.0f} decodes riding along, "
              f"{msum / len(mix):.2f} ms each")
    print(f"  output tokens: {tokens_out:.0f}, "
          f"{tokens_out / wall * 1e3:.0f} tok/s over the run's wall time")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("log")
    ap.add_argument("--gap", type=float, default=0.3, help="idle seconds that separate runs")
    ap.add_argument("--run", type=int, default=None, help="print only this run (0-based)")
    a = ap.parse_args()
    steps = load(a.log)
    if not steps:
        sys.exit(f"{a.log}: no steps")
    for i, r in enumerate(runs(steps, a.gap)):
        if a.run is None or a.run == i:
            summarize(r, i)


if __name__ == "__main__":
    main()
