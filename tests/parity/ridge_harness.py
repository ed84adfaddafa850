"""Shared helpers for the parity tests: where ridge's binaries and the default model are, and a
runner for `ridge run --json`."""
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
