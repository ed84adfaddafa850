#include <cstdint>
#include "ridge/model/forward_batch.h"

#include "ridge/core/error.h"

namespace ridge::model {

void ForwardBatch::clear() {
  tokens.clear();
  positions.clear();
  slots.clear();
  cu_seqlens.clear();
  context_lens.clear();
  block_tables.clear();
  max_blocks_per_seq = 0;
  logits_rows.clear();
}

void ForwardBatch::add_sequence(const std::vector<int32_t>& new_tokens, int32_t context_len,
                                const std::vector<int32_t>& block_table, int32_t block_size,
                                bool want_last_logits) {
  const int32_t n = int32_t(new_tokens.size());
  RIDGE_CHECK(n > 0 && n <= context_len, "forward batch: {} new tokens with context {}", n,
              context_len);
  RIDGE_CHECK(int64_t(block_table.size()) * block_size >= context_len,
              "forward batch: {} blocks of {} cannot hold {} tokens", block_table.size(),
              block_size, context_len);
  if (cu_seqlens.empty()) cu_seqlens.push_back(0);
  // Widen the block-table stride if this sequence needs more blocks.
  const int32_t need = int32_t(block_table.size());
  if (need > max_blocks_per_seq) {
    std::vector<int32_t> wider(size_t(num_seqs()) * size_t(need), 0);
    for (int32_t s = 0; s < num_seqs(); ++s)
      for (int32_t b = 0; b < max_blocks_per_seq; ++b)
        wider[size_t(s) * need + b] = block_tables[size_t(s) * max_blocks_per_seq + b];
    block_tables.swap(wider);
    max_blocks_per_seq = need;
  }
  const int32_t start = context_len - n;
  for (int32_t i = 0; i < n; ++i) {
    const int32_t pos = start + i;
    tokens.push_back(new_tokens[size_t(i)]);
    positions.push_back(pos);
    slots.push_back(block_table[size_t(pos / block_size)] * block_size + pos % block_size);
  }
  cu_seqlens.push_back(cu_seqlens.back() + n);
  context_lens.push_back(context_len);
  for (int32_t b = 0; b < max_blocks_per_seq; ++b)
    block_tables.push_back(b < need ? block_table[size_t(b)] : 0);
  if (want_last_logits) logits_rows.push_back(cu_seqlens.back() - 1);
}

void ForwardBatch::validate(int64_t num_slots, int64_t block_size) const {
  const size_t T = tokens.size();
  RIDGE_CHECK(T > 0, "forward batch: no tokens");
  RIDGE_CHECK(positions.size() == T && slots.size() == T,
              "forward batch: {} tokens but {} positions and {} slots", T, positions.size(),
              slots.size());
  const int32_t S = num_seqs();
  RIDGE_CHECK(S > 0 && cu_seqlens.front() == 0 && size_t(cu_seqlens.back()) == T,
              "forward batch: cu_seqlens does not cover the {} tokens", T);
  RIDGE_CHECK(context_lens.size() == size_t(S) &&
                  block_tables.size() == size_t(S) * size_t(max_blocks_per_seq),
              "forward batch: {} sequences but {} context lengths and {} block-table entries", S,
              context_lens.size(), block_tables.size());
  for (int32_t s = 0; s < S; ++s) {
    const int32_t q = cu_seqlens[s + 1] - cu_seqlens[s];
    RIDGE_CHECK(q > 0 && q <= context_lens[s], "forward batch: sequence {} has {} new tokens, context {}",
                s, q, context_lens[s]);
    RIDGE_CHECK(int64_t(context_lens[s]) <= int64_t(max_blocks_per_seq) * block_size,
                "forward batch: sequence {} context {} exceeds its block table", s, context_lens[s]);
  }
  for (size_t t = 0; t < T; ++t)
    RIDGE_CHECK(slots[t] >= 0 && slots[t] < num_slots, "forward batch: slot {} outside {}", slots[t],
                num_slots);
  for (int32_t r : logits_rows)
    RIDGE_CHECK(r >= 0 && size_t(r) < T, "forward batch: logits row {} outside {}", r, T);
}

}  // namespace ridge::model
