"""A placeholder tokenizer.json for random-weight checkpoints (scripts/device/e2e_parity.py make
saves weights and config only), so that `ridge serve --tokenizer DIR` can serve them.

Byte-level BPE without merges: the 256 byte symbols, then one word per remaining id, token i
decoding to " t<i>" (so every generated token streams as its own text), no special tokens (no
BOS/EOS: nothing stops generation early). Prompts are meant to be token ids; text still encodes
(byte by byte). Standard library only.

  python3 scripts/device/placeholder_tokenizer.py --out DIR (--vocab N | --config config.json)
"""
import argparse
import json
import pathlib


def bytes_to_unicode():
    """GPT-2's byte -> printable character map (the ByteLevel alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def placeholder(vocab_size):
    if vocab_size <= 256:
        raise SystemExit(f"vocab {vocab_size} must exceed the 256 byte symbols")
    byte_chars = bytes_to_unicode()
    space = byte_chars[ord(" ")]
    vocab = {}
    for i in range(vocab_size - 256):
        vocab[f"{space}t{i}"] = i
    for b in range(256):
        vocab[byte_chars[b]] = vocab_size - 256 + b
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": []},
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder to write tokenizer.json into")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--vocab", type=int, help="vocabulary size")
    g.add_argument("--config", help="a model's config.json (its vocab_size)")
    a = ap.parse_args()
    vocab = a.vocab if a.vocab else json.loads(pathlib.Path(a.config).read_text())["vocab_size"]
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_text(json.dumps(placeholder(vocab), ensure_ascii=False))
    print(f"{out / 'tokenizer.json'}: placeholder vocabulary of {vocab} tokens")


if __name__ == "__main__":
    main()
