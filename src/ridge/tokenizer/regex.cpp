#include "ridge/tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "ridge/core/error.h"
#include "ridge/tokenizer/utf8.h"

namespace ridge::tokenizer::detail {
namespace {

// Unicode White_Space, as the body of a character class.
constexpr std::string_view kWhiteSpaceClassBody =
    "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"
    "\\x{205F}\\x{3000}";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  const int n = pcre2_get_error_message(code, buffer, sizeof(buffer));
  if (n < 0) return "PCRE2 error " + std::to_string(code);
  return std::string(reinterpret_cast<const char*>(buffer), static_cast<size_t>(n));
}

}  // namespace

struct Regex::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

std::string rewrite_whitespace_classes(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[i + 1];
      if (e == 's' || e == 'S') {
        if (in_class) {
          if (e == 'S') fail("regex '{}': \\S inside a character class is not supported", pattern);
          out.append(kWhiteSpaceClassBody);
        } else {
          out.append(e == 's' ? "[" : "[^");
          out.append(kWhiteSpaceClassBody);
          out.push_back(']');
        }
      } else {
        out.push_back(c);
        out.push_back(e);
      }
      ++i;
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out.push_back(c);
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out.push_back(pattern[++i]);
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out.push_back(pattern[++i]);
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out.push_back(c);
  }
  return out;
}

Regex::Regex(std::string_view pattern, std::string_view what)
    : pattern_(pattern), code_(std::make_unique<Code>()) {
  const std::string rewritten = rewrite_whitespace_classes(pattern);
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  code_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()), rewritten.size(),
                              PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (code_->code == nullptr) {
    fail("{}: cannot compile regex '{}': {} (at offset {} of the rewritten pattern '{}')", what,
         pattern, pcre2_message(error_code), error_offset, rewritten);
  }
  // JIT is an accelerator only: when it is unavailable the interpreter runs the same pattern.
  pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE);
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

struct Regex::Matcher::State {
  ~State() {
    pcre2_match_data_free(match);
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(jit_stack);
  }
  pcre2_match_data* match = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  size_t jit_stack_size = 32 * 1024;
};

Regex::Matcher::Matcher(const Regex& regex) : regex_(&regex), state_(std::make_unique<State>()) {
  state_->match = pcre2_match_data_create_from_pattern(regex.code_->code, nullptr);
  if (state_->match == nullptr) fail("regex '{}': out of memory for match data", regex.pattern_);
}
Regex::Matcher::~Matcher() = default;
Regex::Matcher::Matcher(Matcher&&) noexcept = default;
Regex::Matcher& Regex::Matcher::operator=(Matcher&&) noexcept = default;

void Regex::Matcher::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) {
  State& st = *state_;
  const pcre2_code* code = regex_->code_->code;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos < text.size()) {
    const int rc =
        pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, st.match, st.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && st.jit_stack_size < (size_t{256} << 20)) {
      // Long runs (e.g. 100k spaces against \s+(?!\S)) need a deeper backtracking stack.
      st.jit_stack_size *= 16;
      pcre2_jit_stack_free(st.jit_stack);
      st.jit_stack = pcre2_jit_stack_create(32 * 1024, st.jit_stack_size, nullptr);
      if (st.context == nullptr) st.context = pcre2_match_context_create(nullptr);
      if (st.jit_stack == nullptr || st.context == nullptr) {
        fail("regex '{}': out of memory for the JIT stack", regex_->pattern_);
      }
      pcre2_jit_stack_assign(st.context, nullptr, st.jit_stack);
      continue;
    }
    if (rc < 0) fail("regex '{}': match failed: {}", regex_->pattern_, pcre2_message(rc));
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(st.match);
    const size_t start = ovector[0];
    const size_t end = ovector[1];
    if (end > start) {
      out.emplace_back(start, end);
      pos = end;
    } else {
      // An empty match produces no piece; step over one character.
      size_t next = start;
      if (next < text.size()) next_char(text, next);
      pos = next;
    }
  }
}

void Regex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const {
  Matcher(*this).find_all(text, out);
}

}  // namespace ridge::tokenizer::detail
