#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "model/generation/multi_sample_searcher.h"
#include "model/generation/single_row_searcher.h"
#include "model/generation/weighted_draw.h"
#include "scripted_model.h"

namespace srformer {
namespace {

using testing::drive;
using testing::log_probs;

constexpr int64_t kEos = 4;  // never drawn in the frequency tests: its probability is 0

GenerationOptions sampling_options(uint64_t seed) {
  GenerationOptions options;
  options.do_sample = true;
  options.seed = seed;
  options.decoder_start_token_id = 0;
  options.eos_token_id = kEos;
  options.max_new_tokens = kMaxNewTokensLimit;
  return options;
}

// The same distribution at every step, whatever the history.
testing::Script fixed(const std::vector<double>& p) {
  return [p](const std::vector<int64_t>&) { return log_probs(p); };
}

// Token frequencies over `searchers` runs of max_new_tokens draws each, with seeds 1..searchers.
std::map<int64_t, double> frequencies(GenerationOptions options, const testing::Script& script, int searchers) {
  std::map<int64_t, double> counts;
  double total = 0;
  for (int s = 1; s <= searchers; ++s) {
    options.seed = static_cast<uint64_t>(s);
    SamplingSearcher searcher(options);
    const auto run = drive(searcher, script, 0);
    for (const int64_t t : run.results[0].tokens) {
      counts[t] += 1;
      total += 1;
    }
  }
  for (auto& [token, count] : counts) count /= total;
  return counts;
}

// Each frequency within 5 standard deviations of its expected probability (n = 16384 draws).
void expect_frequencies(const std::map<int64_t, double>& got, const std::map<int64_t, double>& expected) {
  for (const auto& [token, f] : got) {
    ASSERT_TRUE(expected.count(token)) << "token " << token << " is outside the allowed set";
  }
  for (const auto& [token, p] : expected) {
    const double bound = 5 * std::sqrt(p * (1 - p) / 16384.0);
    const double f = got.count(token) ? got.at(token) : 0.0;
    EXPECT_NEAR(f, p, bound) << "token " << token;
  }
}

const std::vector<double> kDistribution{0.4, 0.3, 0.2, 0.1, 0.0};

TEST(SamplingTest, SameSeedSameTokens) {
  const auto script = testing::random_script(50, 7, kEos, -3.0f);
  auto options = sampling_options(123);
  options.max_new_tokens = 64;
  SamplingSearcher a(options), b(options);
  const auto ra = drive(a, script, 0), rb = drive(b, script, 0);
  EXPECT_EQ(ra.results[0].tokens, rb.results[0].tokens);
  EXPECT_EQ(ra.results[0].score, rb.results[0].score);
  EXPECT_GE(ra.results[0].tokens.size(), 5u);
}

TEST(SamplingTest, DifferentSeedsDiffer) {
  auto options = sampling_options(1);
  options.max_new_tokens = 32;
  const auto script = fixed({0.25, 0.25, 0.25, 0.25, 0.0});
  SamplingSearcher a(options);
  options.seed = 2;
  SamplingSearcher b(options);
  // Identical 32-token sequences from a uniform 4-way draw would have probability 4^-32.
  EXPECT_NE(drive(a, script, 0).results[0].tokens, drive(b, script, 0).results[0].tokens);
}

TEST(SamplingTest, IndependentOfOtherRequestsInterleaved) {
  // Advancing another searcher between steps (another request in the batch) changes nothing.
  auto options = sampling_options(99);
  options.max_new_tokens = 40;
  const auto script = fixed({0.25, 0.25, 0.25, 0.25, 0.0});
  SamplingSearcher alone(options);
  const auto expected = drive(alone, script, 0).results[0].tokens;
  SamplingSearcher mine(options), other(sampling_options(5));
  std::vector<int64_t> got;
  const auto logits = torch::tensor(log_probs({0.25, 0.25, 0.25, 0.25, 0.0})).view({1, -1});
  while (!mine.done()) {
    other.advance(logits);
    got.push_back(mine.advance(logits).next_tokens.item<int64_t>());
  }
  EXPECT_EQ(got, expected);
}

// Sampling at temperature 1.7 with `keep_one` applied (a warper that keeps the likeliest token alone) draws
// what greedy search picks, over ten random scripts and seeds.
void expect_sampling_equals_greedy(const std::function<void(GenerationOptions&)>& keep_one) {
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    const auto script = testing::random_script(20, seed, 1, 0.5f);
    auto options = sampling_options(seed);
    options.eos_token_id = 1;
    options.max_new_tokens = 20;
    options.temperature = 1.7;
    keep_one(options);
    SamplingSearcher sampler(options);
    options.do_sample = false;
    GreedySearcher greedy(options);
    EXPECT_EQ(drive(sampler, script, 0).results[0].tokens, drive(greedy, script, 0).results[0].tokens)
        << "seed " << seed;
  }
}

TEST(SamplingTest, TopKOneEqualsGreedy) {
  expect_sampling_equals_greedy([](GenerationOptions& o) { o.top_k = 1; });
}

// Hugging Face's top_p 0 keeps the likeliest token alone (its cut removes every token whose ascending cumulative
// probability is at most 1), so sampling draws what greedy search picks. It was refused as outside (0, 1].
TEST(SamplingTest, TopPZeroEqualsGreedyAsInHuggingFace) {
  expect_sampling_equals_greedy([](GenerationOptions& o) { o.top_p = 0.0; });
}

TEST(SamplingTest, FrequenciesFollowTheDistribution) {
  expect_frequencies(frequencies(sampling_options(0), fixed(kDistribution), 4),
                     {{0, 0.4}, {1, 0.3}, {2, 0.2}, {3, 0.1}});
}

TEST(SamplingTest, TopKRestrictsAndRenormalises) {
  auto options = sampling_options(0);
  options.top_k = 2;
  expect_frequencies(frequencies(options, fixed(kDistribution), 4), {{0, 0.4 / 0.7}, {1, 0.3 / 0.7}});
}

TEST(SamplingTest, TopPRestrictsAndRenormalises) {
  auto options = sampling_options(0);
  options.top_p = 0.8;  // cumulative 0.4, 0.7, 0.9: tokens 0, 1, 2 (the one that crosses 0.8 included)
  expect_frequencies(frequencies(options, fixed(kDistribution), 4), {{0, 0.4 / 0.9}, {1, 0.3 / 0.9}, {2, 0.2 / 0.9}});
  options.top_p = 0.35;  // the most probable token alone
  expect_frequencies(frequencies(options, fixed(kDistribution), 1), {{0, 1.0}});
}

TEST(SamplingTest, MinPRestrictsAndRenormalises) {
  auto options = sampling_options(0);
  options.min_p = 0.6;  // below 0.24: tokens 2 and 3 go
  expect_frequencies(frequencies(options, fixed(kDistribution), 4), {{0, 0.4 / 0.7}, {1, 0.3 / 0.7}});
}

// Entropy 1.2799; |-log p - H| = .3636, .0759, .3296, 1.0227: order 1, 2, 0, 3, cumulative .3, .5, .9, 1.
TEST(SamplingTest, TypicalPCanLeaveTheLikeliestTokenOut) {
  auto options = sampling_options(0);
  options.typical_p = 0.45;  // one below .45: tokens 1 and 2
  expect_frequencies(frequencies(options, fixed(kDistribution), 4), {{1, 0.3 / 0.5}, {2, 0.2 / 0.5}});
  options.typical_p = 1.0;  // off
  expect_frequencies(frequencies(options, fixed(kDistribution), 4), {{0, 0.4}, {1, 0.3}, {2, 0.2}, {3, 0.1}});
}

TEST(SamplingTest, EpsilonAndEtaCutoffsRestrict) {
  auto options = sampling_options(0);
  options.epsilon_cutoff = 0.15;  // 0.1 goes
  expect_frequencies(frequencies(options, fixed(kDistribution), 4), {{0, 0.4 / 0.9}, {1, 0.3 / 0.9}, {2, 0.2 / 0.9}});
  options.epsilon_cutoff = 0.0;
  options.eta_cutoff = 0.5;  // min(.5, .7071 * exp(-1.2799) = .1966): 0.1 goes
  expect_frequencies(frequencies(options, fixed(kDistribution), 4), {{0, 0.4 / 0.9}, {1, 0.3 / 0.9}, {2, 0.2 / 0.9}});
}

TEST(SamplingTest, TemperatureSharpens) {
  auto options = sampling_options(0);
  options.temperature = 0.5;  // p^2 renormalised: 0.36 / 0.52, 0.16 / 0.52
  expect_frequencies(frequencies(options, fixed({0.6, 0.4, 0.0, 0.0, 0.0}), 4), {{0, 0.36 / 0.52}, {1, 0.16 / 0.52}});
}

TEST(SamplingTest, StopsOnEosAndScoresTheDrawnTokens) {
  auto options = sampling_options(3);
  options.max_new_tokens = 50;
  SamplingSearcher searcher(options);
  // Only token 2 or EOS; EOS always ends the request.
  const auto run = drive(searcher, fixed({0.0, 0.0, 0.5, 0.0, 0.5}), 0);
  const auto& tokens = run.results[0].tokens;
  ASSERT_FALSE(tokens.empty());
  EXPECT_EQ(tokens.back(), kEos);
  EXPECT_EQ(run.results[0].finish_reason, FinishReason::kEos);
  for (size_t i = 0; i + 1 < tokens.size(); ++i) EXPECT_EQ(tokens[i], 2);
  EXPECT_NEAR(run.results[0].score, static_cast<double>(tokens.size()) * std::log(0.5), 1e-4);
  ASSERT_EQ(run.results[0].token_logprobs.size(), tokens.size());
  for (const float p : run.results[0].token_logprobs) EXPECT_NEAR(p, std::log(0.5), 1e-6);
  EXPECT_EQ(run.emitted_logprobs, run.results[0].token_logprobs);
}

// Sampling ends a draw at any of a checkpoint's EOS ids, as Hugging Face's sample() does; several samples
// each at their own. Only the first id ended a draw.
TEST(SamplingTest, AnyOfSeveralEosIdsEndsADraw) {
  auto options = sampling_options(7);
  options.max_new_tokens = 60;
  options.extra_eos_token_ids = {3};
  SamplingSearcher searcher(options);
  // Token 2 or the extra EOS id 3 (kEos itself is never drawn).
  const auto run = drive(searcher, fixed({0.0, 0.0, 0.8, 0.2, 0.0}), 0);
  const auto& tokens = run.results[0].tokens;
  ASSERT_LT(tokens.size(), 60u) << "0.8^59: the draw should have met id 3";
  EXPECT_EQ(tokens.back(), 3);
  EXPECT_EQ(run.results[0].finish_reason, FinishReason::kEos);
  for (size_t i = 0; i + 1 < tokens.size(); ++i) EXPECT_EQ(tokens[i], 2);

  options.num_return_sequences = 4;
  MultiSampleSearcher samples(options);
  const auto several = drive(samples, fixed({0.0, 0.0, 0.8, 0.2, 0.0}), 0);
  ASSERT_EQ(several.results.size(), 4u);
  for (const auto& r : several.results) {
    ASSERT_FALSE(r.tokens.empty());
    EXPECT_EQ(r.tokens.back(), 3);
    EXPECT_EQ(r.finish_reason, FinishReason::kEos);
  }
}

// Ids past the tokenizer's vocabulary (T5's padding rows of the embedding) are left out before the
// warpers, so that top-k counts and the temperature sharpens the tokenizer's ids alone, and each token's
// log-probability is under the distribution it was drawn from: the warped one over those ids, summing to
// the score (docs/API.md, "Responses").
TEST(SamplingTest, OnlyTheTokenizersIdsAreDrawnAndScoredUnderTheWarpedDistribution) {
  // Token 5, the likeliest, is past the tokenizer's 5 ids; kEos (4) has probability 0.
  const std::vector<double> p{0.3, 0.2, 0.1, 0.0, 0.0, 0.4};
  struct Case {
    double temperature;
    int64_t top_k;
    std::map<int64_t, double> expected;
  };
  for (const Case& c :
       {Case{1.0, 0, {{0, 0.5}, {1, 0.2 / 0.6}, {2, 0.1 / 0.6}}},
        Case{0.5, 0, {{0, 0.09 / 0.14}, {1, 0.04 / 0.14}, {2, 0.01 / 0.14}}}, Case{1.0, 2, {{0, 0.6}, {1, 0.4}}}}) {
    SCOPED_TRACE("temperature " + std::to_string(c.temperature) + ", top_k " + std::to_string(c.top_k));
    auto options = sampling_options(11);
    options.max_new_tokens = 64;
    options.vocab_limit = 5;
    options.temperature = c.temperature;
    options.top_k = c.top_k;
    SamplingSearcher searcher(options);
    const auto run = drive(searcher, fixed(p), 0);
    const auto& r = run.results[0];
    ASSERT_EQ(r.token_logprobs.size(), r.tokens.size());
    double sum = 0;
    for (size_t i = 0; i < r.tokens.size(); ++i) {
      ASSERT_TRUE(c.expected.count(r.tokens[i])) << "token " << r.tokens[i] << " at step " << i;
      EXPECT_NEAR(r.token_logprobs[i], std::log(c.expected.at(r.tokens[i])), 1e-5) << "step " << i;
      sum += r.token_logprobs[i];
    }
    EXPECT_NEAR(sum, r.score, 1e-4);
    expect_frequencies(frequencies(options, fixed(p), 256), c.expected);
  }
}

TEST(SamplingTest, EachTokenCarriesItsLogProbabilityAfterTheWarpers) {
  auto options = sampling_options(5);
  options.max_new_tokens = 40;
  options.top_k = 2;  // tokens 0 and 1 of kDistribution, renormalised: 4/7 and 3/7
  SamplingSearcher searcher(options);
  const auto run = drive(searcher, fixed(kDistribution), 0);
  const auto& r = run.results[0];
  ASSERT_EQ(r.token_logprobs.size(), r.tokens.size());
  double sum = 0;
  for (size_t i = 0; i < r.tokens.size(); ++i) {
    ASSERT_LT(r.tokens[i], 2);
    EXPECT_NEAR(r.token_logprobs[i], std::log(r.tokens[i] == 0 ? 0.4 / 0.7 : 0.3 / 0.7), 1e-6) << "token " << i;
    sum += r.token_logprobs[i];
  }
  EXPECT_NEAR(sum, r.score, 1e-4);
}

TEST(SamplingTest, MinNewTokensAndForcedTokensApplyBeforeSampling) {
  auto options = sampling_options(11);
  options.max_new_tokens = 6;
  options.min_new_tokens = 3;
  options.forced_bos_token_id = 3;
  SamplingSearcher searcher(options);
  const auto run = drive(searcher, fixed({0.0, 0.0, 0.1, 0.0, 0.9}), 0);
  // Token 3 forced first; EOS banned for tokens 2 and 3, so those are 2; then EOS is very likely but
  // may not come: check the prefix and that the run ended by the rules.
  const auto& tokens = run.results[0].tokens;
  ASSERT_GE(tokens.size(), 4u);
  EXPECT_EQ((std::vector<int64_t>(tokens.begin(), tokens.begin() + 3)), (std::vector<int64_t>{3, 2, 2}));
  EXPECT_TRUE(tokens.back() == kEos || tokens.size() == 6u);
}

// choose()'s former way, which its faster ones must match bit for bit: `scores` (one row, processed) warped,
// its softmax over the whole row, and draw_weighted over every token. The token drawn (-1: none) and its
// log-probability.
std::pair<int64_t, double> draw_over_the_whole_row(const GenerationOptions& options, torch::Tensor& scores,
                                                   std::mt19937_64& rng) {
  warp_logits(options, scores);
  const auto probs = scores[0].softmax(-1);
  const float* p = probs.data_ptr<float>();
  const auto drawn = draw_weighted(rng, scores.size(1), [p](int64_t i) { return static_cast<double>(p[i]); });
  if (drawn.index < 0) return {-1, 0.0};
  return {drawn.index, std::log(static_cast<double>(p[drawn.index]) / drawn.total)};
}

TEST(SamplingTest, DrawsOverTheTokensWithMassAsOverTheWholeRow) {
  // choose() draws over the tokens the warpers left with mass only; each step must take the token and
  // log-probability that draw_weighted over the whole row of probabilities gives (its former way).
  torch::manual_seed(3);
  const int64_t vocab = 3000;
  for (const auto& [top_k, top_p, temperature] :
       std::vector<std::tuple<int64_t, double, double>>{{0, 1.0, 1.0}, {40, 1.0, 1.0}, {0, 0.9, 0.7}, {7, 0.5, 1.3}}) {
    auto options = sampling_options(11);
    options.top_k = top_k;
    options.top_p = top_p;
    options.temperature = temperature;
    options.vocab_limit = vocab - 28;  // ids past the tokenizer's are never drawn
    SamplingSearcher searcher(options);
    std::mt19937_64 rng(options.seed);
    TokenHistory history{options.decoder_start_token_id};
    for (int step = 0; step < 40; ++step) {
      const auto logits = torch::randn({1, vocab}) * 3.0;
      // The former choose(), over the whole row.
      auto scores = logits.clone();
      process_logits(options, SequenceBias(options.sequence_bias), {history}, scores, VocabLimit::kKeep);
      scores.narrow(1, options.vocab_limit, vocab - options.vocab_limit).fill_(-std::numeric_limits<float>::infinity());
      const auto [index, logprob] = draw_over_the_whole_row(options, scores, rng);
      ASSERT_GE(index, 0);

      const auto got = searcher.advance(logits);
      ASSERT_EQ(got.emitted.size(), 1u);
      ASSERT_EQ(got.emitted[0], index) << "top_k " << top_k << " top_p " << top_p << " step " << step;
      EXPECT_EQ(got.emitted_logprobs[0], static_cast<float>(logprob));
      history.push_back(index);
      if (got.done) break;
    }
    const auto results = searcher.results();
    double score = 0;
    for (const float lp : results[0].token_logprobs) score += lp;
    EXPECT_NEAR(results[0].score, score, 1e-3);
  }
}

TEST(SamplingTest, DrawsFromTheBlocksHoldingTheWarpedTokensAsFromTheWholeRow) {
  // Where top-k or top-p leave few tokens, choose() takes the softmax of the row's 64-score blocks holding them
  // only; it must draw the token, and score it, as the softmax of the whole row does: vocabularies that are and
  // are not multiples of 64 (the last block partial), the kept tokens anywhere, in the last block alone, in
  // one block, and many of them (the whole row's softmax then).
  torch::manual_seed(5);
  int compared = 0;
  for (const int64_t vocab : {32128, 50265, 4100, 1000, 129}) {
    for (const auto& [top_k, top_p, temperature] : std::vector<std::tuple<int64_t, double, double>>{{50, 1.0, 1.0},
                                                                                                    {1, 1.0, 1.0},
                                                                                                    {5, 1.0, 0.5},
                                                                                                    {0, 0.9, 1.0},
                                                                                                    {0, 0.5, 0.7},
                                                                                                    {20, 0.95, 1.3},
                                                                                                    {400, 1.0, 2.0}}) {
      for (const int layout : {0, 1, 2}) {  // spread; the last block's tokens only; one block's only
        auto options = sampling_options(static_cast<uint64_t>(vocab + top_k + layout));
        options.top_k = top_k;
        options.top_p = top_p;
        options.temperature = temperature;
        options.eos_token_id = vocab - 1;
        SamplingSearcher searcher(options);
        std::mt19937_64 rng(options.seed);
        for (int step = 0; step < 12; ++step) {
          auto logits = torch::randn({1, vocab}) * 4.0;
          if (layout == 1) logits.narrow(1, 0, vocab - std::min<int64_t>(vocab, 30)).sub_(100.0);
          if (layout == 2) logits.narrow(1, vocab / 2, std::min<int64_t>(vocab - vocab / 2, 20)).add_(100.0);
          // The former choose(), over the whole row.
          auto scores = logits.clone();
          const auto [index, logprob] = draw_over_the_whole_row(options, scores, rng);
          ASSERT_GE(index, 0);
          const auto got = searcher.advance(logits);
          ASSERT_EQ(got.emitted.size(), 1u);
          ASSERT_EQ(got.emitted[0], index) << "vocab " << vocab << " top_k " << top_k << " top_p " << top_p
                                           << " layout " << layout << " step " << step;
          ASSERT_EQ(got.emitted_logprobs[0], static_cast<float>(logprob));
          ++compared;
          if (got.done) break;
        }
      }
    }
  }
  EXPECT_GT(compared, 1000);
}

TEST(WeightedDrawTest, DrawsWithoutReplacementAsRepeatedDrawsWithTheDrawnZeroed) {
  // draw_without_replacement keeps draw_weighted's running sums between draws; it must draw what
  // draw_weighted draws over the weights with each drawn one set to 0 (beam sampling's former way), with
  // weights of every magnitude (their double sums round), zeros among them, and more draws than weights.
  std::mt19937_64 make(5);
  for (int trial = 0; trial < 200; ++trial) {
    const auto n = static_cast<int64_t>(1 + make() % 3000);
    std::vector<double> weights(static_cast<size_t>(n));
    for (auto& w : weights) {
      const auto kind = make() % 4;
      const double u = static_cast<double>(make() >> 11) * 0x1.0p-53;
      w = kind == 0 ? 0.0 : static_cast<float>(std::exp(-40.0 * u) * (kind == 1 ? 1e-9 : 1.0));
    }
    const int64_t count = 1 + static_cast<int64_t>(make() % 12);
    std::mt19937_64 rng_old(trial), rng_new(trial);
    auto left = weights;
    std::vector<int64_t> expected;
    for (int64_t d = 0; d < count && d < n; ++d) {
      const auto pick = draw_weighted(rng_old, n, [&left](int64_t i) { return left[static_cast<size_t>(i)]; });
      if (pick.index < 0) break;
      expected.push_back(pick.index);
      left[static_cast<size_t>(pick.index)] = 0.0;
    }
    auto ours = weights;
    EXPECT_EQ(draw_without_replacement(rng_new, ours, count), expected) << "trial " << trial;
    EXPECT_EQ(ours, left);
    EXPECT_EQ(rng_old(), rng_new());  // as many random numbers taken
  }
}

// Several samples per request: each row is the draw a one-sample request with that row's seed makes,
// sample 0's seed is the request's, and the rows end on their own.
TEST(MultiSampleTest, EachSampleIsTheOneSampleDrawWithItsSeed) {
  auto options = sampling_options(2024);
  options.max_new_tokens = 24;
  options.num_return_sequences = 5;
  const auto script = testing::random_script(12, 3, kEos, 0.5f);  // EOS likely enough to end rows early
  MultiSampleSearcher several(options);
  ASSERT_EQ(several.num_rows(), 5);
  const auto run = drive(several, script, 0);
  ASSERT_EQ(run.results.size(), 5u);
  EXPECT_EQ(MultiSampleSearcher::sample_seed(2024, 0), 2024u);
  std::set<std::vector<int64_t>> distinct;
  std::set<size_t> lengths;
  int64_t longest = 0;
  for (int64_t i = 0; i < 5; ++i) {
    auto one = options;
    one.num_return_sequences = 1;
    one.seed = MultiSampleSearcher::sample_seed(options.seed, i);
    SamplingSearcher alone(one);
    const auto expected = drive(alone, script, 0).results.at(0);
    const auto& got = run.results[static_cast<size_t>(i)];
    EXPECT_EQ(got.tokens, expected.tokens) << "sample " << i;
    EXPECT_EQ(got.token_logprobs, expected.token_logprobs) << "sample " << i;
    EXPECT_EQ(got.score, expected.score) << "sample " << i;
    EXPECT_EQ(got.finish_reason, expected.finish_reason) << "sample " << i;
    distinct.insert(got.tokens);
    lengths.insert(got.tokens.size());
    longest = std::max(longest, static_cast<int64_t>(got.tokens.size()));
  }
  EXPECT_GE(distinct.size(), 4u) << "the samples draw with seeds of their own";
  ASSERT_GE(lengths.size(), 2u) << "the script should end some samples before others";
  EXPECT_EQ(run.steps, longest);
  // A neighbouring seed's first sample is not this seed's second.
  EXPECT_NE(MultiSampleSearcher::sample_seed(2024, 1), 2025u);
  EXPECT_NE(MultiSampleSearcher::sample_seed(2024, 1), MultiSampleSearcher::sample_seed(2025, 1));
}

// A sample that ends leaves the batch at once: the others keep their order, each row its own sample.
TEST(MultiSampleTest, EndedSamplesLeaveTheirRowsAndSampleZeroIsStreamed) {
  auto options = sampling_options(8);
  options.max_new_tokens = 30;
  options.num_return_sequences = 3;
  const auto script = fixed({0.3, 0.3, 0.2, 0.0, 0.2});  // EOS 1 in 5: the samples end at different steps
  MultiSampleSearcher several(options);
  const auto run = drive(several, script, 0);
  ASSERT_TRUE(std::any_of(run.results.begin(), run.results.end(), [&](const auto& h) {
    return static_cast<int64_t>(h.tokens.size()) < run.steps;
  })) << "the script should end a sample before the others";
  EXPECT_EQ(run.emitted, run.results[0].tokens) << "sample 0's tokens, as they are drawn";
  EXPECT_EQ(run.emitted_logprobs, run.results[0].token_logprobs);
  ASSERT_EQ(static_cast<int64_t>(run.next_tokens.size()), run.steps);
  for (size_t step = 0; step < run.next_tokens.size(); ++step) {
    // Rows at this step: the samples longer than `step`, in sample order; kept: those longer than step + 1.
    std::vector<int64_t> parents, tokens;
    int64_t row = 0;
    for (const auto& h : run.results) {
      if (h.tokens.size() <= step) continue;
      if (h.tokens.size() > step + 1) {
        parents.push_back(row);
        tokens.push_back(h.tokens[step]);
      }
      ++row;
    }
    EXPECT_EQ(run.parent_rows[step], parents) << "step " << step;
    EXPECT_EQ(run.next_tokens[step], tokens) << "step " << step;
  }
  // The rows each step ran (3, then those kept by the step before): one per token drawn.
  int64_t row_steps = 3, drawn = 0;
  for (size_t step = 0; step + 1 < run.parent_rows.size(); ++step) {
    row_steps += static_cast<int64_t>(run.parent_rows[step].size());
  }
  for (const auto& h : run.results) drawn += static_cast<int64_t>(h.tokens.size());
  EXPECT_EQ(row_steps, drawn) << "no row-step spent on a sample that ended";
  EXPECT_TRUE(several.done());
  EXPECT_EQ(several.num_rows(), 0);
  EXPECT_THROW(several.advance(torch::zeros({3, 5})), std::logic_error);
}

}  // namespace
}  // namespace srformer
