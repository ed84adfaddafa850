#include "ridge/server/stop_matcher.h"

#include <algorithm>
#include <utility>

namespace ridge::server {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  std::erase_if(stops, [](const std::string& s) { return s.empty(); });
  stops_ = std::make_shared<const std::vector<std::string>>(std::move(stops));
}

StopMatcher::StopMatcher(std::shared_ptr<const std::vector<std::string>> stops)
    : stops_(std::move(stops)) {
  if (!stops_)
    stops_ = std::make_shared<const std::vector<std::string>>();
  else if (std::any_of(stops_->begin(), stops_->end(), [](const auto& s) { return s.empty(); }))
    stops_ = StopMatcher(std::vector<std::string>(*stops_)).stops_;
}

std::string StopMatcher::push(std::string_view piece) {
  if (stopped_) return {};
  if (stops_->empty()) return std::string(piece);
  held_.append(piece);
  // The earliest stop string in the held text (held_ never contains a whole stop string before
  // this piece, so a match involves the new piece).
  size_t best = std::string::npos;
  for (const auto& s : *stops_) {
    const size_t at = held_.find(s);
    if (at < best) {
      best = at;
      matched_ = s;
    }
  }
  if (best != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, best);
    held_.clear();
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  // This is quadratic in a stop string's length L (up to L candidate lengths, each compared in
  // up to L bytes), per piece; and held_ stays under the longest L plus the piece, so the find()
  // above is too. The server bounds it: parse_generation refuses stop strings past
  // GenParams::kMaxStopBytes (1024) and more than kMaxStops (16) of them, which caps a piece at
  // about 16 x 1024^2 / 2 byte comparisons in the worst case (far less for text that does not
  // repeat a stop string's start).
  size_t hold = 0;
  for (const auto& s : *stops_) {
    for (size_t k = std::min(s.size() - 1, held_.size()); k > hold; --k) {
      if (std::string_view(held_).substr(held_.size() - k) == std::string_view(s).substr(0, k)) {
        hold = k;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return out;
}

std::string StopMatcher::flush() {
  std::string out;
  if (!stopped_) out.swap(held_);
  held_.clear();
  return out;
}

}  // namespace ridge::server
