#pragma once
// Which examples form which training batch: a pure function of (seed, epoch), so a run resumed at
// update N reads exactly the batches an uninterrupted run would have read, with no sampler state to save.
#include <cstdint>
#include <vector>

#include "model/tokenizer/tokenizer.h"

namespace srformer::train {

struct TokenizedExample {
  TokenIds input;   // document ids (prefix included, truncated)
  TokenIds labels;  // summary ids ending in EOS (truncated)
};

// The batches of one epoch, as indices into `examples`: examples shuffled (seeded by seed and epoch),
// then, within windows of 64 batches, sorted by input length so a batch pads little; the batches are
// shuffled again. Every example appears once; the last batch may be short.
std::vector<std::vector<size_t>> epoch_batches(const std::vector<TokenizedExample>& examples, int64_t batch_size,
                                               uint64_t seed, int64_t epoch);

}  // namespace srformer::train
