"""`ridge plan` refuses workload options and hardware databases it cannot use, naming the option
(or the file, accelerator and field) and exiting non-zero: a non-finite length used to print
"ISL -9223372036854775808" and exit 0, a negative duration read "no configuration can serve this
workload", and a wrongly typed database field escaped as a bare nlohmann type_error."""
import json
import os
import pathlib
import subprocess

import pytest

SOURCE_DIR = pathlib.Path(os.environ.get("RIDGE_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
BIN_DIR = pathlib.Path(os.environ.get("RIDGE_BIN_DIR", SOURCE_DIR / "build" / "bin"))
RIDGE = BIN_DIR / "ridge"

pytestmark = pytest.mark.skipif(not RIDGE.exists(), reason=f"{RIDGE} is not built")

BASE = ["plan", "-m", "llama-2-7b", "--hardware", "h200", "--gpus", "1", "--top", "1"]


def plan(*args):
    # 20 requests unless the test gives its own count: quick, and not rate x duration
    count = [] if "--requests" in args else ["--requests", "20"]
    return subprocess.run([str(RIDGE), *BASE, *count, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "RIDGE_DATA_DIR": str(SOURCE_DIR / "data")})


def test_valid_plan_runs():
    r = plan("--isl", "512", "--osl", "32")
    assert r.returncode == 0, r.stderr
    assert "ISL 512" in r.stdout


def test_engine_limits_pin_the_configurations():
    # ridge serve's --max-num-seqs, --max-num-batched-tokens and --ctx-size: the one aggregated
    # configuration they describe, the KV capacity named in it and in the JSON
    r = plan("--isl", "512", "--osl", "32", "--max-num-seqs", "384", "--max-num-batched-tokens", "4096",
             "--ctx-size", "65536", "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["limits"] == {"max_num_seqs": 384, "max_num_batched_tokens": 4096, "kv_tokens": 65536}
    configs = [k["config"] for k in j["ranked"]]
    assert [c for c in configs if c.startswith("aggregated")] == ["aggregated x1 (chunk 4096 tok, batch 384, KV 65536 tok)"]
    assert all("KV 65536 tok" in c for c in configs), configs


@pytest.mark.parametrize("args,needle", [
    (["--isl", "inf"], "--isl"),
    (["--isl", "1e30"], "--isl"),
    (["--isl", "nan"], "--isl"),
    (["--osl", "uniform:1:inf"], "--osl"),
    (["--isl", "0"], "--isl"),
    (["--duration", "inf", "--requests", "0"], "--duration"),
    (["--duration", "-1"], "--duration"),
    (["--requests", "-5"], "--requests"),
    (["--rate", "inf"], "--rate"),
    (["--rate", "0"], "--rate"),
    (["--slo-ttft", "-1"], "--slo-ttft"),
    (["--slo-tpot", "nan"], "--slo-tpot"),
    (["--attainment", "nan"], "--attainment"),
    (["--prefix-share", "nan"], "--prefix-share"),
    (["--prefix-share", "1.5"], "--prefix-share"),
    (["--rate", "1e300", "--duration", "1e300", "--requests", "0"], "duration"),
    (["--max-num-seqs", "0"], "--max-num-seqs"),
    (["--max-num-batched-tokens", "-8"], "--max-num-batched-tokens"),
    (["--ctx-size", "0"], "--ctx-size"),
    (["--ctx-size", "1000000"], "KV cache of 1000000 tokens"),
])
def test_bad_workload_options_are_refused(args, needle):
    r = plan(*args)
    assert r.returncode != 0, r.stdout
    assert needle in r.stderr, r.stderr
    assert "no configuration can serve" not in r.stderr, r.stderr
    assert "-9223372036854775808" not in r.stdout + r.stderr


@pytest.mark.parametrize("accel,field,value", [
    ("h200", "measured", "yes"),
    ("h200", "memory_type", 5),
    ("h200", "links.nvlink.direction", 2),
    ("h200", "links.nvlink.generation", 4),
    ("h200", "memory_bandwidth.estimate", "x"),
    ("h200", "max_warps_per_sm", {"value": 1.5, "unit": "count", "source": "test"}),
    ("h200", "tdp.value", 0),
    ("h200", "memory_bandwidth.value", -1),
])
def test_bad_database_fields_name_file_accelerator_and_field(tmp_path, accel, field, value):
    doc = json.loads((SOURCE_DIR / "data" / "hardware.json").read_text())
    node = doc["accelerators"][accel]
    keys = field.split(".")
    for k in keys[:-1]:
        node = node.setdefault(k, {})
    node[keys[-1]] = value
    path = tmp_path / "hardware.json"
    path.write_text(json.dumps(doc))
    r = plan("--hardware-db", str(path))
    assert r.returncode != 0, r.stdout
    named = field[:-len(".value")] if field.endswith(".value") else field
    for needle in (str(path), f"'{accel}'", f"'{named}'"):
        assert needle in r.stderr, r.stderr
    assert "json.exception" not in r.stderr, r.stderr


def test_bad_schema_type_names_the_file(tmp_path):
    doc = json.loads((SOURCE_DIR / "data" / "hardware.json").read_text())
    doc["schema"] = 1
    path = tmp_path / "hardware.json"
    path.write_text(json.dumps(doc))
    r = plan("--hardware-db", str(path))
    assert r.returncode != 0
    assert str(path) in r.stderr and "schema" in r.stderr, r.stderr
    assert "json.exception" not in r.stderr, r.stderr
