// Greedy and beam search against an independent transcription of Hugging Face transformers 4.11's
// generate() (greedy_search, beam_search, BeamSearchScorer, BeamHypotheses and the logits processors),
// written here in plain C++ over double-precision log-probabilities (beam scores in float32, as HF's
// tensors hold them), without LibTorch or the searchers' code. Random small scripted models and random
// options (length penalties of every sign, the three early-stopping modes, minimum lengths, n-gram bans,
// repetition penalties below and above 1, forced BOS/EOS) exercise the edge cases where the two could
// part. Lists of EOS ids and of forced EOS ids follow the 4.26+ processors and searches (any listed EOS
// ends a sequence or a hypothesis, min_length keeps every one out, every forced id scores 0); a hypothesis
// ends with the id that ended it, as 4.48+ keep it (4.26-4.47's finalize wrote the list's first instead).
// Diverse (group) beam search as transformers 4.3x's _group_beam_search and HammingDiversityLogitsProcessor.
// The sampling warpers likewise, against HF's temperature, top-k and top-p (4.30-4.45).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "model/generation/logits_processors.h"
#include "model/generation/searcher.h"
#include "scripted_model.h"

namespace srformer {
namespace {

using History = std::vector<int64_t>;
constexpr double kInf = std::numeric_limits<double>::infinity();

// --- HF 4.11 logits processors, over one row of scores -------------------------------------------------

void hf_repetition_penalty(std::vector<double>& s, const History& ids, double penalty) {
  // gather / where / scatter: a repeated token is penalised once (the gathered values are the originals).
  std::vector<double> gathered;
  for (const int64_t t : ids) gathered.push_back(s[static_cast<size_t>(t)]);
  for (size_t i = 0; i < ids.size(); ++i) {
    const double v = gathered[i];
    s[static_cast<size_t>(ids[i])] = v < 0 ? v * penalty : v / penalty;
  }
}

void hf_no_repeat_ngram(std::vector<double>& s, const History& ids, int64_t n) {
  const auto cur_len = static_cast<int64_t>(ids.size());
  if (cur_len + 1 < n) return;
  // _get_ngrams: every n-gram of the history, keyed by its first n-1 tokens.
  std::vector<std::pair<History, int64_t>> ngrams;
  for (int64_t i = 0; i + n <= cur_len; ++i) {
    ngrams.emplace_back(History(ids.begin() + i, ids.begin() + i + n - 1), ids[static_cast<size_t>(i + n - 1)]);
  }
  const History key(ids.begin() + (cur_len + 1 - n), ids.end());
  for (const auto& [prefix, next] : ngrams) {
    if (prefix == key) s[static_cast<size_t>(next)] = -kInf;
  }
}

struct HfOptions {
  int64_t max_length = 10;  // counts the decoder start
  int64_t min_length = 0;
  int64_t num_beams = 1;
  int64_t num_beam_groups = 1;
  double diversity_penalty = 0.0;
  int64_t pad = 0;
  double length_penalty = 1.0;
  EarlyStopping early_stopping = EarlyStopping::kHeuristic;
  int64_t num_return_sequences = 1;
  int64_t no_repeat_ngram_size = 0;
  double repetition_penalty = 1.0;
  int64_t forced_bos = -1;
  std::vector<int64_t> forced_eos;  // ForcedEOSTokenLogitsProcessor's list (empty: none)
  int64_t start = 0;
  std::vector<int64_t> eos{1};  // eos_token_id as a list
  bool is_eos(int64_t token) const { return std::find(eos.begin(), eos.end(), token) != eos.end(); }
};

// `current`: the tokens the groups before this one chose at this step (group beam search's current_tokens).
void hf_process(std::vector<double>& s, const History& ids, const HfOptions& o, const History& current = {}) {
  const auto cur_len = static_cast<int64_t>(ids.size());
  // HammingDiversityLogitsProcessor (4.3x: second in the list, after the sequence bias): bincount times penalty.
  if (o.diversity_penalty > 0.0) {
    for (const int64_t t : current) s[static_cast<size_t>(t)] -= o.diversity_penalty;
  }
  if (o.repetition_penalty != 1.0) hf_repetition_penalty(s, ids, o.repetition_penalty);
  if (o.no_repeat_ngram_size > 0) hf_no_repeat_ngram(s, ids, o.no_repeat_ngram_size);
  if (cur_len < o.min_length) {
    for (const int64_t e : o.eos) s[static_cast<size_t>(e)] = -kInf;
  }
  const auto force = [&s](const std::vector<int64_t>& tokens) {
    std::fill(s.begin(), s.end(), -kInf);
    for (const int64_t t : tokens) s[static_cast<size_t>(t)] = 0.0;
  };
  if (o.forced_bos >= 0 && cur_len == 1) force({o.forced_bos});
  if (!o.forced_eos.empty() && cur_len == o.max_length - 1) force(o.forced_eos);
}

std::vector<double> log_softmax(const std::vector<float>& logits) {
  double most = -kInf;
  for (const float v : logits) most = std::max(most, static_cast<double>(v));
  double sum = 0.0;
  for (const float v : logits) sum += std::exp(static_cast<double>(v) - most);
  std::vector<double> out;
  for (const float v : logits) out.push_back(static_cast<double>(v) - most - std::log(sum));
  return out;
}

struct HfHypothesis {
  History tokens;  // new tokens, EOS included where it ended with one
  double score;
};

// greedy_search: processors on the raw logits, argmax (first on ties), stop at any EOS id or max_length.
HfHypothesis hf_greedy(const testing::Script& script, const HfOptions& o) {
  History ids{o.start};
  double score = 0.0;
  while (true) {
    const auto logits = script(ids);
    std::vector<double> s(logits.begin(), logits.end());
    hf_process(s, ids, o);
    const auto best = std::max_element(s.begin(), s.end()) - s.begin();
    // The searcher's score: log_softmax of the processed scores at the token.
    double most = s[static_cast<size_t>(best)], sum = 0.0;
    for (const double v : s) sum += std::exp(v - most);
    score += -std::log(sum);
    ids.push_back(best);
    if (o.is_eos(best) || static_cast<int64_t>(ids.size()) >= o.max_length) break;
  }
  return {History(ids.begin() + 1, ids.end()), score};
}

// beam_search with BeamSearchScorer (one batch row); with num_beam_groups > 1, 4.3x's _group_beam_search:
// the groups step in order, each a beam search of num_beams / num_beam_groups beams with BeamHypotheses of
// its own, a done group's beams fed the pad token; the results are the best over all groups' hypotheses.
std::vector<HfHypothesis> hf_beam(const testing::Script& script, const HfOptions& o) {
  const int64_t nb = o.num_beams / o.num_beam_groups;  // beams per group
  struct Hyp {
    double score;
    History ids;
    int64_t eos;  // the id that ended it, -1 for a beam still running at max_length
  };
  struct Group {
    std::vector<History> beams;
    // HF's beam scores and next-token scores are float32 tensors (-1e9 absorbs a log-probability there).
    std::vector<float> beam_scores;
    std::vector<Hyp> hyps;
    double worst = 1e9;
    bool done = false;
  };
  std::vector<Group> groups(static_cast<size_t>(o.num_beam_groups));
  for (auto& g : groups) {
    g.beams.assign(static_cast<size_t>(nb), History{o.start});
    g.beam_scores.assign(static_cast<size_t>(nb), -1e9f);
    g.beam_scores[0] = 0.0f;
  }
  const auto add = [&](Group& g, const History& ids, double sum_logprobs, int64_t eos) {
    const double score = sum_logprobs / std::pow(static_cast<double>(ids.size()), o.length_penalty);
    auto& hyps = g.hyps;
    if (static_cast<int64_t>(hyps.size()) < nb || score > g.worst) {
      hyps.push_back({score, ids, eos});
      if (static_cast<int64_t>(hyps.size()) > nb) {
        std::vector<std::pair<double, size_t>> sorted;
        for (size_t i = 0; i < hyps.size(); ++i) sorted.emplace_back(hyps[i].score, i);
        std::sort(sorted.begin(), sorted.end());
        hyps.erase(hyps.begin() + static_cast<std::ptrdiff_t>(sorted[0].second));
        g.worst = sorted[1].first;
      } else {
        g.worst = std::min(score, g.worst);
      }
    }
  };
  const auto is_done = [&](const Group& g, double best_sum_logprobs, int64_t cur_len) {
    if (static_cast<int64_t>(g.hyps.size()) < nb) return false;
    if (o.early_stopping == EarlyStopping::kWhenFull) return true;
    const bool never = o.early_stopping == EarlyStopping::kNever && o.length_penalty > 0.0;
    const double length = static_cast<double>(never ? o.max_length : cur_len);
    return g.worst >= best_sum_logprobs / std::pow(length, o.length_penalty);
  };
  int64_t cur_len = 1;
  while (true) {
    History current;  // this step's tokens of the groups before the one stepping
    for (auto& g : groups) {
      if (g.done) {
        current.insert(current.end(), static_cast<size_t>(nb), o.pad);
        continue;
      }
      std::vector<std::pair<float, int64_t>> flat;  // (score, beam * vocab + token)
      int64_t vocab = 0;
      for (int64_t b = 0; b < nb; ++b) {
        auto s = log_softmax(script(g.beams[static_cast<size_t>(b)]));
        vocab = static_cast<int64_t>(s.size());
        hf_process(s, g.beams[static_cast<size_t>(b)], o, current);
        for (int64_t t = 0; t < vocab; ++t) {
          flat.emplace_back(static_cast<float>(s[static_cast<size_t>(t)]) + g.beam_scores[static_cast<size_t>(b)],
                            b * vocab + t);
        }
      }
      // torch.topk(max(2, 1 + len(eos_token_id)) * num_beams, sorted=True) (4.26+; 4.11: 2 * num_beams, its
      // one EOS id); ties by index.
      std::stable_sort(flat.begin(), flat.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
      const int64_t kept = std::min(std::max<int64_t>(2, 1 + static_cast<int64_t>(o.eos.size())) * nb,
                                    static_cast<int64_t>(flat.size()));
      flat.resize(static_cast<size_t>(kept));
      std::vector<History> next;
      std::vector<float> next_scores;
      for (int64_t rank = 0; rank < kept; ++rank) {
        const auto [score, index] = flat[static_cast<size_t>(rank)];
        const int64_t parent = index / vocab, token = index % vocab;
        if (o.is_eos(token)) {
          if (rank >= nb) continue;
          add(g, g.beams[static_cast<size_t>(parent)], score, token);
        } else {
          next.push_back(g.beams[static_cast<size_t>(parent)]);
          next.back().push_back(token);
          next_scores.push_back(score);
          current.push_back(token);
        }
        if (static_cast<int64_t>(next.size()) == nb) break;
      }
      if (static_cast<int64_t>(next.size()) < nb) throw std::runtime_error("reference: too few continuations");
      g.done = is_done(g, flat[0].first, cur_len);
      g.beams = std::move(next);
      g.beam_scores = std::move(next_scores);
    }
    ++cur_len;
    if (std::all_of(groups.begin(), groups.end(), [](const Group& g) { return g.done; }) || cur_len >= o.max_length) {
      break;
    }
  }
  std::vector<Hyp> sorted;  // every group's hypotheses, group after group
  for (auto& g : groups) {
    if (!g.done) {
      for (int64_t b = 0; b < nb; ++b)
        add(g, g.beams[static_cast<size_t>(b)], g.beam_scores[static_cast<size_t>(b)], -1);
    }
    sorted.insert(sorted.end(), g.hyps.begin(), g.hyps.end());
  }
  std::stable_sort(sorted.begin(), sorted.end(), [](const Hyp& a, const Hyp& b) { return a.score < b.score; });
  std::vector<HfHypothesis> out;
  for (int64_t j = 0; j < o.num_return_sequences; ++j) {
    const Hyp h = sorted.back();
    sorted.pop_back();
    History tokens(h.ids.begin() + 1, h.ids.end());
    if (h.eos >= 0) tokens.push_back(h.eos);
    out.push_back({tokens, h.score});
  }
  return out;
}

std::string ids_text(const std::vector<int64_t>& ids) {
  std::string out;
  for (const int64_t id : ids) out += (out.empty() ? "" : ",") + std::to_string(id);
  return "[" + out + "]";
}

std::string describe(const GenerationOptions& o) {
  return "eos " + ids_text(eos_token_ids(o)) + " beams " + std::to_string(o.num_beams) + " max " +
         std::to_string(o.max_new_tokens) + " min " + std::to_string(o.min_new_tokens) + " lp " +
         std::to_string(o.length_penalty) + " es " + std::to_string(static_cast<int>(o.early_stopping)) + " ngram " +
         std::to_string(o.no_repeat_ngram_size) + " rep " + std::to_string(o.repetition_penalty) + " fbos " +
         std::to_string(o.forced_bos_token_id.value_or(-1)) + " feos " + ids_text(forced_eos_token_ids(o)) + " nrs " +
         std::to_string(o.num_return_sequences) +
         (o.num_beam_groups > 1 ? " groups " + std::to_string(o.num_beam_groups) + " diversity " +
                                      std::to_string(o.diversity_penalty) + " pad " + std::to_string(o.pad_token_id)
                                : "");
}

// The transcription's options for a request's (decoder start 0).
HfOptions hf_options(const GenerationOptions& o) {
  HfOptions h;
  h.max_length = o.max_new_tokens + 1;
  h.min_length = o.min_new_tokens + 1;
  h.num_beams = o.num_beams;
  h.num_beam_groups = o.num_beam_groups;
  h.diversity_penalty = o.diversity_penalty;
  h.pad = o.pad_token_id;
  h.length_penalty = o.length_penalty;
  h.early_stopping = o.early_stopping;
  h.num_return_sequences = o.num_return_sequences;
  h.no_repeat_ngram_size = o.no_repeat_ngram_size;
  h.repetition_penalty = o.repetition_penalty;
  h.forced_bos = o.forced_bos_token_id.value_or(-1);
  h.forced_eos = forced_eos_token_ids(o);
  h.eos = eos_token_ids(o);
  return h;
}

// Drives make_searcher(o) over `script` and expects the transcription's hypotheses: the same tokens, scores
// within 1e-4 relative. Returns the run, or nothing where the draw is not compared: HF raises too (fewer
// continuations than beams), or a hypothesis scores -inf (ties among those are ordered by chance); or the
// searcher threw, which fails the test.
std::optional<testing::Run> compare_with_hf(const testing::Script& script, const GenerationOptions& o) {
  const HfOptions h = hf_options(o);
  std::vector<HfHypothesis> want;
  try {
    want = o.num_beams == 1 ? std::vector<HfHypothesis>{hf_greedy(script, h)} : hf_beam(script, h);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (!std::all_of(want.begin(), want.end(), [](const HfHypothesis& w) { return std::isfinite(w.score); })) {
    return std::nullopt;
  }
  testing::Run run;
  try {
    auto searcher = make_searcher(o);
    run = testing::drive(*searcher, script, 0);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "searcher threw: " << e.what();
    return std::nullopt;
  }
  EXPECT_EQ(run.results.size(), want.size());
  for (size_t i = 0; i < std::min(want.size(), run.results.size()); ++i) {
    EXPECT_EQ(run.results[i].tokens, want[i].tokens) << "hypothesis " << i;
    EXPECT_NEAR(run.results[i].score, want[i].score, 1e-4 * (1 + std::abs(want[i].score))) << "hypothesis " << i;
  }
  return run;
}

TEST(HuggingFaceReferenceTest, RandomOptionsMatchTheTranscription) {
  std::mt19937_64 rng(12345);
  const auto pick = [&rng](int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
  };
  const double penalties[] = {-2.0, -1.0, -0.5, 0.0, 0.6, 1.0, 2.0};
  const double repetition[] = {1.0, 1.0, 0.5, 0.8, 1.3, 2.0};
  int compared = 0, compared_with_lists = 0;
  const int trials = 4000;
  for (int trial = 0; trial < trials; ++trial) {
    const int64_t vocab = pick(5, 12);
    const float eos_bias = static_cast<float>(pick(-20, 30)) / 10.0f;
    const auto script = testing::random_script(vocab, static_cast<uint64_t>(trial) + 1, 1, eos_bias);
    GenerationOptions o;
    o.decoder_start_token_id = 0;
    o.eos_token_id = 1;
    // A third of the trials list several EOS ids (the biased id 1 and one or two others, in any order),
    // drawn from a generator of their own: the other options are the draws they were before lists.
    std::mt19937_64 list_rng(static_cast<uint64_t>(trial) + 99);
    const auto pick_listed = [&list_rng](int64_t lo, int64_t hi) {
      return lo + static_cast<int64_t>(list_rng() % static_cast<uint64_t>(hi - lo + 1));
    };
    if (pick_listed(0, 2) == 0) {
      std::vector<int64_t> eos{1};
      for (int64_t n = pick_listed(1, 2); n > 0; --n) eos.push_back(pick_listed(2, vocab - 1));
      std::shuffle(eos.begin(), eos.end(), list_rng);
      o.eos_token_id = eos.front();
      o.extra_eos_token_ids.assign(eos.begin() + 1, eos.end());
    }
    o.num_beams = pick(1, 4);
    o.max_new_tokens = pick(1, 9);
    o.min_new_tokens = pick(0, 3) == 0 ? pick(0, o.max_new_tokens) : 0;
    o.length_penalty = penalties[pick(0, 6)];
    o.early_stopping = static_cast<EarlyStopping>(pick(0, 2));
    o.num_return_sequences = pick(1, o.num_beams);
    o.no_repeat_ngram_size = pick(0, 2) == 0 ? pick(1, 4) : 0;
    o.repetition_penalty = repetition[pick(0, 5)];
    if (pick(0, 4) == 0) o.forced_bos_token_id = pick(2, vocab - 1);
    if (pick(0, 4) == 0) {
      o.forced_eos_token_id = 1;
      // A list: the others score 0 too (an id that is no EOS one is forced and the beam runs on to the end).
      if (pick_listed(0, 1) == 0) {
        o.extra_forced_eos_token_ids.push_back(pick_listed(2, vocab - 1));
        if (pick_listed(0, 1) == 0) std::swap(*o.forced_eos_token_id, o.extra_forced_eos_token_ids.front());
      }
    }
    SCOPED_TRACE("trial " + std::to_string(trial) + ": vocab " + std::to_string(vocab) + " " + describe(o));
    const auto run = compare_with_hf(script, o);
    if (::testing::Test::HasFailure()) break;
    if (!run) continue;
    ++compared;
    if (eos_token_ids(o).size() > 1 || forced_eos_token_ids(o).size() > 1) ++compared_with_lists;
  }
  if (!::testing::Test::HasFailure()) {
    EXPECT_GT(compared, trials * 2 / 3);  // most draws are comparable
    EXPECT_GT(compared_with_lists, trials / 4);
  }
}

// Diverse beam search: random group counts and penalties (0 included: every group then searches alike), a
// pad token the later groups' penalty counts once a group is done, and the processors after the penalty.
TEST(HuggingFaceReferenceTest, GroupBeamSearchMatchesTheTranscription) {
  std::mt19937_64 rng(4242);
  const auto pick = [&rng](int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
  };
  const double penalties[] = {-1.0, 0.0, 0.6, 1.0, 2.0};
  const double diversity[] = {0.0, 0.25, 1.0, 3.0, 50.0};
  const double repetition[] = {1.0, 1.0, 0.5, 1.3, 2.0};
  const std::pair<int64_t, int64_t> shapes[] = {{2, 2}, {4, 2}, {4, 4}, {6, 3}, {6, 2}, {8, 4}};  // beams, groups
  int compared = 0, with_a_group_done_early = 0;
  const int trials = 1500;
  for (int trial = 0; trial < trials; ++trial) {
    const int64_t vocab = pick(6, 16);
    const float eos_bias = static_cast<float>(pick(-10, 30)) / 10.0f;
    const auto script = testing::random_script(vocab, static_cast<uint64_t>(trial) + 7001, 1, eos_bias);
    GenerationOptions o;
    o.decoder_start_token_id = 0;
    o.eos_token_id = 1;
    std::tie(o.num_beams, o.num_beam_groups) = shapes[pick(0, 5)];
    o.diversity_penalty = diversity[pick(0, 4)];
    o.pad_token_id = pick(0, 2) == 0 ? pick(2, vocab - 1) : 0;
    o.max_new_tokens = pick(1, 8);
    o.min_new_tokens = pick(0, 3) == 0 ? pick(0, o.max_new_tokens) : 0;
    o.length_penalty = penalties[pick(0, 4)];
    o.early_stopping = static_cast<EarlyStopping>(pick(0, 2));
    o.num_return_sequences = pick(1, o.num_beams);
    o.no_repeat_ngram_size = pick(0, 2) == 0 ? pick(1, 3) : 0;
    o.repetition_penalty = repetition[pick(0, 4)];
    if (pick(0, 4) == 0) o.forced_bos_token_id = pick(2, vocab - 1);
    if (pick(0, 4) == 0) o.forced_eos_token_id = 1;
    SCOPED_TRACE("trial " + std::to_string(trial) + ": vocab " + std::to_string(vocab) + " " + describe(o));
    const auto run = compare_with_hf(script, o);
    if (::testing::Test::HasFailure()) break;
    if (!run) continue;
    ++compared;
    // A group that is done leaves the batch: fewer rows at some step before the last.
    for (size_t step = 0; step + 1 < run->parent_rows.size(); ++step) {
      if (static_cast<int64_t>(run->parent_rows[step].size()) < o.num_beams) {
        ++with_a_group_done_early;
        break;
      }
    }
  }
  if (!::testing::Test::HasFailure()) {
    EXPECT_GT(compared, trials * 2 / 3);
    EXPECT_GT(with_a_group_done_early, trials / 10);
  }
}

// HF's sampling warpers in its order (TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper of
// transformers 4.30-4.45) over one row, in double precision: the scores that sampling draws from.
std::vector<double> hf_warp(std::vector<double> s, double temperature, int64_t top_k, double top_p, int64_t min_keep) {
  const auto n = static_cast<int64_t>(s.size());
  if (temperature != 1.0) {
    for (auto& v : s) v /= temperature;
  }
  if (top_k != 0) {
    const int64_t k = std::min(std::max(top_k, min_keep), n);
    std::vector<double> sorted = s;
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    const double kth = sorted[static_cast<size_t>(k - 1)];
    for (auto& v : s) {
      if (v < kth) v = -kInf;
    }
  }
  if (top_p < 1.0) {
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&s](int64_t a, int64_t b) { return s[a] < s[b]; });
    double most = -kInf;
    for (const double v : s) most = std::max(most, v);
    double total = 0.0;
    for (const double v : s) total += std::exp(v - most);
    double cumulative = 0.0;
    std::vector<bool> remove(static_cast<size_t>(n), false);
    for (int64_t i = 0; i < n; ++i) {
      cumulative += std::exp(s[static_cast<size_t>(order[static_cast<size_t>(i)])] - most) / total;
      remove[static_cast<size_t>(order[static_cast<size_t>(i)])] = cumulative <= 1.0 - top_p && i < n - min_keep;
    }
    for (int64_t i = 0; i < n; ++i) {
      if (remove[static_cast<size_t>(i)]) s[static_cast<size_t>(i)] = -kInf;
    }
  }
  return s;
}

TEST(HuggingFaceReferenceTest, WarpersKeepWhatTheTranscriptionKeeps) {
  std::mt19937_64 rng(777);
  const double temperatures[] = {1.0, 0.3, 0.7, 1.5, 4.0};
  const double top_ps[] = {1.0, 0.95, 0.9, 0.5, 0.2, 0.05, 1e-3};
  const int64_t top_ks[] = {0, 1, 2, 3, 5, 20, 50, 1000};
  for (int trial = 0; trial < 3000; ++trial) {
    const int64_t vocab = 2 + static_cast<int64_t>(rng() % 60);
    std::vector<float> logits(static_cast<size_t>(vocab));
    const double spread = 1.0 + static_cast<double>(rng() % 8);
    for (auto& v : logits) v = static_cast<float>((static_cast<double>(rng() >> 11) * 0x1.0p-53 - 0.5) * spread);
    if (rng() % 3 == 0) logits[rng() % logits.size()] = -std::numeric_limits<float>::infinity();
    GenerationOptions o;
    o.do_sample = true;
    o.temperature = temperatures[rng() % 5];
    o.top_k = top_ks[rng() % 8];
    o.top_p = top_ps[rng() % 7];
    const int64_t min_keep = rng() % 4 == 0 ? 1 + static_cast<int64_t>(rng() % 4) : 1;
    SCOPED_TRACE("trial " + std::to_string(trial) + " vocab " + std::to_string(vocab) + " T " +
                 std::to_string(o.temperature) + " top_k " + std::to_string(o.top_k) + " top_p " +
                 std::to_string(o.top_p) + " min_keep " + std::to_string(min_keep));
    auto scores = torch::tensor(logits).view({1, vocab}).clone();
    warp_logits(o, scores, min_keep);
    const auto want =
        hf_warp(std::vector<double>(logits.begin(), logits.end()), o.temperature, o.top_k, o.top_p, min_keep);
    for (int64_t t = 0; t < vocab; ++t) {
      const double got = scores[0][t].item<double>();
      const double w = want[static_cast<size_t>(t)];
      if (std::isinf(w) || std::isinf(got)) {
        EXPECT_EQ(got, w) << "token " << t;
      } else {
        EXPECT_NEAR(got, w, 1e-5 * (1 + std::abs(w))) << "token " << t;
      }
    }
    if (::testing::Test::HasFailure()) break;
  }
}

}  // namespace
}  // namespace srformer
