#include "ridge/engine/sequence.h"

#include <algorithm>
#include <cstdint>

namespace ridge::engine {

Sequence::Sequence(int64_t id, Request r, std::vector<int32_t> stops, OutputCallback cb)
    : seq_id(id),
      request(std::move(r)),
      stop_ids(std::move(stops)),
      on_output(std::move(cb)),
      sampler(request.sampling) {
  tokens = std::move(request.prompt);
  request.prompt.clear();
  num_prompt = int32_t(tokens.size());
  std::sort(stop_ids.begin(), stop_ids.end());
  stop_ids.erase(std::unique(stop_ids.begin(), stop_ids.end()), stop_ids.end());
}

std::span<const int32_t> Sequence::banned_tokens() {
  const bool hold = num_output_tokens() < request.min_tokens;
  // The constraint's end tokens are the stop tokens: it bans them itself while they are held.
  if (constraint) return constraint->banned(!hold);
  return hold ? std::span<const int32_t>(stop_ids) : std::span<const int32_t>();
}

bool Sequence::is_stop_token(int32_t token) const {
  return std::binary_search(stop_ids.begin(), stop_ids.end(), token);
}

}  // namespace ridge::engine
