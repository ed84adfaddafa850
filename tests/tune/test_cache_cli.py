"""`ridge cache ls` / `ridge cache clear` on a temporary cache root. The records are written here
in Python from the format documented in src/ridge/tune/build_cache.h (an independent writer: the
C++ reader accepting them checks the documented checksum and layout), plus the model flags that
feed the GPU backend's tuning options."""
import json
import os
import pathlib
import subprocess
import sys
import time

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "parity"))
from ridge_harness import BIN_DIR, ridge  # noqa: E402

pytestmark = pytest.mark.skipif(not (BIN_DIR / "ridge").exists(),
                                reason=f"{BIN_DIR / 'ridge'} is not built")

H200 = dict(gpu_name="NVIDIA H200", sm_count=132, driver_version=13000,
            cuda_runtime_version=13000, kernel_version="3")
H100 = dict(gpu_name="NVIDIA H100 80GB HBM3", sm_count=132, driver_version=12080,
            cuda_runtime_version=12040, kernel_version="3")


def fnv1a64(data: bytes) -> int:
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def canonical(fmt, dev, kind, key, value, created) -> bytes:
    fields = [str(fmt), dev["gpu_name"], str(dev["sm_count"]), str(dev["driver_version"]),
              str(dev["cuda_runtime_version"]), dev["kernel_version"], kind, key, value,
              str(created)]
    out = b""
    for f in fields:
        b = f.encode()
        out += str(len(b)).encode() + b":" + b
    return out


def safe(s: str, n: int) -> str:
    out = "".join(c if (c.isascii() and (c.isalnum() or c in "._-")) else "_" for c in s)[:n]
    if out.startswith("."):
        out = "_" + out[1:]
    return out or "_"


def dir_name(dev) -> str:
    h = "%016x" % fnv1a64(canonical(1, dev, "", "", "", 0))
    return f"{safe(dev['gpu_name'], 40)}-{dev['sm_count']}sm-{h[:8]}"


def text(dev) -> str:
    return (f"{dev['gpu_name']}, {dev['sm_count']} SMs, driver {dev['driver_version']}, "
            f"CUDA runtime {dev['cuda_runtime_version']}, kernels {dev['kernel_version']}")


def write_record(root: pathlib.Path, dev, kind, key, value) -> pathlib.Path:
    created = int(time.time())
    rec = {"format": 1, "device": dev, "kind": kind, "key": key, "value": value,
           "created": created,
           "checksum": "fnv1a64:%016x" % fnv1a64(canonical(1, dev, kind, key, value, created))}
    d = root / "tune" / dir_name(dev)
    d.mkdir(parents=True, exist_ok=True)
    name_hash = fnv1a64(kind.encode() + b"\0" + key.encode())
    p = d / f"{safe(kind, 40)}-{name_hash:016x}.json"
    p.write_text(json.dumps(rec, indent=1))
    return p


def tuning_value(winner, seconds):
    return json.dumps({"winner": winner, "seconds": seconds,
                       "timings": {winner: seconds, "cublaslt": seconds * 2}})


def test_directory_name_matches_the_documented_hash():
    # The same golden value as tests/tune/build_cache_test.cpp (DeviceKey.StableTextAndDirectory).
    assert dir_name(H200) == "NVIDIA_H200-132sm-f4dcd15c"


def test_ls_on_a_missing_root(tmp_path):
    root = tmp_path / "nothing-here"
    p = ridge("cache", "ls", "--cache-root", root)
    assert "no records" in p.stdout
    j = json.loads(ridge("cache", "ls", "--cache-root", root, "--json").stdout)
    assert j["records"] == [] and j["root"] == str(root)
    assert not root.exists()  # listing creates nothing


def test_ls_and_clear(tmp_path):
    root = tmp_path / "cache"
    write_record(root, H200, "gemm", "m1.n4096.k4096.bf16", tuning_value("ridge.skinny", 12.5e-6))
    write_record(root, H200, "gemm", "m16.n4096.k4096.bf16", tuning_value("ridge.sm90", 20e-6))
    write_record(root, H100, "gemm", "m1.n4096.k4096.bf16", "plain value\nwith a newline")
    bad = write_record(root, H200, "gemm", "m32.n4096.k4096.bf16", tuning_value("x", 1e-6))
    bad.write_text(bad.read_text()[:40])  # truncated

    out = ridge("cache", "ls", "--cache-root", root).stdout
    assert f"cache root: {root}" in out
    assert text(H200) in out and text(H100) in out
    assert dir_name(H200) in out and dir_name(H100) in out
    assert "m1.n4096.k4096.bf16" in out and "ridge.skinny (12.50 us)" in out
    assert "ridge.sm90 (20.00 us)" in out
    assert "plain value with a newline" in out
    assert "CORRUPT: not valid JSON" in out
    assert "4 records" in out and "(1 corrupt, 0 foreign)" in out

    j = json.loads(ridge("cache", "ls", "--cache-root", root, "--json").stdout)
    recs = j["records"]
    assert len(recs) == 4
    good = [r for r in recs if not r["corrupt"]]
    assert len(good) == 3 and all(not r["foreign"] for r in good)
    by_key = {(r["device_dir"], r["key"]): r for r in good}
    r = by_key[(dir_name(H200), "m1.n4096.k4096.bf16")]
    assert json.loads(r["value"])["winner"] == "ridge.skinny"
    assert r["device"] == text(H200) and r["kind"] == "gemm" and r["bytes"] > 100
    assert 0 <= r["age_seconds"] < 600
    assert by_key[(dir_name(H100), "m1.n4096.k4096.bf16")]["value"] == "plain value\nwith a newline"
    assert j["total_bytes"] == sum(r["bytes"] for r in recs)

    # One device, by directory name: the other's records stay.
    p = ridge("cache", "clear", "--cache-root", root, "--device", dir_name(H100))
    assert "removed 1 record " in p.stdout, p.stdout
    left = json.loads(ridge("cache", "ls", "--cache-root", root, "--json").stdout)["records"]
    assert {r["device_dir"] for r in left} == {dir_name(H200)} and len(left) == 3
    # Everything (the corrupt record too).
    p = ridge("cache", "clear", "--cache-root", root)
    assert "removed 3 records" in p.stdout, p.stdout
    assert "no records" in ridge("cache", "ls", "--cache-root", root).stdout
    p = ridge("cache", "clear", "--cache-root", root)
    assert "removed 0 records" in p.stdout


def test_clear_removes_only_ridge_records_and_never_follows_symlinks(tmp_path):
    # The review's reproducer: a project's config.json under <root>/tune and a symlink out of the
    # root were taken for records ("removed 2 records") and deleted.
    root, outside = tmp_path / "R", tmp_path / "O"
    (root / "tune" / "proj").mkdir(parents=True)
    outside.mkdir()
    (root / "tune" / "proj" / "config.json").write_text("{}\n")
    (outside / "important.json").write_text("{}\n")
    (root / "tune" / "link").symlink_to(outside)
    # A symlink named like a device directory, to a real record's copy outside the root.
    rec = write_record(tmp_path / "O2root", H200, "gemm", "k", tuning_value("a", 1e-6))
    (root / "tune" / "NVIDIA_H200-132sm-00000000").symlink_to(rec.parent)
    p = ridge("cache", "clear", "--cache-root", root)
    assert "removed 0 records" in p.stdout, p.stdout
    # With ridge's own records and foreign files beside them in ridge's directory.
    mine = [write_record(root, H200, "gemm", k, tuning_value("a", 1e-6)) for k in ("m1", "m2")]
    notes = mine[0].parent / "notes.json"
    notes.write_text('{"mine": true}\n')
    lookalike = mine[0].parent / "config-0123456789abcdef.json"  # a record's name, not a record
    lookalike.write_text("{}\n")
    out = ridge("cache", "ls", "--cache-root", root).stdout  # ls and clear agree: 2 records
    assert "2 records" in out and "corrupt" not in out and "config-" not in out, out
    p = ridge("cache", "clear", "--cache-root", root)
    assert "removed 2 records" in p.stdout, p.stdout
    assert not any(m.exists() for m in mine)
    assert (root / "tune" / "proj" / "config.json").read_text() == "{}\n"
    assert (outside / "important.json").read_text() == "{}\n"
    assert (root / "tune" / "link").is_symlink() and rec.exists()
    assert notes.read_text() == '{"mine": true}\n' and lookalike.read_text() == "{}\n"


def test_default_root_from_the_environment(tmp_path):
    write_record(tmp_path, H200, "gemm", "k", tuning_value("a", 1e-6))
    env = dict(os.environ, RIDGE_CACHE_ROOT=str(tmp_path))
    p = subprocess.run([str(BIN_DIR / "ridge"), "cache", "ls"], capture_output=True, text=True,
                       env=env, timeout=60)
    assert p.returncode == 0 and f"cache root: {tmp_path}" in p.stdout and "1 record" in p.stdout


@pytest.mark.parametrize("sub", ["cache", "cache ls", "cache clear"])
def test_cache_help(sub):
    p = ridge(*sub.split(), "--help")
    assert "Usage" in p.stdout
    if sub != "cache":
        assert "--cache-root" in p.stdout


@pytest.mark.parametrize("sub", ["run", "chat", "serve", "bench model"])
def test_model_commands_take_the_tuning_flags(sub):
    p = ridge(*sub.split(), "--help")
    for flag in ["--cache-root", "--no-tune", "--gemm", "--no-cuda-graphs"]:
        assert flag in p.stdout, (sub, flag)


def test_gemm_flag_is_checked():
    p = ridge("run", "--gemm", "fastest", "-p", "hi", check=False)
    assert p.returncode != 0
    assert "--gemm" in p.stderr and "fastest" in p.stderr, p.stderr
