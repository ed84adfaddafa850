// Tokenizer::Impl: everything a loaded vocabulary holds. Both loaders (load_gguf.cpp,
// load_hf.cpp) fill one of these and call finalize(); tokenizer.cpp runs it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ridge/tokenizer/added_vocab.h"
#include "ridge/tokenizer/bpe.h"
#include "ridge/tokenizer/decode_stream.h"
#include "ridge/tokenizer/pre_tokenize.h"
#include "ridge/tokenizer/tokenizer.h"

namespace ridge::tokenizer {

struct Tokenizer::Impl {
  // Ids a vocabulary may leave unused past its entries and added tokens: ids are refused past
  // that (load_hf's parse_model, finalize), so that a file's memory stays proportional to its size.
  static constexpr size_t kTokenIdSlack = size_t(1) << 16;

  std::string source;  // the file it came from, for messages
  VocabKind kind = VocabKind::byte_level_bpe;

  // id -> text for every id (model vocabulary and added tokens); holes are "".
  std::vector<std::string> id_to_text;
  std::vector<uint8_t> present;  // 1 where an id has a token
  std::vector<uint8_t> special;  // 1 for special (skippable, control) tokens
  detail::TokenMap model_vocab;  // the BPE model's vocabulary
  detail::TokenMap all_tokens;   // text -> id, added tokens included (they win)
  detail::BpeModel bpe;

  std::vector<detail::AddedToken> added_tokens;
  detail::AddedTokenMatcher raw_added;         // matched in the original text
  detail::AddedTokenMatcher normalized_added;  // matched in each normalized piece

  std::vector<detail::NormalizerStep> normalizer;
  std::vector<detail::PreTokenizerStep> pre_tokenizer;
  std::vector<detail::DecoderStep> decoder;

  // add_special: tokens put before and after the text (the post-processor's template).
  std::vector<TokenId> prefix_ids;
  std::vector<TokenId> suffix_ids;

  std::optional<TokenId> bos;
  std::optional<TokenId> eos;
  std::vector<TokenId> extra_stop_ids;  // e.g. GGUF eot/eom ids
  std::vector<TokenId> stop_ids;
  std::string chat_template;
  std::vector<std::string> token_bytes;  // raw bytes per id, precomputed by finalize()

  // Sets vocabulary-wide tables (sizes, added-token matchers, stop ids, token bytes) once the
  // loader has filled the rest; validates ids. Throws ridge::Error naming `source`.
  void finalize();

  std::vector<TokenId> encode(std::string_view text, bool add_special, bool parse_special) const;
  // The text the decoder sees for `id`, or nullptr when `id` is dropped (out of range, a hole,
  // or special while skip_special).
  const std::string* decoder_input(TokenId id, bool skip_special) const;
};

}  // namespace ridge::tokenizer
