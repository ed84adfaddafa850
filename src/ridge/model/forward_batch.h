// ForwardBatch: the host-side plan of one engine step. The tokens of every scheduled sequence are
// flattened into one array (prefill chunks and decode tokens mixed); each sequence's KV lives in
// pages named by its block table. Built once per step on the CPU, then uploaded.
#pragma once

#include <cstdint>
#include <vector>

namespace ridge::model {

struct ForwardBatch {
  std::vector<int32_t> tokens;        // [T] token ids
  std::vector<int32_t> positions;     // [T] position of each token in its sequence
  std::vector<int32_t> slots;         // [T] KV slot = block * block_size + offset
  std::vector<int32_t> cu_seqlens;    // [S + 1] sequence s owns tokens [cu[s], cu[s+1])
  std::vector<int32_t> context_lens;  // [S] tokens in KV after this step (incl. the new ones)
  std::vector<int32_t> block_tables;  // [S * max_blocks_per_seq]
  int32_t max_blocks_per_seq = 0;
  std::vector<int32_t> logits_rows;   // token rows whose logits are wanted, in output order

  int32_t num_tokens() const { return int32_t(tokens.size()); }
  int32_t num_seqs() const { return cu_seqlens.empty() ? 0 : int32_t(cu_seqlens.size()) - 1; }
  // Checks every invariant above (and slots within num_slots); throws ridge::Error.
  void validate(int64_t num_slots, int64_t block_size) const;
  void clear();
  // Appends a sequence: its new tokens start at position context_len - tokens.size().
  void add_sequence(const std::vector<int32_t>& new_tokens, int32_t context_len,
                    const std::vector<int32_t>& block_table, int32_t block_size,
                    bool want_last_logits);
};

}  // namespace ridge::model
