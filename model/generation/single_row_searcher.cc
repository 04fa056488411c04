#include "model/generation/single_row_searcher.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "model/generation/weighted_draw.h"
#include "model/kernels/avx2.h"
#include "model/kernels/greedy_pick.h"

namespace srformer {

namespace {

// A [1] int64 tensor holding v (without a fill kernel's dispatch: this runs per request and step).
torch::Tensor one_token(int64_t v) {
  auto t = torch::empty({1}, torch::kInt64);
  *t.data_ptr<int64_t>() = v;
  return t;
}

}  // namespace

GreedySearcher::GreedySearcher(const GenerationOptions& options)
    : options_(options), history_{options.decoder_start_token_id} {
  validate(options_);
}

SearchStep GreedySearcher::advance(const torch::Tensor& logits) {
  if (done()) throw std::logic_error("Searcher::advance called after the search finished");
  double logprob = 0.0;
  int64_t token = pick_in_place(logits, logprob);
  if (token < 0) {
    const auto scores = scores_from_logits(logits, 1, options_, scores_);
    process_logits(options_, {history_}, scores);
    token = choose(scores, logprob);
    if (std::isnan(logprob)) throw_no_choice(scores, steps());
  }
  score_ += logprob;
  logprobs_.push_back(static_cast<float>(logprob));
  history_.push_back(token);
  if (token == options_.eos_token_id) {
    finish_reason_ = FinishReason::kEos;
  } else if (steps() >= options_.max_new_tokens) {
    finish_reason_ = FinishReason::kLength;
  }
  SearchStep step;
  step.next_tokens = one_token(token);
  step.parent_rows = one_token(0);
  step.emitted = {token};
  step.emitted_logprobs = {logprobs_.back()};
  step.done = done();
  return step;
}

int64_t GreedySearcher::pick_in_place(const torch::Tensor& logits, double& logprob) const {
  if (!picks_argmax() || !kernels_read_in_place(logits, 1)) return -1;
  const int64_t vocab = logits.size(1);
  const auto excluded = excluded_tokens(options_, history_, vocab);
  if (!excluded) return -1;
  const int64_t limit = token_limit(options_, vocab);
  const auto pick = kernels::greedy_pick(logits.data_ptr<float>(), vocab, limit, *excluded);
  if (!pick) return -1;
  logprob = pick->logprob;
  return pick->token;
}

int64_t GreedySearcher::choose(const torch::Tensor& scores, double& logprob) {
  if (kernels::use_cpu_kernels()) {  // one pass for the maximum, one for the normaliser
    if (const auto pick = kernels::greedy_pick(scores.data_ptr<float>(), scores.size(1))) {
      logprob = pick->logprob;
      return pick->token;
    }
  }
  const auto row = scores[0];
  const int64_t token = row.argmax().item<int64_t>();
  // log_softmax at one index: no vocabulary-sized tensor for a single number.
  logprob = (row[token] - row.logsumexp(0)).item<double>();
  return token;
}

std::vector<Hypothesis> GreedySearcher::results() const {
  Hypothesis hypothesis;
  hypothesis.tokens.assign(history_.begin() + 1, history_.end());
  hypothesis.score = score_;
  hypothesis.token_logprobs = logprobs_;
  hypothesis.finish_reason = finish_reason_;
  return {hypothesis};
}

SamplingSearcher::SamplingSearcher(const GenerationOptions& options) : GreedySearcher(options), rng_(options.seed) {
  if (!options.do_sample) throw std::invalid_argument("SamplingSearcher needs do_sample=true");
}

int64_t SamplingSearcher::choose(const torch::Tensor& scores, double& logprob) {
  warp_logits(options_, scores);
  const auto probs = scores[0].softmax(-1);
  const auto* p = probs.data_ptr<float>();
  const auto drawn = draw_weighted(rng_, probs.size(0), [p](int64_t i) { return static_cast<double>(p[i]); });
  if (drawn.index < 0) throw_no_choice(scores, steps());  // no token with a positive probability
  logprob = std::log(static_cast<double>(p[drawn.index]) / drawn.total);
  return drawn.index;
}

}  // namespace srformer
