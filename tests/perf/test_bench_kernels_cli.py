"""`ridge bench kernels --op gemm`'s fixed-cost and streaming-rate table (perf/stream_fit.h) on a
recorded run: a stand-in for bin/ridge-bench-gemm (which needs a GPU) writes a benchmark JSON
whose kernel times are drawn here from a fixed cost and a rate per kernel, plus noise; ridge must
report, per token count and K, the least-squares line that numpy.polyfit finds for the same
points, leave out groups with fewer than three sizes, kernels that failed their check, and
compute-bound shapes."""
import json
import os
import pathlib
import random
import shutil
import stat
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "parity"))
from ridge_harness import BIN_DIR  # noqa: E402

pytestmark = pytest.mark.skipif(not (BIN_DIR / "ridge").exists(),
                                reason=f"{BIN_DIR / 'ridge'} is not built")


def make_run(rng):
    """A benchmark JSON: M = 1 and 8 at K = 4096 over five widths, M = 1 at K = 11008 over two
    widths (too few to fit), and M = 8192 (compute-bound); three kernels with drawn lines."""
    truth = {}
    shapes = []
    # one width in each fifth of 256-4096 (× 8): the sizes span several times, so ±1 % noise moves
    # the fitted rate by a few per cent at most
    widths = [rng.randrange(256 + 768 * i, 256 + 768 * (i + 1)) for i in range(5)]
    for M in (1, 8):
        for kernel in ("ours", "cublas", "alt_window"):
            truth[(M, kernel)] = (rng.uniform(2e-6, 9e-6), rng.uniform(1.5e12, 4.5e12))
    for M, K, ns in [(1, 4096, widths), (8, 4096, widths), (1, 11008, [512, 1024]),
                     (8192, 4096, widths[:3])]:
        for n8 in ns:
            N = 8 * n8
            bytes_ = 2.0 * (M * K + N * K + M * N)
            row = {"model": "drawn", "layer": f"n{N}", "M": M, "N": N, "K": K,
                   "min_bytes": bytes_, "flops": 2.0 * M * N * K}
            for kernel in ("ours", "cublas", "alt_window"):
                fixed, rate = truth.get((M, kernel), (5e-6, 3e12))
                us = (fixed + bytes_ / rate) * (1 + rng.uniform(-0.01, 0.01)) * 1e6
                row[kernel] = {"ok": True, "us": us}
            row["alt_broken"] = {"ok": False, "rel_vs_cublas": 1.0}
            shapes.append(row)
    run = {"meta": {"gpu": "NVIDIA H200", "sms": 132},
           "ceilings": {"copy_tbps": 4.26, "read_tbps": 4.53, "cublas_bf16_8192_tflops": 700.0},
           "shapes": shapes}
    return run, truth


def test_stream_fits_match_numpy(tmp_path):
    rng = random.Random()
    run, truth = make_run(rng)
    recorded = tmp_path / "recorded.json"
    recorded.write_text(json.dumps(run))
    # ridge finds the benchmark beside its own binary: a copy of ridge beside the stand-in.
    shutil.copy2(BIN_DIR / "ridge", tmp_path / "ridge")
    fake = tmp_path / "ridge-bench-gemm"
    fake.write_text(f"#!{sys.executable}\n"
                    "import shutil, sys\n"
                    "a = sys.argv[1:]\n"
                    f"shutil.copy({str(recorded)!r}, a[a.index('--json') + 1])\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    out = tmp_path / "out.json"
    res = subprocess.run([str(tmp_path / "ridge"), "bench", "kernels", "--op", "gemm", "--json",
                          str(out)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "fixed cost and streaming rate" in res.stdout
    fits = json.loads(out.read_text())["stream_fits"]
    got = {(f["M"], f["K"], f["kernel"]): f for f in fits}
    # Only the K = 4096 groups at M = 1 and 8: two widths are too few, M = 8192 is compute-bound,
    # a kernel that failed its check has no times.
    assert set(got) == {(M, 4096, k) for M in (1, 8) for k in ("ours", "cublas", "window")}
    for (M, K, kernel), f in got.items():
        key = "alt_" + kernel if kernel == "window" else kernel
        pts = [(r["min_bytes"], r[key]["us"] * 1e-6) for r in run["shapes"]
               if r["M"] == M and r["K"] == K]
        x, y = np.array(pts).T
        slope, intercept = np.polyfit(x, y, 1)
        assert f["shapes"] == 5 and f["points"] == 5
        assert f["fixed_us"] == pytest.approx(intercept * 1e6, rel=1e-6, abs=1e-9)
        assert f["stream_tbps"] == pytest.approx(1 / slope / 1e12, rel=1e-6)
        assert f["pct_read"] == pytest.approx(100 * f["stream_tbps"] / 4.53, rel=1e-9)
        r2 = 1 - np.sum((y - (intercept + slope * x)) ** 2) / np.sum((y - y.mean()) ** 2)
        assert f["r2"] == pytest.approx(r2, abs=1e-9)
        # and near the line the times were drawn from (±1 % noise on five points)
        assert f["stream_tbps"] == pytest.approx(truth[(M, key)][1] / 1e12, rel=0.1)
