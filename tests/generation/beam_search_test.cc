// Beam search against hand-worked examples of HF 4.11 BeamSearchScorer. Vocabulary: 0 = decoder
// start, 1 = EOS, 2 = A, 3 = B; two beams. Each script gives next-token probabilities per history.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "model/generation/beam_searcher.h"
#include "model/kernels/avx2.h"
#include "scripted_model.h"
#include "tests/support/kernel_switches.h"

namespace srformer {
namespace {

using testing::drive;
using testing::log_probs;
using History = std::vector<int64_t>;

constexpr int64_t kEos = 1, kA = 2, kB = 3;

testing::Script table(const std::map<History, std::vector<double>>& probs) {
  return [probs](const History& history) {
    const auto it = probs.find(history);
    if (it == probs.end()) throw std::runtime_error("the script has no entry for this history");
    return log_probs(it->second);
  };
}

GenerationOptions beam_options(int64_t max_new_tokens, double length_penalty, bool early_stopping) {
  GenerationOptions options;
  options.decoder_start_token_id = 0;
  options.eos_token_id = kEos;
  options.num_beams = 2;
  options.num_return_sequences = 2;
  options.max_new_tokens = max_new_tokens;
  options.length_penalty = length_penalty;
  options.early_stopping = early_stopping_from_bool(early_stopping);
  return options;
}

// The same search driven with the CPU kernels on (runs[0]), then off (runs[1]); the caller restores the
// switches. Expects the same steps: chosen tokens and parent rows.
std::vector<testing::Run> drive_kernels_on_then_off(const GenerationOptions& options, const testing::Script& script,
                                                    uint64_t seed) {
  std::vector<testing::Run> runs;
  for (const bool on : {true, false}) {
    kernels::set_cpu_kernels(on);
    BeamSearcher searcher(options);
    runs.push_back(drive(searcher, script, 0));
  }
  EXPECT_EQ(runs[0].steps, runs[1].steps) << seed;
  EXPECT_EQ(runs[0].next_tokens, runs[1].next_tokens) << seed;
  EXPECT_EQ(runs[0].parent_rows, runs[1].parent_rows) << seed;
  return runs;
}

const std::vector<double> kFirst{0.05, 0.15, 0.5, 0.3};  // after the start token: A 0.5, B 0.3

// Step 1: beams "A" (0.5) and "B" (0.3); the EOS candidate (rank 2) is never reached.
// Step 2 candidates: A EOS 0.30, B B 0.225, A A 0.10, A B 0.075, ... -> finished "A" (len 2),
// beams "B B" (parent 1) and "A A" (parent 0). Then the length limit adds both beams (len 3).
const auto kLengthScript = table({{{0}, kFirst}, {{0, kA}, {0.05, 0.6, 0.2, 0.15}}, {{0, kB}, {0.05, 0.1, 0.1, 0.75}}});

TEST(BeamSearchTest, HandWorkedExampleWithLengthPenaltyOne) {
  BeamSearcher searcher(beam_options(2, 1.0, false));
  const auto run = drive(searcher, kLengthScript, 0);
  EXPECT_EQ(run.steps, 2);
  EXPECT_EQ(run.next_tokens[0], (std::vector<int64_t>{kA, kB}));
  EXPECT_EQ(run.parent_rows[0], (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(run.next_tokens[1], (std::vector<int64_t>{kB, kA}));
  EXPECT_EQ(run.parent_rows[1], (std::vector<int64_t>{1, 0}));
  // Scores: "B B" log(.225)/3 = -0.497 beats "A EOS" log(.3)/2 = -0.602; "A A" log(.1)/3 = -0.768 is out.
  ASSERT_EQ(run.results.size(), 2u);
  EXPECT_EQ(run.results[0].tokens, (std::vector<int64_t>{kB, kB}));
  EXPECT_EQ(run.results[0].finish_reason, FinishReason::kLength);
  EXPECT_NEAR(run.results[0].score, std::log(0.3 * 0.75) / 3, 1e-6);
  EXPECT_EQ(run.results[1].tokens, (std::vector<int64_t>{kA, kEos}));
  EXPECT_EQ(run.results[1].finish_reason, FinishReason::kEos);
  EXPECT_NEAR(run.results[1].score, std::log(0.5 * 0.6) / 2, 1e-6);
  EXPECT_EQ(run.emitted, (std::vector<int64_t>{kB, kB}));  // the best hypothesis, once done
  // Each token's log-probability: the step between its beam's scores.
  ASSERT_EQ(run.results[0].token_logprobs.size(), 2u);
  EXPECT_NEAR(run.results[0].token_logprobs[0], std::log(0.3), 1e-6);
  EXPECT_NEAR(run.results[0].token_logprobs[1], std::log(0.75), 1e-6);
  ASSERT_EQ(run.results[1].token_logprobs.size(), 2u);
  EXPECT_NEAR(run.results[1].token_logprobs[0], std::log(0.5), 1e-6);
  EXPECT_NEAR(run.results[1].token_logprobs[1], std::log(0.6), 1e-6);  // EOS
  EXPECT_EQ(run.emitted_logprobs, run.results[0].token_logprobs);
}

TEST(BeamSearchTest, LengthPenaltyZeroPrefersTheShortHypothesis) {
  BeamSearcher searcher(beam_options(2, 0.0, false));
  const auto run = drive(searcher, kLengthScript, 0);
  ASSERT_EQ(run.results.size(), 2u);
  EXPECT_EQ(run.results[0].tokens, (std::vector<int64_t>{kA, kEos}));
  EXPECT_NEAR(run.results[0].score, std::log(0.3), 1e-6);
  EXPECT_EQ(run.results[1].tokens, (std::vector<int64_t>{kB, kB}));
  EXPECT_NEAR(run.results[1].score, std::log(0.225), 1e-6);
}

TEST(BeamSearchTest, LengthPenaltyTwoLetsALongBeamReplaceAFinishedHypothesis) {
  // "A EOS" log(.3)/2^2 = -0.301 enters first; at the limit "B B" log(.225)/3^2 = -0.166 joins and
  // "A A" log(.1)/9 = -0.256 beats the worst (-0.301), which is dropped.
  BeamSearcher searcher(beam_options(2, 2.0, false));
  const auto run = drive(searcher, kLengthScript, 0);
  ASSERT_EQ(run.results.size(), 2u);
  EXPECT_EQ(run.results[0].tokens, (std::vector<int64_t>{kB, kB}));
  EXPECT_NEAR(run.results[0].score, std::log(0.225) / 9, 1e-6);
  EXPECT_EQ(run.results[1].tokens, (std::vector<int64_t>{kA, kA}));
  EXPECT_NEAR(run.results[1].score, std::log(0.1) / 9, 1e-6);
  EXPECT_EQ(run.results[1].finish_reason, FinishReason::kLength);
}

TEST(BeamSearchTest, EncoderNoRepeatNGramBansTheInputsNGramsInEveryBeam) {
  const testing::KernelSwitchesRestored restore_switches;
  for (const bool kernels : {true, false}) {
    srformer::kernels::set_cpu_kernels(kernels);
    auto options = beam_options(2, 1.0, false);
    options.encoder_no_repeat_ngram_size = 2;
    BeamSearcher searcher(with_encoder_input(options, {kB, kB}));
    const auto run = drive(searcher, kLengthScript, 0);
    // Step 2 without "B B": A EOS .30 (finished), A A .10, A B .075 -> beams "A A", "A B"; at the limit
    // "A A" log(.1)/3 = -0.768 beats "A B" log(.075)/3 = -0.863 for the place beside "A EOS".
    ASSERT_EQ(run.results.size(), 2u);
    EXPECT_EQ(run.results[0].tokens, (std::vector<int64_t>{kA, kEos})) << kernels;
    EXPECT_NEAR(run.results[0].score, std::log(0.3) / 2, 1e-6);
    EXPECT_EQ(run.results[1].tokens, (std::vector<int64_t>{kA, kA})) << kernels;
    EXPECT_NEAR(run.results[1].score, std::log(0.1) / 3, 1e-6);
  }
}

// The penalty applies to every beam's log-probabilities. (Hugging Face builds the processor from the
// unexpanded input, [batch, length], and its gather/scatter then reaches the first `batch` rows only:
// beam 0 of a one-request batch. Here each beam is treated alike, as the setting means.)
TEST(BeamSearchTest, EncoderRepetitionPenaltyActsOnEveryBeam) {
  auto options = beam_options(2, 1.0, false);
  options.encoder_repetition_penalty = 2.0;  // log-probabilities of B are halved
  BeamSearcher searcher(with_encoder_input(options, {kB}));
  const auto run = drive(searcher, kLengthScript, 0);
  // Step 1: B log(.3)/2 = -0.602 beats A log(.5) = -0.693. Step 2: B B -0.602 + log(.75)/2 = -0.746,
  // A EOS -0.693 + log(.6) = -1.204 (finished), A B -0.693 + log(.15)/2 = -1.642 (beam 1's B is favoured
  // too; without it A A at -2.303 would be next).
  EXPECT_EQ(run.next_tokens[0], (std::vector<int64_t>{kB, kA}));
  EXPECT_EQ(run.next_tokens[1], (std::vector<int64_t>{kB, kB}));
  EXPECT_EQ(run.parent_rows[1], (std::vector<int64_t>{0, 1}));
  ASSERT_EQ(run.results.size(), 2u);
  const double b = std::log(0.3) / 2;
  EXPECT_EQ(run.results[0].tokens, (std::vector<int64_t>{kB, kB}));
  EXPECT_NEAR(run.results[0].score, (b + std::log(0.75) / 2) / 3, 1e-5);
  EXPECT_EQ(run.results[1].tokens, (std::vector<int64_t>{kA, kB}));
  EXPECT_NEAR(run.results[1].score, (std::log(0.5) + std::log(0.15) / 2) / 3, 1e-5);
}

TEST(BeamSearchTest, BadWordsIdsBanASequenceInEveryBeam) {
  const testing::KernelSwitchesRestored restore_switches;
  for (const bool kernels : {true, false}) {
    srformer::kernels::set_cpu_kernels(kernels);
    auto options = beam_options(2, 1.0, false);
    options.bad_words_ids = {{kA, kEos}, {kEos}};  // "A EOS" may not end; EOS alone is dropped
    BeamSearcher searcher(options);
    const auto run = drive(searcher, kLengthScript, 0);
    // Step 2 without A EOS: B B .225, A A .10 -> beams, and at the limit "B B" log(.225)/3, "A A" log(.1)/3.
    ASSERT_EQ(run.results.size(), 2u);
    EXPECT_EQ(run.results[0].tokens, (std::vector<int64_t>{kB, kB})) << kernels;
    EXPECT_NEAR(run.results[0].score, std::log(0.225) / 3, 1e-6);
    EXPECT_EQ(run.results[1].tokens, (std::vector<int64_t>{kA, kA})) << kernels;
    EXPECT_NEAR(run.results[1].score, std::log(0.1) / 3, 1e-6);
  }
}

// exponential_decay_length_penalty (0, 1.9) acts on the beams' log-probabilities from the second token:
// EOS's s becomes s + |s| * 0.9 = 0.1 s. Step 2: A EOS log .5 + 0.1 log .6 = -0.744 and B EOS log .3 + 0.1
// log .1 = -1.434 rank first and second and finish; "A EOS" (/2 = -0.372) now beats "B B" (-0.497).
TEST(BeamSearchTest, ExponentialDecayLengthPenaltyActsOnTheLogProbabilities) {
  const testing::KernelSwitchesRestored restore_switches;
  for (const bool kernels : {true, false}) {
    srformer::kernels::set_cpu_kernels(kernels);
    auto options = beam_options(2, 1.0, false);
    options.exponential_decay_length_penalty = std::pair<int64_t, double>{0, 1.9};
    BeamSearcher searcher(options);
    const auto run = drive(searcher, kLengthScript, 0);
    ASSERT_EQ(run.results.size(), 2u);
    EXPECT_EQ(run.results[0].tokens, (std::vector<int64_t>{kA, kEos})) << kernels;
    EXPECT_NEAR(run.results[0].score, (std::log(0.5) + 0.1 * std::log(0.6)) / 2, 1e-5);
    EXPECT_EQ(run.results[1].tokens, (std::vector<int64_t>{kB, kB})) << kernels;
    EXPECT_NEAR(run.results[1].score, std::log(0.225) / 3, 1e-5);
  }
}

TEST(BeamSearchTest, NumReturnSequencesOne) {
  auto options = beam_options(2, 1.0, false);
  options.num_return_sequences = 1;
  BeamSearcher searcher(options);
  const auto run = drive(searcher, kLengthScript, 0);
  ASSERT_EQ(run.results.size(), 1u);
  EXPECT_EQ(run.results[0].tokens, (std::vector<int64_t>{kB, kB}));
}

TEST(BeamSearchTest, MinNewTokensKeepsEosOut) {
  auto options = beam_options(2, 1.0, false);
  options.min_new_tokens = 2;
  BeamSearcher searcher(options);
  const auto run = drive(searcher, kLengthScript, 0);
  // Step 2 without EOS: B B .225, A A .10 are the beams, and become the hypotheses.
  ASSERT_EQ(run.results.size(), 2u);
  EXPECT_EQ(run.results[0].tokens, (std::vector<int64_t>{kB, kB}));
  EXPECT_EQ(run.results[1].tokens, (std::vector<int64_t>{kA, kA}));
  // The -inf on EOS is applied to log-probs and not renormalised (HF order: log_softmax, processors).
  EXPECT_NEAR(run.results[1].score, std::log(0.1) / 3, 1e-6);
  ASSERT_EQ(run.results[1].token_logprobs.size(), 2u);  // likewise each token's (A A: .5, then .2)
  EXPECT_NEAR(run.results[1].token_logprobs[1], std::log(0.2), 1e-6);
}

// Step 2 candidates: B EOS .27, A EOS .17, A A .165, A B .16 -> two finished hypotheses,
// "B" log(.27)/2 = -0.655 and "A" log(.17)/2 = -0.886; beams "A A" and "A B".
std::map<History, std::vector<double>> two_finished_after_step_two() {
  return {{{0}, kFirst}, {{0, kA}, {0.01, 0.34, 0.33, 0.32}}, {{0, kB}, {0.01, 0.9, 0.05, 0.04}}};
}

TEST(BeamSearchTest, EarlyStoppingStopsOnceNumBeamsHypothesesAreFinished) {
  BeamSearcher searcher(beam_options(3, 1.0, true));
  const auto run = drive(searcher, table(two_finished_after_step_two()), 0);
  EXPECT_EQ(run.steps, 2);
  ASSERT_EQ(run.results.size(), 2u);
  EXPECT_EQ(run.results[0].tokens, (std::vector<int64_t>{kB, kEos}));
  EXPECT_NEAR(run.results[0].score, std::log(0.27) / 2, 1e-6);
  EXPECT_EQ(run.results[1].tokens, (std::vector<int64_t>{kA, kEos}));
  EXPECT_NEAR(run.results[1].score, std::log(0.17) / 2, 1e-6);
}

TEST(BeamSearchTest, WithoutEarlyStoppingRunningBeamsCanStillWin) {
  // After step 2 the best candidate score, log(.27)/cur_len 2 = -0.655, beats the worst finished
  // (-0.886): go on. Step 3: "A A A" .16005 and "A B B" .1552 (log(.16005)/3 = -0.61 still beats
  // -0.886); at the length limit both beams enter with len 4 and push both EOS hypotheses out.
  auto probs = two_finished_after_step_two();
  probs[{0, kA, kA}] = {0.01, 0.01, 0.97, 0.01};
  probs[{0, kA, kB}] = {0.01, 0.01, 0.01, 0.97};
  BeamSearcher searcher(beam_options(3, 1.0, false));
  const auto run = drive(searcher, table(probs), 0);
  EXPECT_EQ(run.steps, 3);
  ASSERT_EQ(run.results.size(), 2u);
  EXPECT_EQ(run.results[0].tokens, (std::vector<int64_t>{kA, kA, kA}));
  EXPECT_NEAR(run.results[0].score, std::log(0.5 * 0.33 * 0.97) / 4, 1e-6);
  EXPECT_EQ(run.results[0].finish_reason, FinishReason::kLength);
  EXPECT_EQ(run.results[1].tokens, (std::vector<int64_t>{kA, kB, kB}));
  EXPECT_NEAR(run.results[1].score, std::log(0.5 * 0.32 * 0.97) / 4, 1e-6);
}

TEST(BeamSearchTest, WithoutEarlyStoppingDoneWhenNoBeamCanBeatTheWorstFinished) {
  // Step 3 candidates: A A A .066, A B B .056, ...; log(.066) / cur_len 3 = -0.906 <= -0.886, so the
  // search ends at step 3 although max_new_tokens is 5. (cur_len counts the start token and not the
  // token being chosen: with 4 it would be -0.68 and the search would go on.)
  auto probs = two_finished_after_step_two();
  probs[{0, kA, kA}] = {0.1, 0.2, 0.4, 0.3};
  probs[{0, kA, kB}] = {0.1, 0.25, 0.3, 0.35};
  BeamSearcher searcher(beam_options(5, 1.0, false));
  const auto run = drive(searcher, table(probs), 0);
  EXPECT_EQ(run.steps, 3);
  ASSERT_EQ(run.results.size(), 2u);
  EXPECT_EQ(run.results[0].tokens, (std::vector<int64_t>{kB, kEos}));
  EXPECT_EQ(run.results[1].tokens, (std::vector<int64_t>{kA, kEos}));
}

// early_stopping "never": the same script, but the running beams are scored at the longest length, 6 (the
// start and max_new_tokens 5): log(.066) / 6 = -0.454 may still beat -0.886, so the search goes on. Step 4:
// "A A A EOS" log(.066 * .97) / 4 = -0.687 replaces "A EOS"; "A B B EOS" -0.728 does not enter. Step 5
// (the last): log(.001254 * .5) / 6 = -1.229 cannot beat -0.687.
TEST(BeamSearchTest, EarlyStoppingNeverGoesOnWhileALongerBeamCouldStillWin) {
  auto probs = two_finished_after_step_two();
  probs[{0, kA, kA}] = {0.1, 0.2, 0.4, 0.3};
  probs[{0, kA, kB}] = {0.1, 0.25, 0.3, 0.35};
  probs[{0, kA, kA, kA}] = {0.001, 0.97, 0.019, 0.01};
  probs[{0, kA, kB, kB}] = {0.001, 0.97, 0.01, 0.019};
  probs[{0, kA, kA, kA, kA}] = {0.001, 0.001, 0.5, 0.498};
  probs[{0, kA, kB, kB, kB}] = {0.001, 0.001, 0.5, 0.498};
  auto options = beam_options(5, 1.0, false);
  options.early_stopping = EarlyStopping::kNever;
  BeamSearcher searcher(options);
  const auto run = drive(searcher, table(probs), 0);
  EXPECT_EQ(run.steps, 5);
  ASSERT_EQ(run.results.size(), 2u);
  EXPECT_EQ(run.results[0].tokens, (std::vector<int64_t>{kB, kEos}));
  EXPECT_EQ(run.results[1].tokens, (std::vector<int64_t>{kA, kA, kA, kEos}));
  EXPECT_NEAR(run.results[1].score, std::log(0.5 * 0.33 * 0.4 * 0.97) / 4, 1e-6);
  EXPECT_EQ(run.results[1].finish_reason, FinishReason::kEos);
}

// With length_penalty <= 0 a longer beam only scores lower, and "never" stops where false does (step 3).
TEST(BeamSearchTest, EarlyStoppingNeverWithoutAPositiveLengthPenaltyIsTheHeuristic) {
  auto probs = two_finished_after_step_two();
  probs[{0, kA, kA}] = {0.1, 0.2, 0.4, 0.3};
  probs[{0, kA, kB}] = {0.1, 0.25, 0.3, 0.35};
  for (const double length_penalty : {0.0, -1.0}) {
    auto options = beam_options(5, length_penalty, false);
    BeamSearcher heuristic(options);
    const auto expected = drive(heuristic, table(probs), 0);
    options.early_stopping = EarlyStopping::kNever;
    BeamSearcher never(options);
    const auto run = drive(never, table(probs), 0);
    EXPECT_EQ(run.steps, 3) << "length_penalty " << length_penalty;
    EXPECT_EQ(run.steps, expected.steps);
    ASSERT_EQ(run.results.size(), expected.results.size());
    for (size_t i = 0; i < run.results.size(); ++i) {
      EXPECT_EQ(run.results[i].tokens, expected.results[i].tokens);
      EXPECT_EQ(run.results[i].score, expected.results[i].score);
    }
  }
}

TEST(BeamSearchTest, EosRankedBelowNumBeamsIsNotFinished) {
  // Step 2 candidates: A A .30, A EOS .15 (rank 1: finished), B EOS .135 (rank 2: dropped), B A .105.
  // With early stopping, counting the dropped one would end the search at step 2.
  // Step 3: A A A .12, A A B .09; at the limit they push "A EOS" (log(.15)/2 = -0.949) out.
  const auto script = table({{{0}, kFirst},
                             {{0, kA}, {0.01, 0.3, 0.6, 0.09}},
                             {{0, kB}, {0.01, 0.45, 0.35, 0.19}},
                             {{0, kA, kA}, {0.1, 0.2, 0.4, 0.3}},
                             {{0, kB, kA}, {0.1, 0.25, 0.3, 0.35}}});
  BeamSearcher searcher(beam_options(3, 1.0, true));
  const auto run = drive(searcher, script, 0);
  EXPECT_EQ(run.steps, 3);
  EXPECT_EQ(run.next_tokens[1], (std::vector<int64_t>{kA, kA}));
  EXPECT_EQ(run.parent_rows[1], (std::vector<int64_t>{0, 1}));
  ASSERT_EQ(run.results.size(), 2u);
  EXPECT_EQ(run.results[0].tokens, (std::vector<int64_t>{kA, kA, kA}));
  EXPECT_NEAR(run.results[0].score, std::log(0.5 * 0.6 * 0.4) / 4, 1e-6);
  EXPECT_EQ(run.results[1].tokens, (std::vector<int64_t>{kA, kA, kB}));
  EXPECT_NEAR(run.results[1].score, std::log(0.5 * 0.6 * 0.3) / 4, 1e-6);
}

// Vocabulary 0..4 with EOS ids 1 and 4: any listed id ends a hypothesis (BeamSearchScorer checks each
// token against the list), which keeps the id that ended it; kernels on and off. Step 1: id 4 (0.4) ends
// "" at rank 0, beams A (0.3) and B (0.2). Step 2: A EOS 0.18 and B 4 0.13 end at ranks 0 and 1 (A A
// and A B run on). Of the three, the best two with length_penalty 1: "A" + 1 (log 0.18 / 2) and "" + 4
// (log 0.4 / 1). Only id 1 ended a hypothesis (4 was a word, and the search went on to other histories).
TEST(BeamSearchTest, AnyOfSeveralEosIdsEndsAHypothesisWithThatId) {
  const testing::KernelSwitchesRestored restore_switches;
  const auto script = table({{{0}, {0.05, 0.05, 0.3, 0.2, 0.4}},
                             {{0, kA}, {0.05, 0.6, 0.15, 0.1, 0.1}},
                             {{0, kB}, {0.05, 0.1, 0.1, 0.1, 0.65}}});
  for (const bool kernels : {true, false}) {
    srformer::kernels::set_cpu_kernels(kernels);
    SCOPED_TRACE(kernels ? "kernels on" : "kernels off");
    auto options = beam_options(5, 1.0, true);
    options.extra_eos_token_ids = {4};
    BeamSearcher searcher(options);
    const auto run = drive(searcher, script, 0);
    EXPECT_EQ(run.steps, 2);
    ASSERT_EQ(run.results.size(), 2u);
    EXPECT_EQ(run.results[0].tokens, (std::vector<int64_t>{kA, kEos}));
    EXPECT_NEAR(run.results[0].score, std::log(0.18) / 2, 1e-5);
    EXPECT_EQ(run.results[1].tokens, (std::vector<int64_t>{4}));
    EXPECT_EQ(run.results[1].finish_reason, FinishReason::kEos);
    EXPECT_NEAR(run.results[1].score, std::log(0.4), 1e-5);
    ASSERT_EQ(run.results[1].token_logprobs.size(), 1u);
    EXPECT_NEAR(run.results[1].token_logprobs[0], std::log(0.4), 1e-5);
  }
}

// With n EOS ids Hugging Face takes the best max(2, 1 + n) * num_beams candidates (4.26+), so that each
// beam's EOS ids cannot crowd out every continuation. EOS ids 1 and 4: at step 2 both beams' likeliest
// tokens are the two EOS ids, the best four candidates all EOS. Ranks 0 and 1 end "A" with 1 and with 4,
// ranks 2 and 3 are dropped, and ranks 4 and 5 (A B .025, A A .015) run on; step 3's EOS hypotheses
// (log .0225 / 3) cannot beat the worst finished one (log .2 / 2), and the search ends. It threw "fewer
// than num_beams continuations that are not EOS" after looking at 2 * num_beams; kernels on and off.
TEST(BeamSearchTest, SeveralEosIdsWidenTheCandidatesSoBeamsRunOn) {
  const testing::KernelSwitchesRestored restore_switches;
  const std::vector<double> ending{0.02, 0.9, 0.03, 0.03, 0.02};
  const auto script = table({{{0}, {0.05, 0.05, 0.5, 0.3, 0.1}},
                             {{0, kA}, {0.02, 0.5, 0.03, 0.05, 0.4}},
                             {{0, kB}, {0.02, 0.45, 0.04, 0.04, 0.45}},
                             {{0, kA, kB}, ending},
                             {{0, kA, kA}, ending}});
  for (const bool kernels : {true, false}) {
    srformer::kernels::set_cpu_kernels(kernels);
    SCOPED_TRACE(kernels ? "kernels on" : "kernels off");
    auto options = beam_options(5, 1.0, false);
    options.extra_eos_token_ids = {4};
    BeamSearcher searcher(options);
    const auto run = drive(searcher, script, 0);
    EXPECT_EQ(run.steps, 3);
    EXPECT_EQ(run.next_tokens[1], (std::vector<int64_t>{kB, kA}));
    EXPECT_EQ(run.parent_rows[1], (std::vector<int64_t>{0, 0}));
    ASSERT_EQ(run.results.size(), 2u);
    EXPECT_EQ(run.results[0].tokens, (std::vector<int64_t>{kA, kEos}));
    EXPECT_NEAR(run.results[0].score, std::log(0.25) / 2, 1e-5);
    EXPECT_EQ(run.results[1].tokens, (std::vector<int64_t>{kA, 4}));
    EXPECT_NEAR(run.results[1].score, std::log(0.2) / 2, 1e-5);
  }
}

TEST(BeamSearchTest, RejectsLogitsOfTheWrongShape) {
  BeamSearcher searcher(beam_options(3, 1.0, false));
  EXPECT_THROW(searcher.advance(torch::zeros({1, 4})), std::invalid_argument);
  EXPECT_FALSE(searcher.done());
  EXPECT_TRUE(searcher.results().empty());
}

// Beam steps choose their candidates from the logits in place (kernels::beam_candidates, the
// processors' exclusions applied as rows are read) when the CPU kernels are on; the general path (a
// processed copy, LibTorch's log_softmax) must make the same choices at every step. The script puts
// high scores past the vocabulary limit and on EOS and repeats itself, so that every exclusion
// matters; forced EOS at the last step and a repetition penalty take the general path mid-search.
TEST(BeamSearchTest, InPlaceCandidatesChooseWhatTheProcessedCopyChooses) {
  const testing::KernelSwitchesRestored restore_switches;
  if (!kernels::avx2_fma_available()) GTEST_SKIP() << "no AVX2 + FMA: beam search always takes the general path";
  const int64_t vocab = 300;
  const int64_t limit = 250;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    const auto base = testing::random_script(vocab, seed, kEos);
    const testing::Script script = [&](const History& history) {
      auto logits = base(history);
      for (int64_t t = limit; t < vocab; ++t) logits[static_cast<size_t>(t)] = 20.0F;
      logits[kEos] = 4.5F;                    // EOS, held back by min_new_tokens
      logits[5 + history.size() % 2] = 6.0F;  // an alternation that no_repeat_ngram breaks
      return logits;
    };
    auto options = beam_options(10, 1.0, seed % 2 == 0);
    options.num_beams = 2 + static_cast<int64_t>(seed % 3);
    options.num_return_sequences = options.num_beams;
    options.min_new_tokens = 4;
    options.vocab_limit = limit;
    options.no_repeat_ngram_size = 3;
    if (seed % 4 == 1) options.forced_eos_token_id = kEos;
    if (seed == 12) options.repetition_penalty = 1.3;
    const auto runs = drive_kernels_on_then_off(options, script, seed);
    ASSERT_EQ(runs[0].results.size(), runs[1].results.size()) << seed;
    for (size_t r = 0; r < runs[0].results.size(); ++r) {
      EXPECT_EQ(runs[0].results[r].tokens, runs[1].results[r].tokens) << seed;
      EXPECT_EQ(runs[0].results[r].finish_reason, runs[1].results[r].finish_reason) << seed;
      EXPECT_NEAR(runs[0].results[r].score, runs[1].results[r].score, 1e-5) << seed;
      for (const int64_t t : runs[0].results[r].tokens) EXPECT_LT(t, limit) << seed;
      EXPECT_GE(runs[0].results[r].tokens.size(), 4u) << seed;
    }
  }
}

// A sequence bias changes scores, so its beam steps take the general path (LibTorch's log_softmax and the
// processors on a copy); with the CPU kernels on, the candidates are then read against a bar
// (kernels::best_processed_candidates) rather than offered to a heap one by one: the same steps,
// hypotheses, scores and log-probabilities bit for bit. Half the scripts' logits are rounded to halves,
// so that candidates tie within and across beams.
TEST(BeamSearchTest, WithASequenceBiasTheKernelsChooseBitForBitAsTheHeap) {
  const testing::KernelSwitchesRestored restore_switches;
  const int64_t vocab = 300;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    const auto base = testing::random_script(vocab, seed, kEos);
    const testing::Script script = [&](const History& history) {
      auto logits = base(history);
      if (seed % 2 == 0) {
        for (auto& v : logits) v = std::round(v * 2.0F) / 2.0F;
      }
      return logits;
    };
    auto options = beam_options(12, 1.0, seed % 3 == 0);
    options.num_beams = 2 + static_cast<int64_t>(seed % 3);
    options.num_return_sequences = options.num_beams;
    options.min_new_tokens = 3;
    options.sequence_bias = {{{5}, 3.0}, {{5, 6}, 2.5}, {{7}, -1.0}, {{6, 5}, 0.75}, {{9}, 2.0}, {{9, 9}, -4.0}};
    if (seed == 5) options.vocab_limit = 250;
    const auto runs = drive_kernels_on_then_off(options, script, seed);
    ASSERT_EQ(runs[0].results.size(), runs[1].results.size()) << seed;
    for (size_t r = 0; r < runs[0].results.size(); ++r) {
      EXPECT_EQ(runs[0].results[r].tokens, runs[1].results[r].tokens) << seed;
      EXPECT_EQ(runs[0].results[r].score, runs[1].results[r].score) << seed;
      EXPECT_EQ(runs[0].results[r].token_logprobs, runs[1].results[r].token_logprobs) << seed;
    }
    // The bias acted: 5, 9 or 6 after 5 where the script alone rarely puts them.
    std::set<int64_t> chosen;
    for (const auto& step : runs[0].next_tokens) chosen.insert(step.begin(), step.end());
    EXPECT_TRUE(chosen.count(5) > 0 || chosen.count(9) > 0) << seed;
  }
}

// HF's compute_transition_scores gives each token of a beam hypothesis its entry of that step's
// next_token_scores_processed (the processed log-probability, without the beam score): exactly that
// float, not the difference of two running beam scores, which loses the low bits where the sum is large.
// LibTorch's log_softmax as HF computes it: the general path (the kernels' own normaliser differs from
// it at float rounding, BeamCandidates.MatchHuggingFaceScoresAndOrder).
TEST(BeamSearchTest, TokenLogprobsAreTheStepsProcessedLogProbabilities) {
  const auto script = [](const History& h) -> std::vector<float> {
    if (h.size() == 11) return {-30.0f, -30.0f, 7.0f, 0.0f};  // A likely: log p ~ -9e-4
    if (h.size() == 12) return {0.0f, 8.0f, 0.0f, 0.0f};      // EOS likely: log p ~ -1e-3
    return {-30.0f, -30.0f, 0.0f, 0.0f};                      // A or B, log p ~ -0.69 each
  };
  const auto processed = [&script](const History& history, int64_t token) {
    return torch::log_softmax(torch::tensor(script(history)), 0)[token].item<float>();
  };
  testing::KernelSwitchesRestored restore;
  kernels::set_cpu_kernels(false);
  for (const bool sample : {false, true}) {
    auto options = beam_options(20, 1.0, false);
    options.do_sample = sample;
    options.top_k = 0;
    BeamSearcher searcher(options);
    const auto run = drive(searcher, script, 0);
    ASSERT_EQ(run.results.size(), 2u);
    for (const auto& hypothesis : run.results) {
      ASSERT_EQ(hypothesis.tokens.size(), 12u);
      ASSERT_EQ(hypothesis.token_logprobs.size(), 12u);
      History history{0};
      for (size_t j = 0; j < hypothesis.tokens.size(); ++j) {
        EXPECT_EQ(hypothesis.token_logprobs[j], processed(history, hypothesis.tokens[j]))
            << "token " << j << (sample ? " (sampled)" : "");
        history.push_back(hypothesis.tokens[j]);
      }
    }
  }
}

}  // namespace
}  // namespace srformer

namespace srformer {
namespace {

// Beam sampling (do_sample with beams): 2*num_beams candidates drawn without replacement from the
// softmax over all beams' warped log-probabilities plus beam scores, ranked and kept as beam search
// keeps its top 2*num_beams.
GenerationOptions beam_sampling_options(int64_t beams, uint64_t seed) {
  GenerationOptions o;
  o.decoder_start_token_id = 0;
  o.eos_token_id = 1;
  o.num_beams = beams;
  o.num_return_sequences = beams;
  o.max_new_tokens = 12;
  o.do_sample = true;
  o.seed = seed;
  return o;
}

testing::Run run_beam_search(GenerationOptions o, const testing::Script& script) {
  BeamSearcher searcher(o);
  return testing::drive(searcher, script, 0);
}

std::vector<std::vector<int64_t>> tokens_of(const testing::Run& run) {
  std::vector<std::vector<int64_t>> out;
  for (const auto& h : run.results) out.push_back(h.tokens);
  return out;
}

// Near temperature 0 each step's draws come out in order of score, so beam sampling keeps beam search's
// beams: the same hypotheses, their scores those of the warped log-probabilities (divided by T).
TEST(BeamSamplingTest, AtATinyTemperatureItKeepsBeamSearchsBeams) {
  for (const uint64_t script_seed : {3u, 4u, 5u}) {
    SCOPED_TRACE("script " + std::to_string(script_seed));
    const auto script = testing::random_script(40, script_seed, 1, 1.5f);
    auto searched = beam_sampling_options(3, 0);
    searched.do_sample = false;
    auto sampled = beam_sampling_options(3, 7);
    sampled.temperature = 1e-4;
    const auto want = run_beam_search(searched, script);
    const auto got = run_beam_search(sampled, script);
    EXPECT_EQ(tokens_of(got), tokens_of(want));
    ASSERT_EQ(got.results.size(), want.results.size());
    for (size_t i = 0; i < got.results.size(); ++i) {
      EXPECT_NEAR(got.results[i].score * 1e-4, want.results[i].score, 1e-3 * std::abs(want.results[i].score));
    }
  }
}

// A request's beams depend on its seed only: the same seed draws the same, other seeds draw others.
TEST(BeamSamplingTest, TheSeedDecides) {
  const auto script = testing::random_script(40, 11, 1, 1.0f);
  const auto first = tokens_of(run_beam_search(beam_sampling_options(2, 1), script));
  EXPECT_EQ(tokens_of(run_beam_search(beam_sampling_options(2, 1), script)), first);
  std::set<std::vector<std::vector<int64_t>>> seen{first};
  for (uint64_t seed = 2; seed <= 8; ++seed)
    seen.insert(tokens_of(run_beam_search(beam_sampling_options(2, seed), script)));
  EXPECT_GE(seen.size(), 4u) << "8 seeds at temperature 1 on a flat distribution drew nearly the same beams";
}

// Every candidate a step keeps comes from its beam's top-k (at least 2*num_beams of them, so that a small
// top_k still leaves enough to draw: HF keeps 2 and fails there), and the first step, where only the
// first beam is live, still fills every beam.
TEST(BeamSamplingTest, CandidatesComeFromEachBeamsTopK) {
  const auto script = testing::random_script(40, 21, 1);
  for (const int64_t top_k : {1, 5}) {
    SCOPED_TRACE("top_k " + std::to_string(top_k));
    auto o = beam_sampling_options(2, 5);
    o.top_k = top_k;
    o.max_new_tokens = 6;
    o.min_new_tokens = 6;  // no EOS: every step keeps two beams
    const int64_t keep = std::max<int64_t>(top_k, 2 * o.num_beams);
    BeamSearcher searcher(o);
    std::vector<History> rows(2, History{0});
    while (!searcher.done()) {
      std::vector<float> flat;
      for (const auto& h : rows) {
        const auto l = script(h);
        flat.insert(flat.end(), l.begin(), l.end());
      }
      const auto step = searcher.advance(torch::tensor(flat).view({2, 40}));
      std::vector<History> next;
      for (int64_t i = 0; i < step.parent_rows.numel(); ++i) {
        const auto& parent = rows.at(static_cast<size_t>(step.parent_rows[i].item<int64_t>()));
        const int64_t token = step.next_tokens[i].item<int64_t>();
        auto logits = script(parent);
        logits[1] = -std::numeric_limits<float>::infinity();  // EOS is banned below min_new_tokens
        std::vector<float> sorted = logits;
        std::sort(sorted.begin(), sorted.end(), std::greater<>());
        EXPECT_GE(logits[static_cast<size_t>(token)], sorted[static_cast<size_t>(keep - 1)])
            << "token " << token << " is outside its beam's top " << keep;
        next.push_back(parent);
        next.back().push_back(token);
      }
      ASSERT_EQ(next.size(), 2u);
      rows = std::move(next);
    }
    EXPECT_EQ(searcher.results().size(), 2u);
  }
}

}  // namespace
}  // namespace srformer

namespace srformer {
namespace {

// BART's config forces EOS at the last step (forced_eos_token_id 2): every beam then has one candidate
// with a probability, EOS, and beam sampling must end as beam search does, each beam's EOS a finished
// hypothesis. It threw ("fewer than num_beams continuations that are not EOS; the vocabulary ... is too
// small") once a sampled search reached max_new_tokens, since filtered candidates could not fill the beams.
TEST(BeamSamplingTest, ForcedEosAtTheLastStepEndsEveryBeamWithEos) {
  const auto script = testing::random_script(40, 31, 1);
  for (const int64_t beams : {2, 4}) {
    SCOPED_TRACE("beams " + std::to_string(beams));
    GenerationOptions o;
    o.decoder_start_token_id = 0;
    o.eos_token_id = 1;
    o.num_beams = beams;
    o.num_return_sequences = beams;
    o.max_new_tokens = 5;
    o.min_new_tokens = 4;  // no EOS before the forced one
    o.forced_eos_token_id = 1;
    o.do_sample = true;
    o.seed = 3;
    BeamSearcher searcher(o);
    const auto run = testing::drive(searcher, script, 0);
    ASSERT_EQ(run.results.size(), static_cast<size_t>(beams));
    for (const auto& h : run.results) {
      ASSERT_EQ(h.tokens.size(), 5u);
      EXPECT_EQ(h.tokens.back(), 1) << "the forced EOS";
      EXPECT_EQ(h.finish_reason, FinishReason::kEos);
      EXPECT_TRUE(std::isfinite(h.score));
    }
  }
}

}  // namespace
}  // namespace srformer

namespace srformer {
namespace {

// Diverse (group) beam search: transformers 4.3x's _group_beam_search (its exact decisions over random
// scripts are HuggingFaceReferenceTest.GroupBeamSearchMatchesTheTranscription's).
GenerationOptions group_options(int64_t beams, int64_t groups, double penalty) {
  GenerationOptions o;
  o.decoder_start_token_id = 0;
  o.eos_token_id = 1;
  o.num_beams = beams;
  o.num_beam_groups = groups;
  o.diversity_penalty = penalty;
  o.num_return_sequences = beams;
  o.max_new_tokens = 8;
  return o;
}

void expect_same_runs(const testing::Run& a, const testing::Run& b) {
  EXPECT_EQ(a.steps, b.steps);
  EXPECT_EQ(a.next_tokens, b.next_tokens);
  EXPECT_EQ(a.parent_rows, b.parent_rows);
  ASSERT_EQ(a.results.size(), b.results.size());
  for (size_t i = 0; i < a.results.size(); ++i) {
    EXPECT_EQ(a.results[i].tokens, b.results[i].tokens) << i;
    EXPECT_EQ(a.results[i].score, b.results[i].score) << i;  // bit for bit
    EXPECT_EQ(a.results[i].token_logprobs, b.results[i].token_logprobs) << i;
    EXPECT_EQ(a.results[i].finish_reason, b.results[i].finish_reason) << i;
  }
}

// One group is ordinary beam search, on the kernels' path and the processed copy's alike.
TEST(GroupBeamSearchTest, OneGroupIsPlainBeamSearchBitForBit) {
  const testing::KernelSwitchesRestored restore_switches;
  for (const bool kernels : {true, false}) {
    srformer::kernels::set_cpu_kernels(kernels);
    for (const uint64_t seed : {1, 2, 3}) {
      SCOPED_TRACE("kernels " + std::to_string(kernels) + " seed " + std::to_string(seed));
      const auto script = testing::random_script(30, seed, 1, 1.0f);
      auto plain = group_options(4, 1, 0.0);
      plain.no_repeat_ngram_size = 2;
      BeamSearcher a(plain);
      const auto want = testing::drive(a, script, 0);
      auto one_group = plain;
      one_group.num_beam_groups = 1;
      one_group.diversity_penalty = 0.0;
      one_group.pad_token_id = 5;  // counted only for the groups after a done one: there are none
      BeamSearcher b(one_group);
      expect_same_runs(testing::drive(b, script, 0), want);
    }
  }
}

// Without a penalty every group sees the same scores: each is a beam search of num_beams / num_beam_groups
// beams on its own (the property Hugging Face's group search has), and the results are each of its
// hypotheses once per group.
TEST(GroupBeamSearchTest, WithoutAPenaltyEachGroupIsAnIndependentBeamSearch) {
  for (const uint64_t seed : {4, 5, 6, 7}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const auto script = testing::random_script(20, seed, 1, 1.5f);
    BeamSearcher grouped(group_options(6, 3, 0.0));
    const auto run = testing::drive(grouped, script, 0);
    BeamSearcher alone(group_options(2, 1, 0.0));
    const auto want = testing::drive(alone, script, 0);
    ASSERT_EQ(run.steps, want.steps);
    for (size_t s = 0; s + 1 < want.next_tokens.size(); ++s) {
      std::vector<int64_t> tokens, parents;
      for (int64_t g = 0; g < 3; ++g) {
        tokens.insert(tokens.end(), want.next_tokens[s].begin(), want.next_tokens[s].end());
        for (const int64_t p : want.parent_rows[s]) parents.push_back(p + 2 * g);
      }
      EXPECT_EQ(run.next_tokens[s], tokens) << "step " << s;
      EXPECT_EQ(run.parent_rows[s], parents) << "step " << s;
    }
    ASSERT_EQ(run.results.size(), 6u);
    ASSERT_EQ(want.results.size(), 2u);
    for (size_t i = 0; i < 6; ++i) {
      // Equal scores: HF's stable sort puts the later group's first, which holds the same sequence.
      EXPECT_EQ(run.results[i].tokens, want.results[i / 3].tokens) << i;
      EXPECT_EQ(run.results[i].score, want.results[i / 3].score) << i;
      EXPECT_EQ(run.results[i].token_logprobs, want.results[i / 3].token_logprobs) << i;
    }
  }
}

// Hand-worked on kLengthScript (A 0.5, B 0.3, EOS 0.15 after the start), two groups of one beam, one step:
// group 0 takes A; group 1's A scores log(0.5) - penalty, which B's log(0.3) = -1.204 beats once the
// penalty passes log(0.5) - log(0.3) = 0.511.
TEST(GroupBeamSearchTest, ThePenaltyLowersTheTokensEarlierGroupsChose) {
  for (const double penalty : {0.5, 1.0}) {
    SCOPED_TRACE("penalty " + std::to_string(penalty));
    auto o = group_options(2, 2, penalty);
    o.max_new_tokens = 1;
    BeamSearcher searcher(o);
    const auto run = testing::drive(searcher, kLengthScript, 0);
    ASSERT_EQ(run.results.size(), 2u);
    const int64_t second = penalty < 0.511 ? kA : kB;
    // The beam's log-probability, and so its score (length 2 with the start token), carries the penalty.
    const float logprob = penalty < 0.511 ? static_cast<float>(std::log(0.5)) - static_cast<float>(penalty)
                                          : static_cast<float>(std::log(0.3));
    EXPECT_EQ(run.results[0].tokens, (std::vector<int64_t>{kA}));
    EXPECT_NEAR(run.results[0].score, std::log(0.5) / 2, 1e-6);
    EXPECT_EQ(run.results[1].tokens, (std::vector<int64_t>{second}));
    ASSERT_EQ(run.results[1].token_logprobs.size(), 1u);
    EXPECT_FLOAT_EQ(run.results[1].token_logprobs[0], logprob);
    EXPECT_NEAR(run.results[1].score, logprob / 2.0, 1e-6);
  }
}

// A large penalty leaves each group only tokens no earlier group chose at this step: the groups' first
// tokens are all different. Without it they are the same in every group.
TEST(GroupBeamSearchTest, ALargePenaltyGivesEachGroupOtherFirstTokens) {
  const testing::KernelSwitchesRestored restore_switches;
  for (const bool kernels : {true, false}) {
    srformer::kernels::set_cpu_kernels(kernels);
    for (const double penalty : {0.0, 100.0}) {
      SCOPED_TRACE("kernels " + std::to_string(kernels) + " penalty " + std::to_string(penalty));
      BeamSearcher searcher(group_options(6, 3, penalty));
      const auto run = testing::drive(searcher, testing::random_script(20, 9, 1), 0);
      ASSERT_FALSE(run.next_tokens.empty());
      const auto& first = run.next_tokens[0];
      ASSERT_EQ(first.size(), 6u);
      std::set<int64_t> groups_tokens[3];
      for (size_t r = 0; r < 6; ++r) groups_tokens[r / 2].insert(first[r]);
      for (int g = 1; g < 3; ++g) {
        for (int earlier = 0; earlier < g; ++earlier) {
          for (const int64_t t : groups_tokens[g]) {
            EXPECT_EQ(groups_tokens[earlier].count(t), penalty > 0 ? 0u : 1u) << "group " << g << " token " << t;
          }
        }
      }
    }
  }
}

// Group 0 ends at step 2 (early_stopping: one hypothesis fills a group of one) and leaves the batch; at
// step 3 group 1 runs alone, and Hugging Face's pad token, fed to the done group's beams, counts against
// group 1's choice. Vocabulary: 0 start, 1 EOS, 2 A, 3 B; penalty 1.
TEST(GroupBeamSearchTest, ADoneGroupLeavesTheBatchAndCountsAsThePadToken) {
  const auto script = table({{{0}, {0.01, 0.01, 0.5, 0.48}},
                             {{0, kA}, {0.01, 0.9, 0.05, 0.04}},
                             {{0, kB}, {0.01, 0.01, 0.3, 0.68}},
                             {{0, kB, kB}, {0.01, 0.2, 0.45, 0.34}}});
  for (const int64_t pad : {int64_t{0}, kA}) {
    SCOPED_TRACE("pad " + std::to_string(pad));
    auto o = group_options(2, 2, 1.0);
    o.max_new_tokens = 3;
    o.early_stopping = EarlyStopping::kWhenFull;
    o.pad_token_id = pad;
    BeamSearcher searcher(o);
    const auto run = testing::drive(searcher, script, 0);
    ASSERT_EQ(run.steps, 3);
    // Step 1: group 0 takes A; group 1's A scores log(.5) - 1 below B's log(.48). Step 2: group 0 finishes
    // "A EOS" (and leaves), group 1 goes on with B.
    EXPECT_EQ(run.next_tokens[0], (std::vector<int64_t>{kA, kB}));
    EXPECT_EQ(run.next_tokens[1], (std::vector<int64_t>{kB}));
    EXPECT_EQ(run.parent_rows[1], (std::vector<int64_t>{1}));
    ASSERT_EQ(run.results.size(), 2u);
    EXPECT_EQ(run.results[0].tokens, (std::vector<int64_t>{kA, kEos}));
    // Step 3: A (0.45) wins unless it is the pad token: log(.45) - 1 then falls below B's log(.34).
    EXPECT_EQ(run.results[1].tokens, (std::vector<int64_t>{kB, kB, pad == kA ? kB : kA}));
    EXPECT_EQ(run.results[1].finish_reason, FinishReason::kLength);
  }
}

}  // namespace
}  // namespace srformer
