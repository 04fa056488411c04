#include "model/generation/multi_sample_searcher.h"

#include <torch/torch.h>

#include <algorithm>
#include <stdexcept>

namespace srformer {

namespace {

GenerationOptions one_sample(GenerationOptions options, int64_t index) {
  options.num_return_sequences = 1;
  options.seed = MultiSampleSearcher::sample_seed(options.seed, index);
  return options;
}

}  // namespace

uint64_t MultiSampleSearcher::sample_seed(uint64_t seed, int64_t index) {
  if (index == 0) return seed;
  // SplitMix64's finaliser over seed + index·golden ratio: nearby seeds and indices give unrelated
  // streams (seed s, sample 1 is not seed s + 1, sample 0).
  uint64_t z = seed + static_cast<uint64_t>(index) * 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

MultiSampleSearcher::MultiSampleSearcher(const GenerationOptions& options) {
  validate(options);
  if (!options.do_sample) throw std::invalid_argument("MultiSampleSearcher needs do_sample=true");
  samples_.reserve(static_cast<size_t>(options.num_return_sequences));
  for (int64_t i = 0; i < options.num_return_sequences; ++i) {
    samples_.emplace_back(one_sample(options, i));
    live_.push_back(static_cast<size_t>(i));
  }
}

SearchStep MultiSampleSearcher::advance(const torch::Tensor& logits) {
  if (done()) throw std::logic_error("Searcher::advance called after the search finished");
  const int64_t rows = num_rows();
  if (logits.dim() != 2 || logits.size(0) != rows) {
    throw std::invalid_argument("MultiSampleSearcher::advance expects logits [" + std::to_string(rows) + ", vocab]");
  }
  SearchStep step;
  std::vector<int64_t> parents, next;
  std::vector<size_t> still;
  for (int64_t r = 0; r < rows; ++r) {
    const size_t index = live_[static_cast<size_t>(r)];
    SearchStep drawn = samples_[index].advance(logits.narrow(0, r, 1));
    if (index == 0) {
      step.emitted = std::move(drawn.emitted);
      step.emitted_logprobs = std::move(drawn.emitted_logprobs);
    }
    if (!drawn.done) {
      parents.push_back(r);
      next.push_back(drawn.next_tokens.data_ptr<int64_t>()[0]);
      still.push_back(index);
    }
  }
  live_ = std::move(still);
  step.next_tokens = torch::tensor(next, torch::kInt64);
  step.parent_rows = torch::tensor(parents, torch::kInt64);
  step.done = live_.empty();
  return step;
}

bool MultiSampleSearcher::done() const { return live_.empty(); }

std::vector<Hypothesis> MultiSampleSearcher::results() const {
  std::vector<Hypothesis> out;
  out.reserve(samples_.size());
  for (const auto& sample : samples_) out.push_back(sample.results().front());
  return out;
}

int64_t MultiSampleSearcher::steps() const {
  int64_t most = 0;
  for (const auto& sample : samples_) most = std::max(most, sample.steps());
  return most;
}

}  // namespace srformer
