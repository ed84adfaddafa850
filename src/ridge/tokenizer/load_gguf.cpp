// Tokenizer::from_gguf: the tokenizer.ggml.* metadata of a GGUF file (llama.cpp's keys).
//
// tokenizer.ggml.model "gpt2" is a byte-level BPE with the file's merges, split by the regex that
// tokenizer.ggml.pre names; "llama" is a SentencePiece-style BPE with byte fallback whose merges,
// when the file has none, are rebuilt from the scores the way transformers' GGUF loader does
// (every split of every token into two tokens, best score first), so that the result is the
// tokenizer.json transformers would make from the same file. Token types: 2 (unknown) and
// 3 (control) are special tokens, 4 (user-defined) are added tokens matched whole in the text.
#include <algorithm>
#include <cstdint>
#include <string_view>
#include <unordered_map>

#include <fmt/format.h>

#include "ridge/core/error.h"
#include "ridge/io/gguf.h"
#include "ridge/tokenizer/tokenizer_impl.h"
#include "ridge/tokenizer/utf8.h"

namespace ridge::tokenizer {
namespace {

enum TokenType : int64_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

constexpr std::string_view kLlama3Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// The pre-tokenizer a byte-level vocabulary was trained with, by its tokenizer.ggml.pre name.
// Each is the pipeline of the model's own tokenizer.json.
void byte_level_pre_tokenizer(const std::string& source, const std::string& pre,
                              Tokenizer::Impl& impl) {
  using Kind = detail::PreTokenizerStep::Kind;
  auto split = [&](std::string_view pattern) {
    detail::PreTokenizerStep step;
    step.kind = Kind::split;
    step.regex = std::make_shared<detail::Regex>(
        pattern, fmt::format("{}: tokenizer.ggml.pre '{}'", source, pre));
    impl.pre_tokenizer.push_back(std::move(step));
  };
  auto byte_level = [&](bool use_regex) {
    detail::PreTokenizerStep step;
    step.kind = Kind::byte_level;
    if (use_regex) step.regex = std::make_shared<detail::Regex>(detail::kGpt2Pattern, "ByteLevel");
    impl.pre_tokenizer.push_back(std::move(step));
  };
  if (pre == "default" || pre == "gpt2" || pre == "gpt-2") {
    byte_level(true);
  } else if (pre == "smollm" || pre == "starcoder" || pre == "refact" || pre == "command-r" ||
             pre == "codeshell" || pre == "exaone" || pre == "minerva") {
    // Every digit on its own, then the GPT-2 split: SmolLM2's (StarCoder's) tokenizer.json
    // pre-tokenizer, Sequence[Digits(individual_digits), ByteLevel], which llama.cpp also
    // applies for these names. (transformers' GGUF loader does not know "smollm" and uses the
    // GPT-2 split alone, which differs where whitespace precedes a digit: "  12".)
    detail::PreTokenizerStep digits;
    digits.kind = Kind::digits;
    digits.regex = std::make_shared<detail::Regex>("\\p{N}", "Digits");
    impl.pre_tokenizer.push_back(std::move(digits));
    byte_level(true);
  } else if (pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe" || pre == "smaug-bpe" ||
             pre == "dbrx" || pre == "falcon3") {
    split(kLlama3Split);
    byte_level(false);
  } else if (pre == "qwen2" || pre == "deepseek-r1-qwen" || pre == "megrez") {
    split(kQwen2Split);
    byte_level(false);
  } else {
    fail(
        "{}: tokenizer.ggml.pre '{}' is not a pre-tokenizer ridge knows (known: default, gpt2, "
        "smollm/starcoder, llama-bpe/llama3, qwen2)",
        source, pre);
  }
}

// transformers' generate_merges(vocab, scores): for each token in vocabulary order, every split
// into two tokens (ordered by the two ids), then all of them stable-sorted by (score, length of
// the left part, length of the right part), highest first. Lengths count characters.
//
// Every cut of a token hashes its two parts, so a token of L bytes costs ~L^2/2 bytes hashed: a
// 4 MB token would take half an hour. Real SentencePiece pieces are at most a few hundred bytes,
// so tokens longer than kMaxPieceBytes are refused (bounding a token at ~134M bytes hashed), and a
// cut is only looked up when tokens of both its parts' lengths exist, which skips nearly every cut
// of a long token.
constexpr size_t kMaxPieceBytes = 16 * 1024;

void merges_from_scores(const std::vector<std::string>& tokens, const std::vector<float>& scores,
                        Tokenizer::Impl& impl, const std::string& source) {
  std::vector<bool> has_length(kMaxPieceBytes + 1, false);
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i].size() > kMaxPieceBytes) {
      fail(
          "{}: tokenizer.ggml.tokens[{}] is {} bytes long; rebuilding merges from "
          "tokenizer.ggml.scores allows tokens of at most {} bytes",
          source, i, tokens[i].size(), kMaxPieceBytes);
    }
    has_length[tokens[i].size()] = true;
  }
  struct Candidate {
    std::string_view left;
    std::string_view right;
    float score;
    size_t left_chars;
    size_t right_chars;
  };
  // Python dict semantics for repeated tokens: first position, last value.
  std::unordered_map<std::string_view, size_t> last_index;
  std::vector<size_t> order;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const auto [it, inserted] = last_index.try_emplace(tokens[i], i);
    if (inserted) {
      order.push_back(i);
    } else {
      it->second = i;
    }
  }
  std::vector<Candidate> candidates;
  std::vector<Candidate> local;
  for (size_t first : order) {
    const std::string_view piece = tokens[first];
    const float score = scores[last_index[piece]];
    local.clear();
    size_t left_chars = 0;
    const size_t total_chars = [&] {
      size_t n = 0;
      for (char c : piece) n += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
      return n;
    }();
    for (size_t cut = 1; cut < piece.size(); ++cut) {
      if ((static_cast<uint8_t>(piece[cut - 1]) & 0xC0) != 0x80) ++left_chars;
      if ((static_cast<uint8_t>(piece[cut]) & 0xC0) == 0x80) continue;  // not a character boundary
      if (!has_length[cut] || !has_length[piece.size() - cut]) continue;  // no such tokens
      const std::string_view left = piece.substr(0, cut);
      const std::string_view right = piece.substr(cut);
      if (last_index.count(left) && last_index.count(right)) {
        local.push_back({left, right, score, left_chars, total_chars - left_chars});
      }
    }
    std::sort(local.begin(), local.end(), [&](const Candidate& a, const Candidate& b) {
      const size_t al = last_index[a.left], bl = last_index[b.left];
      if (al != bl) return al < bl;
      return last_index[a.right] < last_index[b.right];
    });
    candidates.insert(candidates.end(), local.begin(), local.end());
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) {
                     if (a.score != b.score) return a.score > b.score;
                     if (a.left_chars != b.left_chars) return a.left_chars > b.left_chars;
                     return a.right_chars > b.right_chars;
                   });
  const std::string field = source + ": merges rebuilt from tokenizer.ggml.scores";
  for (const Candidate& c : candidates) impl.bpe.add_merge(c.left, c.right, field);
}

detail::DecoderStep decoder_step(detail::DecoderStep::Kind kind, std::string pattern = "",
                                 std::string content = "") {
  detail::DecoderStep step;
  step.kind = kind;
  step.pattern = std::move(pattern);
  step.content = std::move(content);
  return step;
}

std::optional<TokenId> token_id_key(const io::GgufFile& gguf, std::string_view key, size_t n) {
  const auto value = gguf.try_int(key);
  if (!value) return std::nullopt;
  if (*value < 0 || static_cast<uint64_t>(*value) >= n) {
    fail("{}: {} = {} is out of range (vocabulary of {} tokens)", gguf.path(), key, *value, n);
  }
  return static_cast<TokenId>(*value);
}

}  // namespace

Tokenizer Tokenizer::from_gguf(const io::GgufFile& gguf) {
  auto impl = std::make_unique<Impl>();
  const std::string& source = gguf.path();
  impl->source = source;

  const auto model = gguf.try_string("tokenizer.ggml.model");
  if (!model) fail("{}: tokenizer.ggml.model is missing (the file has no tokenizer)", source);
  const bool byte_level = *model == "gpt2";
  if (!byte_level && *model != "llama") {
    fail("{}: tokenizer.ggml.model '{}' is not supported (supported: gpt2, llama)", source, *model);
  }
  impl->kind = byte_level ? VocabKind::byte_level_bpe : VocabKind::sentencepiece_bpe;

  const std::vector<std::string> tokens = gguf.get_string_array("tokenizer.ggml.tokens");
  const size_t n = tokens.size();
  if (n == 0) fail("{}: tokenizer.ggml.tokens is empty", source);
  if (n > static_cast<size_t>(INT32_MAX))
    fail("{}: tokenizer.ggml.tokens has {} tokens", source, n);
  std::vector<int64_t> types(n, kNormal);
  if (gguf.has("tokenizer.ggml.token_type")) {
    types = gguf.get_int_array("tokenizer.ggml.token_type");
    if (types.size() != n) {
      fail("{}: tokenizer.ggml.token_type has {} entries, expected {} (one per token)", source,
           types.size(), n);
    }
  }

  impl->id_to_text = tokens;
  impl->present.assign(n, 1);
  for (size_t id = 0; id < n; ++id) {
    if (!detail::is_valid_utf8(tokens[id])) {
      fail("{}: tokenizer.ggml.tokens[{}] is not valid UTF-8", source, id);
    }
    if (types[id] < kUndefined || types[id] > kByte) {
      fail("{}: tokenizer.ggml.token_type[{}] = {} is not a token type (0..6)", source, id,
           types[id]);
    }
    impl->model_vocab[tokens[id]] = static_cast<TokenId>(id);  // a repeated token: last id wins
  }

  impl->bos = token_id_key(gguf, "tokenizer.ggml.bos_token_id", n);
  impl->eos = token_id_key(gguf, "tokenizer.ggml.eos_token_id", n);
  const auto unk = token_id_key(gguf, "tokenizer.ggml.unknown_token_id", n);
  token_id_key(gguf, "tokenizer.ggml.padding_token_id", n);
  for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    if (auto id = token_id_key(gguf, key, n)) impl->extra_stop_ids.push_back(*id);
  }

  detail::BpeOptions options;
  using DKind = detail::DecoderStep::Kind;
  bool add_bos = false;
  if (byte_level) {
    const std::string pre = gguf.try_string("tokenizer.ggml.pre").value_or("default");
    byte_level_pre_tokenizer(source, pre, *impl);
    // llama.cpp ignores merges for Llama 3's vocabulary, as its tokenizer.json does.
    options.ignore_merges = pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe";
    impl->bpe = detail::BpeModel(&impl->model_vocab, options);
    if (!gguf.has("tokenizer.ggml.merges"))
      fail("{}: tokenizer.ggml.merges is missing (gpt2 vocabularies need merges)", source);
    impl->decoder.push_back(decoder_step(DKind::byte_level));
  } else {
    options.byte_fallback = true;
    options.fuse_unk = true;
    options.unk_id = unk;
    impl->bpe = detail::BpeModel(&impl->model_vocab, options);
    const bool space_prefix = gguf.try_bool("tokenizer.ggml.add_space_prefix").value_or(true);
    detail::PreTokenizerStep metaspace;
    metaspace.kind = detail::PreTokenizerStep::Kind::metaspace;
    metaspace.replacement = "\xE2\x96\x81";
    metaspace.prepend_scheme =
        space_prefix ? detail::PrependScheme::first : detail::PrependScheme::never;
    metaspace.metaspace_split = false;
    impl->pre_tokenizer.push_back(std::move(metaspace));
    impl->decoder.push_back(decoder_step(DKind::replace, "\xE2\x96\x81", " "));
    impl->decoder.push_back(decoder_step(DKind::byte_fallback));
    impl->decoder.push_back(decoder_step(DKind::fuse));
    if (space_prefix) {
      detail::DecoderStep strip = decoder_step(DKind::strip, "", " ");
      strip.strip_start = 1;
      impl->decoder.push_back(strip);
    }
    add_bos = true;  // llama.cpp's default for SentencePiece vocabularies
  }
  detail::validate_decoder(impl->decoder, source + ": decoder");

  if (gguf.has("tokenizer.ggml.merges")) {
    const std::vector<std::string> merges = gguf.get_string_array("tokenizer.ggml.merges");
    for (size_t i = 0; i < merges.size(); ++i) {
      const std::string_view m = merges[i];
      // A token may itself start with a space; the separator is the first space after it.
      const size_t space = m.size() > 1 ? m.find(' ', 1) : std::string_view::npos;
      if (space == std::string_view::npos) {
        fail("{}: tokenizer.ggml.merges[{}] '{}' is not two tokens separated by a space", source, i,
             m);
      }
      impl->bpe.add_merge(m.substr(0, space), m.substr(space + 1),
                          fmt::format("{}: tokenizer.ggml.merges[{}]", source, i));
    }
  } else {
    if (!gguf.has("tokenizer.ggml.scores")) {
      fail(
          "{}: tokenizer.ggml.scores is missing (needed to rebuild the merges of a llama "
          "vocabulary)",
          source);
    }
    const std::vector<float> scores = gguf.get_float_array("tokenizer.ggml.scores");
    if (scores.size() != n) {
      fail("{}: tokenizer.ggml.scores has {} entries, expected {} (one per token)", source,
           scores.size(), n);
    }
    merges_from_scores(tokens, scores, *impl, source);
  }

  for (size_t id = 0; id < n; ++id) {
    if (types[id] != kControl && types[id] != kUnknown && types[id] != kUserDefined) continue;
    detail::AddedToken added;
    added.id = static_cast<TokenId>(id);
    added.content = tokens[id];
    added.special = types[id] != kUserDefined;
    impl->added_tokens.push_back(std::move(added));
  }

  add_bos = gguf.try_bool("tokenizer.ggml.add_bos_token").value_or(add_bos);
  const bool add_eos = gguf.try_bool("tokenizer.ggml.add_eos_token").value_or(false);
  if (add_bos) {
    if (!impl->bos)
      fail("{}: tokenizer.ggml.add_bos_token is true but tokenizer.ggml.bos_token_id is missing",
           source);
    impl->prefix_ids.push_back(*impl->bos);
  }
  if (add_eos) {
    if (!impl->eos)
      fail("{}: tokenizer.ggml.add_eos_token is true but tokenizer.ggml.eos_token_id is missing",
           source);
    impl->suffix_ids.push_back(*impl->eos);
  }
  impl->chat_template = gguf.try_string("tokenizer.chat_template").value_or("");

  impl->finalize();
  return Tokenizer(std::move(impl));
}

}  // namespace ridge::tokenizer
