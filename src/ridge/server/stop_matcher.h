// StopMatcher: finds stop strings in a stream of text pieces (matched across piece boundaries)
// and never lets them out: text that could still be the start of a stop string is held back
// until the next piece decides. The input pieces are whole UTF-8 characters (an
// IncrementalDecoder's output); held-back text always starts at a character boundary, so the
// output never splits a character either.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ridge::server {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops = {});
  // Shares one list among many matchers (a request's choices); empty strings are dropped.
  explicit StopMatcher(std::shared_ptr<const std::vector<std::string>> stops);

  // Returns the text that is now safe to emit. When a stop string completes, returns the text
  // before it, and stopped() turns true; later pushes return "".
  std::string push(std::string_view piece);
  // At the end of the stream: the text still held (it matched no stop string).
  std::string flush();
  bool stopped() const { return stopped_; }
  // The stop string that matched ("" when none).
  const std::string& matched() const { return matched_; }

 private:
  std::shared_ptr<const std::vector<std::string>> stops_;  // never null; no empty strings
  std::string held_;
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace ridge::server
