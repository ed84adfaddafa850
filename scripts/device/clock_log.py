#!/usr/bin/env python3
"""Sample the GPU's clocks and power while a command runs, and account them (optionally per engine
step kind, from a step log).

  clock_log.py record OUT.csv [--interval-ms 100]     samples until killed (SIGTERM/SIGINT)
  clock_log.py report OUT.csv [--steps steps.csv] [--t0 UNIX_S --t1 UNIX_S]

`record` runs `nvidia-smi --query-gpu=... -lms N` and stamps each sample with the host's Unix time
(nvidia-smi's own timestamp has no time zone). `report` prints the SM clock, power and throttle
reasons over the samples; with --steps (RIDGE_STEP_LOG's CSV, which has each step's wall_ms) it
splits the samples by what the engine was running: pure decode steps, steps carrying prompt
tokens, and idle. Reading only; the card's settings are never touched (the device tool's METHOD.md).
"""
import argparse
import bisect
import csv
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import step_log  # noqa: E402  (the step log's reader, beside this script)

FIELDS = "clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,clocks_event_reasons.active"
# nvidia-smi's clocks_event_reasons bits (nvml.h, nvmlClocksEventReason*).
REASONS = {
    0x1: "gpu_idle", 0x2: "app_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake",
    0x100: "display_clocks",
}


def record(path, interval_ms):
    # The handlers go in before nvidia-smi starts, so that a stop at any moment ends it too.
    proc = None
    stopped = False

    def stop(*_):
        nonlocal stopped
        stopped = True
        if proc:
            proc.terminate()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    proc = subprocess.Popen(
        ["nvidia-smi", f"--query-gpu={FIELDS}", "--format=csv,noheader,nounits", "-lms", str(interval_ms)],
        stdout=subprocess.PIPE, text=True, bufsize=1)
    if stopped:
        proc.terminate()
    with open(path, "w") as out:
        out.write("unix_s,sm_mhz,mem_mhz,power_w,temp_c,util_pct,reasons\n")
        for line in proc.stdout:
            out.write(f"{time.time():.3f},{','.join(v.strip() for v in line.split(','))}\n")
            out.flush()
    proc.wait()


def num(v):
    try:
        return float(v)
    except ValueError:
        return float("nan")


def load_samples(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    out = []
    for r in rows:
        try:
            reasons = int(r["reasons"], 16)
        except ValueError:
            reasons = 0
        out.append((num(r["unix_s"]), num(r["sm_mhz"]), num(r["power_w"]), num(r["temp_c"]),
                    num(r["util_pct"]), reasons))
    return out


def describe(name, samples):
    if not samples:
        print(f"  {name:24s} no samples")
        return
    sm = sorted(s[1] for s in samples)
    pw = sorted(s[2] for s in samples)
    q = lambda xs, p: xs[min(len(xs) - 1, int(p * len(xs)))]
    counts = {}
    for s in samples:
        for bit, label in REASONS.items():
            if s[5] & bit:
                counts[label] = counts.get(label, 0) + 1
    why = ", ".join(f"{k} {100 * v / len(samples):.0f} %" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))
    print(f"  {name:24s} {len(samples):6d} {sum(sm) / len(sm):8.0f} {q(sm, 0.1):6.0f} {q(sm, 0.5):6.0f} "
          f"{q(sm, 0.9):6.0f} {sum(pw) / len(pw):8.0f} {q(pw, 0.9):6.0f} {max(s[3] for s in samples):5.0f}  {why or '-'}")


def report(a):
    samples = load_samples(a.clocks)
    if a.t0 is not None:
        samples = [s for s in samples if s[0] >= a.t0]
    if a.t1 is not None:
        samples = [s for s in samples if s[0] <= a.t1]
    print(f"{'  samples':26s} {'n':>6s} {'SM MHz':>8s} {'p10':>6s} {'p50':>6s} {'p90':>6s} "
          f"{'power W':>8s} {'p90':>6s} {'max C':>5s}  throttle reasons (share of samples)")
    describe("all", samples)
    if not a.steps:
        return
    steps = [r for r in step_log.load(a.steps) if r.get("wall_ms")]
    if not steps:
        print("  (the step log has no wall_ms column: no split by step kind)")
        return
    spans = []  # (start s, end s, kind)
    for r in steps:
        start = r["wall_ms"] / 1e3
        dur = (r["forward_ms"] + r["sample_ms"] + r["output_ms"]) / 1e3
        kind = "steps with prompts" if r["prefill_tokens"] > 0 else "pure decode steps"
        spans.append((start, start + dur, kind))
    spans.sort()
    starts = [s[0] for s in spans]
    groups = {"pure decode steps": [], "steps with prompts": [], "between / idle": []}
    lo, hi = spans[0][0], spans[-1][1]
    for s in samples:
        if not lo <= s[0] <= hi:
            continue
        i = bisect.bisect_right(starts, s[0]) - 1
        kind = spans[i][2] if i >= 0 and s[0] <= spans[i][1] else "between / idle"
        groups[kind].append(s)
    print(f"  while the engine ran ({hi - lo:.1f} s of steps; a sample is ~{a.interval_hint} ms, so short steps blur):")
    for k, v in groups.items():
        describe(k, v)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("clocks")
    r.add_argument("--interval-ms", type=int, default=100)
    p = sub.add_parser("report")
    p.add_argument("clocks")
    p.add_argument("--steps")
    p.add_argument("--t0", type=float)
    p.add_argument("--t1", type=float)
    p.add_argument("--interval-hint", type=int, default=100)
    a = ap.parse_args()
    if a.cmd == "record":
        record(a.clocks, a.interval_ms)
    else:
        report(a)


if __name__ == "__main__":
    sys.exit(main())
