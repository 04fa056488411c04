#pragma once
// Test helpers: a scripted "model" mapping a row's history (decoder start included) to next-token
// logits, and a driver that plays the caller's part of the Searcher contract (rows, reordering).
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <stdexcept>
#include <vector>

#include "model/generation/searcher.h"

namespace srformer::testing {

using Script = std::function<std::vector<float>(const std::vector<int64_t>& history)>;

// Logits whose log_softmax is log(p) (p sums to 1).
inline std::vector<float> log_probs(const std::vector<double>& p) {
  std::vector<float> out;
  for (const double v : p) out.push_back(static_cast<float>(std::log(v)));
  return out;
}

struct Run {
  std::vector<Hypothesis> results;
  int64_t steps = 0;
  std::vector<int64_t> emitted;
  std::vector<float> emitted_logprobs;
  std::vector<std::vector<int64_t>> parent_rows;  // per step
  std::vector<std::vector<int64_t>> next_tokens;  // per step
};

// Runs `searcher` to completion against `script`, as the batch owner would: num_rows() identical
// rows start with `start`; after each step row i continues row parent_rows[i] with next_tokens[i]
// (as many rows as parent_rows has: the searcher's rows may fall, never rise).
inline Run drive(Searcher& searcher, const Script& script, int64_t start, int64_t max_steps = 10000) {
  std::vector<std::vector<int64_t>> histories(static_cast<size_t>(searcher.num_rows()), std::vector<int64_t>{start});
  Run run;
  for (int64_t s = 0; s < max_steps && !searcher.done(); ++s) {
    const auto rows = static_cast<int64_t>(histories.size());
    if (searcher.num_rows() != rows) throw std::runtime_error("num_rows() disagrees with the rows kept");
    std::vector<float> flat;
    int64_t vocab = -1;
    for (const auto& h : histories) {
      const auto logits = script(h);
      vocab = static_cast<int64_t>(logits.size());
      flat.insert(flat.end(), logits.begin(), logits.end());
    }
    const auto step = searcher.advance(torch::tensor(flat).view({rows, vocab}));
    const int64_t after = step.parent_rows.numel();
    if (step.next_tokens.numel() != after || after > rows) {
      throw std::runtime_error("a SearchStep must give one token and one parent per row it keeps, no more rows");
    }
    std::vector<int64_t> parents(static_cast<size_t>(after)), tokens(static_cast<size_t>(after));
    std::vector<std::vector<int64_t>> next(static_cast<size_t>(after));
    for (int64_t i = 0; i < after; ++i) {
      parents[i] = step.parent_rows[i].item<int64_t>();
      tokens[i] = step.next_tokens[i].item<int64_t>();
      next[i] = histories.at(static_cast<size_t>(parents[i]));
      next[i].push_back(tokens[i]);
    }
    histories = std::move(next);
    run.parent_rows.push_back(parents);
    run.next_tokens.push_back(tokens);
    run.emitted.insert(run.emitted.end(), step.emitted.begin(), step.emitted.end());
    if (step.emitted_logprobs.size() != step.emitted.size()) {
      throw std::runtime_error("a SearchStep must give one log-probability per emitted token");
    }
    run.emitted_logprobs.insert(run.emitted_logprobs.end(), step.emitted_logprobs.begin(), step.emitted_logprobs.end());
    if (step.done != searcher.done()) throw std::runtime_error("SearchStep::done disagrees with done()");
  }
  run.results = searcher.results();
  run.steps = searcher.steps();
  return run;
}

// A deterministic pseudo-random script: logits drawn from a generator seeded by the history, so that
// the same history always gets the same logits. `eos_bias` is added to the EOS logit.
inline Script random_script(int64_t vocab, uint64_t seed, int64_t eos, float eos_bias = 0.0f) {
  return [=](const std::vector<int64_t>& history) {
    uint64_t h = seed * 0x9E3779B97F4A7C15ull + 1;
    for (const int64_t t : history) h = (h ^ static_cast<uint64_t>(t + 1)) * 0x100000001B3ull;
    std::mt19937_64 rng(h);
    std::vector<float> out(static_cast<size_t>(vocab));
    for (auto& v : out) v = static_cast<float>(static_cast<double>(rng() >> 11) * 0x1.0p-53 * 8.0 - 4.0);
    out[static_cast<size_t>(eos)] += eos_bias;
    return out;
  };
}

}  // namespace srformer::testing
