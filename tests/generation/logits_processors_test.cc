#include "model/generation/logits_processors.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

namespace srformer {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

torch::Tensor row(const std::vector<float>& values) { return torch::tensor(values).view({1, -1}); }

std::vector<float> values(const torch::Tensor& t) {
  const auto c = t.contiguous();
  return {c.data_ptr<float>(), c.data_ptr<float>() + c.numel()};
}

// process_logits as the searchers call it, with the options' sequence_bias prepared.
void process(const GenerationOptions& options, const std::vector<TokenHistory>& histories, const torch::Tensor& scores,
             VocabLimit vocab_limit = VocabLimit::kApply, const std::vector<int64_t>& earlier_group_tokens = {}) {
  process_logits(options, SequenceBias(options.sequence_bias), histories, scores, vocab_limit, earlier_group_tokens);
}

std::vector<float> log_of(const std::vector<double>& p) {
  std::vector<float> out;
  for (const double v : p) out.push_back(static_cast<float>(std::log(v)));
  return out;
}

// The tokens a filter left finite.
std::vector<int64_t> kept(const torch::Tensor& t) {
  std::vector<int64_t> out;
  const auto v = values(t);
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::isfinite(v[i])) out.push_back(static_cast<int64_t>(i));
  }
  return out;
}

TEST(RepetitionPenaltyTest, DividesPositiveAndMultipliesNegativeScoresOfSeenTokensOnce) {
  const auto scores = row({2.0f, -1.0f, 0.5f, -3.0f, 1.0f});
  // Token 1 appears twice but is penalised once; token 0 is the decoder start and counts.
  apply_repetition_penalty(scores, {{0, 1, 1, 3}}, 2.0);
  EXPECT_EQ(values(scores), (std::vector<float>{1.0f, -2.0f, 0.5f, -6.0f, 1.0f}));
}

TEST(RepetitionPenaltyTest, AppliesPerRow) {
  const auto scores = torch::tensor({1.0f, 1.0f, 1.0f, 1.0f}).view({2, 2});
  apply_repetition_penalty(scores, {{0, 0}, {1, 1}}, 4.0);
  EXPECT_EQ(values(scores), (std::vector<float>{0.25f, 1.0f, 1.0f, 0.25f}));
}

TEST(NoRepeatNGramTest, BansTheTokenThatWouldRepeatAnNGram) {
  // History (decoder start 0 included): 0 5 6 7 5 6.
  const std::vector<int64_t> history{0, 5, 6, 7, 5, 6};
  EXPECT_EQ(banned_ngram_tokens(history, 3), (std::vector<int64_t>{7}));  // "5 6 7" seen
  EXPECT_EQ(banned_ngram_tokens(history, 2), (std::vector<int64_t>{7}));  // "6 7" seen
  EXPECT_EQ(banned_ngram_tokens(history, 4), (std::vector<int64_t>{}));   // "7 5 6 ?" new
  EXPECT_EQ(banned_ngram_tokens(history, 1), (std::vector<int64_t>{0, 5, 6, 7, 5, 6}));
  EXPECT_EQ(banned_ngram_tokens({0}, 3), (std::vector<int64_t>{}));
  EXPECT_EQ(banned_ngram_tokens({0, 5}, 3), (std::vector<int64_t>{}));
  // The decoder start token takes part in n-grams, as in HF (input_ids include it).
  EXPECT_EQ(banned_ngram_tokens({2, 9, 2}, 2), (std::vector<int64_t>{9}));
}

TEST(NoRepeatNGramTest, SetsBannedScoresToMinusInfinity) {
  const auto scores = torch::zeros({2, 8});
  apply_no_repeat_ngram(scores, {{0, 5, 6, 7, 5, 6}, {0, 1, 2, 3, 4, 1}}, 2);
  EXPECT_EQ(kept(scores[0].view({1, -1})), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(kept(scores[1].view({1, -1})), (std::vector<int64_t>{0, 1, 3, 4, 5, 6, 7}));
}

TEST(ProcessLogitsTest, MinNewTokensSuppressesEosUntilEnoughTokens) {
  GenerationOptions options;
  options.eos_token_id = 1;
  options.min_new_tokens = 2;  // HF min_length 3
  for (int64_t generated = 0; generated <= 3; ++generated) {
    std::vector<int64_t> history(static_cast<size_t>(generated + 1), 2);
    const auto scores = row({0.0f, 5.0f, 1.0f});
    process(options, {history}, scores);
    EXPECT_EQ(std::isinf(values(scores)[1]), generated < 2) << generated;
    EXPECT_EQ(values(scores)[2], 1.0f);
  }
}

TEST(ProcessLogitsTest, IdsPastTheTokenizerVocabularyAreNeverChosen) {
  GenerationOptions options;
  options.vocab_limit = 6;  // a model with 8 embedding rows, a tokenizer with 6 tokens
  auto scores = torch::tensor({{0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 9.0f, 8.0f}});
  process(options, {{0}}, scores);
  EXPECT_EQ(scores.argmax(-1).item<int64_t>(), 5);
  EXPECT_TRUE(std::isinf(scores[0][6].item<float>()) && std::isinf(scores[0][7].item<float>()));
  EXPECT_FLOAT_EQ(scores[0][5].item<float>(), 0.6f);
  auto same = torch::tensor({{0.1f, 9.0f}});
  options.vocab_limit = 2;  // no rows past the vocabulary: nothing changes
  process(options, {{0}}, same);
  EXPECT_FLOAT_EQ(same[0][1].item<float>(), 9.0f);
}

TEST(ProcessLogitsTest, ForcedBosAtTheFirstStepOnly) {
  GenerationOptions options;
  options.forced_bos_token_id = 3;
  const auto first = row({1.0f, 2.0f, 3.0f, -1.0f});
  process(options, {{0}}, first);
  EXPECT_EQ(values(first), (std::vector<float>{-kInf, -kInf, -kInf, 0.0f}));
  const auto second = row({1.0f, 2.0f, 3.0f, -1.0f});
  process(options, {{0, 3}}, second);
  EXPECT_EQ(values(second), (std::vector<float>{1.0f, 2.0f, 3.0f, -1.0f}));
}

TEST(ProcessLogitsTest, ForcedEosAtTheLastStepOnlyAndOverMinLength) {
  GenerationOptions options;
  options.max_new_tokens = 4;  // HF max_length 5: forced at cur_len 4, i.e. for the 4th new token
  options.min_new_tokens = 4;  // would ban EOS, but forced EOS comes later in HF's order
  options.eos_token_id = 1;
  options.forced_eos_token_id = 1;
  const auto before = row({1.0f, 2.0f, 3.0f});
  process(options, {{0, 2, 2}}, before);
  EXPECT_EQ(values(before), (std::vector<float>{1.0f, -kInf, 3.0f}));
  const auto last = row({1.0f, 2.0f, 3.0f});
  process(options, {{0, 2, 2, 2}}, last);
  EXPECT_EQ(values(last), (std::vector<float>{-kInf, 0.0f, -kInf}));
}

// Lists of EOS ids: MinLengthLogitsProcessor keeps every listed id out, ForcedEOSTokenLogitsProcessor
// gives every listed forced id 0 (transformers 4.26+); the tokens the kernels' path excludes agree.
TEST(ProcessLogitsTest, EveryListedEosIdIsHeldBackAndEveryForcedIdForced) {
  GenerationOptions options;
  options.max_new_tokens = 4;
  options.min_new_tokens = 2;
  options.eos_token_id = 3;
  options.extra_eos_token_ids = {1};
  const auto early = row({1.0f, 2.0f, 3.0f, 4.0f, 5.0f});
  process(options, {{0, 2}}, early);
  EXPECT_EQ(values(early), (std::vector<float>{1.0f, -kInf, 3.0f, -kInf, 5.0f}));
  EXPECT_EQ(excluded_tokens(options, {0, 2}, 5), (std::vector<int64_t>{1, 3}));
  const auto later = row({1.0f, 2.0f, 3.0f, 4.0f, 5.0f});
  process(options, {{0, 2, 2}}, later);
  EXPECT_EQ(values(later), (std::vector<float>{1.0f, 2.0f, 3.0f, 4.0f, 5.0f}));
  options.forced_eos_token_id = 4;
  options.extra_forced_eos_token_ids = {1};
  const auto last = row({1.0f, 2.0f, 3.0f, 4.0f, 5.0f});
  process(options, {{0, 2, 2, 2}}, last);
  EXPECT_EQ(values(last), (std::vector<float>{-kInf, 0.0f, -kInf, -kInf, 0.0f}));
  EXPECT_EQ(forced_tokens(options, 4), (std::vector<int64_t>{4, 1}));
  EXPECT_TRUE(forced_tokens(options, 3).empty());
}

TEST(ProcessLogitsTest, RepetitionPenaltyThenNoRepeatNGram) {
  GenerationOptions options;
  options.repetition_penalty = 2.0;
  options.no_repeat_ngram_size = 2;
  options.eos_token_id = 7;
  const auto scores = row({4.0f, 4.0f, -4.0f, 4.0f, 4.0f, 4.0f, 4.0f, 4.0f});
  process(options, {{0, 5, 6, 5, 2}}, scores);
  // Penalised: 0, 2, 5, 6. No ban: the last token (2) has not been followed by anything yet.
  EXPECT_EQ(values(scores), (std::vector<float>{2.0f, 4.0f, -8.0f, 4.0f, 4.0f, 2.0f, 2.0f, 4.0f}));
  const auto again = row({4.0f, 4.0f, -4.0f, 4.0f, 4.0f, 4.0f, 4.0f, 4.0f});
  process(options, {{0, 5, 6, 5}}, again);  // "5 6" seen: 6 banned
  EXPECT_EQ(values(again), (std::vector<float>{2.0f, 4.0f, -4.0f, 4.0f, 4.0f, 2.0f, -kInf, 4.0f}));
}

// HF's HammingDiversityLogitsProcessor: scores -= penalty * bincount(earlier groups' tokens), a float32
// product subtracted once per token, in every row of the group; ids outside the vocabulary count for none.
TEST(HammingDiversityTest, LowersEachTokenByThePenaltyTimesItsCountInEveryRow) {
  auto scores = torch::tensor({-1.0f, -2.0f, -3.0f, -kInf, -1.0f, -2.0f, -3.0f, -4.0f}).view({2, 4});
  apply_hamming_diversity(scores, {2, 0, 2, 9, -1}, 0.1);
  const float twice = 0.1f * 2.0f;
  EXPECT_EQ(values(scores),
            (std::vector<float>{-1.0f - 0.1f, -2.0f, -3.0f - twice, -kInf, -1.0f - 0.1f, -2.0f, -3.0f - twice, -4.0f}));
  const auto untouched = row({-1.0f, -2.0f});
  apply_hamming_diversity(untouched, {}, 5.0);
  EXPECT_EQ(values(untouched), (std::vector<float>{-1.0f, -2.0f}));
}

// Second in HF's list: the sequence bias acts before it, the repetition penalty (and the rest) after, on the
// lowered scores; greedy search and sampling (no earlier groups) are untouched by a diversity_penalty.
TEST(ProcessLogitsTest, HammingDiversityComesAfterTheSequenceBiasAndBeforeTheRepetitionPenalty) {
  GenerationOptions options;
  options.eos_token_id = 7;
  options.num_beams = 2;
  options.num_beam_groups = 2;
  options.diversity_penalty = 0.5;
  options.repetition_penalty = 2.0;
  options.sequence_bias = {{{3}, 1.0}};
  const auto scores = row({-1.0f, -1.0f, -1.0f, -1.0f, -1.0f, -1.0f, -1.0f, -1.0f});
  process(options, {{0, 2, 3}}, scores, VocabLimit::kApply, {2, 3, 4});
  // 2: (-1 - .5) * 2; 3: (-1 + 1 - .5) * 2; 4: -1 - .5 (not in the history); 0: -1 * 2 (the start token).
  EXPECT_EQ(values(scores), (std::vector<float>{-2.0f, -1.0f, -3.0f, -1.0f, -1.5f, -1.0f, -1.0f, -1.0f}));
  const auto alone = row({-1.0f, -1.0f, -1.0f, -1.0f, -1.0f, -1.0f, -1.0f, -1.0f});
  process(options, {{0, 2, 3}}, alone);
  EXPECT_EQ(values(alone), (std::vector<float>{-2.0f, -1.0f, -2.0f, 0.0f, -1.0f, -1.0f, -1.0f, -1.0f}));
}

// HF: penalty' = 1 / penalty; a gathered score s < 0 becomes s * penalty', else s / penalty'.
TEST(EncoderRepetitionPenaltyTest, FavoursTheInputsTokensInEveryRowOnce) {
  const auto scores = torch::tensor({2.0f, -1.0f, 0.5f, -3.0f, 1.0f, 2.0f, -1.0f, 0.5f, -3.0f, 1.0f}).view({2, 5});
  // Token 3 is in the input twice but changed once; 1 / 2 = 0.5: -1 -> -0.5, -3 -> -1.5, 1 -> 2.
  apply_encoder_repetition_penalty(scores, {1, 3, 3, 4}, 2.0);
  EXPECT_EQ(values(scores), (std::vector<float>{2.0f, -0.5f, 0.5f, -1.5f, 2.0f, 2.0f, -0.5f, 0.5f, -1.5f, 2.0f}));
  // Below 1 it penalises: 1 / 0.5 = 2.
  const auto penalised = row({2.0f, -1.0f});
  apply_encoder_repetition_penalty(penalised, {0, 1}, 0.5);
  EXPECT_EQ(values(penalised), (std::vector<float>{1.0f, -2.0f}));
  EXPECT_THROW(apply_encoder_repetition_penalty(row({1.0f, 2.0f}), {2}, 2.0), std::out_of_range);
}

// HF's EncoderNoRepeatNGramLogitsProcessor: the input's n-grams keyed by their first n - 1 tokens; the
// history's last n - 1 tokens (decoder start included) name the banned ones.
TEST(EncoderNoRepeatNGramTest, BansWhatWouldRepeatAnNGramOfTheInput) {
  const std::vector<int64_t> input{5, 6, 7, 5, 6, 8};
  EXPECT_EQ(banned_encoder_ngram_tokens(input, {0, 5, 6}, 3), (std::vector<int64_t>{7, 8}));  // "5 6 7", "5 6 8"
  EXPECT_EQ(banned_encoder_ngram_tokens(input, {0, 9, 6}, 2), (std::vector<int64_t>{7, 8}));  // "6 7", "6 8"
  EXPECT_EQ(banned_encoder_ngram_tokens(input, {0, 5, 6}, 4), (std::vector<int64_t>{}));      // "0 5 6" not in it
  EXPECT_EQ(banned_encoder_ngram_tokens(input, {0, 7}, 2), (std::vector<int64_t>{5}));
  EXPECT_EQ(banned_encoder_ngram_tokens(input, {0}, 1), input);                     // every input token
  EXPECT_EQ(banned_encoder_ngram_tokens(input, {0}, 3), (std::vector<int64_t>{}));  // shorter than n - 1
  // The decoder start is part of the key while the history is n - 1 long.
  EXPECT_EQ(banned_encoder_ngram_tokens({4, 0, 9}, {0}, 2), (std::vector<int64_t>{9}));
  EXPECT_EQ(banned_encoder_ngram_tokens({4, 0, 9}, {0, 9}, 2), (std::vector<int64_t>{}));
  const auto scores = torch::zeros({2, 10});
  apply_encoder_no_repeat_ngram(scores, input, {{0, 5, 6}, {0, 5, 7}}, 3);
  EXPECT_EQ(kept(scores[0].view({1, -1})), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 9}));
  EXPECT_EQ(kept(scores[1].view({1, -1})), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

TEST(ProcessLogitsTest, EncoderSettingsReadTheEncoderInput) {
  GenerationOptions options;
  options.eos_token_id = 7;
  options.encoder_no_repeat_ngram_size = 2;
  options.encoder_input_ids = {3, 4, 3, 5};
  // Exclusions only: the searchers' kernels may skip the banned tokens where they lie.
  const auto excluded = excluded_tokens(options, {0, 3}, 8);
  ASSERT_TRUE(excluded.has_value());
  EXPECT_EQ(*excluded, (std::vector<int64_t>{4, 5}));
  const auto banned = row({1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f});
  process(options, {{0, 3}}, banned);
  EXPECT_EQ(values(banned), (std::vector<float>{1.0f, 1.0f, 1.0f, 1.0f, -kInf, -kInf, 1.0f, 1.0f}));
  // The penalty changes scores: no in-place path. It comes first, then the n-gram ban.
  options.encoder_repetition_penalty = 4.0;
  EXPECT_FALSE(excluded_tokens(options, {0, 3}, 8).has_value());
  const auto scores = row({-1.0f, -1.0f, -1.0f, -1.0f, -1.0f, 2.0f, 2.0f, 2.0f});
  process(options, {{0, 4}}, scores);  // "4 3" in the input: 3 banned
  EXPECT_EQ(values(scores), (std::vector<float>{-1.0f, -1.0f, -1.0f, -kInf, -0.25f, 8.0f, 2.0f, 2.0f}));
}

// HF 4.34+'s NoBadWordsLogitsProcessor: one-token sequences always (an EOS-only one dropped); a longer one's
// last token where it is no longer than the history (decoder start included) and the history ends with
// the rest of it.
TEST(BadWordsTest, BansOneTokenSequencesAlwaysAndLongerOnesWhereTheHistoryEndsWithTheirPrefix) {
  GenerationOptions options;
  options.eos_token_id = 1;
  options.bad_words_ids = {{4}, {1}, {5, 6}, {0, 7}, {2, 3, 8}};
  EXPECT_EQ(banned_bad_words(options, {0}), (std::vector<int64_t>{4}));  // [0, 7] is longer than the history
  EXPECT_EQ(banned_bad_words(options, {0, 5}), (std::vector<int64_t>{4, 6}));
  EXPECT_EQ(banned_bad_words(options, {0, 2, 3}), (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(banned_bad_words(options, {0, 0}), (std::vector<int64_t>{4, 7}));
  EXPECT_EQ(banned_bad_words(options, {0, 3}), (std::vector<int64_t>{4}));
  const auto scores = torch::zeros({2, 9});
  apply_bad_words(scores, options, {{0, 5}, {0, 2, 3}});
  EXPECT_EQ(kept(scores[0].view({1, -1})), (std::vector<int64_t>{0, 1, 2, 3, 5, 7, 8}));
  EXPECT_EQ(kept(scores[1].view({1, -1})), (std::vector<int64_t>{0, 1, 2, 3, 5, 6, 7}));
  // Exclusions only: the kernels' in-place path takes them.
  const auto excluded = excluded_tokens(options, {0, 5}, 9);
  ASSERT_TRUE(excluded.has_value());
  EXPECT_EQ(*excluded, (std::vector<int64_t>{4, 6}));
  // Any listed id must lie in the vocabulary, as HF checks.
  torch::Tensor buffer;
  EXPECT_THROW(scores_from_logits(torch::zeros({1, 8}), 1, options, buffer), std::invalid_argument);
  EXPECT_NO_THROW(scores_from_logits(torch::zeros({1, 9}), 1, options, buffer));
}

TEST(SuppressTokensTest, AlwaysAndAtTheFirstFreeStepAfterTheForcedTokens) {
  GenerationOptions options;
  options.eos_token_id = 1;
  options.max_new_tokens = 4;
  options.suppress_tokens = {3, 50};  // 50 is past the vocabulary: ignored, as HF's isin ignores it
  options.begin_suppress_tokens = {2};
  EXPECT_EQ(suppressed_tokens(options, 1, 10), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(suppressed_tokens(options, 2, 10), (std::vector<int64_t>{3}));
  const auto excluded = excluded_tokens(options, {0}, 10);
  ASSERT_TRUE(excluded.has_value());
  EXPECT_EQ(*excluded, (std::vector<int64_t>{2, 3}));
  // With a forced BOS the first free token is the second.
  options.forced_bos_token_id = 2;
  EXPECT_EQ(suppressed_tokens(options, 1, 10), (std::vector<int64_t>{3}));
  EXPECT_EQ(suppressed_tokens(options, 2, 10), (std::vector<int64_t>{3, 2}));
  // After the forced tokens: a suppressed forced EOS leaves nothing.
  options.forced_bos_token_id.reset();
  options.forced_eos_token_id = 3;
  const auto last = row({1.0f, 2.0f, 3.0f, 4.0f, 5.0f});
  process(options, {{0, 4, 4, 4}}, last);
  EXPECT_EQ(values(last), (std::vector<float>{-kInf, -kInf, -kInf, -kInf, -kInf}));
}

// HF's ExponentialDecayLengthPenalty with exponential_decay_length_penalty (2, 1.5): regulation start
// 2 + 1 (the decoder input); at cur_len 4 each EOS score s gains |s| * (1.5^1 - 1), at 5 |s| * (1.5^2 - 1).
TEST(ExponentialDecayLengthPenaltyTest, EosScoresGainTheirMagnitudeTimesTheFactorsPowerLessOne) {
  const std::vector<int64_t> eos{1, 3};
  const auto at = [&eos](int64_t cur_len, double factor) {
    const auto scores = row({0.5f, -2.0f, 1.0f, 4.0f});
    apply_exponential_decay_length_penalty(scores, cur_len, 2, factor, eos);
    return values(scores);
  };
  EXPECT_EQ(at(3, 1.5), (std::vector<float>{0.5f, -2.0f, 1.0f, 4.0f}));  // not past the start
  EXPECT_EQ(at(4, 1.5), (std::vector<float>{0.5f, -1.0f, 1.0f, 6.0f}));  // -2 + 2 * .5, 4 + 4 * .5
  EXPECT_EQ(at(5, 1.5), (std::vector<float>{0.5f, 0.5f, 1.0f, 9.0f}));   // -2 + 2 * 1.25, 4 + 4 * 1.25
  EXPECT_EQ(at(4, 0.5), (std::vector<float>{0.5f, -3.0f, 1.0f, 2.0f}));  // below 1 EOS falls: -2 - 1, 4 - 2
  // A banned EOS stays banned (HF's -inf + inf would be NaN).
  const auto banned = row({0.5f, -kInf, 1.0f, 4.0f});
  apply_exponential_decay_length_penalty(banned, 5, 2, 1.5, eos);
  EXPECT_EQ(values(banned), (std::vector<float>{0.5f, -kInf, 1.0f, 9.0f}));
  // Through process_logits with the options' EOS ids, and not as exclusions once it acts.
  GenerationOptions options;
  options.eos_token_id = 1;
  options.exponential_decay_length_penalty = std::pair<int64_t, double>{2, 1.5};
  const auto scores = row({0.5f, -2.0f, 1.0f, 4.0f});
  process(options, {{0, 2, 2, 2}}, scores);
  EXPECT_EQ(values(scores), (std::vector<float>{0.5f, -1.0f, 1.0f, 4.0f}));
  EXPECT_TRUE(excluded_tokens(options, {0, 2, 2}, 4).has_value());
  EXPECT_FALSE(excluded_tokens(options, {0, 2, 2, 2}, 4).has_value());
}

// HF's SequenceBiasLogitsProcessor over the pairs as its dict holds them: [5] once, with its last bias 0.5;
// a longer sequence biases its last token where the history ends with the rest of it and is no shorter.
TEST(SequenceBiasTest, BiasesTheLastTokenWhereTheHistoryEndsWithTheRestAndALaterRepeatWins) {
  const std::vector<std::pair<std::vector<int64_t>, double>> bias{
      {{5}, 1.5}, {{2, 6}, -2.0}, {{5}, 0.5}, {{3, 4, 5}, 1.0}, {{2, 5}, 0.25}};
  const auto scores = torch::zeros({4, 8});
  SequenceBias(bias).apply(scores, {{0, 2}, {0, 3, 4}, {0}, {3, 4}});
  EXPECT_EQ(values(scores[0]), (std::vector<float>{0, 0, 0, 0, 0, 0.75f, -2.0f, 0}));  // 0.5 + 0.25; [2, 6]
  EXPECT_EQ(values(scores[1]), (std::vector<float>{0, 0, 0, 0, 0, 1.5f, 0, 0}));       // 0.5 + 1.0
  EXPECT_EQ(values(scores[2]), (std::vector<float>{0, 0, 0, 0, 0, 0.5f, 0, 0}));       // one token only
  // The history is all of [3, 4, 5] but its last token, yet shorter than it: HF skips the sequence.
  EXPECT_EQ(values(scores[3]), (std::vector<float>{0, 0, 0, 0, 0, 0.5f, 0, 0}));
  // First in HF's order, and never as exclusions.
  GenerationOptions options;
  options.sequence_bias = {{{3}, -1.0}};
  options.repetition_penalty = 2.0;
  const auto penalised = row({1.0f, 1.0f, 1.0f, 3.0f});
  process(options, {{0, 3}}, penalised);
  EXPECT_EQ(values(penalised), (std::vector<float>{0.5f, 1.0f, 1.0f, 1.0f}));  // (3 - 1) / 2, not 3 / 2 - 1
  options.repetition_penalty = 1.0;
  EXPECT_FALSE(excluded_tokens(options, {0}, 4).has_value());
  torch::Tensor buffer;
  options.sequence_bias = {{{2, 4}, 1.0}};
  EXPECT_THROW(scores_from_logits(torch::zeros({1, 4}), 1, options, buffer), std::invalid_argument);
}

// A searcher prepares its sequence_bias once (SequenceBias) and applies it at every step: each step's
// scores are those of HF's processor, which adds to them a bias tensor made of the one-token sequences'
// biases and, in its dict's order, every longer sequence the row's history completes, bit for bit, whether
// the scores are contiguous or not.
TEST(SequenceBiasTest, APreparedListBiasesEveryStepAsHuggingFaceDoes) {
  const std::vector<std::pair<std::vector<int64_t>, double>> pairs{
      {{3}, 1.5}, {{2, 3}, -0.7}, {{3, 4, 3}, 0.3}, {{2}, -2.25}, {{4, 3}, 0.1},
      {{3}, 0.4}, {{5, 5}, 1e-3}, {{2, 3}, 0.9},    {{4}, 7.0},   {{4, 2, 3}, -1e-2}};
  // HF's dict: a repeat keeps its first place and takes its last bias.
  std::vector<std::pair<std::vector<int64_t>, float>> dict;
  for (const auto& [sequence, bias] : pairs) {
    const auto same = std::find_if(dict.begin(), dict.end(), [&](const auto& e) { return e.first == sequence; });
    if (same != dict.end()) {
      same->second = static_cast<float>(bias);
    } else {
      dict.emplace_back(sequence, static_cast<float>(bias));
    }
  }
  const int64_t vocab = 7;
  const auto hugging_face = [&](const torch::Tensor& scores, const std::vector<TokenHistory>& histories) {
    auto bias = torch::zeros_like(scores);
    for (const auto& [sequence, value] : dict) {
      if (sequence.size() == 1) bias.select(1, sequence.front()).fill_(value);  // length_1_bias
    }
    for (const auto& [sequence, value] : dict) {
      for (size_t r = 0; r < histories.size(); ++r) {
        const auto& h = histories[r];
        const size_t rest = sequence.size() - 1;
        if (sequence.size() > 1 && sequence.size() <= h.size() &&
            std::equal(sequence.begin(), sequence.end() - 1, h.end() - static_cast<std::ptrdiff_t>(rest))) {
          auto cell = bias[static_cast<int64_t>(r)][sequence.back()];
          cell.add_(value);
        }
      }
    }
    return scores + bias;
  };
  const SequenceBias prepared(pairs);
  torch::manual_seed(3);
  std::vector<TokenHistory> histories{{0}, {0}, {0}};
  for (int step = 0; step < 12; ++step) {
    const auto logits = torch::randn({3, vocab});
    const auto expected = hugging_face(logits, histories);
    const auto contiguous = logits.clone();
    prepared.apply(contiguous, histories);
    EXPECT_TRUE(torch::equal(contiguous, expected)) << "step " << step;
    const auto strided = logits.t().contiguous().t();  // column-major: stride(1) != 1
    ASSERT_NE(strided.stride(1), 1);
    prepared.apply(strided, histories);
    EXPECT_TRUE(torch::equal(strided, expected)) << "step " << step;
    for (size_t r = 0; r < histories.size(); ++r) histories[r].push_back(2 + (step * 5 + static_cast<int>(r)) % 4);
  }
  EXPECT_THROW(prepared.apply(torch::zeros({1, 4}), {{0}}), std::out_of_range);  // token 4 and 5 past it
  EXPECT_THROW(SequenceBias({{{}, 1.0}}), std::invalid_argument);
}

// ForceTokensLogitsProcessor (transformers 4.27-4.39): {index: token} of the pairs, the last of an index
// winning and a null token forcing nothing; applied last, so a suppressed token is still forced; the
// begin-suppressed tokens wait for the step after the last pair's index.
TEST(ForcedDecoderIdsTest, ForcesTheTokenAtItsIndexLastOfAllAndMovesTheBeginSuppression) {
  GenerationOptions options;
  options.eos_token_id = 1;
  options.forced_decoder_ids = {{1, 4}, {2, std::nullopt}, {3, 2}, {3, 6}};
  EXPECT_EQ(forced_decoder_token(options, 1), std::optional<int64_t>(4));
  EXPECT_EQ(forced_decoder_token(options, 2), std::nullopt);
  EXPECT_EQ(forced_decoder_token(options, 3), std::optional<int64_t>(6));
  EXPECT_EQ(forced_decoder_token(options, 4), std::nullopt);
  EXPECT_EQ(forced_tokens(options, 3), (std::vector<int64_t>{6}));
  options.suppress_tokens = {6};
  const auto scores = row({1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f});
  process(options, {{0, 4, 5}}, scores);
  EXPECT_EQ(values(scores), (std::vector<float>{-kInf, -kInf, -kInf, -kInf, -kInf, -kInf, 0.0f, -kInf}));
  EXPECT_FALSE(excluded_tokens(options, {0}, 8).has_value());
  EXPECT_TRUE(excluded_tokens(options, {0, 4}, 8).has_value());
  options.begin_suppress_tokens = {7};  // begin index 1 + 3
  EXPECT_EQ(suppressed_tokens(options, 1, 8), (std::vector<int64_t>{6}));
  EXPECT_EQ(suppressed_tokens(options, 4, 8), (std::vector<int64_t>{6, 7}));
  options.forced_bos_token_id = 2;  // 2 + 3
  EXPECT_EQ(suppressed_tokens(options, 5, 8), (std::vector<int64_t>{6, 7}));
  torch::Tensor buffer;
  EXPECT_THROW(scores_from_logits(torch::zeros({1, 6}), 1, options, buffer), std::invalid_argument);
}

TEST(WarpersTest, TemperatureDividesLogits) {
  const auto scores = row({2.0f, -4.0f});
  apply_temperature(scores, 0.5);
  EXPECT_EQ(values(scores), (std::vector<float>{4.0f, -8.0f}));
}

TEST(WarpersTest, TopKKeepsTheKBestAndTiesAtTheBoundary) {
  const auto a = row({1.0f, 3.0f, 2.0f, 3.0f, 0.0f});
  apply_top_k(a, 2);
  EXPECT_EQ(kept(a), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(values(a)[1], 3.0f);  // kept scores are unchanged
  const auto b = row({1.0f, 3.0f, 2.0f, 3.0f, 0.0f});
  apply_top_k(b, 3);
  EXPECT_EQ(kept(b), (std::vector<int64_t>{1, 2, 3}));
  const auto c = row({1.0f, 3.0f, 3.0f, 3.0f});
  apply_top_k(c, 2);
  EXPECT_EQ(kept(c), (std::vector<int64_t>{1, 2, 3}));
  const auto d = row({1.0f, 2.0f});
  apply_top_k(d, 10);  // k above the vocabulary keeps everything
  EXPECT_EQ(kept(d), (std::vector<int64_t>{0, 1}));
}

TEST(WarpersTest, TopKIsLibTorchsTopKAndMaskBitForBit) {
  // apply_top_k finds each row's k-th score with a heap; it must leave what torch::topk's k-th value and a
  // mask below it leave (its former way): ties at the boundary, -inf, k past the finite scores, several rows.
  torch::manual_seed(7);
  for (const int64_t vocab : {1, 7, 300, 5000}) {
    for (const int64_t k : {1, 2, 8, 50, 299, 300, 6000}) {
      auto scores = torch::randn({3, vocab}) * 3.0;
      scores[1] = (scores[1] * 2.0).round() / 2.0;                        // many ties
      scores[2].masked_fill_(torch::rand({vocab}) < 0.97, -kInf);         // few finite scores
      if (vocab > 4) scores[0][vocab / 2] = scores[0][vocab / 3] = kInf;  // +inf kept first
      const auto ours = scores.clone();
      apply_top_k(ours, k, /*min_tokens_to_keep=*/2);
      const int64_t kk = std::min(std::max<int64_t>(k, 2), vocab);
      const auto reference = scores.clone();
      reference.masked_fill_(reference < std::get<0>(reference.topk(kk, -1)).narrow(-1, kk - 1, 1), -kInf);
      EXPECT_TRUE(torch::equal(ours, reference)) << "vocab " << vocab << " k " << k;
    }
  }
  // NaN, which topk ranks above everything, takes LibTorch's way.
  auto scores = torch::randn({2, 100});
  scores[1][5] = std::numeric_limits<float>::quiet_NaN();
  const auto ours = scores.clone();
  apply_top_k(ours, 10);
  const auto reference = scores.clone();
  reference.masked_fill_(reference < std::get<0>(reference.topk(10, -1)).narrow(-1, 9, 1), -kInf);
  EXPECT_TRUE(torch::equal(ours.nan_to_num(0.5), reference.nan_to_num(0.5)));
  EXPECT_TRUE(std::isnan(ours[1][5].item<float>()));
}

TEST(WarpersTest, TopPKeepsTokensUpToTheOneThatCrossesTheThreshold) {
  // Probabilities by token: 0.15, 0.5, 0.1, 0.25 (sorted: 0.5, 0.25, 0.15, 0.1; cumulative 0.5, 0.75, 0.9, 1).
  const auto p = log_of({0.15, 0.5, 0.1, 0.25});
  const auto cases = std::vector<std::pair<double, std::vector<int64_t>>>{
      {0.4, {1}}, {0.7, {1, 3}}, {0.8, {0, 1, 3}}, {0.85, {0, 1, 3}}, {0.95, {0, 1, 2, 3}}, {1.0, {0, 1, 2, 3}}};
  for (const auto& [top_p, expected] : cases) {
    const auto scores = row(p);
    apply_top_p(scores, top_p);
    EXPECT_EQ(kept(scores), expected) << "top_p " << top_p;
    EXPECT_EQ(values(scores)[1], p[1]);
  }
}

TEST(WarpersTest, TopPRemovesTokensWhoseTailMassIsAtMostOneMinusTopP) {
  // transformers 4.30-4.45 TopPLogitsWarper sorts ascending and removes the tokens whose cumulative
  // probability (their own and all smaller ones) is <= 1 - top_p: where the likeliest tokens reach
  // exactly top_p, the next one goes (4.11 kept it). Four equal logits: p = 0.25 each, exactly, and
  // the ascending cumulative sums are 0.25, 0.5, 0.75, 1.
  for (const auto& [top_p, expected] : std::vector<std::pair<double, size_t>>{{0.25, 1}, {0.5, 2}, {0.75, 3}}) {
    const auto scores = row({0.0f, 0.0f, 0.0f, 0.0f});
    apply_top_p(scores, top_p);
    EXPECT_EQ(kept(scores).size(), expected) << "top_p " << top_p;
  }
  // p = 0.5, 0.5 beside filtered tokens (cumulative 0, 0, 0.5, 1): top_p 0.5 keeps one of the two.
  const auto scores = row({0.0f, -kInf, 0.0f, -kInf});
  apply_top_p(scores, 0.5);
  EXPECT_EQ(kept(scores).size(), 1u);
  const auto one = row({0.0f, 0.0f, 0.0f, 0.0f});
  apply_top_p(one, 0.5, /*min_tokens_to_keep=*/3);
  EXPECT_EQ(kept(one).size(), 3u);
}

TEST(WarpersTest, TopPOnALargeFlatVocabularyMatchesAFullSort) {
  // Many tokens are needed to reach top_p here (more than the first top-k the filter tries).
  const int64_t vocab = 3000;
  std::vector<float> logits(vocab);
  for (int64_t i = 0; i < vocab; ++i) logits[i] = static_cast<float>(std::sin(0.37 * i) + 0.001 * i);
  for (const double top_p : {0.3, 0.9, 0.999}) {
    // Reference: probabilities in double, sorted, kept while those before reach less than top_p.
    std::vector<double> p(vocab);
    double z = 0;
    for (int64_t i = 0; i < vocab; ++i) z += p[i] = std::exp(static_cast<double>(logits[i]));
    std::vector<int64_t> order(vocab);
    for (int64_t i = 0; i < vocab; ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[a] > p[b]; });
    std::vector<int64_t> expected;
    double cumulative = 0;
    for (const int64_t t : order) {
      if (cumulative >= top_p) break;
      expected.push_back(t);
      cumulative += p[t] / z;
    }
    std::sort(expected.begin(), expected.end());
    ASSERT_GT(expected.size(), 64u);
    const auto scores = row(logits);
    apply_top_p(scores, top_p);
    EXPECT_EQ(kept(scores), expected) << "top_p " << top_p;
  }
}

// apply_top_p's former way: LibTorch's top-k of growing k, the first `keep` of its order kept.
void top_p_by_topk(const torch::Tensor& scores, double top_p, int64_t min_tokens_to_keep) {
  const int64_t vocab = scores.size(-1);
  const auto remove_at_most = static_cast<float>(1.0 - top_p);
  const int64_t min_keep = std::min(std::max<int64_t>(min_tokens_to_keep, 1), vocab);
  const auto probs = scores.softmax(-1);
  for (int64_t r = 0; r < scores.size(0); ++r) {
    const double total = probs[r].sum(torch::kFloat64).item<double>();
    int64_t k = std::min<int64_t>(vocab, std::max<int64_t>(64, min_keep));
    int64_t keep = vocab;
    torch::Tensor order;
    while (true) {
      auto [values, indices] = probs[r].topk(k);
      order = indices;
      const auto* p = values.data_ptr<float>();
      double above = 0.0;
      int64_t i = 0;
      while (i < k && !(static_cast<float>(total - above) <= remove_at_most)) above += p[i++];
      if (i < k || k == vocab) {
        keep = i;
        break;
      }
      k = std::min(vocab, 2 * k);
    }
    keep = std::max(keep, min_keep);
    if (keep >= vocab) continue;
    auto remove = torch::ones({vocab}, torch::kBool);
    remove.index_fill_(0, order.narrow(0, 0, keep), false);
    scores[r].masked_fill_(remove, -kInf);
  }
}

TEST(WarpersTest, TopPIsTheGrowingTopKsCutBitForBit) {
  // apply_top_p finds the cut from a histogram of the probabilities' bits; it must leave what LibTorch's
  // top-k of growing k leaves (its former way): peaked and flat rows, ties, -inf, min_tokens_to_keep.
  torch::manual_seed(11);
  int compared = 0;
  for (const int64_t vocab : {1, 5, 300, 5000, 32128}) {
    for (const double spread : {0.3, 3.0, 12.0}) {
      for (const double top_p : {0.05, 0.5, 0.9, 0.95, 0.999}) {
        for (const int64_t min_keep : {1, 8}) {
          auto scores = torch::randn({3, vocab}) * spread;
          scores[1] = (scores[1] * 2.0).round() / 2.0;                // ties
          scores[2].masked_fill_(torch::rand({vocab}) < 0.5, -kInf);  // filtered tokens
          const auto ours = scores.clone();
          apply_top_p(ours, top_p, min_keep);
          const auto reference = scores.clone();
          top_p_by_topk(reference, top_p, min_keep);
          ASSERT_TRUE(torch::equal(ours, reference))
              << "vocab " << vocab << " spread " << spread << " top_p " << top_p << " min_keep " << min_keep;
          ++compared;
        }
      }
    }
  }
  EXPECT_EQ(compared, 150);
}

// Hugging Face's top_p 0: every token whose ascending cumulative probability is at most 1 goes, which leaves
// the min_tokens_to_keep likeliest (on a small row and on a vocabulary-sized one, where the cut is found
// without sorting).
TEST(WarpersTest, TopPZeroKeepsTheLikeliestTokensOnly) {
  const auto small = row(log_of({0.15, 0.5, 0.1, 0.25}));
  apply_top_p(small, 0.0);
  EXPECT_EQ(kept(small), (std::vector<int64_t>{1}));
  const auto two = row(log_of({0.15, 0.5, 0.1, 0.25}));
  apply_top_p(two, 0.0, /*min_tokens_to_keep=*/2);
  EXPECT_EQ(kept(two), (std::vector<int64_t>{1, 3}));
  torch::manual_seed(7);
  for (const double spread : {0.5, 3.0}) {
    const auto scores = (torch::randn({3, 32128}) * spread).contiguous();
    const auto best = scores.argmax(1);
    apply_top_p(scores, 0.0);
    EXPECT_TRUE(torch::equal(torch::isfinite(scores).sum(1), torch::ones({3}, torch::kLong))) << "spread " << spread;
    EXPECT_TRUE(torch::equal(scores.argmax(1), best)) << "spread " << spread;
  }
}

TEST(WarpersTest, TopPKeepsAtLeastMinTokens) {
  const auto scores = row(log_of({0.9, 0.05, 0.05}));
  apply_top_p(scores, 0.5, /*min_tokens_to_keep=*/2);
  EXPECT_EQ(kept(scores).size(), 2u);
}

TEST(WarpLogitsTest, AppliesTemperatureBeforeTopP) {
  // p = 0.6 / 0.4; at temperature 0.5 it becomes 0.36/0.52 = 0.69 / 0.31, so top_p 0.65 keeps one token
  // (it would keep both without the temperature, 0.6 < 0.65).
  GenerationOptions options;
  options.do_sample = true;
  options.top_p = 0.65;
  const auto plain = row(log_of({0.6, 0.4}));
  warp_logits(options, plain);
  EXPECT_EQ(kept(plain), (std::vector<int64_t>{0, 1}));
  options.temperature = 0.5;
  const auto sharpened = row(log_of({0.6, 0.4}));
  warp_logits(options, sharpened);
  EXPECT_EQ(kept(sharpened), (std::vector<int64_t>{0}));
}

// p = {.5, .3, .15, .05}: worked by hand from Hugging Face's warper definitions.
TEST(WarpersTest, MinPRemovesTokensBelowAShareOfTheLikeliest) {
  const auto p = log_of({0.5, 0.3, 0.15, 0.05});
  auto scores = row(p);
  apply_min_p(scores, 0.2);  // below 0.2 * 0.5 = 0.1
  EXPECT_EQ(kept(scores), (std::vector<int64_t>{0, 1, 2}));
  scores = row(p);
  apply_min_p(scores, 0.5);  // below 0.25
  EXPECT_EQ(kept(scores), (std::vector<int64_t>{0, 1}));
  scores = row(p);
  apply_min_p(scores, 0.5, 3);
  EXPECT_EQ(kept(scores), (std::vector<int64_t>{0, 1, 2}));
}

// Entropy H = 1.1421; |-log p - H| = .4490, .0619, .7550, 1.8536: tokens 1, 0, 2, 3 in that order, their
// cumulative probability .3, .8, .95, 1.
TEST(WarpersTest, TypicalPKeepsTheTokensNearestTheEntropyUntilTheMass) {
  const auto p = log_of({0.5, 0.3, 0.15, 0.05});
  auto scores = row(p);
  apply_typical_p(scores, 0.5);  // one below .5: tokens up to the second (0)
  EXPECT_EQ(kept(scores), (std::vector<int64_t>{0, 1}));
  scores = row(p);
  apply_typical_p(scores, 0.2);  // none below: token 1 alone, the likeliest removed
  EXPECT_EQ(kept(scores), (std::vector<int64_t>{1}));
  scores = row(p);
  apply_typical_p(scores, 0.9);
  EXPECT_EQ(kept(scores), (std::vector<int64_t>{0, 1, 2}));
  scores = row(p);
  apply_typical_p(scores, 0.2, 2);
  EXPECT_EQ(kept(scores), (std::vector<int64_t>{0, 1}));
}

// Epsilon: below the cutoff. Eta: cutoff min(eps, sqrt(eps) exp(-H)), exp(-1.1421) = 0.3191.
TEST(WarpersTest, EpsilonAndEtaCutoffs) {
  const auto p = log_of({0.5, 0.3, 0.15, 0.05});
  auto scores = row(p);
  apply_epsilon_cutoff(scores, 0.1);
  EXPECT_EQ(kept(scores), (std::vector<int64_t>{0, 1, 2}));
  scores = row(p);
  apply_epsilon_cutoff(scores, 0.16);
  EXPECT_EQ(kept(scores), (std::vector<int64_t>{0, 1}));
  scores = row(p);
  apply_epsilon_cutoff(scores, 0.6);  // every token below it: the likeliest stays
  EXPECT_EQ(kept(scores), (std::vector<int64_t>{0}));
  scores = row(p);
  apply_eta_cutoff(scores, 0.16);  // min(.16, .4 * .3191 = .1277)
  EXPECT_EQ(kept(scores), (std::vector<int64_t>{0, 1, 2}));
  scores = row(p);
  apply_eta_cutoff(scores, 0.3);  // min(.3, .5477 * .3191 = .1748)
  EXPECT_EQ(kept(scores), (std::vector<int64_t>{0, 1}));
}

TEST(ScoresFromLogitsTest, RejectsBadShapesAndTokenIdsOutsideTheVocabulary) {
  GenerationOptions options;
  options.eos_token_id = 1;
  torch::Tensor buffer;
  EXPECT_THROW(scores_from_logits(torch::zeros({2, 4}), 1, options, buffer), std::invalid_argument);
  EXPECT_THROW(scores_from_logits(torch::zeros({4}), 1, options, buffer), std::invalid_argument);
  options.eos_token_id = 4;
  EXPECT_THROW(scores_from_logits(torch::zeros({1, 4}), 1, options, buffer), std::invalid_argument);
  options.eos_token_id = 3;
  const auto logits = torch::arange(4, torch::kFloat64).view({1, 4});
  const auto scores = scores_from_logits(logits, 1, options, buffer);
  EXPECT_EQ(scores.scalar_type(), torch::kFloat32);
  EXPECT_TRUE(torch::equal(scores, logits.to(torch::kFloat32)));
  scores.fill_(1.0f);
  EXPECT_EQ(logits.sum().item<double>(), 6.0);  // a copy: the caller's logits stay untouched
  // The buffer is reused while the shape stays, and replaced when it changes.
  const auto* storage = buffer.data_ptr<float>();
  EXPECT_EQ(scores_from_logits(logits * 2, 1, options, buffer).data_ptr<float>(), storage);
  EXPECT_EQ(buffer[0][3].item<float>(), 6.0f);
  EXPECT_EQ(scores_from_logits(torch::zeros({2, 4}), 2, options, buffer).size(0), 2);
}

}  // namespace
}  // namespace srformer
