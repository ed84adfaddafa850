#include "ridge/tokenizer/tokenizer.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <string_view>

#include "ridge/core/error.h"
#include "ridge/tokenizer/byte_level.h"
#include "ridge/tokenizer/tokenizer_impl.h"
#include "ridge/tokenizer/utf8.h"

namespace ridge::tokenizer {
namespace {

// Tokens that end generation when the vocabulary has them as special tokens.
constexpr std::array<std::string_view, 10> kStopTokenTexts = {
    "<|im_end|>", "<|eot_id|>",    "<|end_of_text|>", "</s>",       "<|endoftext|>",
    "<|eom_id|>", "<end_of_turn>", "<|end|>",         "<|return|>", "<|im_sep|>",
};

// Words longer than this are not worth caching (and SentencePiece-style vocabularies pass whole
// text segments as one word).
constexpr size_t kMaxCachedWordBytes = 64;

}  // namespace

void Tokenizer::Impl::finalize() {
  size_t size = id_to_text.size();
  // Added ids past every token plus some unused ids (holes) are refused, so that the id-indexed
  // tables stay proportional to the vocabulary rather than to the largest id a file names.
  const size_t n_tokens = std::max(size, model_vocab.size());
  const size_t id_limit = n_tokens + added_tokens.size() + Impl::kTokenIdSlack;
  for (const auto& added : added_tokens) {
    if (added.id < 0)
      fail("{}: added token '{}' has a negative id {}", source, added.content, added.id);
    if (static_cast<size_t>(added.id) >= id_limit)
      fail(
          "{}: added token '{}' has id {}, past the vocabulary's id range ({} tokens and {} added "
          "tokens; ids must be below {})",
          source, added.content, added.id, n_tokens, added_tokens.size(), id_limit);
    size = std::max(size, static_cast<size_t>(added.id) + 1);
  }
  id_to_text.resize(size);
  present.resize(size, 0);
  special.resize(size, 0);

  all_tokens = model_vocab;
  std::vector<detail::AddedToken> raw;
  std::vector<std::string> raw_patterns;
  std::vector<detail::AddedToken> normalized;
  std::vector<std::string> normalized_patterns;
  for (const auto& added : added_tokens) {
    present[added.id] = 1;
    if (added.special) special[added.id] = 1;
    all_tokens[added.content] = added.id;
    if (added.normalized) {
      // `tokenizers` spells a normalized added token in its normalized form (id_to_token, and
      // so decode: "</tool>" after a Prepend("▁") normalizer decodes as " </tool>").
      std::string spelled = detail::normalize(normalizer, added.content);
      id_to_text[added.id] = spelled;
      if (spelled.empty()) continue;
      normalized.push_back(added);
      normalized_patterns.push_back(std::move(spelled));
    } else {
      id_to_text[added.id] = added.content;
      if (added.content.empty()) continue;
      raw.push_back(added);
      raw_patterns.push_back(added.content);
    }
  }
  raw_added.build(std::move(raw), std::move(raw_patterns));
  normalized_added.build(std::move(normalized), std::move(normalized_patterns));

  auto check_id = [&](std::optional<TokenId> id, std::string_view what) {
    if (id && (*id < 0 || static_cast<size_t>(*id) >= size || !present[*id])) {
      fail("{}: {} id {} is not a token of the vocabulary (size {})", source, what, *id, size);
    }
  };
  check_id(bos, "bos token");
  check_id(eos, "eos token");
  for (TokenId id : prefix_ids) check_id(id, "post-processor token");
  for (TokenId id : suffix_ids) check_id(id, "post-processor token");
  for (TokenId id : extra_stop_ids) check_id(id, "stop token");

  stop_ids.clear();
  auto add_stop = [&](TokenId id) {
    if (std::find(stop_ids.begin(), stop_ids.end(), id) == stop_ids.end()) stop_ids.push_back(id);
  };
  if (eos) add_stop(*eos);
  for (TokenId id : extra_stop_ids) add_stop(id);
  for (std::string_view text : kStopTokenTexts) {
    const auto it = all_tokens.find(text);
    if (it != all_tokens.end() && special[it->second]) add_stop(it->second);
  }

  const auto& alphabet = detail::ByteLevelAlphabet::get();
  const bool byte_fallback = bpe.options().byte_fallback;
  token_bytes.assign(size, std::string());
  for (size_t id = 0; id < size; ++id) {
    const std::string& text = id_to_text[id];
    if (kind == VocabKind::byte_level_bpe) {
      auto bytes = alphabet.decode(text);
      token_bytes[id] = bytes ? std::move(*bytes) : text;
      continue;
    }
    unsigned value = 0;
    if (byte_fallback && text.size() == 6 && text.starts_with("<0x") && text.back() == '>' &&
        std::sscanf(text.c_str() + 3, "%2x", &value) == 1) {
      token_bytes[id] = std::string(1, static_cast<char>(value));
      continue;
    }
    std::string bytes = text;
    for (size_t pos = bytes.find("\xE2\x96\x81"); pos != std::string::npos;
         pos = bytes.find("\xE2\x96\x81", pos + 1)) {
      bytes.replace(pos, 3, " ");
    }
    token_bytes[id] = std::move(bytes);
  }
}

std::vector<TokenId> Tokenizer::Impl::encode(std::string_view input, bool add_special,
                                             bool parse_special) const {
  std::vector<TokenId> ids;
  ids.reserve(input.size() / 3 + prefix_ids.size() + suffix_ids.size() + 4);
  if (add_special) ids.insert(ids.end(), prefix_ids.begin(), prefix_ids.end());

  // Text that is not UTF-8 is read with its invalid bytes as U+FFFD, as a Python caller doing
  // bytes.decode(errors="replace") would hand it to `tokenizers`.
  std::string repaired;
  std::string_view text = input;
  if (!detail::is_valid_utf8(text)) {
    repaired = detail::utf8_lossy(text);
    text = repaired;
  }

  detail::BpeModel::Scratch scratch;
  std::vector<detail::AddedSplit> outer;
  std::vector<detail::AddedSplit> inner;
  // word -> where its ids were first written into `ids`.
  std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, detail::StringHash,
                     std::equal_to<>>
      word_cache;
  auto encode_piece_text = [&](detail::Pieces&& pieces) {
    detail::pre_tokenize(pre_tokenizer, pieces);
    for (const auto& span : pieces.spans) {
      const std::string_view word(pieces.buffer.data() + span.begin, span.end - span.begin);
      const bool cacheable = word.size() <= kMaxCachedWordBytes;
      if (cacheable) {
        if (const auto it = word_cache.find(word); it != word_cache.end()) {
          const auto [offset, count] = it->second;
          for (uint32_t i = 0; i < count; ++i) {
            const TokenId id = ids[offset + i];
            ids.push_back(id);
          }
          continue;
        }
      }
      const size_t before = ids.size();
      bpe.tokenize(word, ids, scratch);
      if (cacheable) {
        word_cache.emplace(
            std::string(word),
            std::pair{static_cast<uint32_t>(before), static_cast<uint32_t>(ids.size() - before)});
      }
    }
  };

  raw_added.split(text, !parse_special, outer);
  for (const auto& piece : outer) {
    if (piece.token >= 0) {
      ids.push_back(raw_added.tokens()[piece.token].id);
      continue;
    }
    const std::string_view segment = text.substr(piece.begin, piece.end - piece.begin);
    std::string normalized = detail::normalize(normalizer, segment);
    inner.clear();
    if (normalized_added.empty()) {
      inner.push_back(detail::AddedSplit{0, normalized.size(), -1});
    } else {
      normalized_added.split(normalized, !parse_special, inner);
    }
    for (const auto& sub : inner) {
      if (sub.token >= 0) {
        ids.push_back(normalized_added.tokens()[sub.token].id);
        continue;
      }
      if (sub.end <= sub.begin) continue;
      detail::Pieces pieces;
      pieces.buffer.assign(normalized, sub.begin, sub.end - sub.begin);
      pieces.spans.push_back({0, pieces.buffer.size(), piece.begin == 0 && sub.begin == 0});
      encode_piece_text(std::move(pieces));
    }
  }

  if (add_special) ids.insert(ids.end(), suffix_ids.begin(), suffix_ids.end());
  return ids;
}

const std::string* Tokenizer::Impl::decoder_input(TokenId id, bool skip_special) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_text.size() || !present[id]) return nullptr;
  if (skip_special && special[id]) return nullptr;
  return &id_to_text[id];
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

std::vector<TokenId> Tokenizer::encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
  return impl_->encode(text, add_special, parse_special);
}

std::string Tokenizer::decode(std::span<const TokenId> ids, bool skip_special) const {
  std::string out;
  detail::DecodeStream stream(&impl_->decoder);
  for (TokenId id : ids) {
    if (const std::string* text = impl_->decoder_input(id, skip_special)) stream.push(*text, out);
  }
  stream.finish(out);
  return out;
}

std::string Tokenizer::token_bytes(TokenId id) const {
  RIDGE_CHECK(id >= 0 && static_cast<size_t>(id) < impl_->token_bytes.size(),
              "token id {} is out of range (vocabulary size {})", id, impl_->token_bytes.size());
  return impl_->token_bytes[id];
}

const std::string& Tokenizer::token_text(TokenId id) const {
  RIDGE_CHECK(id >= 0 && static_cast<size_t>(id) < impl_->id_to_text.size(),
              "token id {} is out of range (vocabulary size {})", id, impl_->id_to_text.size());
  return impl_->id_to_text[id];
}

std::optional<TokenId> Tokenizer::token_id(std::string_view text) const {
  const auto it = impl_->all_tokens.find(text);
  if (it == impl_->all_tokens.end()) return std::nullopt;
  return it->second;
}

VocabKind Tokenizer::kind() const {
  return impl_->kind;
}
size_t Tokenizer::vocab_size() const {
  return impl_->id_to_text.size();
}
bool Tokenizer::is_special(TokenId id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->special.size() && impl_->special[id];
}
std::optional<TokenId> Tokenizer::bos_id() const {
  return impl_->bos;
}
std::optional<TokenId> Tokenizer::eos_id() const {
  return impl_->eos;
}
const std::vector<TokenId>& Tokenizer::stop_ids() const {
  return impl_->stop_ids;
}
bool Tokenizer::add_bos() const {
  return impl_->bos && std::find(impl_->prefix_ids.begin(), impl_->prefix_ids.end(), *impl_->bos) !=
                           impl_->prefix_ids.end();
}
const std::string& Tokenizer::chat_template() const {
  return impl_->chat_template;
}

}  // namespace ridge::tokenizer
