// A pre-tokenizer regular expression, compiled with PCRE2 in UTF + UCP mode and JIT-compiled.
//
// Patterns are written for Oniguruma (what the `tokenizers` crate uses). The one difference that
// shows on real text is \s: PCRE2's UCP \s also matches U+180E (it is in PCRE2's fixed \h list),
// Oniguruma's is exactly Unicode White_Space. So \s and \S are rewritten to explicit classes of
// the White_Space code points before compiling.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ridge::tokenizer::detail {

class Regex {
 public:
  // Throws ridge::Error naming `what` (where the pattern came from), PCRE2's message and offset.
  Regex(std::string_view pattern, std::string_view what);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  const std::string& pattern() const { return pattern_; }

  struct Code;
  // Match state for one thread (PCRE2 match data, JIT stack); reuse it across calls.
  class Matcher {
   public:
    explicit Matcher(const Regex& regex);
    ~Matcher();
    Matcher(Matcher&&) noexcept;
    Matcher& operator=(Matcher&&) noexcept;
    // Every non-overlapping, non-empty match of `text` (valid UTF-8), left to right, as
    // [start, end) byte offsets; appended to `out`.
    void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out);

    struct State;

   private:
    const Regex* regex_;
    std::unique_ptr<State> state_;
  };
  // One-shot convenience over a temporary Matcher.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;

 private:
  std::string pattern_;
  std::unique_ptr<Code> code_;
};

// The pattern with \s / \S replaced by explicit White_Space classes (exposed for tests).
std::string rewrite_whitespace_classes(std::string_view pattern);

}  // namespace ridge::tokenizer::detail
