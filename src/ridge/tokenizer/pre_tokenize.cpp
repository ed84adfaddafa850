#include "ridge/tokenizer/pre_tokenize.h"

#include <algorithm>
#include <utility>

#include "ridge/tokenizer/byte_level.h"
#include "ridge/tokenizer/nfc.h"

namespace ridge::tokenizer::detail {

const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string escape_regex(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    const auto b = static_cast<unsigned char>(c);
    const bool plain = b >= 0x80 || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
                       (c >= 'A' && c <= 'Z') || c == '_';
    if (!plain) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

namespace {

void replace_all(std::string& s, std::string_view pattern, std::string_view content) {
  if (pattern.empty() || s.find(pattern) == std::string::npos) return;
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (true) {
    const size_t hit = s.find(pattern, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos).append(content);
    pos = hit + pattern.size();
  }
  out.append(s, pos, std::string::npos);
  s = std::move(out);
}

// The regions of `text` as the crate's Pattern::find_matches yields them: alternating
// non-matches and matches covering the whole text, each with its is_match flag.
struct Region {
  size_t begin;
  size_t end;
  bool is_match;
};

void split_span(Regex::Matcher& matcher, SplitBehavior behavior, bool invert, std::string_view text,
                const Pieces::Span& span, std::vector<Pieces::Span>& out,
                std::vector<std::pair<size_t, size_t>>& matches, std::vector<Region>& regions,
                std::vector<std::pair<size_t, size_t>>& parts) {
  matches.clear();
  regions.clear();
  matcher.find_all(text, matches);
  size_t prev = 0;
  for (const auto& [b, e] : matches) {
    if (b > prev) regions.push_back({prev, b, invert});
    regions.push_back({b, e, !invert});
    prev = e;
  }
  if (prev < text.size()) regions.push_back({prev, text.size(), invert});

  // (begin, end) pieces relative to `text`, then emitted with the span's offset.
  parts.clear();
  switch (behavior) {
    case SplitBehavior::isolated:
      for (const Region& r : regions) parts.emplace_back(r.begin, r.end);
      break;
    case SplitBehavior::removed:
      for (const Region& r : regions) {
        if (!r.is_match) parts.emplace_back(r.begin, r.end);
      }
      break;
    case SplitBehavior::merged_with_previous: {
      bool previous_match = false;
      for (const Region& r : regions) {
        if (r.is_match && !previous_match && !parts.empty()) {
          parts.back().second = r.end;
        } else {
          parts.emplace_back(r.begin, r.end);
        }
        previous_match = r.is_match;
      }
      break;
    }
    case SplitBehavior::merged_with_next: {
      bool previous_match = false;
      for (size_t i = regions.size(); i-- > 0;) {
        const Region& r = regions[i];
        if (r.is_match && !previous_match && !parts.empty()) {
          parts.back().first = r.begin;
        } else {
          parts.emplace_back(r.begin, r.end);
        }
        previous_match = r.is_match;
      }
      std::reverse(parts.begin(), parts.end());
      break;
    }
    case SplitBehavior::contiguous: {
      bool previous_match = false;
      for (const Region& r : regions) {
        if (r.is_match == previous_match && !parts.empty()) {
          parts.back().second = r.end;
        } else {
          parts.emplace_back(r.begin, r.end);
        }
        previous_match = r.is_match;
      }
      break;
    }
  }
  for (const auto& [b, e] : parts) {
    if (e > b) out.push_back({span.begin + b, span.begin + e, span.at_start && b == 0});
  }
}

void run_split(const Regex& regex, SplitBehavior behavior, bool invert, Pieces& pieces) {
  std::vector<Pieces::Span> out;
  out.reserve(pieces.spans.size() * 2);
  std::vector<std::pair<size_t, size_t>> matches;
  std::vector<Region> regions;
  std::vector<std::pair<size_t, size_t>> parts;
  Regex::Matcher matcher(regex);
  for (const Pieces::Span& span : pieces.spans) {
    const std::string_view text(pieces.buffer.data() + span.begin, span.end - span.begin);
    split_span(matcher, behavior, invert, text, span, out, matches, regions, parts);
  }
  pieces.spans = std::move(out);
}

// Rewrites every span through `transform(text, at_start, out_buffer)` into a new buffer.
template <typename Transform>
void rewrite_spans(Pieces& pieces, Transform&& transform) {
  Pieces out;
  out.buffer.reserve(pieces.buffer.size() + pieces.buffer.size() / 2);
  out.spans.reserve(pieces.spans.size());
  for (const Pieces::Span& span : pieces.spans) {
    const std::string_view text(pieces.buffer.data() + span.begin, span.end - span.begin);
    const size_t begin = out.buffer.size();
    transform(text, span.at_start, out.buffer);
    if (out.buffer.size() > begin) out.spans.push_back({begin, out.buffer.size(), span.at_start});
  }
  pieces = std::move(out);
}

}  // namespace

std::string normalize(const std::vector<NormalizerStep>& steps, std::string_view text) {
  std::string s(text);
  for (const NormalizerStep& step : steps) {
    switch (step.kind) {
      case NormalizerStep::Kind::nfc:
        s = to_nfc(s);
        break;
      case NormalizerStep::Kind::prepend:
        if (!s.empty()) s.insert(0, step.content);
        break;
      case NormalizerStep::Kind::replace:
        replace_all(s, step.pattern, step.content);
        break;
    }
  }
  return s;
}

void pre_tokenize(const std::vector<PreTokenizerStep>& steps, Pieces& pieces) {
  const ByteLevelAlphabet& alphabet = ByteLevelAlphabet::get();
  for (const PreTokenizerStep& step : steps) {
    switch (step.kind) {
      case PreTokenizerStep::Kind::split:
      case PreTokenizerStep::Kind::digits:
        run_split(*step.regex, step.behavior, step.invert, pieces);
        break;
      case PreTokenizerStep::Kind::byte_level:
        if (step.add_prefix_space) {
          rewrite_spans(pieces, [](std::string_view text, bool, std::string& out) {
            if (text.front() != ' ') out.push_back(' ');
            out.append(text);
          });
        }
        if (step.regex) run_split(*step.regex, SplitBehavior::isolated, false, pieces);
        rewrite_spans(pieces, [&](std::string_view text, bool, std::string& out) {
          alphabet.encode(out, text);
        });
        break;
      case PreTokenizerStep::Kind::metaspace: {
        const std::string& rep = step.replacement;
        rewrite_spans(pieces, [&](std::string_view text, bool at_start, std::string& out) {
          // Spaces become the replacement first; the prefix is added unless one is there now.
          const bool starts_with_space_or_rep =
              text.front() == ' ' || text.substr(0, rep.size()) == rep;
          const bool prepend = !starts_with_space_or_rep &&
                               (step.prepend_scheme == PrependScheme::always ||
                                (step.prepend_scheme == PrependScheme::first && at_start));
          if (prepend) out.append(rep);
          for (char c : text) {
            if (c == ' ') {
              out.append(rep);
            } else {
              out.push_back(c);
            }
          }
        });
        if (step.metaspace_split)
          run_split(*step.regex, SplitBehavior::merged_with_next, false, pieces);
        break;
      }
    }
  }
}

}  // namespace ridge::tokenizer::detail
