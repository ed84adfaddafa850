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


# Bad arguments a demanding user hits: each refused with the option (or file:line) named, never a
# crash (a negative returncode is a signal) and never run as something else.

def refused(p, *expect):
    assert p.returncode > 0, (p.returncode, p.stderr)
    for e in expect:
        assert e in p.stderr, (e, p.stderr)


def write_tiny_hf_folder(path, vocab=100, hidden=64, layers=1):
    """A Hugging Face folder with config.json and random model.safetensors, no tokenizer."""
    import numpy as np
    from safetensors.numpy import save_file
    path.mkdir()
    ffn = 2 * hidden
    (path / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
        "intermediate_size": ffn, "num_attention_heads": 4, "num_key_value_heads": 4,
        "num_hidden_layers": layers, "vocab_size": vocab, "max_position_embeddings": 64,
        "rms_norm_eps": 1e-5, "torch_dtype": "float32", "tie_word_embeddings": False}))
    rng = np.random.default_rng(7)
    r = lambda *s: (rng.standard_normal(s) * 0.05).astype(np.float32)
    t = {"model.embed_tokens.weight": r(vocab, hidden), "lm_head.weight": r(vocab, hidden),
         "model.norm.weight": np.ones(hidden, np.float32)}
    for i in range(layers):
        p = f"model.layers.{i}."
        t.update({p + "input_layernorm.weight": np.ones(hidden, np.float32),
                  p + "post_attention_layernorm.weight": np.ones(hidden, np.float32),
                  p + "self_attn.q_proj.weight": r(hidden, hidden),
                  p + "self_attn.k_proj.weight": r(hidden, hidden),
                  p + "self_attn.v_proj.weight": r(hidden, hidden),
                  p + "self_attn.o_proj.weight": r(hidden, hidden),
                  p + "mlp.gate_proj.weight": r(ffn, hidden), p + "mlp.up_proj.weight": r(ffn, hidden),
                  p + "mlp.down_proj.weight": r(hidden, ffn)})
    save_file(t, str(path / "model.safetensors"))
    return path


def test_chat_on_a_model_without_tokenizer_is_a_clear_error(tmp_path):
    """It segfaulted (a null tokenizer dereferenced); both a HF folder and a GGUF without one."""
    folder = write_tiny_hf_folder(tmp_path / "hf-no-tokenizer")
    # the folder itself is a working model: token ids run
    ok = ridge("run", "-m", folder, "--prompt-ids", "3,4,5", "-n", "2", "--json", "--device", "cpu")
    assert len(json.loads(ok.stdout)["token_ids"]) == 2
    for model in (folder, write_tiny_gguf(tmp_path / "no-tokenizer.gguf")):
        p = ridge("chat", "-m", model, "--device", "cpu", input="hi\n", check=False, timeout=120)
        refused(p, str(model), "has no tokenizer", "ridge chat needs one")
        assert p.stdout == "", p.stdout


def test_chat_refuses_max_tokens_zero():
    """-n 0 used to say every turn that the conversation fills the context."""
    p = ridge("chat", "-n", "0", "--device", "cpu", input="hi\nhello\n", check=False, timeout=120)
    refused(p, "--max-tokens 0", "at least 1")
    assert "fills the context" not in p.stderr, p.stderr


PROMPT_200 = ",".join(str(100 + 37 * i % 4000) for i in range(200))


def test_prefill_chunk_reaches_run():
    """--prefill-chunk sized only the workspace; prompts were prefilled 512 tokens at a time."""
    runs = {}
    for chunk in (8, 64, 512):
        p = ridge("run", "--prompt-ids", PROMPT_200, "-n", "6", "--temperature", "0", "--json",
                  "--ignore-eos", "--device", "cpu", "--prefill-chunk", chunk)
        runs[chunk] = json.loads(p.stdout)
    for chunk, r in runs.items():
        assert r["timings"]["prefill_steps"] == -(-200 // chunk), (chunk, r["timings"])
    assert runs[8]["token_ids"] == runs[64]["token_ids"] == runs[512]["token_ids"], runs


def test_prefill_chunk_reaches_chat():
    import re
    steps = {}
    for chunk in (8, 512):
        p = ridge("chat", "--temperature", "0", "-n", "4", "--device", "cpu", "--prefill-chunk",
                  chunk, "--log-level", "debug", input="Tell me about the sea.\n", timeout=300)
        m = re.search(r"turn: (\d+) prompt tokens \(0 reused\), \d+ generated, \w+; (\d+) prefill "
                      r"steps", p.stderr)
        assert m, p.stderr
        steps[chunk] = (int(m[1]), int(m[2]), p.stdout)
    prompt = steps[8][0]
    assert prompt > 8 and steps[8][1] == -(-prompt // 8) and steps[512][1] == 1, steps
    assert steps[8][2] == steps[512][2], steps


@pytest.mark.parametrize("line,expect", [
    ('{"prompt_ids": [4294967297, 1.9]}', "prompt_ids[0] is 4294967297"),  # ran as [1, 1]
    ('{"prompt_ids": [5, 1.9]}', "prompt_ids[1] is 1.9"),
    ('{"prompt_ids": ["a"]}', 'prompt_ids[0] is "a"'),  # a bare nlohmann type_error
    ('{"prompt_ids": [-1]}', "prompt_ids[0] is -1"),
    ('{"prompt_ids": [49152]}', "token id 49152 is outside the vocabulary of 49152"),
    ('{"prompt_ids": []}', "non-empty array"),
])
def test_batch_file_prompt_ids_must_be_token_ids(tmp_path, line, expect):
    f = tmp_path / "batch.jsonl"
    f.write_text('{"prompt_ids": [1, 2, 3]}\n\n' + line + "\n")
    p = ridge("run", "--batch-file", f, "-n", "1", "--device", "cpu", check=False)
    refused(p, f"{f}:3:", expect)
    assert len(p.stdout.splitlines()) == 1, p.stdout  # the good line before it ran


def test_batch_file_that_is_a_directory_or_missing(tmp_path):
    p = ridge("run", "--batch-file", tmp_path, "--device", "cpu", check=False)
    refused(p, str(tmp_path), "is a directory")  # exited 0 with no output
    assert p.stdout == ""
    p = ridge("run", "--batch-file", tmp_path / "none.jsonl", "--device", "cpu", check=False)
    refused(p, "none.jsonl", "not found")


def test_batch_file_errors_from_the_engine_name_the_line(tmp_path):
    f = tmp_path / "long.jsonl"
    f.write_text('{"prompt": "' + "hello " * 40 + '"}\n')
    p = ridge("run", "--batch-file", f, "--ctx-size", "32", "-n", "4", "--device", "cpu",
              check=False)
    refused(p, f"{f}:1:", "past the context limit of 32")


@pytest.mark.parametrize("args,expect", [
    (["--threads", "100000"], "--threads"),  # tried to start 100k threads
    (["--threads", "-4"], "--threads"),  # silently one per core
    (["--ctx-size", "-5"], "--ctx-size"),  # silently the model's context
    (["--seed", "-7"], "-7 is not a seed"),  # silently a random seed each run
    (["--seed", "18446744073709551616"], "is not a seed"),
    (["--seed", "1.5"], "is not a seed"),
    (["--prefill-chunk", "0"], "--prefill-chunk"),
])
@pytest.mark.parametrize("sub", ["run", "chat"])
def test_out_of_range_numbers_are_refused(sub, args, expect):
    p = ridge(sub, "-p" if sub == "run" else "--system", "hi", "-n", "2", "--device", "cpu", *args,
              check=False, input="hi\n", timeout=60)
    refused(p, expect)
    assert p.stdout == ""


def test_seed_minus_one_is_a_random_seed():
    """--seed -1, llama.cpp's spelling of a random seed, was refused with the other negatives."""
    args = dict(temperature=1.0, max_tokens=2)
    a = ridge_run_json(DEFAULT_MODEL, "Once upon a time", seed=-1, **args)
    b = ridge_run_json(DEFAULT_MODEL, "Once upon a time", seed=-1, **args)
    assert a["seed"] != b["seed"], (a["seed"], b["seed"])  # each run its own, printed
    assert 0 <= a["seed"] < 2**64 and 0 <= b["seed"] < 2**64
    p = ridge("chat", "-n", "2", "--device", "cpu", "--seed", "-1", input="hi\n", timeout=60)
    assert p.stdout.strip(), p.stderr


def test_the_largest_seed_is_taken_as_given():
    """18446744073709551615 became INT64_MAX; valid spellings of threads and seeds still run."""
    args = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0, max_tokens=6, ignore_eos=True)
    top = ridge_run_json(DEFAULT_MODEL, "Once upon a time", seed="18446744073709551615", **args)
    assert top["seed"] == 18446744073709551615, top["seed"]
    again = ridge_run_json(DEFAULT_MODEL, "Once upon a time", seed="18446744073709551615",
                           threads=1, **args)
    assert again["token_ids"] == top["token_ids"]
    zero = ridge_run_json(DEFAULT_MODEL, "Once upon a time", seed=0, threads=0, ctx_size=0, **args)
    assert zero["seed"] == 0


@pytest.mark.parametrize("args,expect", [
    (["--repeats", "0"], "--repeats"),  # segfaulted (the median of no runs)
    (["--repeats", "-2"], "--repeats"),
    (["--decode-out", "-3"], "--decode-out"),  # printed -inf out tok/s and exited 0
    (["--decode-in", "0"], "--decode-in"),
    (["--batches", "1,0"], "--batches"),
    (["--prefill-tokens", "-16"], "--prefill-tokens"),
    (["--long-batch", "0"], "--long-batch"),
    (["--profile-calls", "0"], "--profile-calls"),
])
def test_bench_model_refuses_counts_that_make_no_sense(args, expect):
    p = ridge("bench", "model", "--device", "cpu", *args, check=False, timeout=60)
    refused(p, expect)
    assert "tok/s" not in p.stdout, p.stdout


def test_bench_model_one_repeat_runs():
    p = ridge("bench", "model", "--device", "cpu", "--repeats", "1", "--prefill-tokens", "16",
              "--batches", "1", "--decode-in", "8", "--decode-out", "2", "--ctx-size", "256",
              timeout=300)
    assert "prefill 16 tokens" in p.stdout and "inf" not in p.stdout, p.stdout


@pytest.mark.parametrize("value", ["-1", "0", "nan", "inf", "1e300", "86401"])
def test_serve_keep_alive_out_of_range_is_refused(value):
    """-1 dropped every connection; NaN and 1e300 went through an undefined duration_cast."""
    p = ridge("serve", "--stub-engine", "--port", "0", "--keep-alive", value, check=False,
              timeout=60)
    refused(p, "--keep-alive")
    assert "listening" not in p.stdout


def test_serve_max_queue_zero_is_refused():
    """A queue of 0 made the engine refuse every request (429) while the server read 0 as "no
    limit": refused at the command line."""
    p = ridge("serve", "--stub-engine", "--port", "0", "--max-queue", "0", check=False, timeout=60)
    refused(p, "--max-queue")
    assert "listening" not in p.stdout


@pytest.mark.parametrize("opt", ["--shutdown-timeout", "--stub-step-ms"])
def test_serve_other_durations_must_be_finite(opt):
    p = ridge("serve", "--stub-engine", "--port", "0", opt, "nan", check=False, timeout=60)
    refused(p, opt)
