// Tokenizer::from_hf: a Hugging Face tokenizer.json (+ tokenizer_config.json and
// chat_template.jinja beside it). Supported: model BPE; normalizers NFC, Prepend, Replace
// (literal), Sequence; pre-tokenizers Split, ByteLevel, Digits, Metaspace, Sequence;
// post-processors TemplateProcessing, ByteLevel, Sequence; decoders ByteLevel, Replace,
// ByteFallback, Fuse, Strip, Metaspace, Sequence. That covers SmolLM2, Llama 2/3, Mistral and
// Qwen2; anything else is refused naming the field and the type.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ridge/core/error.h"
#include "ridge/io/safetensors.h"
#include "ridge/tokenizer/tokenizer_impl.h"
#include "ridge/tokenizer/utf8.h"

namespace ridge::tokenizer {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::string read_text_file(const fs::path& path) {
  // A FIFO or device would block the open or the read forever: only regular files are read.
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) fail("cannot read {}: not a regular file", path.string());
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open {}", path.string());
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) fail("cannot read {}", path.string());
  return buffer.str();
}

// JSON through io::read_json_file: regular files only, and nesting past 64 levels refused while
// parsing. Real tokenizer files nest about 6 levels (the root, a Sequence in a Sequence, its steps);
// the limit also bounds the recursion of the Sequence parsers below (two JSON levels per Sequence,
// so fewer than 32 nested Sequences) and the length of the field paths they build.
json read_json(const fs::path& path) { return io::read_json_file(path.string()); }

std::string describe(const json& value) { return io::describe_json(value); }

// Field access that names the field in its errors ("tokenizer.json: model.vocab: ...").
class Fields {
 public:
  explicit Fields(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void error(std::string_view field, std::string_view what) const {
    fail("{}: {}: {}", file_, field, what);
  }
  const json& require(const json& obj, std::string_view key, std::string_view field) const {
    if (!obj.is_object()) error(field, "expected an object");
    const auto it = obj.find(key);
    if (it == obj.end()) error(field, fmt::format("missing key '{}'", key));
    return *it;
  }
  const json* optional(const json& obj, std::string_view key) const {
    if (!obj.is_object()) return nullptr;
    const auto it = obj.find(key);
    return (it == obj.end() || it->is_null()) ? nullptr : &*it;
  }
  std::string string(const json& value, std::string_view field) const {
    if (!value.is_string())
      error(field, fmt::format("expected a string, found {}", value.type_name()));
    return value.get<std::string>();
  }
  std::string string_or(const json& obj, std::string_view key, std::string_view field,
                        std::string fallback) const {
    const json* v = optional(obj, key);
    return v ? string(*v, fmt::format("{}.{}", field, key)) : fallback;
  }
  bool boolean_or(const json& obj, std::string_view key, std::string_view field,
                  bool fallback) const {
    const json* v = optional(obj, key);
    if (!v) return fallback;
    if (!v->is_boolean()) error(fmt::format("{}.{}", field, key), "expected true or false");
    return v->get<bool>();
  }
  int64_t integer(const json& value, std::string_view field) const {
    if (!value.is_number_integer())
      error(field, fmt::format("expected an integer, found {}", describe(value)));
    return value.get<int64_t>();
  }
  TokenId token_id(const json& value, std::string_view field) const {
    const int64_t id = integer(value, field);
    if (id < 0 || id > INT32_MAX) error(field, fmt::format("token id {} is out of range", id));
    return static_cast<TokenId>(id);
  }
  std::string type_of(const json& obj, std::string_view field) const {
    return string(require(obj, "type", field), fmt::format("{}.type", field));
  }
  const std::string& file() const { return file_; }

 private:
  std::string file_;
};

// A {"String": s} or {"Regex": r} pattern as a regex source.
std::string pattern_regex(const Fields& f, const json& pattern, std::string_view field) {
  if (const json* s = f.optional(pattern, "String")) {
    return detail::escape_regex(f.string(*s, fmt::format("{}.String", field)));
  }
  if (const json* r = f.optional(pattern, "Regex"))
    return f.string(*r, fmt::format("{}.Regex", field));
  f.error(field, "expected {\"String\": ...} or {\"Regex\": ...}");
}

std::string literal_pattern(const Fields& f, const json& pattern, std::string_view field) {
  if (pattern.is_string()) return pattern.get<std::string>();
  if (const json* s = f.optional(pattern, "String"))
    return f.string(*s, fmt::format("{}.String", field));
  f.error(field, "only literal {\"String\": ...} patterns are supported here");
}

void parse_normalizer(const Fields& f, const json& node, std::string_view field,
                      std::vector<detail::NormalizerStep>& out) {
  const std::string type = f.type_of(node, field);
  using Kind = detail::NormalizerStep::Kind;
  if (type == "Sequence") {
    const json& list = f.require(node, "normalizers", field);
    if (!list.is_array()) f.error(fmt::format("{}.normalizers", field), "expected an array");
    for (size_t i = 0; i < list.size(); ++i) {
      parse_normalizer(f, list[i], fmt::format("{}.normalizers[{}]", field, i), out);
    }
  } else if (type == "NFC") {
    out.push_back({Kind::nfc, "", ""});
  } else if (type == "Prepend") {
    out.push_back({Kind::prepend, "",
                   f.string(f.require(node, "prepend", field), fmt::format("{}.prepend", field))});
  } else if (type == "Replace") {
    std::string pattern =
        literal_pattern(f, f.require(node, "pattern", field), fmt::format("{}.pattern", field));
    std::string content =
        f.string(f.require(node, "content", field), fmt::format("{}.content", field));
    if (pattern.empty()) f.error(fmt::format("{}.pattern", field), "is empty");
    out.push_back({Kind::replace, std::move(pattern), std::move(content)});
  } else {
    f.error(fmt::format("{}.type", field), fmt::format("normalizer '{}' is not supported", type));
  }
}

detail::SplitBehavior split_behavior(const Fields& f, const json& value, std::string_view field) {
  const std::string name = f.string(value, field);
  if (name == "Isolated") return detail::SplitBehavior::isolated;
  if (name == "Removed") return detail::SplitBehavior::removed;
  if (name == "MergedWithPrevious") return detail::SplitBehavior::merged_with_previous;
  if (name == "MergedWithNext") return detail::SplitBehavior::merged_with_next;
  if (name == "Contiguous") return detail::SplitBehavior::contiguous;
  f.error(field, fmt::format("unknown split behavior '{}'", name));
}

detail::PrependScheme metaspace_scheme(const Fields& f, const json& node, std::string_view field) {
  if (const json* scheme = f.optional(node, "prepend_scheme")) {
    const std::string name = f.string(*scheme, fmt::format("{}.prepend_scheme", field));
    if (name == "first") return detail::PrependScheme::first;
    if (name == "always") return detail::PrependScheme::always;
    if (name == "never") return detail::PrependScheme::never;
    f.error(fmt::format("{}.prepend_scheme", field), fmt::format("unknown scheme '{}'", name));
  }
  // Files older than prepend_scheme say add_prefix_space.
  return f.boolean_or(node, "add_prefix_space", field, true) ? detail::PrependScheme::always
                                                             : detail::PrependScheme::never;
}

std::string metaspace_replacement(const Fields& f, const json& node, std::string_view field) {
  std::string rep = f.string_or(node, "replacement", field, "\xE2\x96\x81");
  size_t pos = 0;
  if (rep.empty() || detail::utf8_valid_char_len(rep, pos) != rep.size()) {
    f.error(fmt::format("{}.replacement", field), "must be exactly one character");
  }
  return rep;
}

void parse_pre_tokenizer(const Fields& f, const json& node, std::string_view field,
                         std::vector<detail::PreTokenizerStep>& out) {
  const std::string type = f.type_of(node, field);
  using Kind = detail::PreTokenizerStep::Kind;
  detail::PreTokenizerStep step;
  if (type == "Sequence") {
    const json& list = f.require(node, "pretokenizers", field);
    if (!list.is_array()) f.error(fmt::format("{}.pretokenizers", field), "expected an array");
    for (size_t i = 0; i < list.size(); ++i) {
      parse_pre_tokenizer(f, list[i], fmt::format("{}.pretokenizers[{}]", field, i), out);
    }
    return;
  }
  if (type == "Split") {
    step.kind = Kind::split;
    const std::string where = fmt::format("{}.pattern", field);
    const std::string regex = pattern_regex(f, f.require(node, "pattern", field), where);
    step.regex = std::make_shared<detail::Regex>(regex, fmt::format("{}: {}", f.file(), where));
    step.behavior =
        split_behavior(f, f.require(node, "behavior", field), fmt::format("{}.behavior", field));
    step.invert = f.boolean_or(node, "invert", field, false);
  } else if (type == "ByteLevel") {
    step.kind = Kind::byte_level;
    step.add_prefix_space = f.boolean_or(node, "add_prefix_space", field, false);
    if (f.boolean_or(node, "use_regex", field, true)) {
      step.regex = std::make_shared<detail::Regex>(detail::kGpt2Pattern, "ByteLevel");
    }
  } else if (type == "Digits") {
    step.kind = Kind::digits;
    const bool individual = f.boolean_or(node, "individual_digits", field, false);
    step.regex = std::make_shared<detail::Regex>(individual ? "\\p{N}" : "\\p{N}+", "Digits");
  } else if (type == "Metaspace") {
    step.kind = Kind::metaspace;
    step.replacement = metaspace_replacement(f, node, field);
    step.prepend_scheme = metaspace_scheme(f, node, field);
    step.metaspace_split = f.boolean_or(node, "split", field, true);
    if (step.metaspace_split) {
      step.regex =
          std::make_shared<detail::Regex>(detail::escape_regex(step.replacement), "Metaspace");
    }
  } else {
    f.error(fmt::format("{}.type", field),
            fmt::format("pre-tokenizer '{}' is not supported", type));
  }
  out.push_back(std::move(step));
}

void parse_decoder(const Fields& f, const json& node, std::string_view field,
                   std::vector<detail::DecoderStep>& out) {
  const std::string type = f.type_of(node, field);
  using Kind = detail::DecoderStep::Kind;
  detail::DecoderStep step;
  if (type == "Sequence") {
    const json& list = f.require(node, "decoders", field);
    if (!list.is_array()) f.error(fmt::format("{}.decoders", field), "expected an array");
    for (size_t i = 0; i < list.size(); ++i) {
      parse_decoder(f, list[i], fmt::format("{}.decoders[{}]", field, i), out);
    }
    return;
  }
  if (type == "ByteLevel") {
    step.kind = Kind::byte_level;
  } else if (type == "Replace") {
    step.kind = Kind::replace;
    step.pattern =
        literal_pattern(f, f.require(node, "pattern", field), fmt::format("{}.pattern", field));
    step.content = f.string(f.require(node, "content", field), fmt::format("{}.content", field));
  } else if (type == "ByteFallback") {
    step.kind = Kind::byte_fallback;
  } else if (type == "Fuse") {
    step.kind = Kind::fuse;
  } else if (type == "Strip") {
    step.kind = Kind::strip;
    step.content = f.string(f.require(node, "content", field), fmt::format("{}.content", field));
    const int64_t start =
        f.integer(f.require(node, "start", field), fmt::format("{}.start", field));
    const int64_t stop = f.integer(f.require(node, "stop", field), fmt::format("{}.stop", field));
    if (start < 0 || stop < 0) f.error(field, "start and stop must not be negative");
    step.strip_start = static_cast<size_t>(start);
    step.strip_stop = static_cast<size_t>(stop);
  } else if (type == "Metaspace") {
    step.kind = Kind::metaspace;
    step.pattern = metaspace_replacement(f, node, field);
    step.metaspace_prepend = metaspace_scheme(f, node, field) != detail::PrependScheme::never;
  } else {
    f.error(fmt::format("{}.type", field), fmt::format("decoder '{}' is not supported", type));
  }
  out.push_back(std::move(step));
}

// Token ids that a TemplateProcessing item names.
std::vector<TokenId> template_special_ids(const Fields& f, const json& node, const json& item,
                                          std::string_view field) {
  const std::string name = f.string(f.require(item, "id", field), fmt::format("{}.id", field));
  const json& specials = f.require(node, "special_tokens", field);
  const json& entry = f.require(specials, name, "post_processor.special_tokens");
  const json& ids =
      f.require(entry, "ids", fmt::format("post_processor.special_tokens[\"{}\"]", name));
  if (!ids.is_array())
    f.error(fmt::format("post_processor.special_tokens[\"{}\"].ids", name), "expected an array");
  std::vector<TokenId> out;
  for (const json& id : ids)
    out.push_back(f.token_id(id, fmt::format("post_processor.special_tokens[\"{}\"].ids", name)));
  return out;
}

void parse_post_processor(const Fields& f, const json& node, std::string_view field,
                          Tokenizer::Impl& impl) {
  const std::string type = f.type_of(node, field);
  if (type == "Sequence") {
    const json& list = f.require(node, "processors", field);
    if (!list.is_array()) f.error(fmt::format("{}.processors", field), "expected an array");
    for (size_t i = 0; i < list.size(); ++i) {
      parse_post_processor(f, list[i], fmt::format("{}.processors[{}]", field, i), impl);
    }
  } else if (type == "ByteLevel") {
    // Only adjusts offsets; ids are unchanged.
  } else if (type == "TemplateProcessing") {
    const std::string where = fmt::format("{}.single", field);
    const json& single = f.require(node, "single", field);
    if (!single.is_array()) f.error(where, "expected an array");
    bool seen_sequence = false;
    impl.prefix_ids.clear();
    impl.suffix_ids.clear();
    for (size_t i = 0; i < single.size(); ++i) {
      const std::string item_field = fmt::format("{}[{}]", where, i);
      if (f.optional(single[i], "Sequence")) {
        if (seen_sequence) f.error(item_field, "a second $A is not supported");
        seen_sequence = true;
      } else if (const json* special = f.optional(single[i], "SpecialToken")) {
        auto ids = template_special_ids(f, node, *special, item_field);
        auto& target = seen_sequence ? impl.suffix_ids : impl.prefix_ids;
        target.insert(target.end(), ids.begin(), ids.end());
      } else {
        f.error(item_field, "expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
      }
    }
    if (!seen_sequence) f.error(where, "has no $A sequence");
  } else {
    f.error(fmt::format("{}.type", field),
            fmt::format("post-processor '{}' is not supported", type));
  }
}

// `n_added` is the length of the file's added_tokens list (bounds the ids, below).
void parse_model(const Fields& f, const json& model, size_t n_added, Tokenizer::Impl& impl) {
  const std::string type = f.string_or(model, "type", "model", "BPE");
  if (type != "BPE")
    f.error("model.type", fmt::format("model '{}' is not supported (only BPE)", type));
  if (const json* dropout = f.optional(model, "dropout")) {
    if (!dropout->is_number() || dropout->get<double>() != 0.0) {
      f.error("model.dropout", "BPE dropout is not supported for inference");
    }
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (!f.string_or(model, key, "model", "").empty()) {
      f.error(fmt::format("model.{}", key), "is not supported (must be null or empty)");
    }
  }

  const json& vocab = f.require(model, "vocab", "model");
  if (!vocab.is_object()) f.error("model.vocab", "expected an object of token -> id");
  // The ids of a real vocabulary are (nearly) dense: with every entry and added token there are
  // n tokens, ids below n. Ids are refused past n plus kTokenIdSlack (room for holes), so that the
  // id-indexed tables below stay proportional to the file. (Impl::finalize bounds added ids alike.)
  const size_t id_limit = vocab.size() + n_added + Tokenizer::Impl::kTokenIdSlack;
  for (const auto& [text, id_json] : vocab.items()) {
    const std::string field = fmt::format("model.vocab[\"{}\"]", text);
    const TokenId id = f.token_id(id_json, field);
    if (static_cast<size_t>(id) >= id_limit) {
      f.error(field, fmt::format("token id {} is past the vocabulary's id range ({} entries and {} "
                                 "added tokens; ids must be below {})",
                                 id, vocab.size(), n_added, id_limit));
    }
    if (static_cast<size_t>(id) >= impl.id_to_text.size()) {
      impl.id_to_text.resize(static_cast<size_t>(id) + 1);
      impl.present.resize(static_cast<size_t>(id) + 1, 0);
    }
    impl.id_to_text[id] = text;
    impl.present[id] = 1;
    impl.model_vocab[text] = id;
  }

  detail::BpeOptions options;
  options.byte_fallback = f.boolean_or(model, "byte_fallback", "model", false);
  options.fuse_unk = f.boolean_or(model, "fuse_unk", "model", false);
  options.ignore_merges = f.boolean_or(model, "ignore_merges", "model", false);
  if (const json* unk = f.optional(model, "unk_token")) {
    const std::string text = f.string(*unk, "model.unk_token");
    const auto it = impl.model_vocab.find(text);
    if (it == impl.model_vocab.end())
      f.error("model.unk_token", fmt::format("'{}' is not in model.vocab", text));
    options.unk_id = it->second;
  }
  impl.bpe = detail::BpeModel(&impl.model_vocab, options);

  const json* merges = f.optional(model, "merges");
  if (!merges) return;
  if (!merges->is_array()) f.error("model.merges", "expected an array");
  for (size_t i = 0; i < merges->size(); ++i) {
    const json& m = (*merges)[i];
    const std::string field = fmt::format("{}: model.merges[{}]", f.file(), i);
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        f.error(fmt::format("model.merges[{}]", i),
                fmt::format("'{}' is not two tokens separated by one space", s));
      }
      impl.bpe.add_merge(std::string_view(s).substr(0, space),
                         std::string_view(s).substr(space + 1), field);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      impl.bpe.add_merge(m[0].get_ref<const std::string&>(), m[1].get_ref<const std::string&>(),
                         field);
    } else {
      f.error(fmt::format("model.merges[{}]", i), "expected \"a b\" or [\"a\", \"b\"]");
    }
  }
}

void parse_added_tokens(const Fields& f, const json& list, Tokenizer::Impl& impl) {
  if (!list.is_array()) f.error("added_tokens", "expected an array");
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string field = fmt::format("added_tokens[{}]", i);
    const json& t = list[i];
    detail::AddedToken added;
    added.id = f.token_id(f.require(t, "id", field), field + ".id");
    added.content = f.string(f.require(t, "content", field), field + ".content");
    added.special = f.boolean_or(t, "special", field, false);
    added.lstrip = f.boolean_or(t, "lstrip", field, false);
    added.rstrip = f.boolean_or(t, "rstrip", field, false);
    added.normalized = f.boolean_or(t, "normalized", field, !added.special);
    if (f.boolean_or(t, "single_word", field, false)) {
      f.error(field + ".single_word", "single_word added tokens are not supported");
    }
    impl.added_tokens.push_back(std::move(added));
  }
}

// bos_token / eos_token in tokenizer_config.json: a string or {"content": ...}.
std::optional<std::string> config_token(const Fields& f, const json& config, std::string_view key) {
  const json* v = f.optional(config, key);
  if (!v) return std::nullopt;
  if (v->is_string()) return v->get<std::string>();
  if (const json* content = f.optional(*v, "content"))
    return f.string(*content, fmt::format("{}.content", key));
  f.error(key, "expected a string or an object with \"content\"");
}

void apply_config(const Fields& f, const json& config, Tokenizer::Impl& impl) {
  auto lookup = [&](std::string_view key) -> std::optional<TokenId> {
    const auto text = config_token(f, config, key);
    if (!text) return std::nullopt;
    const auto it = impl.all_tokens.find(*text);
    if (it == impl.all_tokens.end())
      f.error(key, fmt::format("'{}' is not a token of the vocabulary", *text));
    return it->second;
  };
  // all_tokens is complete only after finalize(); build the lookup from what is loaded.
  impl.all_tokens = impl.model_vocab;
  for (const auto& added : impl.added_tokens) impl.all_tokens[added.content] = added.id;
  if (auto bos = lookup("bos_token")) impl.bos = bos;
  if (auto eos = lookup("eos_token")) impl.eos = eos;
  // Explicit add_bos_token / add_eos_token rewrite the template, as transformers does.
  if (const json* add_bos = f.optional(config, "add_bos_token")) {
    if (!add_bos->is_boolean()) f.error("add_bos_token", "expected true or false");
    impl.prefix_ids.clear();
    if (add_bos->get<bool>()) {
      if (!impl.bos) f.error("add_bos_token", "is true but there is no bos_token");
      impl.prefix_ids.push_back(*impl.bos);
    }
  }
  if (const json* add_eos = f.optional(config, "add_eos_token")) {
    if (!add_eos->is_boolean()) f.error("add_eos_token", "expected true or false");
    impl.suffix_ids.clear();
    if (add_eos->get<bool>()) {
      if (!impl.eos) f.error("add_eos_token", "is true but there is no eos_token");
      impl.suffix_ids.push_back(*impl.eos);
    }
  }
  if (const json* tpl = f.optional(config, "chat_template")) {
    if (tpl->is_string()) {
      impl.chat_template = tpl->get<std::string>();
    } else if (tpl->is_array()) {
      // Named templates: [{"name": "default", "template": ...}, ...]; the default one is used.
      for (const json& entry : *tpl) {
        if (f.string_or(entry, "name", "chat_template[]", "") == "default") {
          impl.chat_template =
              f.string(f.require(entry, "template", "chat_template[]"), "chat_template[].template");
        }
      }
    }
  }
}

}  // namespace

Tokenizer Tokenizer::from_hf(const std::string& path) {
  fs::path file(path);
  if (fs::is_directory(file)) file /= "tokenizer.json";
  if (!fs::exists(file)) fail("tokenizer file not found: {}", file.string());
  const fs::path dir = file.parent_path();

  auto impl = std::make_unique<Impl>();
  impl->source = file.string();
  const Fields f(file.string());
  const json root = read_json(file);
  if (!root.is_object()) f.error("(root)", "expected an object");

  if (const json* n = f.optional(root, "normalizer"))
    parse_normalizer(f, *n, "normalizer", impl->normalizer);
  if (const json* p = f.optional(root, "pre_tokenizer"))
    parse_pre_tokenizer(f, *p, "pre_tokenizer", impl->pre_tokenizer);
  const json* added = f.optional(root, "added_tokens");
  const size_t n_added = added && added->is_array() ? added->size() : 0;
  parse_model(f, f.require(root, "model", "(root)"), n_added, *impl);
  if (added) parse_added_tokens(f, *added, *impl);
  if (const json* post = f.optional(root, "post_processor"))
    parse_post_processor(f, *post, "post_processor", *impl);
  const json* decoder = f.optional(root, "decoder");
  if (!decoder) f.error("decoder", "a tokenizer without a decoder is not supported");
  parse_decoder(f, *decoder, "decoder", impl->decoder);
  detail::validate_decoder(impl->decoder, impl->source + ": decoder");

  bool byte_level = false;
  for (const auto& step : impl->pre_tokenizer)
    byte_level |= step.kind == detail::PreTokenizerStep::Kind::byte_level;
  for (const auto& step : impl->decoder)
    byte_level |= step.kind == detail::DecoderStep::Kind::byte_level;
  impl->kind = byte_level ? VocabKind::byte_level_bpe : VocabKind::sentencepiece_bpe;

  // Without a config, BOS is what the template puts first.
  if (!impl->prefix_ids.empty()) impl->bos = impl->prefix_ids.front();
  const fs::path config_path = dir / "tokenizer_config.json";
  if (fs::exists(config_path)) {
    const Fields cf(config_path.string());
    apply_config(cf, read_json(config_path), *impl);
  }
  const fs::path template_path = dir / "chat_template.jinja";
  if (fs::exists(template_path)) impl->chat_template = read_text_file(template_path);

  impl->finalize();
  return Tokenizer(std::move(impl));
}

}  // namespace ridge::tokenizer
