#include "model/generation/single_row_searcher.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
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

// The log-probability of `pick`, chosen below `limit`, with the scores at or past the limit (less the
// `excluded` ones, ascending) in its normaliser too: ids the tokenizer lacks are never chosen, but they
// are part of the model's distribution, as in Hugging Face's scores and in beam search. std::nullopt
// where one of those is NaN or +inf (the general path then decides).
std::optional<double> normalised_over_row(const float* x, int64_t n, int64_t limit,
                                          const std::vector<int64_t>& excluded, const kernels::GreedyPick& pick) {
  if (limit >= n) return pick.logprob;
  std::vector<int64_t> tail_excluded;
  for (const int64_t e : excluded) {
    if (e >= limit) tail_excluded.push_back(e - limit);
  }
  const auto tail = kernels::greedy_pick(x + limit, n - limit, n - limit, tail_excluded);
  if (!tail) {  // no finite score past the limit adds nothing; NaN or +inf there is not ours to judge
    for (int64_t i = limit; i < n; ++i) {
      if (x[i] != -std::numeric_limits<float>::infinity() && !std::binary_search(excluded.begin(), excluded.end(), i)) {
        return std::nullopt;
      }
    }
    return pick.logprob;
  }
  // Each part's log Σ exp is its maximum less its pick's log-probability; log(e^a + e^b) relative to a.
  const double d = (static_cast<double>(x[limit + tail->token]) - tail->logprob) -
                   (static_cast<double>(x[pick.token]) - pick.logprob);
  return pick.logprob - (d > 0.0 ? d + std::log1p(std::exp(-d)) : std::log1p(std::exp(d)));
}

// The blocks of kSoftmaxBlock scores of `x` (n of them) that hold one above -inf, copied one after another
// into `blocks` (the last padded with -inf), with `starts` the row index of each block's first score. LibTorch's
// softmax of a CPU float32 row reduces (maximum, then Σ exp) in 8 or 16 lanes, element i in lane i mod 8 or
// 16, each lane in row order, and its exp is per element: blocks starting at multiples of 64 keep every score
// in its lane and order, and a -inf adds exactly 0 (maximum: leaves it), so blocks.softmax(0) gives each
// score's probability bit for bit as the whole row's softmax does, having read only these blocks. false
// (nothing written) where they would be more than half of the row or none, or the row holds NaN or +inf.
constexpr int64_t kSoftmaxBlock = 64;
bool blocks_with_finite_scores(const float* x, int64_t n, std::vector<float>& blocks, std::vector<int64_t>& starts) {
  starts.clear();
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const auto most = static_cast<size_t>(n / (2 * kSoftmaxBlock));
  for (int64_t b = 0; b < n; b += kSoftmaxBlock) {
    // Branch-free over the block (the compiler vectorises it): this runs over every block of the row.
    int finite = 0, odd = 0;  // a score above -inf; NaN or +inf
    const float* block = x + b;
    if (n - b >= kSoftmaxBlock) {
      for (int64_t i = 0; i < kSoftmaxBlock; ++i) {
        finite |= static_cast<int>(block[i] != -kInf);
        odd |= static_cast<int>(!(block[i] < kInf));
      }
    } else {
      for (int64_t i = 0; i < n - b; ++i) {
        finite |= static_cast<int>(block[i] != -kInf);
        odd |= static_cast<int>(!(block[i] < kInf));
      }
    }
    if (odd != 0) return false;
    if (finite == 0) continue;
    if (starts.size() == most) return false;
    starts.push_back(b);
  }
  if (starts.empty()) return false;
  blocks.assign(starts.size() * static_cast<size_t>(kSoftmaxBlock), -kInf);
  for (size_t j = 0; j < starts.size(); ++j) {
    const int64_t len = std::min(kSoftmaxBlock, n - starts[j]);
    std::copy(x + starts[j], x + starts[j] + len, blocks.begin() + static_cast<std::ptrdiff_t>(j) * kSoftmaxBlock);
  }
  return true;
}

}  // namespace

GreedySearcher::GreedySearcher(const GenerationOptions& options)
    : options_(options), rows_{TokenHistory{options.decoder_start_token_id}} {
  validate(options_);
  sequence_bias_ = SequenceBias(options_.sequence_bias);
}

SearchStep GreedySearcher::advance(const torch::Tensor& logits) {
  if (done()) throw std::logic_error("Searcher::advance called after the search finished");
  double logprob = 0.0;
  int64_t token = pick_in_place(logits, logprob);
  if (token < 0) {
    const auto scores = scores_from_logits(logits, 1, options_, scores_);
    // Hugging Face's processed scores: the ids past the tokenizer's keep theirs, for the normaliser.
    process_logits(options_, sequence_bias_, rows_, scores, VocabLimit::kKeep);
    // Forced tokens are the row's only finite scores, wherever they lie (as when the limit was applied first).
    const int64_t vocab = scores.size(1);
    const int64_t limit =
        forced_tokens(options_, static_cast<int64_t>(history().size())).empty() ? token_limit(options_, vocab) : vocab;
    token = choose(scores, limit, logprob);
    if (std::isnan(logprob)) throw_no_choice(scores.narrow(1, 0, limit), steps());
  }
  score_ += logprob;
  logprobs_.push_back(static_cast<float>(logprob));
  rows_.front().push_back(token);
  if (is_eos(options_, token)) {
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
  const auto excluded = excluded_tokens(options_, history(), vocab);
  if (!excluded) return -1;
  const int64_t limit = token_limit(options_, vocab);
  const float* x = logits.data_ptr<float>();
  const auto pick = kernels::greedy_pick(x, vocab, limit, *excluded);
  if (!pick) return -1;
  const auto normalised = normalised_over_row(x, vocab, limit, *excluded, *pick);
  if (!normalised) return -1;
  logprob = *normalised;
  return pick->token;
}

int64_t GreedySearcher::choose(const torch::Tensor& scores, int64_t limit, double& logprob) {
  const int64_t vocab = scores.size(1);
  if (kernels::use_cpu_kernels()) {  // one pass for the maximum, one for the normaliser
    const float* x = scores.data_ptr<float>();
    if (const auto pick = kernels::greedy_pick(x, vocab, limit, {})) {
      if (const auto normalised = normalised_over_row(x, vocab, limit, {}, *pick)) {
        logprob = *normalised;
        return pick->token;
      }
    }
  }
  const auto row = scores[0];
  const int64_t token = row.narrow(0, 0, limit).argmax().item<int64_t>();
  // log_softmax at one index: no vocabulary-sized tensor for a single number. A pick that is not finite
  // (nothing left below the limit, or +inf) has none, whatever lies past the limit.
  logprob = std::isfinite(row[token].item<float>()) ? (row[token] - row.logsumexp(0)).item<double>()
                                                    : std::numeric_limits<double>::quiet_NaN();
  return token;
}

std::vector<Hypothesis> GreedySearcher::results() const {
  Hypothesis hypothesis;
  hypothesis.tokens.assign(history().begin() + 1, history().end());
  hypothesis.score = score_;
  hypothesis.token_logprobs = logprobs_;
  hypothesis.finish_reason = finish_reason_;
  return {hypothesis};
}

SamplingSearcher::SamplingSearcher(const GenerationOptions& options) : GreedySearcher(options), rng_(options.seed) {
  if (!options.do_sample) throw std::invalid_argument("SamplingSearcher needs do_sample=true");
}

int64_t SamplingSearcher::choose(const torch::Tensor& scores, int64_t limit, double& logprob) {
  // Draws from the tokenizer's ids only: the distribution the token is drawn from, and reported under.
  if (limit < scores.size(1))
    scores.narrow(1, limit, scores.size(1) - limit).fill_(-std::numeric_limits<float>::infinity());
  warp_logits(options_, scores);
  // Where the warpers (top-k, top-p) left a few of the row's tokens, the softmax reads only the blocks of the
  // row holding them (blocks_with_finite_scores): the same probabilities, for ~60 µs less a 32k row.
  const bool filtered = options_.top_k > 0 || options_.top_p < 1.0;  // else every token keeps its score
  if (filtered && blocks_with_finite_scores(scores.data_ptr<float>(), scores.size(1), blocks_, block_starts_)) {
    const auto q = torch::from_blob(blocks_.data(), {static_cast<int64_t>(blocks_.size())}, torch::kFloat32).softmax(0);
    const float* bp = q.data_ptr<float>();
    with_mass_.clear();
    mass_.clear();
    for (size_t b = 0; b < block_starts_.size(); ++b) {
      for (int64_t o = 0; o < kSoftmaxBlock; ++o) {
        const float v = bp[b * static_cast<size_t>(kSoftmaxBlock) + static_cast<size_t>(o)];
        if (v != 0.0f) {  // padding past the row's end is -inf: probability 0
          with_mass_.push_back(block_starts_[b] + o);
          mass_.push_back(v);
        }
      }
    }
    const float* w = mass_.data();
    const auto drawn =
        draw_weighted(rng_, static_cast<int64_t>(mass_.size()), [w](int64_t j) { return static_cast<double>(w[j]); });
    if (drawn.index < 0) throw_no_choice(scores, steps());
    logprob = std::log(static_cast<double>(w[drawn.index]) / drawn.total);
    return with_mass_[static_cast<size_t>(drawn.index)];
  }
  const auto probs = scores[0].softmax(-1);
  const auto* p = probs.data_ptr<float>();
  // Where top-k or top-p left a few of the row's tokens with mass, the draw reads only those (NaN included,
  // which the draw refuses): the others add exactly 0 to its sums and are never drawn, so it draws and scores
  // as over the whole row (two passes over a 32k row were a third of such a step).
  const int64_t n = probs.size(0);
  int64_t m = 0;
  for (int64_t i = 0; i < n; ++i) m += p[i] != 0.0f ? 1 : 0;
  if (2 * m > n) {
    const auto drawn = draw_weighted(rng_, n, [p](int64_t i) { return static_cast<double>(p[i]); });
    if (drawn.index < 0) throw_no_choice(scores, steps());  // no token with a positive probability
    logprob = std::log(static_cast<double>(p[drawn.index]) / drawn.total);
    return drawn.index;
  }
  with_mass_.clear();
  for (int64_t i = 0; i < n; ++i) {
    if (p[i] != 0.0f) with_mass_.push_back(i);
  }
  const int64_t* at = with_mass_.data();
  const auto drawn = draw_weighted(rng_, m, [p, at](int64_t j) { return static_cast<double>(p[at[j]]); });
  if (drawn.index < 0) throw_no_choice(scores, steps());
  const int64_t token = at[drawn.index];
  logprob = std::log(static_cast<double>(p[token]) / drawn.total);
  return token;
}

}  // namespace srformer
