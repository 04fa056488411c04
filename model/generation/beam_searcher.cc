#include "model/generation/beam_searcher.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include "model/generation/weighted_draw.h"
#include "model/kernels/avx2.h"
#include "model/kernels/beam_candidates.h"

namespace srformer {
namespace {

// The `count` best of `values` (index into [num_beams * vocab]), best first: what
// torch::topk(sorted=true) returns (HF uses it), with ties ordered by index; each with its entry of
// `logprobs`. One pass with a small heap instead of topk, which costs ~1 ms on 4 x 50k.
std::vector<kernels::BeamCandidate> top_candidates(const float* values, const float* logprobs, int64_t n,
                                                   int64_t count) {
  kernels::BestCandidates best(count);
  for (int64_t i = 0; i < n; ++i) best.offer(values[i], i, logprobs[i]);
  return std::move(best).sorted();
}

// Whether contiguous CPU float32 `t` holds a NaN: one pass without the bool tensor and reduction of
// at::isnan(t).any() (~100 µs a 32k row).
bool holds_nan(const torch::Tensor& t) {
  const float* x = t.data_ptr<float>();
  const int64_t n = t.numel();
  int nan = 0;  // an int, not a bool: the compiler then vectorises the loop (a bool's took 4x as long)
  for (int64_t i = 0; i < n; ++i) nan |= static_cast<int>(std::isnan(x[i]));
  return nan != 0;
}

// `options`, once validate() passed them (the members after it divide by num_beam_groups).
const GenerationOptions& validated(const GenerationOptions& options) {
  validate(options);
  return options;
}

}  // namespace

BeamSearcher::BeamSearcher(const GenerationOptions& options)
    : options_(validated(options)),
      sequence_bias_(options_.sequence_bias),
      group_size_(options.num_beams / beam_groups(options)),
      groups_(static_cast<size_t>(beam_groups(options))),
      rows_(options.num_beams),
      rng_(options.seed) {
  for (auto& group : groups_) {
    group.beams.assign(static_cast<size_t>(group_size_), TokenHistory{options_.decoder_start_token_id});
    // Only each group's first beam is live at the start; the others cannot win a top-k slot from it.
    group.beam_scores.assign(static_cast<size_t>(group_size_), -1e9f);
    group.beam_scores[0] = 0.0f;
    group.beam_logprobs.resize(static_cast<size_t>(group_size_));
  }
}

SearchStep BeamSearcher::advance(const torch::Tensor& logits) {
  if (done_) throw std::logic_error("Searcher::advance called after the search finished");
  if (!logits.defined() || logits.dim() != 2 || logits.size(0) != rows_) {
    throw std::invalid_argument("BeamSearcher::advance expects logits [" + std::to_string(rows_) + ", vocab]");
  }
  // The rows of the groups still running after the step, and of every group that stepped (where the search
  // ends here, its step names them all, as without groups).
  std::vector<int64_t> parents, tokens, stepped_parents, stepped_tokens;
  // HF's current_tokens: what the groups before the one stepping chose at this step (a done group the pad token).
  std::vector<int64_t> earlier;
  int64_t row = 0;  // the first of the group's rows in `logits`
  for (auto& group : groups_) {
    if (group.done) {
      earlier.insert(earlier.end(), static_cast<size_t>(group_size_), options_.pad_token_id);
      continue;
    }
    std::vector<int64_t> group_parents, group_tokens;
    advance_group(group, logits.narrow(0, row, group_size_), earlier, group_parents, group_tokens);
    for (int64_t& parent : group_parents) parent += row;
    earlier.insert(earlier.end(), group_tokens.begin(), group_tokens.end());
    if (!group.done) {  // a group done now leaves the batch
      parents.insert(parents.end(), group_parents.begin(), group_parents.end());
      tokens.insert(tokens.end(), group_tokens.begin(), group_tokens.end());
    }
    stepped_parents.insert(stepped_parents.end(), group_parents.begin(), group_parents.end());
    stepped_tokens.insert(stepped_tokens.end(), group_tokens.begin(), group_tokens.end());
    row += group_size_;
  }
  ++steps_;
  done_ = std::all_of(groups_.begin(), groups_.end(), [](const Group& g) { return g.done; });
  if (!done_ && steps_ >= options_.max_new_tokens) {
    // BeamSearchScorer.finalize: the running beams of each group not done compete with its finished hypotheses.
    for (auto& group : groups_) {
      if (group.done) continue;
      for (size_t b = 0; b < group.beams.size(); ++b) {
        add_hypothesis(group, group.beams[b], group.beam_scores[b], group.beam_logprobs[b], FinishReason::kLength);
      }
      group.done = true;
    }
    done_ = true;
  }
  if (!done_) rows_ = static_cast<int64_t>(parents.size());

  SearchStep step;
  step.next_tokens = torch::tensor(done_ ? stepped_tokens : tokens, torch::kInt64);
  step.parent_rows = torch::tensor(done_ ? stepped_parents : parents, torch::kInt64);
  step.done = done_;
  if (done_) {
    auto best = results().front();
    step.emitted = std::move(best.tokens);
    step.emitted_logprobs = std::move(best.token_logprobs);
  }
  return step;
}

void BeamSearcher::advance_group(Group& group, const torch::Tensor& logits, const std::vector<int64_t>& earlier,
                                 std::vector<int64_t>& parents, std::vector<int64_t>& tokens) {
  const int64_t num_beams = group_size_;
  const int64_t vocab = logits.size(1);
  // max(2, 1 + EOS ids) candidates per beam, as Hugging Face takes with a list of EOS ids: the beams' EOS
  // candidates cannot crowd out every continuation.
  const auto per_beam = 2 + static_cast<int64_t>(options_.extra_eos_token_ids.size());
  const int64_t candidates = std::min(per_beam * num_beams, num_beams * vocab);
  // The diversity penalty changes scores: the kernels do not apply it.
  const bool penalised = options_.diversity_penalty > 0.0 && !earlier.empty();
  auto top = options_.do_sample || penalised ? std::vector<kernels::BeamCandidate>{}
                                             : candidates_in_place(group, logits, candidates);
  if (top.empty()) {
    // LibTorch's log_softmax reads CPU float32 logits where they lie (the same values: no copy of them first).
    const bool direct = logits.is_cpu() && logits.scalar_type() == torch::kFloat32 && logits.is_contiguous();
    if (direct) check_logits(logits, num_beams, options_);
    const auto source = direct ? logits : scores_from_logits(logits, num_beams, options_, logits_);
    if (!scores_.defined() || scores_.sizes() != source.sizes())
      scores_ = torch::empty(source.sizes(), torch::kFloat32);
    if (!logits_.defined() || logits_.sizes() != source.sizes())
      logits_ = torch::empty(source.sizes(), torch::kFloat32);
    const auto& scores = at::log_softmax_out(scores_, source, -1);
    // HF applies the processors to the log-probabilities here (unlike greedy search and sampling).
    // The in-place pass refuses NaN and lands here: a NaN would rank anywhere, and its beams score NaN.
    if (holds_nan(scores)) throw std::runtime_error(non_finite_logits_message(steps_));
    process_logits(options_, sequence_bias_, group.beams, scores, VocabLimit::kApply, earlier);
    if (options_.do_sample) warp_logits(options_, scores, candidates);
    // Without sampling the kernels offer the heap only the scores that can enter it, the same choice.
    if (!options_.do_sample && kernels::use_cpu_kernels()) {
      if (auto best = kernels::best_processed_candidates(scores.data_ptr<float>(), num_beams, vocab,
                                                         group.beam_scores.data(), candidates)) {
        top = std::move(*best);
      }
    }
    if (top.empty()) {
      // The totals go to logits_ (the copy of the logits, where one was made): `scores` keeps the tokens' own
      // log-probabilities, which HF reports as their transition scores.
      const auto& totals =
          at::add_out(logits_, scores, torch::from_blob(group.beam_scores.data(), {num_beams, 1}, torch::kFloat32));
      top = options_.do_sample
                ? sample_candidates(totals, scores, candidates)
                : top_candidates(totals.data_ptr<float>(), scores.data_ptr<float>(), num_beams * vocab, candidates);
    }
  }

  const auto cur_len = static_cast<int64_t>(group.beams.front().size());
  std::vector<TokenHistory> next_beams;
  std::vector<std::vector<float>> next_logprobs;
  std::vector<float> next_scores;
  // Fewer than `candidates` only where the vocabulary holds fewer.
  for (int64_t rank = 0; rank < static_cast<int64_t>(top.size()) && static_cast<int64_t>(next_beams.size()) < num_beams;
       ++rank) {
    const auto [score, index, logprob] = top[static_cast<size_t>(rank)];
    const int64_t parent = index / vocab;
    const int64_t token = index % vocab;
    auto logprobs = group.beam_logprobs[static_cast<size_t>(parent)];
    logprobs.push_back(logprob);
    if (is_eos(options_, token)) {
      // An EOS candidate outside the first num_beams ranks is dropped, not finished.
      if (rank < num_beams) {
        add_hypothesis(group, group.beams[static_cast<size_t>(parent)], score, std::move(logprobs), FinishReason::kEos,
                       token);
      }
      continue;
    }
    next_beams.push_back(group.beams[static_cast<size_t>(parent)]);
    next_beams.back().push_back(token);
    next_logprobs.push_back(std::move(logprobs));
    next_scores.push_back(score);
    tokens.push_back(token);
    parents.push_back(parent);
  }
  if (static_cast<int64_t>(next_beams.size()) < num_beams) {
    const std::string beams = groups_.size() > 1 ? "num_beams / num_beam_groups=" + std::to_string(num_beams)
                                                 : "num_beams=" + std::to_string(num_beams);
    throw std::runtime_error("beam search found fewer than " + beams + " continuations that are not EOS; the " +
                             "vocabulary (" + std::to_string(vocab) + " tokens) is too small for this many beams");
  }
  group.done = hypotheses_done(group, top.front().score, cur_len);
  group.beams = std::move(next_beams);
  group.beam_logprobs = std::move(next_logprobs);
  group.beam_scores = std::move(next_scores);
}

std::vector<kernels::BeamCandidate> BeamSearcher::candidates_in_place(const Group& group, const torch::Tensor& logits,
                                                                      int64_t count) const {
  const int64_t num_beams = group_size_;
  if (!kernels_read_in_place(logits, num_beams)) return {};
  const int64_t vocab = logits.size(1);
  kernels::BeamRows rows;
  rows.x = logits.data_ptr<float>();
  rows.rows = num_beams;
  rows.n = vocab;
  rows.beam_scores = group.beam_scores.data();
  rows.limit = token_limit(options_, vocab);
  for (const auto& beam : group.beams) {
    auto excluded = excluded_tokens(options_, beam, vocab);
    if (!excluded) return {};
    rows.excluded.push_back(std::move(*excluded));
  }
  auto best = kernels::beam_candidates(rows, count);
  return best ? std::move(*best) : std::vector<kernels::BeamCandidate>{};
}

std::vector<kernels::BeamCandidate> BeamSearcher::sample_candidates(const torch::Tensor& scores,
                                                                    const torch::Tensor& logprobs, int64_t count) {
  const auto flat = scores.reshape({-1}).contiguous();
  const auto flat_logprobs = logprobs.reshape({-1}).contiguous();
  const auto probs = flat.softmax(0);
  const float* s = flat.data_ptr<float>();
  const float* lp = flat_logprobs.data_ptr<float>();
  const float* p = probs.data_ptr<float>();
  const int64_t n = flat.numel();
  std::vector<int64_t> with_mass;  // the candidates with mass, and their probabilities
  std::vector<double> weights;
  with_mass.reserve(static_cast<size_t>(n));
  weights.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if (p[i] > 0.0f) {
      with_mass.push_back(i);
      weights.push_back(p[i]);
    }
  }
  if (with_mass.empty()) throw_no_choice(flat, steps_);  // no token with a positive probability
  std::vector<kernels::BeamCandidate> drawn;
  std::vector<bool> taken(static_cast<size_t>(n), false);
  // As SamplingSearcher draws one token, over the candidates not drawn yet.
  for (const int64_t pick : draw_without_replacement(rng_, weights, count)) {
    const int64_t index = with_mass[static_cast<size_t>(pick)];
    drawn.push_back({s[index], index, lp[index]});
    taken[static_cast<size_t>(index)] = true;
  }
  // Fewer candidates with a float probability above 0 than draws (a low temperature puts all the mass on a
  // few): the rest follow by score, where draws of vanishing probability would come from, so that every
  // beam is filled (HF's multinomial refuses to draw there). Filtered candidates (-inf) come back only below.
  if (static_cast<int64_t>(drawn.size()) < count) {
    kernels::BestCandidates best(count - static_cast<int64_t>(drawn.size()));
    for (int64_t i = 0; i < n; ++i) {
      if (!taken[static_cast<size_t>(i)] && s[i] > -std::numeric_limits<float>::infinity()) best.offer(s[i], i, lp[i]);
    }
    for (const auto& c : std::move(best).sorted()) {
      drawn.push_back(c);
      taken[static_cast<size_t>(c.index)] = true;
    }
  }
  // Still short where fewer candidates than that are left at all (a forced EOS leaves one per beam): the
  // filtered ones make up the count, lowest index first, as beam search's top-k takes them, so that
  // every beam's EOS becomes a hypothesis and the -inf continuations never win.
  for (int64_t i = 0; i < n && static_cast<int64_t>(drawn.size()) < count; ++i) {
    if (!taken[static_cast<size_t>(i)]) drawn.push_back({s[i], i, lp[i]});
  }
  std::sort(drawn.begin(), drawn.end(), [](const kernels::BeamCandidate& a, const kernels::BeamCandidate& b) {
    return a.score != b.score ? a.score > b.score : a.index < b.index;
  });
  return drawn;
}

void BeamSearcher::add_hypothesis(Group& group, const TokenHistory& tokens, float sum_logprobs,
                                  std::vector<float> logprobs, FinishReason reason, int64_t eos) const {
  const double score =
      static_cast<double>(sum_logprobs) / std::pow(static_cast<double>(tokens.size()), options_.length_penalty);
  auto& finished = group.finished;
  if (static_cast<int64_t>(finished.size()) < group_size_ || score > group.worst_score) {
    finished.push_back({score, tokens, std::move(logprobs), reason, eos});
    if (static_cast<int64_t>(finished.size()) > group_size_) {
      // Drop the worst (the earliest among equals); the worst score becomes the second worst's.
      std::vector<size_t> order(finished.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::sort(order.begin(), order.end(), [&finished](size_t a, size_t b) {
        return finished[a].score != finished[b].score ? finished[a].score < finished[b].score : a < b;
      });
      group.worst_score = finished[order[1]].score;
      finished.erase(finished.begin() + static_cast<std::ptrdiff_t>(order[0]));
    } else {
      group.worst_score = std::min(score, group.worst_score);
    }
  }
}

bool BeamSearcher::hypotheses_done(const Group& group, float best_sum_logprobs, int64_t cur_len) const {
  if (static_cast<int64_t>(group.finished.size()) < group_size_) return false;
  if (options_.early_stopping == EarlyStopping::kWhenFull) return true;
  // The best running beam's score were it to end now (the heuristic), or, "never" with length_penalty > 0,
  // at the longest length a hypothesis reaches: the decoder start and max_new_tokens tokens, as the search's
  // end scores it (HF 4.26-4.34's max_length; 4.35 and later count one fewer here and at the end alike).
  const bool longest = options_.early_stopping == EarlyStopping::kNever && options_.length_penalty > 0.0;
  const double length = static_cast<double>(longest ? options_.max_new_tokens + 1 : cur_len);
  const double best_possible = static_cast<double>(best_sum_logprobs) / std::pow(length, options_.length_penalty);
  return group.worst_score >= best_possible;
}

std::vector<Hypothesis> BeamSearcher::results() const {
  if (!done_) return {};
  // HF sorts every group's hypotheses, group after group, ascending (stable) and pops from the end: among
  // equal scores the later one wins.
  std::vector<const Finished*> sorted;
  for (const auto& group : groups_) {
    for (const auto& f : group.finished) sorted.push_back(&f);
  }
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const Finished* a, const Finished* b) { return a->score < b->score; });
  std::vector<Hypothesis> out;
  for (auto it = sorted.rbegin();
       it != sorted.rend() && static_cast<int64_t>(out.size()) < options_.num_return_sequences; ++it) {
    Hypothesis h;
    h.tokens.assign((*it)->tokens.begin() + 1, (*it)->tokens.end());
    // The EOS id that ended it, as transformers 4.48 and later keep it (4.26-4.47 wrote the list's first id
    // whichever ended the beam; its log-probability is the id's that ended it).
    if ((*it)->reason == FinishReason::kEos) h.tokens.push_back((*it)->eos);
    h.score = static_cast<float>((*it)->score);  // HF returns sequences_scores as float32
    h.token_logprobs = (*it)->logprobs;
    h.finish_reason = (*it)->reason;
    out.push_back(std::move(h));
  }
  return out;
}

}  // namespace srformer
