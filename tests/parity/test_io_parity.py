"""Parity of ridge's io readers (via the ridge_io_dump tool) with the reference Python readers:
the `gguf` package's GGUFReader and the `safetensors` package.

Files checked: the default model (models/SmolLM2-135M-Instruct.Q4_1.gguf; the tests that need it
skip when it is absent), GGUF files written here with gguf.GGUFWriter (every metadata type, every
tensor type ridge supports, quantized with gguf.quants, plus unsupported ones), and safetensors
files written here (single file with metadata; a sharded tiny Llama saved by transformers).
Tensor bytes are compared through zlib's CRC-32.
"""
import json
import os
import pathlib
import shutil
import subprocess
import zlib

import numpy as np
import pytest

import gguf
from gguf import GGMLQuantizationType as Q, GGUFValueType as V

from ridge_harness import BLOCK_TYPES, random_blocks

SOURCE_DIR = pathlib.Path(os.environ.get("RIDGE_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
BIN_DIR = pathlib.Path(os.environ.get("RIDGE_BIN_DIR", SOURCE_DIR / "build" / "bin"))
DUMP = BIN_DIR / "ridge_io_dump"
DEFAULT_MODEL = SOURCE_DIR / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"

TYPE_NAMES = {
    V.UINT8: "u8", V.INT8: "i8", V.UINT16: "u16", V.INT16: "i16", V.UINT32: "u32", V.INT32: "i32",
    V.FLOAT32: "f32", V.BOOL: "bool", V.STRING: "string", V.ARRAY: "array", V.UINT64: "u64",
    V.INT64: "i64", V.FLOAT64: "f64",
}
RIDGE_DTYPE = {Q.F32: "f32", Q.F16: "f16", Q.BF16: "bf16", Q.Q8_0: "q8_0", Q.Q4_0: "q4_0", Q.Q4_1: "q4_1",
               Q.Q5_0: "q5_0", Q.Q5_1: "q5_1", Q.Q2_K: "q2_k", Q.Q3_K: "q3_k", Q.Q4_K: "q4_k",
               Q.Q5_K: "q5_k", Q.Q6_K: "q6_k", Q.IQ4_NL: "iq4_nl", Q.IQ4_XS: "iq4_xs"}


@pytest.fixture(scope="session", autouse=True)
def dump_tool_exists():
    # A missing tool is a failure, not a skip: the parity suite must not pass without running.
    assert DUMP.is_file(), f"{DUMP} is missing: build the ridge_io_dump target (RIDGE_BIN_DIR={BIN_DIR})"


def ridge_dump(kind, path, expect_ok=True):
    p = subprocess.run([str(DUMP), kind, str(path)], capture_output=True, text=True, timeout=300)
    if expect_ok:
        assert p.returncode == 0, f"ridge_io_dump {kind} {path} failed ({p.returncode}):\n{p.stderr}"
        return json.loads(p.stdout)
    return p


def crc(array):
    return zlib.crc32(np.ascontiguousarray(array).tobytes())


def tensor_bytes(t):
    """The raw bytes of a torch tensor (any dtype, any rank, scalars and empty ones too)."""
    import torch
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def flatten(v):
    if isinstance(v, list):
        return [x for e in v for x in flatten(e)]
    return [v]


# ---------------------------------------------------------------- GGUF


def compare_gguf(path):
    """Compares everything ridge reads from a GGUF file with GGUFReader; returns ridge's dump."""
    ours = ridge_dump("gguf", path)
    ref = gguf.GGUFReader(path)

    assert ours["version"] == ref.fields["GGUF.version"].contents()
    assert ours["alignment"] == ref.alignment
    assert ours["data_offset"] == ref.data_offset

    ref_kv = {k: f for k, f in ref.fields.items() if not k.startswith("GGUF.")}
    assert sorted(ours["metadata"]) == sorted(ref_kv)
    for key, field in ref_kv.items():
        m = ours["metadata"][key]
        assert m["type"] == TYPE_NAMES[field.types[0]], key
        want = field.contents()
        if field.types[0] == V.ARRAY:
            assert m["array_type"] == TYPE_NAMES[field.types[1]], key
            got = flatten(m["value"])  # GGUFReader flattens nested arrays
        else:
            got = m["value"]
        assert got == want, key

    assert len(ours["tensors"]) == len(ref.tensors)
    for t, r in zip(ours["tensors"], ref.tensors):  # both in file order
        assert t["name"] == r.name
        assert t["ggml_type"] == int(r.tensor_type), r.name
        assert t["shape"] == [int(x) for x in reversed(r.shape)], r.name
        assert ours["data_offset"] + t["offset"] == r.data_offset, r.name
        assert t["nbytes"] == r.n_bytes, r.name
        assert t["crc32"] == crc(r.data), r.name
        assert t["supported"] == (r.tensor_type in RIDGE_DTYPE), r.name
        if t["supported"]:
            assert t["dtype"] == RIDGE_DTYPE[r.tensor_type], r.name
    return ours


def test_default_model_matches_gguf_reader():
    if not DEFAULT_MODEL.is_file():
        pytest.skip(f"{DEFAULT_MODEL} is absent (scripts/setup puts it there)")
    ours = compare_gguf(DEFAULT_MODEL)
    assert len(ours["tensors"]) == 272
    assert {t["dtype"] for t in ours["tensors"]} == {"f32", "q4_1", "q8_0"}
    assert len(ours["metadata"]["tokenizer.ggml.tokens"]["value"]) == 49152


def write_every_type_gguf(path, alignment=None):
    rng = np.random.default_rng(1234)
    w = gguf.GGUFWriter(str(path), arch="llama")
    if alignment:
        w.add_custom_alignment(alignment)
    w.add_uint8("v.u8", 255)
    w.add_int8("v.i8", -128)
    w.add_uint16("v.u16", 65535)
    w.add_int16("v.i16", -32768)
    w.add_uint32("v.u32", 4294967295)
    w.add_int32("v.i32", -2147483648)
    w.add_float32("v.f32", 0.1)
    w.add_uint64("v.u64", 18446744073709551615)
    w.add_int64("v.i64", -9223372036854775808)
    w.add_float64("v.f64", 1e-300)
    w.add_bool("v.bool_true", True)
    w.add_bool("v.bool_false", False)
    w.add_string("v.string", "ünïcödé ✓ \"quoted\"\nnewline")
    for name, vtype, vals in [
        ("u8", V.UINT8, [0, 1, 255]), ("i8", V.INT8, [-1, 7]), ("u16", V.UINT16, [65535]),
        ("i16", V.INT16, [-300, 300]), ("u32", V.UINT32, [1, 2, 3]), ("i32", V.INT32, [-5]),
        ("f32", V.FLOAT32, [0.5, -1.25, 3.0e38]), ("u64", V.UINT64, [2**64 - 1, 0]),
        ("i64", V.INT64, [-(2**63), 2**63 - 1]), ("f64", V.FLOAT64, [2.5e-310, -0.0]),
        ("bool", V.BOOL, [True, False, True]), ("string", V.STRING, ["a", "", "ccc", "日本"]),
    ]:
        w.add_key_value(f"a.{name}", vals, V.ARRAY, sub_type=vtype)
    w.add_array("a.nested", [[1, 2], [3], [4, 5, 6]])  # ARRAY of ARRAY of INT32
    w.add_array("a.nested_f", [[0.25], [0.5, 0.75]])

    def rand(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    w.add_tensor("t.f32", rand(3, 5))
    w.add_tensor("t.f16", rand(2, 3, 4).astype(np.float16))
    w.add_tensor("t.f32_4d", rand(2, 1, 3, 2))
    for qt, shape in [(Q.BF16, (4, 7)), (Q.Q8_0, (3, 64)), (Q.Q4_0, (2, 2, 32)), (Q.Q4_1, (5, 96))]:
        w.add_tensor(f"t.{qt.name.lower()}", gguf.quants.quantize(rand(*shape), qt), raw_dtype=qt)
    # Types ridge does not compute with: read and validated, refused only when used.
    w.add_tensor("t.i32", rng.integers(-100, 100, size=(4, 3), dtype=np.int32))
    w.add_tensor("t.f64", rng.standard_normal((6,)))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize("alignment", [None, 64, 256])
def test_written_gguf_matches_gguf_reader(tmp_path, alignment):
    path = tmp_path / "every_type.gguf"
    write_every_type_gguf(path, alignment)
    ours = compare_gguf(path)
    assert ours["alignment"] == (alignment or 32)
    by_name = {t["name"]: t for t in ours["tensors"]}
    assert by_name["t.q4_1"]["shape"] == [5, 96]
    assert by_name["t.q4_1"]["view"] == "q4_1[5, 96]"
    assert by_name["t.q8_0"]["nbytes"] == 3 * 2 * 34
    assert by_name["t.i32"]["supported"] is False and by_name["t.i32"]["ggml_type"] == 26
    assert ours["metadata"]["a.nested"]["value"] == [[1, 2], [3], [4, 5, 6]]
    assert ours["metadata"]["v.f32"]["value"] == float(np.float32(0.1))


def test_truncated_gguf_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "every_type.gguf"
    write_every_type_gguf(path)
    data = path.read_bytes()
    # The writer pads after the last tensor; a file cut right after the last tensor's bytes is
    # still whole, one byte less is not.
    end = max(t.data_offset + t.n_bytes for t in gguf.GGUFReader(path).tensors)
    whole = tmp_path / "whole.gguf"
    whole.write_bytes(data[:end])
    assert ridge_dump("gguf", whole)["tensors"][-1]["name"] == "t.f64"
    # A sample of cut points across header, metadata, tensor infos and data (the unit tests cut
    # at every byte of their own files).
    for n in sorted({0, 3, 4, 8, 16, 24, 25, 100, 500, end // 2, end - 1}):
        cut = tmp_path / f"cut_{n}.gguf"
        cut.write_bytes(data[:n])
        p = ridge_dump("gguf", cut, expect_ok=False)
        assert p.returncode == 1, f"cut at {n}: rc {p.returncode}\n{p.stderr}"
        if n:
            assert str(cut) in p.stderr, p.stderr
        else:
            assert "is empty" in p.stderr, p.stderr


@pytest.mark.parametrize("reference", [False, True], ids=["fast", "reference"])
def test_dequantization_matches_gguf_package(tmp_path, reference):
    """Every block type ridge reads, from random blocks, converted to fp32 by ridge's CPU backend
    (the row converter the CPU matmul uses, and the element-wise reference the GPU's load-time
    conversion shares) against gguf.quants.dequantize: bitwise equal."""
    rng = np.random.default_rng()
    path = tmp_path / "blocks.gguf"
    w = gguf.GGUFWriter(str(path), arch="llama")
    want = {}
    for qt in (Q[name] for name in BLOCK_TYPES):
        block = gguf.constants.GGML_QUANT_SIZES[qt][0]
        rows, cols = int(rng.integers(1, 6)), block * int(rng.integers(1, 5))
        raw = random_blocks(rng, qt, rows, cols)  # fp16 subnormal scales included
        name = f"t.{qt.name.lower()}"
        w.add_tensor(name, raw, raw_dtype=qt)
        want[name] = gguf.quants.dequantize(raw, qt).astype(np.float32).reshape(-1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    out = tmp_path / "values.f32"
    args = [str(DUMP), "dequant", str(path), str(out)] + (["--reference"] if reference else [])
    p = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    listed = json.loads(p.stdout)["tensors"]
    assert [t["name"] for t in listed] == list(want)
    got = np.fromfile(out, dtype=np.float32)
    assert got.size == sum(v.size for v in want.values())
    at = 0
    for t in listed:
        ref = want[t["name"]]
        ours = got[at:at + ref.size]
        at += ref.size
        assert t["numel"] == ref.size
        assert np.isfinite(ref).all(), t["name"]
        bad = np.flatnonzero(ours.view(np.uint32) != ref.view(np.uint32))
        assert bad.size == 0, (f"{t['name']} ({t['dtype']}): {bad.size} of {ref.size} differ, first at "
                               f"{bad[0]}: ridge {ours[bad[0]]!r}, gguf {ref[bad[0]]!r}")


# ---------------------------------------------------------------- safetensors


def compare_safetensors(path):
    """Compares what ridge reads from one safetensors file with the safetensors package."""
    import torch
    from safetensors import safe_open

    ours = ridge_dump("safetensors", path)
    header_len = int.from_bytes(pathlib.Path(path).read_bytes()[:8], "little")
    assert ours["data_offset"] == 8 + header_len
    with safe_open(str(path), framework="pt") as f:
        assert ours["metadata"] == (f.metadata() or {})
        ref_names = sorted(f.keys())
        assert sorted(t["name"] for t in ours["tensors"]) == ref_names
        for t in ours["tensors"]:
            ref = f.get_tensor(t["name"])
            assert t["shape"] == list(ref.shape), t["name"]
            assert t["end"] - t["begin"] == ref.numel() * ref.element_size(), t["name"]
            want_dtype = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}.get(ref.dtype)
            assert t["supported"] == (want_dtype is not None), t["name"]
            if want_dtype:
                assert t["dtype"] == want_dtype, t["name"]
                assert t["crc32"] == zlib.crc32(tensor_bytes(ref)), t["name"]
    return ours


def test_single_safetensors_matches_reference(tmp_path):
    import torch
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(7)
    tensors = {
        "model.embed_tokens.weight": torch.randn(16, 8, generator=g).to(torch.bfloat16),
        "model.layers.0.self_attn.q_proj.weight": torch.randn(8, 8, generator=g).half(),
        "model.norm.weight": torch.randn(8, generator=g),
        "four_d": torch.randn(2, 3, 1, 4, generator=g),
        "scalar": torch.tensor(3.5),
        "empty": torch.zeros(0, 4),
        "position_ids": torch.arange(6, dtype=torch.int64).reshape(1, 6),  # unsupported dtype
    }
    path = tmp_path / "model.safetensors"
    save_file(tensors, str(path), metadata={"format": "pt", "note": "ünïcode"})
    ours = compare_safetensors(path)
    assert ours["metadata"] == {"format": "pt", "note": "ünïcode"}
    by_name = {t["name"]: t for t in ours["tensors"]}
    assert by_name["scalar"]["shape"] == []
    assert by_name["position_ids"]["file_dtype"] == "I64"


def test_sharded_transformers_model_matches_reference(tmp_path):
    import torch
    import transformers
    from safetensors import safe_open

    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                                   num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                   tie_word_embeddings=False)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16)
    out = tmp_path / "tiny_llama"
    model.save_pretrained(str(out), max_shard_size="16KB")
    index_path = out / "model.safetensors.index.json"
    assert index_path.is_file(), f"transformers wrote no index: {sorted(os.listdir(out))}"
    weight_map = json.loads(index_path.read_text())["weight_map"]
    shards = sorted(set(weight_map.values()))
    assert len(shards) >= 2

    for shard in shards:
        compare_safetensors(out / shard)

    ours = ridge_dump("model", out)
    assert ours["config"] == json.loads((out / "config.json").read_text())
    assert sorted(pathlib.Path(f).name for f in ours["files"]) == shards
    assert sorted(t["name"] for t in ours["tensors"]) == sorted(weight_map)
    for t in ours["tensors"]:
        with safe_open(str(out / weight_map[t["name"]]), framework="pt") as f:
            ref = f.get_tensor(t["name"])
        assert t["dtype"] == "bf16"
        assert t["shape"] == list(ref.shape)
        assert t["crc32"] == zlib.crc32(tensor_bytes(ref)), t["name"]

    # The index naming a shard that is gone: refused, naming the shard.
    copy = tmp_path / "broken"
    shutil.copytree(out, copy)
    (copy / shards[-1]).unlink()
    p = ridge_dump("model", copy, expect_ok=False)
    assert p.returncode == 1
    assert f"shard '{shards[-1]}'" in p.stderr and "is missing" in p.stderr, p.stderr
