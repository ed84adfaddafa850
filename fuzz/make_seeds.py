#!/usr/bin/env python3
"""Writes the fuzz seed corpora (fuzz/seeds/gguf, fuzz/seeds/safetensors): small valid files that
cover every GGUF metadata type, the GGUF versions, alignments and tensor types, and the
safetensors dtypes and header shapes. Run with the test Python (it needs the `gguf` package):

    .venv/bin/python fuzz/make_seeds.py

The seeds are small (well under 50 KB together) and committed; the corpora that libFuzzer grows
from them live in the build directory.
"""
import json
import pathlib
import struct
import tempfile

import numpy as np

import gguf
from gguf import GGMLQuantizationType as Q, GGUFValueType as V

OUT = pathlib.Path(__file__).resolve().parent / "seeds"


def gguf_bytes(fill, alignment=None):
    with tempfile.TemporaryDirectory() as d:
        path = pathlib.Path(d) / "seed.gguf"
        w = gguf.GGUFWriter(str(path), arch="llama")
        if alignment:
            w.add_custom_alignment(alignment)
        fill(w)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        return path.read_bytes()


def every_metadata_type(w):
    w.add_uint8("u8", 7)
    w.add_int8("i8", -7)
    w.add_uint16("u16", 700)
    w.add_int16("i16", -700)
    w.add_uint32("u32", 70000)
    w.add_int32("i32", -70000)
    w.add_float32("f32", 0.5)
    w.add_uint64("u64", 2**40)
    w.add_int64("i64", -(2**40))
    w.add_float64("f64", 0.25)
    w.add_bool("bool", True)
    w.add_string("string", "abc")
    w.add_key_value("a.u32", [1, 2, 3], V.ARRAY, sub_type=V.UINT32)
    w.add_key_value("a.f32", [0.5, 1.5], V.ARRAY, sub_type=V.FLOAT32)
    w.add_key_value("a.bool", [True, False], V.ARRAY, sub_type=V.BOOL)
    w.add_key_value("a.i64", [-1], V.ARRAY, sub_type=V.INT64)
    w.add_array("a.string", ["x", "yz"])
    w.add_array("a.nested", [[1, 2], [3]])


def tensors(types):
    def fill(w):
        rng = np.random.default_rng(0)
        for i, qt in enumerate(types):
            x = rng.standard_normal((2, 32)).astype(np.float32)
            if qt == Q.F32:
                w.add_tensor(f"t{i}", x)
            elif qt == Q.F16:
                w.add_tensor(f"t{i}", x.astype(np.float16))
            elif qt == Q.I32:
                w.add_tensor(f"t{i}", np.arange(6, dtype=np.int32).reshape(3, 2))
            else:
                w.add_tensor(f"t{i}", gguf.quants.quantize(x, qt), raw_dtype=qt)
    return fill


def block_types(types):
    """One tensor of two 256-element rows per block type, random bytes (any byte pattern is a
    valid block: the fp16 scales may be anything, NaN included)."""
    def fill(w):
        rng = np.random.default_rng(1)
        for i, qt in enumerate(types):
            _, size = gguf.constants.GGML_QUANT_SIZES[qt]
            block = gguf.constants.GGML_QUANT_SIZES[qt][0]
            raw = rng.integers(0, 256, size=(2, 256 // block * size), dtype=np.uint8)
            w.add_tensor(f"b{i}", raw, raw_dtype=qt)
    return fill


def write_gguf_seeds(d):
    d.mkdir(parents=True, exist_ok=True)
    seeds = {
        "metadata_every_type": gguf_bytes(every_metadata_type),
        "tensors_every_type": gguf_bytes(tensors([Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1])),
        "tensors_block_types": gguf_bytes(block_types([Q.Q5_0, Q.Q5_1, Q.Q2_K, Q.Q3_K, Q.Q4_K,
                                                       Q.Q5_K, Q.Q6_K, Q.IQ4_NL, Q.IQ4_XS])),
        "tensors_unsupported": gguf_bytes(tensors([Q.F32, Q.I32])),
        "alignment_64": gguf_bytes(tensors([Q.F32, Q.Q8_0]), alignment=64),
        "no_tensors": gguf_bytes(lambda w: None),
    }
    v2 = bytearray(seeds["tensors_every_type"])
    v2[4:8] = struct.pack("<I", 2)
    seeds["version_2"] = bytes(v2)
    for name, data in seeds.items():
        (d / f"{name}.gguf").write_bytes(data)


def safetensors_bytes(entries, metadata=None, pad=True):
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in entries:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def write_safetensors_seeds(d):
    d.mkdir(parents=True, exist_ok=True)
    f32 = np.arange(6, dtype=np.float32).tobytes()
    seeds = {
        "dtypes": safetensors_bytes([
            ("a", "F32", [2, 3], f32),
            ("b", "F16", [4], np.ones(4, np.float16).tobytes()),
            ("c", "BF16", [1, 2], b"\x80\x3f\x00\x40"),
        ], metadata={"format": "pt"}),
        "unsupported": safetensors_bytes([
            ("ids", "I64", [1, 2], np.arange(2, dtype=np.int64).tobytes()),
            ("w", "F32", [2], f32[:8]),
        ]),
        "scalar_empty_rank5": safetensors_bytes([
            ("s", "F32", [], f32[:4]),
            ("e", "F16", [0, 3], b""),
            ("r5", "F32", [1, 1, 1, 1, 2], f32[:8]),
        ]),
        "empty_header": safetensors_bytes([], pad=False),
    }
    for name, data in seeds.items():
        (d / f"{name}.safetensors").write_bytes(data)


if __name__ == "__main__":
    write_gguf_seeds(OUT / "gguf")
    write_safetensors_seeds(OUT / "safetensors")
    total = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"seeds in {OUT}: {sum(1 for p in OUT.rglob('*') if p.is_file())} files, {total} bytes")
