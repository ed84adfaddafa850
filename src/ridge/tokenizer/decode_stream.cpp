#include "ridge/tokenizer/decode_stream.h"

#include <cstdint>
#include <optional>

#include "ridge/core/error.h"
#include "ridge/tokenizer/byte_level.h"
#include "ridge/tokenizer/utf8.h"

namespace ridge::tokenizer::detail {
namespace {

size_t char_count(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
  return n;
}

void replace_all(std::string& s, std::string_view pattern, std::string_view content) {
  if (pattern.empty()) return;
  size_t pos = s.find(pattern);
  if (pos == std::string::npos) return;
  std::string out;
  out.reserve(s.size());
  size_t from = 0;
  while (pos != std::string::npos) {
    out.append(s, from, pos - from).append(content);
    from = pos + pattern.size();
    pos = s.find(pattern, from);
  }
  out.append(s, from, std::string::npos);
  s = std::move(out);
}

// The byte of a "<0xNN>" token (hex digits in either case), as ByteFallback reads it.
std::optional<uint8_t> byte_token_value(std::string_view token) {
  if (token.size() != 6 || token.substr(0, 3) != "<0x" || token[5] != '>') return std::nullopt;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  const int hi = hex(token[3]);
  const int lo = hex(token[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<uint8_t>(hi * 16 + lo);
}

// Removes up to `count` leading `ch` characters; returns how many were removed. Sets `blocked`
// when a different character was met first.
size_t strip_leading(std::string& s, std::string_view ch, size_t count, bool& blocked) {
  size_t removed = 0;
  size_t pos = 0;
  blocked = false;
  while (removed < count && pos < s.size()) {
    if (s.compare(pos, ch.size(), ch) != 0) {
      blocked = true;
      break;
    }
    pos += ch.size();
    ++removed;
  }
  s.erase(0, pos);
  return removed;
}

void strip_trailing(std::string& s, std::string_view ch, size_t count) {
  for (size_t i = 0; i < count && s.size() >= ch.size(); ++i) {
    if (s.compare(s.size() - ch.size(), ch.size(), ch) != 0) break;
    s.resize(s.size() - ch.size());
  }
}

std::string_view kind_name(DecoderStep::Kind k) {
  switch (k) {
    case DecoderStep::Kind::byte_level:
      return "ByteLevel";
    case DecoderStep::Kind::replace:
      return "Replace";
    case DecoderStep::Kind::byte_fallback:
      return "ByteFallback";
    case DecoderStep::Kind::fuse:
      return "Fuse";
    case DecoderStep::Kind::strip:
      return "Strip";
    case DecoderStep::Kind::metaspace:
      return "Metaspace";
  }
  return "?";
}

}  // namespace

void validate_decoder(std::vector<DecoderStep>& steps, std::string_view field) {
  bool fused = false;
  for (size_t i = 0; i < steps.size(); ++i) {
    DecoderStep& step = steps[i];
    step.after_fuse = fused;
    auto refuse = [&](std::string_view why) {
      fail("{}: decoder step {} ({}) {}", field, i, kind_name(step.kind), why);
    };
    switch (step.kind) {
      case DecoderStep::Kind::byte_level:
        if (fused) refuse("after Fuse is not supported");
        fused = true;
        break;
      case DecoderStep::Kind::byte_fallback:
        if (fused) refuse("after Fuse is not supported");
        break;
      case DecoderStep::Kind::replace:
        // One character cannot straddle two chunks of the fused text; a longer pattern could.
        if (fused && char_count(step.pattern) != 1)
          refuse("after Fuse needs a one-character pattern");
        if (step.pattern.empty()) refuse("has an empty pattern");
        break;
      case DecoderStep::Kind::strip:
        if (char_count(step.content) != 1) refuse("needs a one-character content");
        if (fused && step.strip_stop != 0) refuse("with stop > 0 after Fuse is not supported");
        break;
      case DecoderStep::Kind::metaspace:
        if (char_count(step.pattern) != 1) refuse("needs a one-character replacement");
        break;
      case DecoderStep::Kind::fuse:
        fused = true;
        break;
    }
  }
}

DecodeStream::DecodeStream(const std::vector<DecoderStep>* steps)
    : steps_(steps), state_(steps->size()) {}

void DecodeStream::push(std::string_view token, std::string& out) {
  feed(0, std::string(token), out);
}

void DecodeStream::finish(std::string& out) {
  end(0, out);
  state_.assign(steps_->size(), State{});
}

void DecodeStream::feed(size_t index, std::string item, std::string& out) {
  if (index == steps_->size()) {
    out.append(item);
    return;
  }
  const DecoderStep& step = (*steps_)[index];
  State& state = state_[index];
  switch (step.kind) {
    case DecoderStep::Kind::byte_level: {
      const auto bytes = ByteLevelAlphabet::get().decode(item);
      state.held.append(bytes ? *bytes : item);
      const size_t tail = utf8_incomplete_tail(state.held);
      const std::string_view ready(state.held.data(), state.held.size() - tail);
      if (ready.empty()) return;
      std::string chunk = utf8_lossy(ready);
      state.held.erase(0, ready.size());
      feed(index + 1, std::move(chunk), out);
      return;
    }
    case DecoderStep::Kind::replace:
      replace_all(item, step.pattern, step.content);
      feed(index + 1, std::move(item), out);
      return;
    case DecoderStep::Kind::byte_fallback: {
      if (const auto byte = byte_token_value(item)) {
        state.held.push_back(static_cast<char>(*byte));
        return;
      }
      flush_byte_run(index, out);
      feed(index + 1, std::move(item), out);
      return;
    }
    case DecoderStep::Kind::fuse:
      feed(index + 1, std::move(item), out);
      return;
    case DecoderStep::Kind::strip:
      if (step.after_fuse) {
        if (!state.strip_done && !item.empty()) {
          bool blocked = false;
          state.stripped +=
              strip_leading(item, step.content, step.strip_start - state.stripped, blocked);
          state.strip_done = blocked || state.stripped == step.strip_start;
        }
      } else {
        bool blocked = false;
        strip_leading(item, step.content, step.strip_start, blocked);
        strip_trailing(item, step.content, step.strip_stop);
      }
      feed(index + 1, std::move(item), out);
      return;
    case DecoderStep::Kind::metaspace: {
      // The first token (the whole text once fused) loses every replacement character; in later
      // tokens they become spaces. prepend_scheme "never" keeps them all as spaces.
      const bool first = step.after_fuse || state.index == 0;
      ++state.index;
      replace_all(item, step.pattern, (first && step.metaspace_prepend) ? "" : " ");
      feed(index + 1, std::move(item), out);
      return;
    }
  }
}

void DecodeStream::flush_byte_run(size_t index, std::string& out) {
  State& state = state_[index];
  if (state.held.empty()) return;
  std::string run = std::move(state.held);
  state.held.clear();
  if (is_valid_utf8(run)) {
    feed(index + 1, std::move(run), out);
  } else {
    for (size_t i = 0; i < run.size(); ++i) feed(index + 1, std::string(kReplacementChar), out);
  }
}

void DecodeStream::end(size_t index, std::string& out) {
  if (index == steps_->size()) return;
  const DecoderStep& step = (*steps_)[index];
  State& state = state_[index];
  if (step.kind == DecoderStep::Kind::byte_level && !state.held.empty()) {
    std::string chunk = utf8_lossy(state.held);
    state.held.clear();
    feed(index + 1, std::move(chunk), out);
  } else if (step.kind == DecoderStep::Kind::byte_fallback) {
    flush_byte_run(index, out);
  }
  end(index + 1, out);
}

}  // namespace ridge::tokenizer::detail
