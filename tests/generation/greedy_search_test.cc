#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/generation/beam_searcher.h"
#include "model/generation/searcher.h"
#include "model/generation/single_row_searcher.h"
#include "model/kernels/avx2.h"
#include "scripted_model.h"
#include "tests/support/kernel_switches.h"

namespace srformer {
namespace {

using testing::drive;
using testing::log_probs;

// Vocabulary: 0 = decoder start/pad, 1 = EOS, 2.. = words.
GenerationOptions base_options() {
  GenerationOptions options;
  options.decoder_start_token_id = 0;
  options.eos_token_id = 1;
  options.max_new_tokens = 10;
  return options;
}

// Next token is the history length + 1 (2, 3, 4, ...) with probability 0.7; EOS once the history
// holds `eos_after` tokens.
testing::Script counting_script(size_t eos_after, int64_t vocab = 16) {
  return [=](const std::vector<int64_t>& history) {
    std::vector<double> p(static_cast<size_t>(vocab), 0.3 / static_cast<double>(vocab - 1));
    const size_t favourite = history.size() >= eos_after ? 1 : history.size() + 1;
    p[favourite] = 0.7;
    return log_probs(p);
  };
}

// Always prefers token 2 (.5), then 3 (.3) and 4 (.18); EOS and the start token have .01 each.
testing::Script prefers_2_then_3() {
  return [](const std::vector<int64_t>&) { return log_probs({0.01, 0.01, 0.5, 0.3, 0.18}); };
}

// The tokens greedy search picks under `options` over `script`.
std::vector<int64_t> greedy_tokens(const GenerationOptions& options, const testing::Script& script) {
  GreedySearcher searcher(options);
  return drive(searcher, script, 0).results.at(0).tokens;
}

TEST(GreedySearchTest, PicksTheArgmaxAndStopsOnEos) {
  GreedySearcher searcher(base_options());
  const auto run = drive(searcher, counting_script(4), 0);
  ASSERT_EQ(run.results.size(), 1u);
  EXPECT_EQ(run.results[0].tokens, (std::vector<int64_t>{2, 3, 4, 1}));
  EXPECT_EQ(run.results[0].finish_reason, FinishReason::kEos);
  EXPECT_EQ(run.steps, 4);
  EXPECT_EQ(run.emitted, (std::vector<int64_t>{2, 3, 4, 1}));
  EXPECT_NEAR(run.results[0].score, 4 * std::log(0.7), 1e-5);
  for (const auto& parents : run.parent_rows) EXPECT_EQ(parents, (std::vector<int64_t>{0}));
}

TEST(GreedySearchTest, EachTokenCarriesItsLogProbabilityUnderTheProcessedScores) {
  auto options = base_options();
  options.min_new_tokens = 4;  // EOS masked for steps 0-3: what is left is renormalised
  GreedySearcher searcher(options);
  const auto run = drive(searcher, counting_script(3), 0);
  // Every token but the favourite has 0.3 / 15 = 0.02. Steps 0 and 1: the favourites 2 and 3 of what
  // is left without EOS (0.98); steps 2 and 3: EOS is the favourite but masked, so the first of the
  // 0.02 tokens (0) of the 0.3 left; step 4: EOS at 0.7.
  const auto& r = run.results[0];
  ASSERT_EQ(r.tokens, (std::vector<int64_t>{2, 3, 0, 0, 1}));
  ASSERT_EQ(r.token_logprobs.size(), r.tokens.size());
  const double expected[] = {std::log(0.7 / 0.98), std::log(0.7 / 0.98), std::log(0.02 / 0.3), std::log(0.02 / 0.3),
                             std::log(0.7)};
  double sum = 0;
  for (size_t i = 0; i < r.tokens.size(); ++i) {
    EXPECT_NEAR(r.token_logprobs[i], expected[i], 1e-5) << "token " << i;
    sum += r.token_logprobs[i];
  }
  EXPECT_NEAR(sum, r.score, 1e-5);
  EXPECT_EQ(run.emitted_logprobs, r.token_logprobs);  // streamed as decided
}

TEST(GreedySearchTest, StopsAtMaxNewTokens) {
  auto options = base_options();
  options.max_new_tokens = 3;
  GreedySearcher searcher(options);
  const auto run = drive(searcher, counting_script(100), 0);
  EXPECT_EQ(run.results[0].tokens, (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(run.results[0].finish_reason, FinishReason::kLength);
  EXPECT_EQ(run.steps, 3);
  EXPECT_TRUE(searcher.done());
  EXPECT_THROW(searcher.advance(torch::zeros({1, 16})), std::logic_error);
}

TEST(GreedySearchTest, FirstIndexWinsTies) {
  GreedySearcher searcher(base_options());
  const auto step = searcher.advance(torch::tensor({0.0f, 0.0f, 5.0f, 5.0f}).view({1, 4}));
  EXPECT_EQ(step.next_tokens.item<int64_t>(), 2);
}

TEST(GreedySearchTest, MinNewTokensSuppressesEos) {
  auto options = base_options();
  options.min_new_tokens = 3;
  GreedySearcher searcher(options);
  // EOS is the favourite from the start; the runner-up is token 5.
  const auto run = drive(
      searcher,
      [](const std::vector<int64_t>&) {
        return log_probs({0.05, 0.6, 0.05, 0.05, 0.05, 0.2});
      },
      0);
  EXPECT_EQ(run.results[0].tokens, (std::vector<int64_t>{5, 5, 5, 1}));
  EXPECT_EQ(run.results[0].finish_reason, FinishReason::kEos);
  // Score: log-softmax of the processed logits (EOS removed) for the first three tokens.
  EXPECT_NEAR(run.results[0].score, 3 * std::log(0.2 / 0.4) + std::log(0.6), 1e-5);
}

TEST(GreedySearchTest, ForcedBosAndForcedEos) {
  auto options = base_options();
  options.max_new_tokens = 4;
  options.forced_bos_token_id = 7;
  options.forced_eos_token_id = 1;
  GreedySearcher searcher(options);
  const auto run = drive(searcher, counting_script(100), 0);
  // Forced 7 first; then the script's favourites for histories of length 2 and 3; EOS forced last.
  EXPECT_EQ(run.results[0].tokens, (std::vector<int64_t>{7, 3, 4, 1}));
  EXPECT_EQ(run.results[0].finish_reason, FinishReason::kEos);
  EXPECT_NEAR(run.results[0].score, 2 * std::log(0.7), 1e-5);  // forced tokens have log-prob 0
}

// A checkpoint's list of EOS ids: any of them ends the sequence ("eos"), every one is kept out before
// min_new_tokens, and a list of forced ids scores each 0 at the last step (greedy takes the lowest),
// as Hugging Face's greedy search and processors do; with the CPU kernels' in-place pick and without.
// Only the first id ended a sequence (extra ids were dropped with a start-up warning).
TEST(GreedySearchTest, AnyOfSeveralEosIdsEndsTheSequence) {
  const testing::KernelSwitchesRestored restore_switches;
  for (const bool kernels : {true, false}) {
    srformer::kernels::set_cpu_kernels(kernels);
    SCOPED_TRACE(kernels ? "kernels on" : "kernels off");
    auto options = base_options();
    options.extra_eos_token_ids = {9, 5};
    GreedySearcher searcher(options);
    // The favourite is 2, 3, 4, then 5 (history length 4), which ends it.
    const auto run = drive(searcher, counting_script(100), 0);
    EXPECT_EQ(run.results[0].tokens, (std::vector<int64_t>{2, 3, 4, 5}));
    EXPECT_EQ(run.results[0].finish_reason, FinishReason::kEos);
    EXPECT_EQ(run.emitted, run.results[0].tokens);

    // min_new_tokens keeps 1, 9 and 5 out; the next favourite (4) comes instead.
    options.min_new_tokens = 3;
    const auto script = [](const std::vector<int64_t>&) {
      return log_probs({0.01, 0.3, 0.01, 0.01, 0.15, 0.3, 0.01, 0.01, 0.01, 0.19});
    };
    GreedySearcher held(options);
    const auto held_run = drive(held, script, 0);
    EXPECT_EQ(held_run.results[0].tokens, (std::vector<int64_t>{4, 4, 4, 1}));
    EXPECT_NEAR(held_run.results[0].token_logprobs[0], std::log(0.15 / 0.21), 1e-5);

    // Forced ids 7 and 6 at the last step: both score 0, the first index (6) wins with log(1/2).
    auto forced = base_options();
    forced.max_new_tokens = 3;
    forced.forced_eos_token_id = 7;
    forced.extra_forced_eos_token_ids = {6};
    forced.extra_eos_token_ids = {6};
    GreedySearcher forcing(forced);
    const auto forced_run = drive(forcing, counting_script(100), 0);
    EXPECT_EQ(forced_run.results[0].tokens, (std::vector<int64_t>{2, 3, 6}));
    EXPECT_EQ(forced_run.results[0].finish_reason, FinishReason::kEos);
    EXPECT_NEAR(forced_run.results[0].token_logprobs[2], std::log(0.5), 1e-6);
  }
}

TEST(GreedySearchTest, NoRepeatNGramAndRepetitionPenaltyChangeTheChoice) {
  const auto script = prefers_2_then_3();  // plain greedy repeats 2
  auto options = base_options();
  options.max_new_tokens = 4;
  EXPECT_EQ(greedy_tokens(options, script), (std::vector<int64_t>{2, 2, 2, 2}));
  {
    auto o = options;
    o.no_repeat_ngram_size = 2;  // bigrams (incl. the start token 0) may not repeat
    GreedySearcher searcher(o);
    // 0 -> 2; "2 2" not seen yet -> 2; "2 2" seen -> 3; nothing followed 3 yet -> 2.
    EXPECT_EQ(drive(searcher, script, 0).results[0].tokens, (std::vector<int64_t>{2, 2, 3, 2}));
  }
  {
    auto o = options;
    o.repetition_penalty = 1.2;  // log-probs: 2 -> log(.5)*1.2 = -0.83 > log(.3) = -1.20; stays 2
    EXPECT_EQ(greedy_tokens(o, script), (std::vector<int64_t>{2, 2, 2, 2}));
    // Once 2 was generated: log(.5)*1.9 = -1.32 < log(.3) = -1.20 -> 3; once 3 was too: 2 (-1.32) beats
    // 3 (-2.29) and 4 (log(.18) = -1.71) again.
    o.repetition_penalty = 1.9;
    EXPECT_EQ(greedy_tokens(o, script), (std::vector<int64_t>{2, 3, 2, 2}));
  }
}

// encoder_no_repeat_ngram_size and encoder_repetition_penalty, with HF's meanings, on the raw logits
// (here log-probabilities), in place (kernels on) and on a processed copy alike.
TEST(GreedySearchTest, EncoderNoRepeatNGramAndEncoderRepetitionPenaltyChangeTheChoice) {
  const testing::KernelSwitchesRestored restore_switches;
  const auto script = prefers_2_then_3();
  auto options = base_options();
  options.max_new_tokens = 4;
  for (const bool kernels : {true, false}) {
    srformer::kernels::set_cpu_kernels(kernels);
    {
      auto o = options;
      o.encoder_no_repeat_ngram_size = 2;
      o = with_encoder_input(o, {4, 2, 2, 3});
      GreedySearcher searcher(o);
      // 0: no "0 ?" in the input -> 2; "2 2" and "2 3" are -> 4; "4 2" is -> 3; nothing follows 3 -> 2.
      EXPECT_EQ(drive(searcher, script, 0).results[0].tokens, (std::vector<int64_t>{2, 4, 3, 2})) << kernels;
    }
    {
      auto o = options;
      o.encoder_repetition_penalty = 2.0;  // token 3 in the input: log(.3) * 0.5 = -0.60 > log(.5) = -0.69
      EXPECT_EQ(greedy_tokens(with_encoder_input(o, {3}), script), (std::vector<int64_t>{3, 3, 3, 3})) << kernels;
      o.encoder_repetition_penalty = 1.1;  // log(.3) / 1.1 = -1.09 < -0.69: 2 stays
      EXPECT_EQ(greedy_tokens(with_encoder_input(o, {3}), script), (std::vector<int64_t>{2, 2, 2, 2})) << kernels;
      o.encoder_repetition_penalty = 0.5;  // token 2 in the input: log(.5) * 2 = -1.39 < log(.3) = -1.20
      EXPECT_EQ(greedy_tokens(with_encoder_input(o, {2}), script), (std::vector<int64_t>{3, 3, 3, 3})) << kernels;
    }
  }
}

TEST(GreedySearchTest, BadWordsIdsChangeTheChoice) {
  const testing::KernelSwitchesRestored restore_switches;
  const auto script = prefers_2_then_3();
  auto options = base_options();
  options.max_new_tokens = 4;
  for (const bool kernels : {true, false}) {
    srformer::kernels::set_cpu_kernels(kernels);
    auto o = options;
    o.bad_words_ids = {{2}};
    EXPECT_EQ(greedy_tokens(o, script), (std::vector<int64_t>{3, 3, 3, 3})) << kernels;
    o.bad_words_ids = {{2, 2}};  // no "2 2": 2 after a 2 is banned
    EXPECT_EQ(greedy_tokens(o, script), (std::vector<int64_t>{2, 3, 2, 3})) << kernels;
    o.bad_words_ids = {{1}, {2, 2}};  // EOS alone is dropped, as HF drops it
    EXPECT_EQ(greedy_tokens(o, script), (std::vector<int64_t>{2, 3, 2, 3})) << kernels;
  }
}

TEST(GreedySearchTest, SuppressTokensAndBeginSuppressTokensChangeTheChoice) {
  const testing::KernelSwitchesRestored restore_switches;
  const auto script = prefers_2_then_3();
  auto options = base_options();
  options.max_new_tokens = 4;
  for (const bool kernels : {true, false}) {
    srformer::kernels::set_cpu_kernels(kernels);
    auto o = options;
    o.suppress_tokens = {2};
    EXPECT_EQ(greedy_tokens(o, script), (std::vector<int64_t>{3, 3, 3, 3})) << kernels;
    o.suppress_tokens.clear();
    o.begin_suppress_tokens = {2};
    EXPECT_EQ(greedy_tokens(o, script), (std::vector<int64_t>{3, 2, 2, 2})) << kernels;
    o.forced_bos_token_id = 4;  // the first free token is the second
    EXPECT_EQ(greedy_tokens(o, script), (std::vector<int64_t>{4, 3, 2, 2})) << kernels;
  }
}

// exponential_decay_length_penalty (1, 1.5): from the third new token EOS's log(.01) is multiplied by
// 2 - 1.5^k (k = 1: -2.30, below 2's log(.5) = -0.69; k = 2: +1.15, above it), so EOS ends the fourth.
TEST(GreedySearchTest, ExponentialDecayLengthPenaltyEndsTheSequenceSooner) {
  const testing::KernelSwitchesRestored restore_switches;
  const auto script = prefers_2_then_3();
  auto options = base_options();
  options.max_new_tokens = 6;
  for (const bool kernels : {true, false}) {
    srformer::kernels::set_cpu_kernels(kernels);
    EXPECT_EQ(greedy_tokens(options, script), (std::vector<int64_t>{2, 2, 2, 2, 2, 2})) << kernels;
    auto o = options;
    o.exponential_decay_length_penalty = std::pair<int64_t, double>{1, 1.5};
    GreedySearcher decayed(o);
    const auto run = drive(decayed, script, 0);
    EXPECT_EQ(run.results[0].tokens, (std::vector<int64_t>{2, 2, 2, 1})) << kernels;
    EXPECT_EQ(run.results[0].finish_reason, FinishReason::kEos);
  }
}

// sequence_bias [[[3], 1.0], [[3, 3], -1.0]]: 3's log(.3) + 1 = -0.20 beats 2's log(.5) = -0.69, but after
// a 3 it gets -1 more and 2 wins.
TEST(GreedySearchTest, SequenceBiasChangesTheChoice) {
  const testing::KernelSwitchesRestored restore_switches;
  const auto script = prefers_2_then_3();
  auto options = base_options();
  options.max_new_tokens = 4;
  options.sequence_bias = {{{3}, 1.0}, {{3, 3}, -1.0}};
  for (const bool kernels : {true, false}) {
    srformer::kernels::set_cpu_kernels(kernels);
    EXPECT_EQ(greedy_tokens(options, script), (std::vector<int64_t>{3, 2, 3, 2})) << kernels;
  }
}

// forced_decoder_ids [[1, 4], [2, null], [3, 3]]: 4 first, 2 freely, 3 though suppressed; the begin-suppressed
// 2 waits for the fourth token (begin index 1 + 3).
TEST(GreedySearchTest, ForcedDecoderIdsForceTheirTokens) {
  const testing::KernelSwitchesRestored restore_switches;
  const auto script = prefers_2_then_3();
  auto options = base_options();
  options.max_new_tokens = 4;
  options.forced_decoder_ids = {{1, 4}, {2, std::nullopt}, {3, 3}};
  for (const bool kernels : {true, false}) {
    srformer::kernels::set_cpu_kernels(kernels);
    EXPECT_EQ(greedy_tokens(options, script), (std::vector<int64_t>{4, 2, 3, 2})) << kernels;
    auto o = options;
    o.suppress_tokens = {3};
    o.begin_suppress_tokens = {2};
    EXPECT_EQ(greedy_tokens(o, script), (std::vector<int64_t>{4, 2, 3, 4})) << kernels;
  }
}

// Greedy steps pick from the logits in place (vocabulary limit, minimum length and banned n-grams
// applied as the row is read) when the CPU kernels are on; the general path (a processed copy,
// LibTorch's argmax) must choose the same tokens. The script puts its highest scores past the
// limit and on EOS, and repeats itself, so that every exclusion changes the choice.
TEST(GreedySearchTest, InPlacePickChoosesWhatTheProcessedCopyChooses) {
  const testing::KernelSwitchesRestored restore_switches;
  const int64_t vocab = 300;
  const int64_t limit = 250;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    const auto base = testing::random_script(vocab, seed, 1);
    const testing::Script script = [&](const std::vector<int64_t>& history) {
      auto logits = base(history);
      for (int64_t t = limit; t < vocab; ++t) logits[static_cast<size_t>(t)] = 20.0F;
      logits[1] = 10.0F;                      // EOS, held back by min_new_tokens
      logits[5 + history.size() % 2] = 9.0F;  // an alternation that no_repeat_ngram breaks
      return logits;
    };
    auto options = base_options();
    options.max_new_tokens = 12;
    options.min_new_tokens = 6;
    options.vocab_limit = limit;
    options.no_repeat_ngram_size = 3;
    std::vector<testing::Run> runs;
    for (const bool kernels : {true, false}) {
      srformer::kernels::set_cpu_kernels(kernels);
      GreedySearcher searcher(options);
      runs.push_back(drive(searcher, script, 0));
    }
    ASSERT_EQ(runs[0].results[0].tokens, runs[1].results[0].tokens) << seed;
    EXPECT_NEAR(runs[0].results[0].score, runs[1].results[0].score, 1e-4) << seed;
    const auto& tokens = runs[0].results[0].tokens;
    EXPECT_EQ(tokens.size(), 7u) << seed;  // EOS as soon as it is allowed
    EXPECT_EQ(tokens.back(), 1) << seed;
    for (const int64_t t : tokens) EXPECT_LT(t, limit);
  }
}

// Ids past the tokenizer's vocabulary (T5: 32,128 embedding rows, 32,100 tokens) are never chosen, but
// their logits stay in the normaliser of token_logprobs, as in Hugging Face's greedy scores (which know
// no tokenizer size) and in beam search: log_softmax over the whole processed row, in double here.
// Greedy normalised over the tokenizer's ids only, reporting higher log-probabilities than beam search
// for the same tokens. In place (kernels on, exclusions only), general path with the kernels (a
// repetition penalty) and LibTorch's (kernels off).
TEST(GreedySearchTest, LogprobsNormaliseOverTheWholeRowThoughIdsPastTheLimitAreNeverChosen) {
  const testing::KernelSwitchesRestored restore_switches;
  const int64_t vocab = 300;
  const int64_t limit = 250;
  const auto base = testing::random_script(vocab, 7, 1);
  const testing::Script script = [&](const std::vector<int64_t>& history) {
    auto logits = base(history);
    for (int64_t t = limit; t < vocab; ++t) logits[static_cast<size_t>(t)] = 3.0F + 0.01F * static_cast<float>(t);
    return logits;
  };
  for (const bool kernels : {true, false}) {
    srformer::kernels::set_cpu_kernels(kernels);
    for (int variant = 0; variant < 3; ++variant) {
      SCOPED_TRACE(std::string(kernels ? "kernels on" : "kernels off") + ", variant " + std::to_string(variant));
      auto options = base_options();
      options.max_new_tokens = 8;
      options.vocab_limit = limit;
      if (variant >= 1) {  // exclusions: EOS held back, banned n-grams
        options.min_new_tokens = 4;
        options.no_repeat_ngram_size = 2;
      }
      if (variant == 2) options.repetition_penalty = 1.3;  // the general path, kernels or not
      GreedySearcher greedy(options);
      const auto run = drive(greedy, script, 0);
      const auto& result = run.results.at(0);
      ASSERT_EQ(result.token_logprobs.size(), result.tokens.size());
      // Hugging Face's processed scores (no vocabulary limit), log_softmax in double.
      auto hf = options;
      hf.vocab_limit = 0;
      std::vector<int64_t> history{0};
      for (size_t i = 0; i < result.tokens.size(); ++i) {
        const int64_t token = result.tokens[i];
        EXPECT_LT(token, limit);
        auto scores = torch::tensor(script(history)).view({1, vocab});
        process_logits(hf, SequenceBias(hf.sequence_bias), {history}, scores);
        EXPECT_EQ(token, scores[0].narrow(0, 0, limit).argmax().item<int64_t>()) << "step " << i;
        const double expected = scores[0].to(torch::kFloat64).log_softmax(0)[token].item<double>();
        EXPECT_NEAR(result.token_logprobs[i], expected, 1e-5) << "step " << i;
        history.push_back(token);
      }
      if (variant == 0) {  // no processor but the limit: beam search's log-probabilities, token by token
        BeamSearcher beam(options);
        const auto b = drive(beam, script, 0);
        ASSERT_EQ(b.results.at(0).tokens, result.tokens);
        for (size_t i = 0; i < result.tokens.size(); ++i) {
          EXPECT_NEAR(result.token_logprobs[i], b.results[0].token_logprobs[i], 1e-5) << "step " << i;
        }
      }
    }
  }
}

TEST(GreedySearchTest, BeamSearchWithOneBeamPicksTheSameTokens) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    auto options = base_options();
    options.max_new_tokens = 12;
    const auto script = testing::random_script(9, seed, options.eos_token_id, 1.0f);
    GreedySearcher greedy(options);
    BeamSearcher beam(options);
    const auto g = drive(greedy, script, 0);
    const auto b = drive(beam, script, 0);
    ASSERT_EQ(b.results.size(), 1u);
    EXPECT_EQ(g.results[0].tokens, b.results[0].tokens) << "seed " << seed;
    EXPECT_EQ(g.results[0].finish_reason, b.results[0].finish_reason) << "seed " << seed;
    EXPECT_EQ(g.steps, b.steps) << "seed " << seed;
    // Beam search divides the same sum of log-probs by the length (start token included, EOS not).
    const auto& tokens = b.results[0].tokens;
    const double length = 1.0 + static_cast<double>(tokens.size()) - (tokens.back() == 1 ? 1.0 : 0.0);
    EXPECT_NEAR(b.results[0].score, g.results[0].score / length, 1e-5) << "seed " << seed;
  }
}

// A model whose logits hold NaN (NaN weights, a layer norm with a negative epsilon) stops the search with
// an error that blames the model, with the kernels and without: greedy search took NaN's index as the
// argmax and returned an empty summary, and beam search ranked NaN scores anywhere.
TEST(NonFiniteLogitsTest, GreedyAndBeamSearchRefuseNaNLogits) {
  testing::KernelSwitchesRestored restore;
  for (const bool kernels_on : {true, false}) {
    kernels::set_cpu_kernels(kernels_on);
    SCOPED_TRACE(kernels_on ? "kernels on" : "kernels off");
    auto logits = torch::zeros({1, 16});
    logits[0][5] = std::nanf("");
    GreedySearcher greedy(base_options());
    try {
      greedy.advance(logits);
      ADD_FAILURE() << "greedy search took NaN logits";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("the model's logits hold NaN at step 0"), std::string::npos) << e.what();
    }
    auto options = base_options();
    options.num_beams = 2;
    // Among the scores the NaN check reads several at a time, and the last of an odd count.
    for (const auto& [vocab, at] : {std::pair<int64_t, int64_t>{16, 3}, {17, 16}}) {
      BeamSearcher beam(options);
      auto rows = torch::zeros({2, vocab});
      rows[1][at] = std::nanf("");
      try {
        beam.advance(rows);
        ADD_FAILURE() << "beam search took NaN logits";
      } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("the model's logits hold NaN at step 0"), std::string::npos) << e.what();
      }
    }
    // The same rows without the NaN are searched as ever.
    GreedySearcher clean(base_options());
    EXPECT_EQ(clean.advance(torch::zeros({1, 16})).emitted.size(), 1u);
  }
}

// Options that leave no token to choose (here: each of 5 tokens at most once, EOS barred until 10 new
// tokens) end the search with NoTokenLeftError, which blames the request (the server answers
// INVALID_ARGUMENT), for greedy search, sampling, several samples and beam sampling, with the kernels and
// without; it said the model's logits held NaN (INTERNAL). Also with 3 embedding rows past the tokenizer's
// 5 ids, whose finite scores greedy search normalises over but never chooses.
TEST(NonFiniteLogitsTest, OptionsThatLeaveNoTokenBlameTheRequest) {
  testing::KernelSwitchesRestored restore;
  for (const bool kernels_on : {true, false}) {
    kernels::set_cpu_kernels(kernels_on);
    for (const int kind : {0, 1, 2, 3, 4, 5, 6, 7}) {
      SCOPED_TRACE(std::string(kernels_on ? "kernels on, " : "kernels off, ") + "searcher " + std::to_string(kind));
      const int64_t vocab = kind >= 4 ? 8 : 5;
      auto options = base_options();
      if (kind >= 4) options.vocab_limit = 5;
      options.no_repeat_ngram_size = 1;
      options.min_new_tokens = 10;
      options.do_sample = kind % 4 != 0;
      options.num_return_sequences = kind % 4 == 2 ? 2 : 1;
      options.num_beams = kind % 4 == 3 ? 2 : 1;
      options.seed = 4;
      const auto searcher = make_searcher(options);
      const int64_t rows = searcher->num_rows();
      bool refused = false;
      for (int step = 0; step < 10 && !refused; ++step) {
        try {
          (void)searcher->advance(torch::randn({rows, vocab}));
        } catch (const NoTokenLeftError& e) {
          refused = true;
          EXPECT_NE(std::string(e.what()).find("the request's options leave no token to choose"), std::string::npos)
              << e.what();
        }
      }
      EXPECT_TRUE(refused) << "10 new tokens from the 3 that are neither the start token nor EOS, none twice";
    }
  }
}

}  // namespace
}  // namespace srformer
