#!/usr/bin/env python3
"""Measure what the GPU's power cap does to sustained work, for the cost model's power term.

Runs a few kernels back to back for several seconds each (torch: bf16 GEMMs of a prefill and a
decode shape, a device copy, a read-only reduction) while nvidia-smi samples power and the SM
clock (scripts/device/clock_log.py record), then fits

    power = static_w + pj_per_flop * FLOP/s + pj_per_byte * bytes/s

over the phases (least squares), where each phase's rate is what it achieved while sustained. A
phase held at the power cap shows as `sw_power_cap` with its clock below the boost clock. Reading
only: the card's clocks and power limit are never set (the device tool's METHOD.md).

  power_probe.py --out probe.json [--seconds 5]
"""
import argparse
import json
import os
import subprocess
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def sustained(fn, seconds, sync_every):
    """Runs fn repeatedly for `seconds`; returns (calls, elapsed) over the last 60 % of the run,
    so that the clock has settled under the cap."""
    torch.cuda.synchronize()
    t_start = time.time()
    marks = []
    calls = 0
    while True:
        for _ in range(sync_every):
            fn()
        torch.cuda.synchronize()
        calls += sync_every
        now = time.time()
        marks.append((now, calls))
        if now - t_start >= seconds:
            break
    cut = t_start + 0.4 * seconds
    first = next(m for m in marks if m[0] >= cut)
    last = marks[-1]
    return last[1] - first[1], last[0] - first[0], first[0], last[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, default=5.0)
    a = ap.parse_args()
    dev = torch.device("cuda")
    torch.manual_seed(1)
    clocks_csv = os.path.splitext(a.out)[0] + "_clocks.csv"
    rec = subprocess.Popen([sys.executable, os.path.join(HERE, "clock_log.py"), "record", clocks_csv,
                            "--interval-ms", "50"])
    time.sleep(2.0)  # idle samples first
    idle_end = time.time()

    phases = []

    def gemm(name, m, n, k):
        x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        w = torch.randn(n, k, device=dev, dtype=torch.bfloat16) * 0.02
        y = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
        fn = lambda: torch.matmul(x, w.t(), out=y)
        per = 2.0 * m * n * k
        calls, dt, t0, t1 = sustained(fn, a.seconds, max(1, int(2e12 / per)))
        # bytes: the operands once per call (what HBM must at least move)
        byts = 2.0 * (m * k + n * k + m * n)
        phases.append({"name": name, "flops_per_s": calls * per / dt, "bytes_per_s": calls * byts / dt,
                       "t0": t0, "t1": t1})

    def stream(name, kind, gib):
        n = int(gib * (1 << 30)) // 4
        src = torch.randn(n, device=dev, dtype=torch.float32)
        if kind == "copy":
            dst = torch.empty_like(src)
            fn = lambda: dst.copy_(src)
            byts = 8.0 * n
        else:
            fn = lambda: src.sum()
            byts = 4.0 * n
        calls, dt, t0, t1 = sustained(fn, a.seconds, 20)
        phases.append({"name": name, "flops_per_s": 0.0, "bytes_per_s": calls * byts / dt, "t0": t0, "t1": t1})

    try:
        gemm("gemm 8192x8192x8192", 8192, 8192, 8192)
        gemm("gemm 512x22016x4096", 512, 22016, 4096)
        stream("copy 2 GiB", "copy", 2)
        stream("read 4 GiB", "read", 4)
        time.sleep(0.5)
    finally:  # never leave the recorder (and its nvidia-smi) behind
        rec.terminate()
        rec.wait()

    # Samples per phase.
    import csv
    with open(clocks_csv, newline="") as f:
        samples = [r for r in csv.DictReader(f)]

    def window(t0, t1):
        out = [r for r in samples if t0 <= float(r["unix_s"]) <= t1]
        if not out:
            return None
        pw = [float(r["power_w"]) for r in out]
        sm = [float(r["sm_mhz"]) for r in out]
        capped = sum(1 for r in out if int(r["reasons"], 16) & 0x4)
        return {"samples": len(out), "power_w": sum(pw) / len(pw), "sm_mhz": sum(sm) / len(sm),
                "power_capped_share": capped / len(out)}

    idle = window(idle_end - 1.5, idle_end)
    for p in phases:
        p.update(window(p["t0"], p["t1"]) or {})
    # Fit power = s + f * FLOP/s + b * B/s over the phases (3 unknowns; 4 phases).
    import numpy as np
    rows = [p for p in phases if "power_w" in p]
    A = np.array([[1.0, p["flops_per_s"] / 1e12, p["bytes_per_s"] / 1e12] for p in rows])
    y = np.array([p["power_w"] for p in rows])
    coef, *_ = np.linalg.lstsq(A, y, rcond=None)
    fit = {"static_w": coef[0], "pj_per_flop": coef[1], "pj_per_byte": coef[2],
           "residual_w": [float(v) for v in (A @ coef - y)]}
    print(f"idle: {idle}")
    print(f"{'phase':24s} {'TFLOP/s':>8s} {'TB/s':>6s} {'W':>6s} {'SM MHz':>7s} {'capped':>7s}")
    for p in rows:
        print(f"{p['name']:24s} {p['flops_per_s'] / 1e12:8.1f} {p['bytes_per_s'] / 1e12:6.2f} "
              f"{p['power_w']:6.0f} {p['sm_mhz']:7.0f} {100 * p['power_capped_share']:6.0f}%")
    print(f"fit: power = {fit['static_w']:.0f} W + {fit['pj_per_flop']:.3f} pJ/FLOP x FLOP/s + "
          f"{fit['pj_per_byte']:.1f} pJ/B x B/s (residuals {', '.join(f'{r:+.0f}' for r in fit['residual_w'])} W)")
    json.dump({"gpu": torch.cuda.get_device_name(), "idle": idle, "phases": phases, "fit": fit,
               "date": time.strftime("%Y-%m-%d")}, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
