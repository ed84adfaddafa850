"""The ridge CLI end to end on the default model (CPU): answers, JSON output, seeds, chat over
stdin, --help, and clear errors for bad input."""
import json
import os
import shutil

import pytest

from ridge_harness import BIN_DIR, DEFAULT_MODEL, ridge, ridge_run_json

pytestmark = pytest.mark.skipif(not DEFAULT_MODEL.exists(),
                                reason="the default model is not installed (scripts/setup)")


def test_default_model_knows_the_capital_of_france():
    p = ridge("run", "-p", "What is the capital of France?", "--chat", "--temperature", "0",
              "--max-tokens", "48", "--device", "cpu")
    assert "Paris" in p.stdout, p.stdout


def test_json_output_schema_and_logprobs():
    # --ignore-eos: exactly max_tokens steps, so the per-step checks below cannot pass vacuously.
    r = ridge_run_json(DEFAULT_MODEL, "Count to five: one, two,", temperature=0, max_tokens=8,
                       top_logprobs=3, ignore_eos=True)
    assert set(r) >= {"prompt_token_ids", "token_ids", "text", "logprobs", "finish_reason"}
    assert len(r["token_ids"]) == len(r["logprobs"]) == 8, r
    assert r["usage"]["completion_tokens"] == 8, r["usage"]
    for step, tok in zip(r["logprobs"], r["token_ids"]):
        assert step["token_id"] == tok
        assert step["logprob"] <= 0
        assert len(step["top_logprobs"]) == 3
        lps = [a["logprob"] for a in step["top_logprobs"]]
        assert lps == sorted(lps, reverse=True)
        # greedy: the chosen token is the most likely one
        assert step["top_logprobs"][0]["token_id"] == tok
    assert r["finish_reason"] == "length"


def test_seeds_reproduce_and_differ():
    args = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0, max_tokens=24, ignore_eos=True)
    a = ridge_run_json(DEFAULT_MODEL, "Tell me a story about", seed=11, **args)
    b = ridge_run_json(DEFAULT_MODEL, "Tell me a story about", seed=11, **args)
    c = ridge_run_json(DEFAULT_MODEL, "Tell me a story about", seed=12, **args)
    assert a["token_ids"] == b["token_ids"]
    assert a["token_ids"] != c["token_ids"]


def test_chat_over_stdin_keeps_history_and_ends_on_eof():
    """Two turns over stdin: the second turn's prompt holds the first exchange (its tokens are
    the first prompt + reply + the new message) and reuses the first turn's KV."""
    import re
    p = ridge("chat", "--temperature", "0", "--max-tokens", "24", "--device", "cpu",
              "--log-level", "debug", input="My name is Ada.\nWhat is my name?\n", timeout=300)
    assert p.returncode == 0
    replies = [l for l in p.stdout.splitlines() if l.strip()]
    assert len(replies) >= 2, p.stdout
    turns = [tuple(map(int, m)) for m in
             re.findall(r"turn: (\d+) prompt tokens \((\d+) reused\), (\d+) generated", p.stderr)]
    assert len(turns) == 2, p.stderr
    (p1, _, g1), (p2, reused2, _) = turns
    assert p2 > p1 + g1 - 2, turns      # the history (first prompt and reply) is in the second prompt
    assert reused2 >= p1 - 1, turns     # and its KV is reused, not recomputed


@pytest.mark.parametrize("sub", ["", "run", "chat", "bench", "bench model", "version"])
def test_help_is_complete(sub):
    p = ridge(*sub.split(), "--help")
    assert p.returncode == 0
    assert "Usage" in p.stdout
    if sub == "run":
        for flag in ["--model", "--prompt", "--max-tokens", "--temperature", "--seed",
                     "--top-logprobs", "--chat", "--json", "--device"]:
            assert flag in p.stdout, flag


def test_truncated_model_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "truncated.gguf"
    with open(DEFAULT_MODEL, "rb") as f:
        bad.write_bytes(f.read(1_000_000))
    p = ridge("run", "-m", bad, "-p", "hi", check=False)
    assert p.returncode == 1
    assert "error:" in p.stderr and "truncated.gguf" in p.stderr, p.stderr


def test_missing_model_is_a_clear_error(tmp_path):
    p = ridge("run", "-m", tmp_path / "nope.gguf", "-p", "hi", check=False)
    assert p.returncode == 1 and "nope.gguf" in p.stderr


def test_prompt_past_context_names_both_numbers():
    p = ridge("run", "-p", "hello " * 40, "--ctx-size", "32", "--max-tokens", "8", check=False)
    assert p.returncode == 1
    assert "past the context limit of 32" in p.stderr, p.stderr


def test_bad_sampling_parameter_names_it():
    p = ridge("run", "-p", "hi", "--top-p", "1.5", check=False)
    assert p.returncode == 1 and "top_p" in p.stderr, p.stderr


TINY_H, TINY_F, TINY_V = 256, 512, 300


def write_tiny_gguf(path, block_count=1, layers=1, rope_dims=TINY_H // 4, freq_base=10000.0,
                    k_rows=TINY_H):
    """A random-weight llama GGUF without a tokenizer: 4 heads of 64, `layers` layers of tensors
    under a `block_count` that may disagree, and the metadata or shapes given."""
    import numpy as np
    import gguf
    from gguf import GGMLQuantizationType as Q
    from ridge_harness import random_blocks
    rng = np.random.default_rng()
    H, F, V = TINY_H, TINY_F, TINY_V
    w = gguf.GGUFWriter(str(path), arch="llama")
    w.add_context_length(256)
    w.add_embedding_length(H)
    w.add_block_count(block_count)
    w.add_feed_forward_length(F)
    w.add_head_count(4)
    w.add_head_count_kv(4)
    w.add_rope_dimension_count(rope_dims)
    w.add_rope_freq_base(freq_base)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(V)
    shapes = {"token_embd.weight": (V, H), "output.weight": (V, H)}
    for i in range(layers):
        shapes.update({f"blk.{i}.attn_q.weight": (H, H), f"blk.{i}.attn_k.weight": (k_rows, H),
                       f"blk.{i}.attn_v.weight": (H, H), f"blk.{i}.attn_output.weight": (H, H),
                       f"blk.{i}.ffn_gate.weight": (F, H), f"blk.{i}.ffn_up.weight": (F, H),
                       f"blk.{i}.ffn_down.weight": (H, F)})
    for name, shape in shapes.items():
        w.add_tensor(name, random_blocks(rng, Q.Q4_K, *shape, lo=1e-3, hi=3e-3), raw_dtype=Q.Q4_K)
    norms = ["output_norm.weight"] + [f"blk.{i}.{n}_norm.weight" for i in range(layers)
                                      for n in ("attn", "ffn")]
    for name in norms:
        w.add_tensor(name, np.ones(H, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_gguf_without_tokenizer_takes_token_ids(tmp_path):
    """A GGUF file with no tokenizer (a benchmark's random weights) loads with a warning and
    decodes token ids; a text prompt is a clear error."""
    V = TINY_V
    path = write_tiny_gguf(tmp_path / "no-tokenizer.gguf")
    p = ridge("run", "-m", path, "--prompt-ids", "5,17,42", "--max-tokens", "4", "--json",
              "--device", "cpu")
    assert "has no tokenizer" in p.stderr, p.stderr
    out = json.loads(p.stdout)
    assert len(out["token_ids"]) == 4 and all(0 <= t < V for t in out["token_ids"])
    p = ridge("run", "-m", path, "-p", "hello", "--device", "cpu", check=False)
    assert p.returncode == 1 and "no tokenizer" in p.stderr and "--prompt-ids" in p.stderr, p.stderr


@pytest.mark.parametrize("kw,expect", [
    (dict(block_count=1, layers=2), "blk.1."),  # layers the metadata leaves out
    (dict(rope_dims=32), "rope.dimension_count is 32"),  # rotary over half a head
    (dict(freq_base=float("inf")), "rope_theta"),
    (dict(k_rows=250), "blk.0.attn_k.weight"),  # rows that are not whole heads
])
def test_gguf_metadata_that_disagrees_is_a_clear_error(tmp_path, kw, expect):
    path = write_tiny_gguf(tmp_path / "bad.gguf", **kw)
    p = ridge("run", "-m", path, "--prompt-ids", "5,17", "--max-tokens", "2", "--device", "cpu",
              check=False)
    assert p.returncode == 1 and "error:" in p.stderr and expect in p.stderr, p.stderr


def test_a_fifo_as_the_model_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    p = ridge("run", "-m", fifo, "-p", "hi", check=False, timeout=60)
    assert p.returncode == 1 and "not a regular file" in p.stderr, p.stderr
    # and under another name, where the format is sniffed from the first bytes
    other = tmp_path / "model.bin"  # the format sniffed from the first bytes
    os.mkfifo(other)
    p = ridge("run", "-m", other, "-p", "hi", check=False, timeout=60)
    assert p.returncode == 1 and "not a regular file" in p.stderr, p.stderr
    # a FIFO as a folder's model.safetensors: not taken for the weights file, never opened
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
        "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4,
        "num_hidden_layers": 1, "vocab_size": 100, "max_position_embeddings": 64,
        "rms_norm_eps": 1e-5}))
    os.mkfifo(folder / "model.safetensors")
    p = ridge("run", "-m", folder, "--prompt-ids", "1,2", check=False, timeout=60)
    assert p.returncode == 1 and "model.safetensors" in p.stderr, p.stderr


def test_an_empty_prompt_says_so():
    p = ridge("run", "-p", "", check=False)
    assert p.returncode == 1 and "prompt given is empty" in p.stderr, p.stderr
    p = ridge("run", check=False)  # no prompt at all: no such hint
    assert p.returncode == 1 and "exactly one of" in p.stderr and "empty" not in p.stderr, p.stderr
