"""Shared helpers for the parity tests: where ridge's binaries and the default model are, a
runner for `ridge run --json`, and random GGUF blocks."""
import json
import os
import pathlib
import subprocess

SOURCE_DIR = pathlib.Path(os.environ.get("RIDGE_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
BIN_DIR = pathlib.Path(os.environ.get("RIDGE_BIN_DIR", SOURCE_DIR / "build" / "bin"))
DEFAULT_MODEL = SOURCE_DIR / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def ridge(*args, timeout=600, check=True, input=None):
    """Runs the ridge CLI; returns the CompletedProcess (text mode)."""
    cmd = [str(BIN_DIR / "ridge"), "--log-level", "warn", *map(str, args)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, input=input)
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr}")
    return p


def ridge_run_json(model, prompt, **flags):
    """`ridge run --json` with --flag value pairs (underscores become dashes)."""
    args = ["run", "-m", model, "-p", prompt, "--json", "--device", "cpu"]
    for k, v in flags.items():
        k = "--" + k.replace("_", "-")
        if v is True:
            args.append(k)
        elif v is not False and v is not None:
            args += [k, v]
    return json.loads(ridge(*args).stdout)


def random_blocks(rng, qt, rows, cols, lo=1e-6, hi=0.3):
    """Random bytes in GGUF block type qt's layout, shaped (rows, bytes a row): every quant,
    sub-scale and high bit random, the fp16 scale fields finite with random signs and magnitudes
    log-uniform in [lo, hi) (fp16 subnormals lie below 6.1e-5)."""
    import numpy as np
    import gguf
    from gguf import GGMLQuantizationType as Q
    # Byte offsets of each block type's fp16 scale fields (ggml's block structs).
    f16_fields = {Q.Q8_0: [0], Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q5_0: [0], Q.Q5_1: [0, 2],
                  Q.IQ4_NL: [0], Q.Q2_K: [80, 82], Q.Q3_K: [108], Q.Q4_K: [0, 2], Q.Q5_K: [0, 2],
                  Q.Q6_K: [208], Q.IQ4_XS: [0]}
    block, size = gguf.constants.GGML_QUANT_SIZES[qt]
    assert cols % block == 0
    raw = rng.integers(0, 256, size=(rows * (cols // block), size), dtype=np.uint8)
    for at in f16_fields[qt]:
        mag = np.exp(rng.uniform(np.log(lo), np.log(hi), size=raw.shape[0]))
        scale = (mag * rng.choice([-1.0, 1.0], size=raw.shape[0])).astype(np.float16)
        raw[:, at:at + 2] = scale.view(np.uint8).reshape(-1, 2)
    return raw.reshape(rows, -1)


BLOCK_TYPES = ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "IQ4_NL", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
               "Q6_K", "IQ4_XS"]
