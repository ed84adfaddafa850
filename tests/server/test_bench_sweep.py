"""`ridge bench serve` modes over the stub engine (seconds): --offline (every request at once,
exact output lengths) and --rates (one Poisson phase per rate: the JSON of every point, the SLO
rule on p99s, the highest rate meeting it, --max-misses, --plot)."""
import json
import shutil
import subprocess

import pytest

from server_harness import BIN_DIR, Server


@pytest.fixture(scope="module")
def stub():
    s = Server(stub=True)
    yield s
    assert s.stop() == 0, "".join(s.stderr_lines)


def bench(server, *args, expect=0):
    p = subprocess.run([str(BIN_DIR / "ridge"), "bench", "serve", "--port", str(server.port),
                        *map(str, args)], capture_output=True, text=True, timeout=120)
    assert p.returncode == expect, p.stdout + p.stderr
    return p


def test_offline_sends_everything_at_once(stub, tmp_path):
    out = tmp_path / "offline.json"
    p = bench(stub, "--offline", "-n", 24, "--input-len", 8, "--output-len", 8, "--warmup", 4,
              "--json", out, "--fail-on-error")
    assert "all at once (offline)" in p.stdout and "warm-up" in p.stdout
    j = json.loads(out.read_text())
    assert j["workload"]["mode"] == "offline" and j["workload"]["concurrency"] == 24
    assert j["completed"] == 24 and j["failed"] == 0
    assert j["output_tokens"] == 24 * 8  # ignore_eos + max_tokens: exact
    assert j["output_token_throughput"] > 0


def test_sweep_json_has_every_point_and_the_best_rate(stub, tmp_path):
    out, png = tmp_path / "sweep.json", tmp_path / "sweep.png"
    p = bench(stub, "--rates", "40,20", "--duration", 0.5, "--input-len", 8, "--output-len", 6,
              "--length-dist", "lognormal", "--slo-ttft-ms", 5000, "--slo-tpot-ms", 5000,
              "--json", out, "--plot", png)
    j = json.loads(out.read_text())
    assert j["mode"] == "sweep" and j["rates"] == [20, 40]  # ascending
    assert j["workload"]["duration_per_rate_s"] == 0.5 and j["workload"]["concurrency"] == 0
    assert [pt["rate"] for pt in j["points"]] == [20, 40]
    assert [pt["num_requests"] for pt in j["points"]] == [10, 20]
    for pt in j["points"]:
        assert pt["meets_slo"] and pt["slo_miss"] == "" and pt["failed"] == 0
        assert pt["completed"] == pt["num_requests"]
        for k in ("goodput", "goodput_wall", "arrival_rate", "request_throughput",
                  "output_token_throughput"):
            assert k in pt
        assert pt["slo_attainment"] == 1 and pt["goodput"] == pt["rate"]
        for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
            assert set(pt[k]) >= {"mean", "p50", "p90", "p99", "max", "count"}
    assert len({pt["seed"] for pt in j["points"]}) == 2  # fresh prompts per point
    assert j["best_rate"] == 40 and j["skipped_rates"] == []
    assert "highest rate meeting the SLOs: 40 req/s" in p.stdout
    assert (tmp_path / "sweep.dat").exists() and (tmp_path / "sweep.gp").exists()
    if shutil.which("gnuplot"):
        assert png.read_bytes()[:4] == b"\x89PNG"


def test_sweep_stops_after_misses(stub, tmp_path):
    out = tmp_path / "sweep.json"
    # The stub steps every 2 ms: a 0.01 ms TPOT bound cannot be met.
    bench(stub, "--rates", "10,20,40", "--duration", 0.4, "--input-len", 8, "--output-len", 4,
          "--slo-tpot-ms", 0.01, "--max-misses", 1, "--json", out)
    j = json.loads(out.read_text())
    assert len(j["points"]) == 1 and j["skipped_rates"] == [20, 40]
    assert not j["points"][0]["meets_slo"] and "p99 TPOT" in j["points"][0]["slo_miss"]
    assert j["best_rate"] is None


def test_bad_combinations_are_refused(stub):
    p = bench(stub, "--plot", "x.png", "-n", 2, expect=1)
    assert "--rates" in p.stderr
    p = bench(stub, "--offline", "-r", 5, "-n", 2, expect=1)
    assert "--offline" in p.stderr
