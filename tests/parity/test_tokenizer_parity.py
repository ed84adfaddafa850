"""Tokenizer parity: ridge against the Hugging Face `tokenizers` library reading tokenizer.json.

The references are built here, without the network:
  * SmolLM2: transformers converts the default model's GGUF into a fast tokenizer, saved as
    tokenizer.json. ridge loads both the GGUF and that tokenizer.json.
  * SentencePiece: a small BPE model with byte fallback and user-defined symbols is trained on
    generated text, converted by transformers (LlamaTokenizer from tokenizer.model) into a
    tokenizer.json, and written as a GGUF (tokenizer.ggml.model = llama) with the `gguf` package;
    transformers' own GGUF conversion of that file is the reference for ridge's GGUF path.
  * Variants of those tokenizer.json files in the shapes of the other families ridge supports
    (Llama 3 and Qwen2 splits, NFC, SmolLM's digit splitting, Llama 2's legacy normalizer,
    Metaspace decoding), so each code path meets the reference.

Every corpus string (tests/parity/corpus, >= 500) is encoded with add_special and parse_special
on and off; the reference ids are decoded with skip_special on and off, and so are random id
sequences (biased towards byte tokens that split characters); the IncrementalDecoder must give
the batch decode exactly, each piece whole UTF-8. All mismatches are reported with the string.
"""
import json
import os
import pathlib
import random
import subprocess
import sys
import time
import zlib

import pytest

SOURCE_DIR = pathlib.Path(os.environ.get("RIDGE_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
BIN_DIR = pathlib.Path(os.environ.get("RIDGE_BIN_DIR", SOURCE_DIR / "build" / "bin"))
TOOL = BIN_DIR / "ridge_tok_tool"
MODEL = SOURCE_DIR / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "corpus"))
from generate_corpus import full_corpus  # noqa: E402

tokenizers = pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")

RANDOM_SEQUENCES = 300
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


# ---------------------------------------------------------------------------------------------
# References


def save_tokenizer_json(data, directory):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return directory


@pytest.fixture(scope="session")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("tokenizer_parity")


@pytest.fixture(scope="session")
def smollm(work):
    if not MODEL.exists():
        pytest.skip(f"{MODEL} is missing (run scripts/setup)")
    tok = transformers.AutoTokenizer.from_pretrained(str(MODEL.parent), gguf_file=MODEL.name)
    out = work / "smollm2"
    tok.save_pretrained(str(out))
    return out


def train_sentencepiece(directory):
    import sentencepiece as spm

    r = random.Random(7)
    syllables = ["ka", "to", "ri", "mu", "sen", "tra", "ble", "ion", "ing", "the", "and", "er", "qu", "ph"]
    words = ["".join(r.choice(syllables) for _ in range(r.randint(1, 4))) for _ in range(400)]
    words += ["über", "café", "naïve", "日本語", "中文", "테스트", "δοκιμή", "привет", "😀", "🎉", "2024", "3.14"]
    lines = []
    for _ in range(4000):
        line = " ".join(r.choice(words) for _ in range(r.randint(3, 14)))
        if r.random() < 0.3:
            line = line.capitalize() + r.choice([".", "!", "?", ","])
        lines.append(line)
    corpus = directory / "train.txt"
    corpus.write_text("\n".join(lines), encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(directory / "spm"), vocab_size=900, model_type="bpe",
        byte_fallback=True, user_defined_symbols=["<tool>", "</tool>", "<|eot_id|>"],
        character_coverage=0.9995, bos_id=1, eos_id=2, unk_id=0, minloglevel=2,
    )
    return directory / "spm.model"


def write_spm_gguf(model_path, gguf_path):
    import gguf
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as pb

    sp = spm.SentencePieceProcessor(model_file=str(model_path))
    proto = pb.ModelProto()
    proto.ParseFromString(model_path.read_bytes())
    tokens, scores, types = [], [], []
    for i, piece in enumerate(proto.pieces):
        tokens.append(piece.piece)
        scores.append(piece.score)
        kind = {
            pb.ModelProto.SentencePiece.NORMAL: 1, pb.ModelProto.SentencePiece.UNKNOWN: 2,
            pb.ModelProto.SentencePiece.CONTROL: 3, pb.ModelProto.SentencePiece.USER_DEFINED: 4,
            pb.ModelProto.SentencePiece.UNUSED: 5, pb.ModelProto.SentencePiece.BYTE: 6,
        }[piece.type]
        types.append(kind)
    writer = gguf.GGUFWriter(str(gguf_path), "llama")
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(sp.bos_id())
    writer.add_eos_token_id(sp.eos_id())
    writer.add_unk_token_id(sp.unk_id())
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_chat_template("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.fixture(scope="session")
def sentencepiece(work):
    pytest.importorskip("sentencepiece")
    pytest.importorskip("gguf")
    base = work / "spm"
    base.mkdir()
    model = train_sentencepiece(base)
    slow_dir = base / "slow"
    slow_dir.mkdir()
    (slow_dir / "tokenizer.model").write_bytes(model.read_bytes())
    tok = transformers.LlamaTokenizer.from_pretrained(str(slow_dir))
    hf_dir = base / "hf"
    tok.save_pretrained(str(hf_dir))
    gguf_path = base / "spm.gguf"
    write_spm_gguf(model, gguf_path)
    from_gguf = transformers.AutoTokenizer.from_pretrained(str(base), gguf_file=gguf_path.name)
    gguf_ref = base / "gguf_ref"
    from_gguf.save_pretrained(str(gguf_ref))
    return {"hf": hf_dir, "gguf": gguf_path, "gguf_ref": gguf_ref}


def load_json(directory):
    return json.loads((directory / "tokenizer.json").read_text(encoding="utf-8"))


def byte_level_variant(smollm_dir, out, *, pre_tokenizer, normalizer=None, ignore_merges=False, bos=None):
    data = load_json(smollm_dir)
    data["pre_tokenizer"] = pre_tokenizer
    data["normalizer"] = normalizer
    data["model"]["ignore_merges"] = ignore_merges
    if bos is not None:
        bos_id = data["model"]["vocab"].get(bos)
        if bos_id is None:
            bos_id = next(t["id"] for t in data["added_tokens"] if t["content"] == bos)
        data["post_processor"] = {"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
             "special_tokens": {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}}},
        ]}
    return save_tokenizer_json(data, out)


def split_then_bytes(pattern):
    return {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
    ]}


def spm_legacy_variant(spm_dir, out):
    """Llama 2 / Mistral's original shape: Prepend + Replace normalizer, no pre-tokenizer, BOS."""
    data = load_json(spm_dir)
    data["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "\u2581"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
    ]}
    data["pre_tokenizer"] = None
    for t in data["added_tokens"]:
        if t["content"] == "</tool>":
            t["normalized"] = True  # matched in the normalized text, as "▁</tool>" after Prepend
    data["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                   {"SpecialToken": {"id": "</s>", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]},
                           "</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]}},
    }
    return save_tokenizer_json(data, out)


def spm_metaspace_variant(spm_dir, out):
    """Metaspace splitting on every '▁' and the Metaspace decoder (no byte fallback in it)."""
    data = load_json(spm_dir)
    data["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}
    data["decoder"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}
    for t in data["added_tokens"]:
        if t["content"] == "<tool>":
            t["lstrip"] = True
            t["rstrip"] = True
    return save_tokenizer_json(data, out)


VARIANTS = [
    "smollm2-gguf", "smollm2-json", "smollm2-digits-json", "llama3-style-json", "qwen2-style-json",
    "spm-json", "spm-gguf", "spm-legacy-json", "spm-metaspace-json",
]


@pytest.fixture(scope="session")
def variants(work, smollm, sentencepiece):
    """name -> (ridge_tok_tool arguments, reference tokenizer.json)."""
    v = {}
    v["smollm2-json"] = (["--hf", smollm], smollm / "tokenizer.json")
    digits = byte_level_variant(smollm, work / "smollm2-digits", pre_tokenizer={"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]})
    v["smollm2-digits-json"] = (["--hf", digits / "tokenizer.json"], digits / "tokenizer.json")
    # The GGUF says tokenizer.ggml.pre = "smollm": SmolLM2's own pre-tokenizer, digits split one
    # by one before the GPT-2 split (its tokenizer.json on the Hub; llama.cpp does the same).
    # transformers' GGUF loader does not know the name and falls back to the GPT-2 split alone,
    # so the reference for the GGUF is the converted tokenizer.json with SmolLM2's pre-tokenizer.
    v["smollm2-gguf"] = (["--gguf", MODEL], digits / "tokenizer.json")
    llama3 = byte_level_variant(smollm, work / "llama3-style", pre_tokenizer=split_then_bytes(LLAMA3_SPLIT),
                                ignore_merges=True, bos="<|im_start|>")
    v["llama3-style-json"] = (["--hf", llama3 / "tokenizer.json"], llama3 / "tokenizer.json")
    qwen2 = byte_level_variant(smollm, work / "qwen2-style", pre_tokenizer=split_then_bytes(QWEN2_SPLIT),
                               normalizer={"type": "NFC"})
    v["qwen2-style-json"] = (["--hf", qwen2 / "tokenizer.json"], qwen2 / "tokenizer.json")
    v["spm-json"] = (["--hf", sentencepiece["hf"]], sentencepiece["hf"] / "tokenizer.json")
    v["spm-gguf"] = (["--gguf", sentencepiece["gguf"]], sentencepiece["gguf_ref"] / "tokenizer.json")
    legacy = spm_legacy_variant(sentencepiece["hf"], work / "spm-legacy")
    v["spm-legacy-json"] = (["--hf", legacy / "tokenizer.json"], legacy / "tokenizer.json")
    metaspace = spm_metaspace_variant(sentencepiece["hf"], work / "spm-metaspace")
    v["spm-metaspace-json"] = (["--hf", metaspace / "tokenizer.json"], metaspace / "tokenizer.json")
    return v


# ---------------------------------------------------------------------------------------------
# ridge


def run_tool(args, requests, timeout=600):
    """Runs ridge_tok_tool over all requests in one process; returns the responses."""
    if not TOOL.exists():
        pytest.fail(f"{TOOL} is missing (build the ridge_tok_tool target)")
    payload = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in requests)
    p = subprocess.run([str(TOOL), *map(str, args)], input=payload.encode("utf-8"), capture_output=True,
                       timeout=timeout)
    lines = [line for line in p.stdout.decode("utf-8").split("\n") if line]
    if p.returncode != 0 or not lines or "ready" not in json.loads(lines[0]):
        pytest.fail(f"ridge_tok_tool {args} failed ({p.returncode}): {p.stderr.decode(errors='replace')}"
                    f"{lines[:1]}")
    responses = [json.loads(line) for line in lines[1:]]
    assert len(responses) == len(requests), "ridge_tok_tool answered fewer requests than asked"
    return responses


def random_id_sequences(ref, count, seed):
    """Uniform ids, plus sequences rich in byte tokens (which split characters) and specials."""
    r = random.Random(seed)
    vocab = ref.get_vocab(with_added_tokens=True)
    size = max(vocab.values()) + 1
    byte_ids = [i for t, i in vocab.items() if len(t) == 6 and t.startswith("<0x") and t.endswith(">")]
    # Byte-level vocabularies: tokens standing for lone high bytes (pieces of a character).
    byte_ids += [i for t, i in vocab.items() if len(t) == 1 and ord(t) >= 0x80]
    special_ids = sorted(ref.get_added_tokens_decoder().keys())
    sequences = []
    for k in range(count):
        n = r.randint(1, 40)
        seq = []
        for _ in range(n):
            c = r.random()
            if c < 0.45 or not byte_ids:
                seq.append(r.randrange(size))
            elif c < 0.9:
                seq.append(r.choice(byte_ids))
            else:
                seq.append(r.choice(special_ids) if special_ids else r.randrange(size))
        sequences.append(seq)
    return sequences


# ---------------------------------------------------------------------------------------------
# The test


def short(value, limit=160):
    s = repr(value)
    return s if len(s) <= limit else s[:limit] + "..."


@pytest.mark.parametrize("name", VARIANTS)
def test_parity(name, variants):
    args, reference = variants[name]
    ref = tokenizers.Tokenizer.from_file(str(reference))
    corpus = full_corpus()
    assert len(corpus) >= 500

    requests, expected, labels = [], [], []
    flag_sets = [(True, True), (False, True), (True, False), (False, False)]
    reference_ids = []
    for text in corpus:
        for add_special, parse_special in flag_sets:
            ref.encode_special_tokens = not parse_special
            ids = ref.encode(text, add_special_tokens=add_special).ids
            requests.append({"op": "encode", "text": text, "add_special": add_special, "parse_special": parse_special})
            expected.append(("ids", ids))
            labels.append(f"encode(add_special={add_special}, parse_special={parse_special}) of {short(text)}")
            if add_special and parse_special:
                reference_ids.append((f"ids of {short(text)}", ids))
    ref.encode_special_tokens = False

    random_ids = random_id_sequences(ref, RANDOM_SEQUENCES, seed=zlib.crc32(name.encode()))
    decode_cases = reference_ids + [(f"random ids {short(seq)}", seq) for seq in random_ids]
    for label, ids in decode_cases:
        for skip in (False, True):
            text = ref.decode(ids, skip_special_tokens=skip)
            requests.append({"op": "decode", "ids": ids, "skip_special": skip})
            expected.append(("text", text))
            labels.append(f"decode(skip_special={skip}) of {label}")
            requests.append({"op": "stream", "ids": ids, "skip_special": skip})
            expected.append(("stream", text))
            labels.append(f"stream(skip_special={skip}) of {label}")

    responses = run_tool(args, requests)
    mismatches = []
    counts = {"ids": 0, "text": 0, "stream": 0}
    for (kind, want), got, label in zip(expected, responses, labels):
        counts[kind] += 1
        if "error" in got:
            mismatches.append(f"{label}: ridge error {got['error']}")
            continue
        if kind == "ids":
            if got["ids"] != want:
                mismatches.append(f"{label}:\n    want {want}\n    got  {got['ids']}")
        elif kind == "text":
            if got["text"] != want:
                mismatches.append(f"{label}:\n    want {short(want)}\n    got  {short(got['text'])}")
        else:
            pieces = [bytes.fromhex(p) for p in got["pieces"]] + [bytes.fromhex(got["flush"])]
            broken = []
            for i, piece in enumerate(pieces):
                try:
                    piece.decode("utf-8")
                except UnicodeDecodeError:
                    broken.append(i)
            joined = b"".join(pieces).decode("utf-8", errors="replace")
            if broken:
                mismatches.append(f"{label}: pieces {broken} are not whole UTF-8: {[p.hex() for p in pieces]}")
            elif joined != want:
                mismatches.append(f"{label}: streamed pieces join to {short(joined)}, decode is {short(want)}")

    print(f"\n{name}: {len(corpus)} strings, {counts['ids']} encodes, {counts['text']} decodes "
          f"({len(random_ids)} random id sequences x 2), {counts['stream']} streams, {len(mismatches)} mismatches")
    assert not mismatches, f"{len(mismatches)} mismatches in {name}:\n" + "\n".join(mismatches[:25])


def test_info_smollm2(smollm):
    """Special tokens, stop ids and BOS/EOS of the default model, from both sources, against HF
    transformers' tokenizer of the same file."""
    ref = transformers.AutoTokenizer.from_pretrained(str(smollm))
    special = sorted(i for i, t in ref.added_tokens_decoder.items() if t.special)
    probe = ref("hello there").input_ids
    for args in (["--gguf", MODEL], ["--hf", smollm]):
        (info,) = run_tool(args, [{"op": "info"}])
        assert info["kind"] == "byte_level_bpe"
        assert info["vocab_size"] == len(ref)
        assert info["bos"] == ref.bos_token_id and info["eos"] == ref.eos_token_id
        assert info["add_bos"] is (probe[0] == ref.bos_token_id)
        assert ref.convert_tokens_to_ids("<|im_end|>") in info["stop_ids"]
        assert info["special_ids"] == special
        assert info["chat_template_bytes"] == len(ref.chat_template.encode())


def test_info_sentencepiece(sentencepiece):
    (info,) = run_tool(["--gguf", sentencepiece["gguf"]], [{"op": "info"}])
    assert info["kind"] == "sentencepiece_bpe"
    assert info["bos"] == 1 and info["eos"] == 2 and info["add_bos"] is True
    assert info["stop_ids"][0] == 2


def test_encode_speed_report(smollm):
    """Not a timed test: prints ridge's and `tokenizers`' time to encode 1 MB of corpus text."""
    text = "\n".join(full_corpus())
    text = (text * (1_000_000 // len(text.encode()) + 1))
    text = text.encode()[:1_000_000].decode("utf-8", errors="ignore")
    (got,) = run_tool(["--hf", smollm], [{"op": "time_encode", "text": text, "repeat": 3}])
    ref = tokenizers.Tokenizer.from_file(str(smollm / "tokenizer.json"))
    best = min(_timed(lambda: ref.encode(text, add_special_tokens=False)) for _ in range(3))
    print(f"\nencode 1 MB (SmolLM2): ridge {got['cpu_seconds'] * 1e3:.0f} ms CPU, {got['seconds'] * 1e3:.0f} ms wall ({got['ids']} ids), "
          f"tokenizers {best * 1e3:.0f} ms (single-threaded encode)")
    assert got["ids"] == len(ref.encode(text, add_special_tokens=False).ids)


def _timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start
