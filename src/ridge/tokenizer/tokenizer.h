// Tokenizer: BPE over byte-level vocabularies (GPT-2 style: SmolLM2, Llama 3, Qwen2) and
// SentencePiece-style vocabularies with byte fallback (Llama 2, Mistral), read from GGUF
// metadata (tokenizer.ggml.*) or a Hugging Face tokenizer.json (+ tokenizer_config.json).
//
// Behaviour is that of the Hugging Face `tokenizers` library reading the same tokenizer.json
// (tests/parity/test_tokenizer_parity.py checks encode, decode and streaming against it). A GGUF
// is read as the tokenizer.json transformers would make from it, except where the model's own
// tokenizer.json (and llama.cpp) differ from that conversion: "smollm" splits digits one by one
// before the GPT-2 split, "llama-bpe" (Llama 3) ignores merges for whole-word tokens. A loaded
// Tokenizer is immutable: encode and decode may be called from many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ridge::io {
class GgufFile;
}

namespace ridge::tokenizer {

using TokenId = int32_t;

enum class VocabKind { byte_level_bpe, sentencepiece_bpe };

class Tokenizer {
 public:
  static Tokenizer from_gguf(const io::GgufFile& gguf);
  // `path`: tokenizer.json, or a folder holding it (tokenizer_config.json beside it is read for
  // the chat template, bos/eos and add_bos when present).
  static Tokenizer from_hf(const std::string& path);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // add_special: prepend BOS where the vocabulary asks for it (add_bos_token).
  // parse_special: text matching a special/added token becomes that token; otherwise it is
  // tokenized as plain text.
  // (Non-special added tokens, e.g. user-defined <tool>, are matched either way, as in
  // `tokenizers`. Bytes of `text` that are not UTF-8 are read as U+FFFD.)
  std::vector<TokenId> encode(std::string_view text, bool add_special = true,
                              bool parse_special = true) const;
  // skip_special: drop special tokens from the output. Ids outside the vocabulary are dropped
  // (as `tokenizers` does); invalid UTF-8 that the tokens spell out is rendered as U+FFFD.
  std::string decode(std::span<const TokenId> ids, bool skip_special = false) const;
  // The raw bytes a token stands for (byte-level mapping undone, "▁" -> " ", <0xNN> -> byte).
  std::string token_bytes(TokenId id) const;
  // The vocabulary's own string for the token (e.g. "Ġthe").
  const std::string& token_text(TokenId id) const;
  std::optional<TokenId> token_id(std::string_view text) const;

  VocabKind kind() const;
  size_t vocab_size() const;
  bool is_special(TokenId id) const;
  std::optional<TokenId> bos_id() const;
  std::optional<TokenId> eos_id() const;
  // Every token that ends generation (eos, eot, <|im_end|>, <|eot_id|>, ...).
  const std::vector<TokenId>& stop_ids() const;
  bool add_bos() const;
  // The model's Jinja chat template ("" if none is stored).
  const std::string& chat_template() const;

  struct Impl;

 private:
  friend class IncrementalDecoder;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Turns a stream of token ids into text pieces, never emitting half a UTF-8 character:
// bytes of an incomplete sequence are held until it completes. Invalid bytes become U+FFFD
// exactly as the batch decode would render them.
//
// The concatenation of every push() and the final flush() equals decode(ids, skip_special)
// exactly (the batch decode is the same stream run to its end). Each push costs time in the
// token only, not in the length of the stream. Text is held back only while a later token can
// still change it: the bytes of an incomplete UTF-8 character, or a run of <0xNN> byte-fallback
// tokens (an invalid run renders as one U+FFFD per byte). After flush() the decoder starts a new
// stream.
class IncrementalDecoder {
 public:
  explicit IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special = true);
  ~IncrementalDecoder();
  IncrementalDecoder(IncrementalDecoder&&) noexcept;
  IncrementalDecoder& operator=(IncrementalDecoder&&) noexcept;

  // Text that became complete with this token (possibly empty).
  std::string push(TokenId id);
  // Whatever is still held (incomplete bytes rendered as U+FFFD).
  std::string flush();

  // The ids pushed since the start of the stream, and the bytes of text returned for them.
  const std::vector<TokenId>& ids() const { return ids_; }
  size_t emitted_bytes() const { return emitted_bytes_; }

  struct Stream;

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::vector<TokenId> ids_;
  size_t emitted_bytes_ = 0;  // of decode(ids_) already returned
  std::unique_ptr<Stream> stream_;
};

}  // namespace ridge::tokenizer
