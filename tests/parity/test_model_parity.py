"""Logits parity: ridge's CPU backend against HF transformers (fp32) on the same weights.

* The default model (SmolLM2-135M-Instruct, Q4_1 GGUF): transformers dequantizes the GGUF to
  fp32 and un-permutes Q/K itself, so this checks ridge's GGUF reader, Q4_1 dequantization,
  Q/K un-permutation and the forward.
* Tiny random-weight models of each supported architecture (Llama MHA and GQA with llama3 RoPE
  scaling, Mistral, Qwen2 with q/k/v bias; tied and untied embeddings; fp32 and bf16 storage),
  made here and saved as safetensors.

For each prompt ridge generates 32 greedy tokens with top-5 logprobs; HF then scores the same
sequence in one teacher-forced pass. Every reported logprob must agree within fp32 tolerance,
and every greedy token must be HF's argmax unless HF itself sees a near-tie there.
"""
import json
import pathlib
import shutil

import pytest
import torch

from ridge_harness import DEFAULT_MODEL, ridge_run_json

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a land far away,",
    "The three primary colors are",
    "Water boils at a temperature of",
    "Here is a list of prime numbers: 2, 3, 5,",
    "The quick brown fox",
    "In machine learning, gradient descent is",
    "SELECT name FROM users WHERE",
    "Les mathématiques sont",
    "東京は日本の",
    "1 + 1 = 2, 2 + 2 = 4, 3 + 3 =",
]
GEN_TOKENS = 32
TOP_N = 5            # top logprobs asked of ridge at every step, compared with HF's top-N
LOGPROB_TOL = 5e-4   # fp32 accumulation-order differences; measured worst 5.4e-5 (SmolLM2, 30 layers)
TIE_MARGIN = 1e-3    # HF top-1 vs ridge's choice closer than this is a tie


def check_against_hf(hf_model, result, label):
    prompt = result["prompt_token_ids"]
    gen = result["token_ids"]
    assert len(gen) == GEN_TOKENS, f"{label}: generated {len(gen)} tokens"
    # Every check below runs per logprob entry: there must be one per generated token, each with
    # the top-N asked, or a short list would pass unchecked.
    steps = result["logprobs"]
    assert len(steps) == len(gen), f"{label}: {len(steps)} logprob entries for {len(gen)} tokens"
    for j, step in enumerate(steps):
        assert len(step["top_logprobs"]) == TOP_N, \
            f"{label} step {j}: {len(step['top_logprobs'])} top logprobs, asked {TOP_N}"
    ids = torch.tensor([prompt + gen])
    with torch.no_grad():
        logits = hf_model(ids).logits[0].double()
    lp = torch.log_softmax(logits, dim=-1)
    worst = 0.0
    for j, step in enumerate(steps):
        row = lp[len(prompt) - 1 + j]
        tok = step["token_id"]
        assert tok == gen[j]
        diff = abs(row[tok].item() - step["logprob"])
        worst = max(worst, diff)
        assert diff < LOGPROB_TOL, f"{label} step {j}: logprob {step['logprob']} vs HF {row[tok].item()}"
        for alt in step["top_logprobs"]:
            d = abs(row[alt["token_id"]].item() - alt["logprob"])
            worst = max(worst, d)
            assert d < LOGPROB_TOL, f"{label} step {j}: top token {alt['token_id']} {alt['logprob']} vs HF {row[alt['token_id']].item()}"
        hf_best = int(row.argmax())
        if hf_best != tok:
            margin = (row[hf_best] - row[tok]).item()
            assert margin < TIE_MARGIN, f"{label} step {j}: ridge chose {tok}, HF {hf_best} by {margin}"
        # the reported top-N are HF's top-N (up to ties)
        hf_top = set(row.topk(TOP_N).indices.tolist())
        ridge_top = {a["token_id"] for a in step["top_logprobs"]}
        fifth = row.topk(TOP_N).values[-1].item()
        for t in ridge_top ^ hf_top:
            assert abs(row[t].item() - fifth) < TIE_MARGIN, f"{label} step {j}: top-5 differ at {t}"
    return worst


@pytest.fixture(scope="module")
def default_hf_model():
    if not DEFAULT_MODEL.exists():
        pytest.skip("the default model is not installed (scripts/setup)")
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(str(DEFAULT_MODEL.parent), gguf_file=DEFAULT_MODEL.name,
                                             dtype=torch.float32)
    m.eval()
    return m


@pytest.mark.parametrize("prompt", PROMPTS)
def test_default_gguf_model(default_hf_model, prompt):
    result = ridge_run_json(DEFAULT_MODEL, prompt, temperature=0, max_tokens=GEN_TOKENS,
                            top_logprobs=TOP_N, ignore_eos=True)
    worst = check_against_hf(default_hf_model, result, prompt)
    print(f"{prompt!r}: max |Δ logprob| = {worst:.2e}")


TINY = {
    "llama_mha_tied_f32": dict(model_type="llama", num_attention_heads=4, num_key_value_heads=4,
                               tie_word_embeddings=True, dtype=torch.float32),
    "llama3_gqa_scaled_bf16": dict(model_type="llama", num_attention_heads=8, num_key_value_heads=2,
                                   tie_word_embeddings=False, rope_theta=500000.0,
                                   rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                                 "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                 "original_max_position_embeddings": 64},
                                   dtype=torch.bfloat16),
    "mistral_gqa_f32": dict(model_type="mistral", num_attention_heads=8, num_key_value_heads=4,
                            tie_word_embeddings=False, dtype=torch.float32),
    "qwen2_bias_bf16": dict(model_type="qwen2", num_attention_heads=4, num_key_value_heads=2,
                            tie_word_embeddings=True, dtype=torch.bfloat16),
}


@pytest.fixture(scope="module")
def smollm_tokenizer_dir(tmp_path_factory):
    """The default model's tokenizer as tokenizer.json, converted by transformers."""
    if not DEFAULT_MODEL.exists():
        pytest.skip("the default model is not installed (scripts/setup)")
    from transformers import AutoTokenizer
    d = tmp_path_factory.mktemp("tokenizer")
    tok = AutoTokenizer.from_pretrained(str(DEFAULT_MODEL.parent), gguf_file=DEFAULT_MODEL.name)
    tok.save_pretrained(d)
    return d


def make_tiny(name, spec, tokenizer_dir, root):
    from transformers import AutoConfig, AutoModelForCausalLM
    spec = dict(spec)
    dtype = spec.pop("dtype")
    model_type = spec.pop("model_type")
    torch.manual_seed(sum(map(ord, name)))
    cfg = AutoConfig.for_model(model_type, vocab_size=49152, hidden_size=64, intermediate_size=176,
                               num_hidden_layers=3, max_position_embeddings=256,
                               rms_norm_eps=1e-5, initializer_range=0.3, **spec)
    model = AutoModelForCausalLM.from_config(cfg)
    d = root / name
    model.to(dtype).save_pretrained(d, safe_serialization=True)
    for f in pathlib.Path(tokenizer_dir).iterdir():
        shutil.copy(f, d / f.name)
    # Reference: reloaded from disk in fp32 (keeps RoPE's inv_freq in fp32).
    ref = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
    ref.eval()
    return d, ref


def worst_over_prompts(model, ref, prompts, label):
    """ridge's greedy run of each prompt checked against HF; the largest |Δ logprob| seen."""
    worst = 0.0
    for prompt in prompts:
        result = ridge_run_json(model, prompt, temperature=0, max_tokens=GEN_TOKENS, top_logprobs=TOP_N,
                                ignore_eos=True)
        worst = max(worst, check_against_hf(ref, result, f"{label}: {prompt}"))
    return worst


@pytest.mark.parametrize("name", sorted(TINY))
def test_tiny_random_models(name, smollm_tokenizer_dir, tmp_path):
    d, ref = make_tiny(name, TINY[name], smollm_tokenizer_dir, tmp_path)
    worst = worst_over_prompts(d, ref, PROMPTS[:10], name)
    print(f"{name}: max |Δ logprob| = {worst:.2e}")


# Every block type ridge reads, in one GGUF model: llama, hidden 256 (4 heads of 64, 2 KV heads),
# FFN 512, two layers, the default model's tokenizer. Weights are random blocks (a quantizer is
# not needed: both sides read the same file, and transformers dequantizes it with the gguf
# package, which test_io_parity.py holds ridge's decoder bitwise equal to).
BLOCK_MODEL_TYPES = {
    "token_embd.weight": "Q6_K", "output.weight": "Q5_K",
    "blk.0.attn_q.weight": "Q4_K", "blk.0.attn_k.weight": "Q5_K", "blk.0.attn_v.weight": "Q6_K",
    "blk.0.attn_output.weight": "Q3_K", "blk.0.ffn_gate.weight": "Q2_K",
    "blk.0.ffn_up.weight": "IQ4_XS", "blk.0.ffn_down.weight": "Q4_K",
    "blk.1.attn_q.weight": "Q5_0", "blk.1.attn_k.weight": "Q5_1", "blk.1.attn_v.weight": "IQ4_NL",
    "blk.1.attn_output.weight": "Q8_0", "blk.1.ffn_gate.weight": "Q4_0",
    "blk.1.ffn_up.weight": "Q4_1", "blk.1.ffn_down.weight": "Q6_K",
}


def write_block_type_model(path):
    import numpy as np
    import gguf
    from gguf import GGMLQuantizationType as Q
    from ridge_harness import random_blocks
    rng = np.random.default_rng(4321)
    ref = gguf.GGUFReader(str(DEFAULT_MODEL))
    H, F, heads, kv_heads, layers = 256, 512, 4, 2, 2
    vocab = len(ref.fields["tokenizer.ggml.tokens"].contents())
    w = gguf.GGUFWriter(str(path), arch="llama")
    w.add_context_length(2048)
    w.add_embedding_length(H)
    w.add_block_count(layers)
    w.add_feed_forward_length(F)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_dimension_count(H // heads)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab)
    for key, field in ref.fields.items():
        if key.startswith("tokenizer."):
            sub = field.types[1] if len(field.types) > 1 else None
            w.add_key_value(key, field.contents(), field.types[0], sub_type=sub)
    shapes = {"token_embd.weight": (vocab, H), "output.weight": (vocab, H)}
    for i in range(layers):
        shapes.update({f"blk.{i}.attn_q.weight": (H, H), f"blk.{i}.attn_k.weight": (H // 2, H),
                       f"blk.{i}.attn_v.weight": (H // 2, H), f"blk.{i}.attn_output.weight": (H, H),
                       f"blk.{i}.ffn_gate.weight": (F, H), f"blk.{i}.ffn_up.weight": (F, H),
                       f"blk.{i}.ffn_down.weight": (H, F)})
    for name, (rows, cols) in shapes.items():
        qt = Q[BLOCK_MODEL_TYPES[name]]
        raw = random_blocks(rng, qt, rows, cols, lo=0.5, hi=1.5)
        # Scale every fp16 field of the tensor alike so that its values have std 0.2 (the values
        # are linear in the block scales).
        std = float(gguf.quants.dequantize(raw, qt).std())
        raw = random_blocks(rng, qt, rows, cols, lo=0.5 * 0.2 / std, hi=1.5 * 0.2 / std)
        w.add_tensor(name, raw, raw_dtype=qt)
    for i in range(layers):
        for norm in ("attn_norm", "ffn_norm"):
            w.add_tensor(f"blk.{i}.{norm}.weight", (1 + 0.1 * rng.standard_normal(H)).astype(np.float32))
    w.add_tensor("output_norm.weight", (1 + 0.1 * rng.standard_normal(H)).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_every_block_type_gguf_model(tmp_path):
    if not DEFAULT_MODEL.exists():
        pytest.skip("the default model is not installed (scripts/setup)")
    from transformers import AutoModelForCausalLM
    path = tmp_path / "block-types.gguf"
    write_block_type_model(path)
    ref = AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file=path.name, dtype=torch.float32)
    ref.eval()
    worst = worst_over_prompts(path, ref, PROMPTS[:6], "block types")
    print(f"every block type: max |Δ logprob| = {worst:.2e}")
