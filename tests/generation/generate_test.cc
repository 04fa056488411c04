// generate() over a fake Seq2SeqModel whose logits depend on (document id, row history): the batched
// driver must give every request exactly what its searcher gives when run alone.
#include "model/generation/generate.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "model/generation/beam_searcher.h"
#include "model/generation/multi_sample_searcher.h"
#include "model/generation/single_row_searcher.h"
#include "scripted_model.h"

namespace srformer {
namespace {

constexpr int64_t kVocab = 12, kEos = 1, kStart = 0;

testing::Script document_script(int64_t document) {
  return testing::random_script(kVocab, 1000 + document, kEos, 1.5f);
}

// The document id is the first input token; the decoder history lives in a self-attention cache,
// layers[0].self_k [B, 1, T, 1] (what differs between beams of one request, DecoderState::retain).
class FakeModel : public Seq2SeqModel {
 public:
  explicit FakeModel(ModelConfig config = {}) : config_(std::move(config)) { config_.vocab_size = kVocab; }
  const ModelConfig& config() const override { return config_; }
  torch::Device device() const override { return torch::kCPU; }
  torch::ScalarType dtype() const override { return torch::kFloat32; }
  StateFootprint state_footprint() const override { return {}; }
  using Seq2SeqModel::encode;
  EncoderOutput encode(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                       const EncodeStop&) override {
    return {input_ids.to(torch::kFloat32).unsqueeze(-1), attention_mask.to(torch::kBool)};
  }
  using Seq2SeqModel::start;
  DecoderState start(const EncoderOutput& enc, const torch::Tensor& expected_length, const torch::Tensor&,
                     const EncodeStop&) override {
    const int64_t batch = enc.hidden.size(0);
    expected_lengths.push_back(expected_length.clone());
    DecoderState state;
    state.enc_len = enc.hidden.select(1, 0).squeeze(-1).to(torch::kInt64);
    state.expected_len = expected_length;
    state.step = torch::zeros({batch}, torch::kInt64);
    state.self_pos = torch::empty({batch, 0}, torch::kInt64);
    state.self_valid = torch::empty({batch, 0}, torch::kBool);
    state.layers.emplace_back();
    state.layers[0].self_k = torch::empty({batch, 1, 0, 1});
    state.layers[0].self_v = torch::empty({batch, 1, 0, 1});
    return state;
  }
  torch::Tensor step(DecoderState& state, const torch::Tensor& tokens) override {
    const int64_t batch = state.batch_size();
    batch_sizes.push_back(batch);
    state.self_pos = torch::cat({state.self_pos, state.step.view({batch, 1})}, 1);
    state.self_valid = torch::cat({state.self_valid, torch::ones({batch, 1}, torch::kBool)}, 1);
    auto& cache = state.layers[0];
    cache.self_k = torch::cat({cache.self_k, tokens.to(torch::kFloat32).view({batch, 1, 1, 1})}, 2);
    cache.self_v = cache.self_k.clone();
    state.step += 1;
    auto logits = torch::empty({batch, kVocab});
    for (int64_t b = 0; b < batch; ++b) {
      const auto row = cache.self_k[b].flatten().to(torch::kInt64).contiguous();
      const std::vector<int64_t> history(row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + row.numel());
      logits[b] = torch::tensor(document_script(state.enc_len[b].item<int64_t>())(history));
    }
    return logits;
  }
  torch::Tensor forward(const EncoderOutput&, const torch::Tensor&, const std::optional<torch::Tensor>&) override {
    throw std::logic_error("not used");
  }
  int64_t parameter_count() const override { return 0; }
  const std::vector<std::pair<std::string, torch::Tensor>>& named_parameters() const override { return parameters_; }

  std::vector<int64_t> batch_sizes;
  std::vector<torch::Tensor> expected_lengths;

 private:
  ModelConfig config_;
  std::vector<std::pair<std::string, torch::Tensor>> parameters_;
};

GenerationOptions options_for(int64_t num_beams) {
  GenerationOptions options;
  options.decoder_start_token_id = kStart;
  options.eos_token_id = kEos;
  options.max_new_tokens = 10;
  options.num_beams = num_beams;
  options.num_return_sequences = num_beams;
  return options;
}

// Documents 3, 5, 8, 13 (first token), padded inputs of length 4.
const auto kInputs = torch::tensor({3, 7, 7, 7, 5, 7, 7, 0, 8, 7, 0, 0, 13, 7, 7, 7}, torch::kInt64).view({4, 4});
const auto kMask = torch::tensor({1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 0, 0, 1, 1, 1, 1}, torch::kInt64).view({4, 4});
const std::vector<int64_t> kDocuments{3, 5, 8, 13};

template <typename MakeSearcher>
void expect_same_as_alone(const std::vector<GenerateResult>& batched, MakeSearcher make) {
  ASSERT_EQ(batched.size(), kDocuments.size());
  for (size_t i = 0; i < kDocuments.size(); ++i) {
    auto searcher = make();
    const auto alone = testing::drive(*searcher, document_script(kDocuments[i]), kStart);
    EXPECT_EQ(batched[i].steps, alone.steps) << "row " << i;
    ASSERT_EQ(batched[i].hypotheses.size(), alone.results.size()) << "row " << i;
    for (size_t h = 0; h < alone.results.size(); ++h) {
      EXPECT_EQ(batched[i].hypotheses[h].tokens, alone.results[h].tokens) << "row " << i << " hyp " << h;
      EXPECT_EQ(batched[i].hypotheses[h].score, alone.results[h].score) << "row " << i << " hyp " << h;
      EXPECT_EQ(batched[i].hypotheses[h].finish_reason, alone.results[h].finish_reason);
    }
  }
}

TEST(GenerateTest, GreedyBatchMatchesEachRequestAloneAndStreamsTokens) {
  FakeModel model;
  const auto options = options_for(1);
  std::map<int64_t, std::vector<int64_t>> streamed;
  const auto results = generate(model, kInputs, kMask, options, std::nullopt,
                                [&](int64_t row, int64_t token) { streamed[row].push_back(token); });
  expect_same_as_alone(results, [&] { return std::make_unique<GreedySearcher>(options); });
  for (size_t i = 0; i < results.size(); ++i) {
    EXPECT_EQ(streamed[static_cast<int64_t>(i)], results[i].hypotheses[0].tokens);
  }
  // One model step per iteration; finished requests leave the batch.
  int64_t longest = 0;
  for (const auto& r : results) longest = std::max(longest, r.steps);
  ASSERT_EQ(static_cast<int64_t>(model.batch_sizes.size()), longest);
  for (size_t s = 0; s < model.batch_sizes.size(); ++s) {
    int64_t live = 0;
    for (const auto& r : results) live += r.steps > static_cast<int64_t>(s) ? 1 : 0;
    EXPECT_EQ(model.batch_sizes[s], live) << "step " << s;
  }
  // Default expected length L = max_new_tokens for every row.
  ASSERT_EQ(model.expected_lengths.size(), 1u);
  EXPECT_TRUE(model.expected_lengths[0].equal(torch::full({4}, options.max_new_tokens, torch::kInt64)));
}

// Several samples per request: each is what its searcher gives alone, and a sample that ends leaves the
// batch (each step runs one row per sample still drawing).
TEST(GenerateTest, SeveralSamplesLeaveTheBatchAsTheyEnd) {
  FakeModel model;
  auto options = options_for(1);
  options.do_sample = true;
  options.seed = 5;
  options.num_return_sequences = 3;
  const auto results = generate(model, kInputs, kMask, options);
  expect_same_as_alone(results, [&] { return std::make_unique<MultiSampleSearcher>(options); });
  bool ended_before_a_sibling = false;
  for (size_t s = 0; s < model.batch_sizes.size(); ++s) {
    int64_t drawing = 0;
    for (const auto& r : results) {
      int64_t mine = 0;
      for (const auto& h : r.hypotheses) mine += h.tokens.size() > s ? 1 : 0;
      drawing += mine;
      ended_before_a_sibling = ended_before_a_sibling || (mine > 0 && mine < 3);
    }
    EXPECT_EQ(model.batch_sizes[s], drawing) << "step " << s;
  }
  EXPECT_EQ(model.batch_sizes.front(), 12);  // 4 requests x 3 samples
  EXPECT_TRUE(ended_before_a_sibling) << "no sample ended before another of its request: the test shows nothing";
}

// A checkpoint's srformer.expected_length is the L of rows given none, whatever max_new_tokens is.
TEST(GenerateTest, DefaultExpectedLengthIsTheCheckpointsElseMaxNewTokens) {
  ModelConfig config;
  EXPECT_EQ(default_expected_length(config, 40), 40);
  config.srformer.expected_length = 7;
  EXPECT_EQ(default_expected_length(config, 40), 7);
  FakeModel model(config);
  generate(model, kInputs, kMask, options_for(1));
  ASSERT_EQ(model.expected_lengths.size(), 1u);
  EXPECT_TRUE(model.expected_lengths[0].equal(torch::full({4}, int64_t{7}, torch::kInt64)));
  generate(model, kInputs, kMask, options_for(1), torch::tensor({4, 5, 6, 7}, torch::kInt64));
  EXPECT_TRUE(model.expected_lengths[1].equal(torch::tensor({4, 5, 6, 7}, torch::kInt64))) << "a given L wins";
}

TEST(GenerateTest, BeamBatchMatchesEachRequestAlone) {
  FakeModel model;
  const auto options = options_for(3);
  std::map<int64_t, std::vector<int64_t>> streamed;
  const auto results = generate(model, kInputs, kMask, options, torch::tensor({4, 5, 6, 7}, torch::kInt64),
                                [&](int64_t row, int64_t token) { streamed[row].push_back(token); });
  expect_same_as_alone(results, [&] { return std::make_unique<BeamSearcher>(options); });
  for (size_t i = 0; i < results.size(); ++i) {
    EXPECT_EQ(streamed[static_cast<int64_t>(i)], results[i].hypotheses[0].tokens);
  }
  EXPECT_EQ(model.batch_sizes.front(), 12);  // 4 requests x 3 beams
  ASSERT_EQ(model.expected_lengths.size(), 1u);
  EXPECT_TRUE(model.expected_lengths[0].equal(torch::tensor({4, 5, 6, 7}, torch::kInt64)));
}

// Diverse beam search: each request's groups count only its own earlier groups' tokens (a batch of
// documents gives each what it gets alone), and a group that is done leaves the batch.
TEST(GenerateTest, GroupBeamBatchMatchesEachRequestAloneAndDoneGroupsLeave) {
  FakeModel model;
  auto options = options_for(6);
  options.num_beam_groups = 3;
  options.diversity_penalty = 1.5;
  const auto results = generate(model, kInputs, kMask, options);
  expect_same_as_alone(results, [&] { return std::make_unique<BeamSearcher>(options); });
  EXPECT_EQ(model.batch_sizes.front(), 24);  // 4 requests x 6 beams
  // Rows fall by whole groups (2 beams) before requests end: groups leave on their own.
  bool a_group_left_early = false;
  for (size_t s = 0; s < model.batch_sizes.size(); ++s) {
    int64_t requests_rows = 0;
    for (const auto& r : results) requests_rows += r.steps > static_cast<int64_t>(s) ? 6 : 0;
    EXPECT_EQ(model.batch_sizes[s] % 2, 0) << "step " << s;
    EXPECT_LE(model.batch_sizes[s], requests_rows) << "step " << s;
    a_group_left_early = a_group_left_early || model.batch_sizes[s] < requests_rows;
  }
  EXPECT_TRUE(a_group_left_early) << "no group ended before its request: the test shows nothing";
  // Two documents together get what each gets alone (the penalty counts per request, not over the batch).
  FakeModel pair_model;
  const auto pair = generate(pair_model, kInputs.narrow(0, 1, 2), kMask.narrow(0, 1, 2), options);
  for (size_t i = 0; i < 2; ++i) {
    FakeModel single_model;
    const auto single = generate(single_model, kInputs.narrow(0, 1 + static_cast<int64_t>(i), 1),
                                 kMask.narrow(0, 1 + static_cast<int64_t>(i), 1), options);
    ASSERT_EQ(pair[i].hypotheses.size(), single[0].hypotheses.size());
    for (size_t h = 0; h < single[0].hypotheses.size(); ++h) {
      EXPECT_EQ(pair[i].hypotheses[h].tokens, single[0].hypotheses[h].tokens) << i << " " << h;
      EXPECT_EQ(pair[i].hypotheses[h].score, single[0].hypotheses[h].score) << i << " " << h;
    }
  }
}

// Each row's encoder_input_ids are its own tokens without its padding: it generates as it would alone.
TEST(GenerateTest, EncoderNoRepeatNGramReadsEachRowsUnpaddedInput) {
  FakeModel model;
  const auto inputs = kInputs.narrow(0, 0, 3);  // documents 3, 5, 8 (13 is past the vocabulary)
  const auto mask = kMask.narrow(0, 0, 3);
  const std::vector<std::vector<int64_t>> unpadded{{3, 7, 7, 7}, {5, 7, 7}, {8, 7}};
  for (const int64_t beams : {1, 2}) {
    auto options = options_for(beams);
    options.encoder_no_repeat_ngram_size = 1;  // no token of the input
    const auto results = generate(model, inputs, mask, options);
    ASSERT_EQ(results.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      auto searcher = make_searcher(with_encoder_input(options, unpadded[i]));
      const auto alone = testing::drive(*searcher, document_script(kDocuments[i]), kStart);
      EXPECT_EQ(results[i].hypotheses[0].tokens, alone.results[0].tokens) << beams << " row " << i;
      for (const int64_t t : results[i].hypotheses[0].tokens) {
        EXPECT_EQ(std::count(unpadded[i].begin(), unpadded[i].end(), t), 0) << beams << " row " << i;
      }
    }
  }
}

TEST(GenerateTest, RejectsMismatchedInputs) {
  FakeModel model;
  EXPECT_THROW(generate(model, kInputs, kMask.narrow(0, 0, 2), options_for(1)), std::invalid_argument);
  EXPECT_THROW(generate(model, kInputs, kMask, options_for(1), torch::tensor({4, 5}, torch::kInt64)),
               std::invalid_argument);
}

TEST(GenerateTest, WithModelTokensCopiesTheConfigIds) {
  ModelConfig config;
  config.decoder_start_token_id = 2;
  config.eos_token_id = 2;
  config.pad_token_id = 1;
  config.forced_eos_token_id = 2;
  GenerationOptions options;
  options.forced_bos_token_id = 0;
  const auto o = with_model_tokens(options, config);
  EXPECT_EQ(o.decoder_start_token_id, 2);
  EXPECT_EQ(o.eos_token_id, 2);
  EXPECT_EQ(o.pad_token_id, 1);
  EXPECT_EQ(o.forced_bos_token_id, 0);
  EXPECT_EQ(o.forced_eos_token_id, 2);
  // A checkpoint's lists of EOS and forced EOS ids come along (only the first of each did).
  config.extra_eos_token_ids = {5, 7};
  config.extra_forced_eos_token_ids = {5};
  const auto listed = with_model_tokens(GenerationOptions{}, config);
  EXPECT_EQ(eos_token_ids(listed), (std::vector<int64_t>{2, 5, 7}));
  EXPECT_EQ(forced_eos_token_ids(listed), (std::vector<int64_t>{2, 5}));
}

// The server, `srformer summarize` and `srformer eval` take their defaults from here: HF's max_length
// and min_length count the decoder start token, so new tokens are one fewer.
TEST(GenerateTest, ModelGenerationDefaultsFollowTheConfigInHuggingFaceTerms) {
  ModelConfig config;
  config.decoder_start_token_id = 3;
  config.forced_bos_token_id = 0;
  const auto none = model_generation_defaults(config);
  EXPECT_EQ(none.max_new_tokens, 128);
  EXPECT_EQ(none.min_new_tokens, 0);
  EXPECT_EQ(none.num_beams, 1);
  EXPECT_EQ(none.num_beam_groups, 1);
  EXPECT_DOUBLE_EQ(none.diversity_penalty, 0.0);
  EXPECT_DOUBLE_EQ(none.length_penalty, 1.0);
  EXPECT_EQ(none.early_stopping, EarlyStopping::kHeuristic);
  EXPECT_EQ(none.no_repeat_ngram_size, 0);
  EXPECT_EQ(none.decoder_start_token_id, 3);
  EXPECT_EQ(none.forced_bos_token_id, 0);
  EXPECT_FALSE(none.do_sample);
  EXPECT_DOUBLE_EQ(none.temperature, 1.0);
  EXPECT_EQ(none.top_k, 50);  // HF's default, where GenerationOptions{} has none
  EXPECT_DOUBLE_EQ(none.top_p, 1.0);
  EXPECT_DOUBLE_EQ(none.repetition_penalty, 1.0);
  EXPECT_EQ(none.num_return_sequences, 1);
  config.num_return_sequences = 3;  // greedy search with one beam: one sequence (HF refuses more)
  EXPECT_EQ(model_generation_defaults(config).num_return_sequences, 1);
  config.max_length = 62;
  config.min_length = 11;
  config.num_beams = 4;
  config.length_penalty = 2.0;
  config.early_stopping = EarlyStopping::kNever;
  config.no_repeat_ngram_size = 3;
  const auto set = model_generation_defaults(config);
  EXPECT_EQ(set.max_new_tokens, 61);
  EXPECT_EQ(set.min_new_tokens, 10);
  EXPECT_EQ(set.num_beams, 4);
  config.num_beam_groups = 2;
  config.diversity_penalty = 0.5;
  EXPECT_EQ(model_generation_defaults(config).num_beam_groups, 2);
  EXPECT_DOUBLE_EQ(model_generation_defaults(config).diversity_penalty, 0.5);
  config.num_beam_groups.reset();
  config.diversity_penalty.reset();
  EXPECT_DOUBLE_EQ(set.length_penalty, 2.0);
  EXPECT_EQ(set.early_stopping, EarlyStopping::kNever);
  EXPECT_EQ(set.no_repeat_ngram_size, 3);
  EXPECT_EQ(set.num_return_sequences, 3);
  config.num_return_sequences = 6;
  EXPECT_EQ(model_generation_defaults(config).num_return_sequences, 4) << "at most one per beam";
  EXPECT_EQ(set.encoder_no_repeat_ngram_size, 0);
  EXPECT_DOUBLE_EQ(set.encoder_repetition_penalty, 1.0);
  config.encoder_no_repeat_ngram_size = 3;
  config.encoder_repetition_penalty = 1.5;
  EXPECT_EQ(model_generation_defaults(config).encoder_no_repeat_ngram_size, 3);
  EXPECT_DOUBLE_EQ(model_generation_defaults(config).encoder_repetition_penalty, 1.5);
  config.encoder_no_repeat_ngram_size = -1;  // off, as HF applies only sizes > 0
  EXPECT_EQ(model_generation_defaults(config).encoder_no_repeat_ngram_size, 0);
  config.bad_words_ids = {{5}, {6, 7}};
  EXPECT_EQ(model_generation_defaults(config).bad_words_ids, config.bad_words_ids);
  config.bad_words_ids.clear();
  config.suppress_tokens = {5};
  config.begin_suppress_tokens = {6};
  EXPECT_EQ(model_generation_defaults(config).suppress_tokens, config.suppress_tokens);
  EXPECT_EQ(model_generation_defaults(config).begin_suppress_tokens, config.begin_suppress_tokens);
  config.suppress_tokens.clear();
  config.begin_suppress_tokens.clear();
  config.exponential_decay_length_penalty = std::pair<int64_t, double>{10, 1.2};
  config.sequence_bias = {{{5}, -1.0}};
  config.forced_decoder_ids = {{1, 5}, {2, std::nullopt}};
  const auto applied = model_generation_defaults(config);
  EXPECT_EQ(applied.exponential_decay_length_penalty, config.exponential_decay_length_penalty);
  EXPECT_EQ(applied.sequence_bias, config.sequence_bias);
  EXPECT_EQ(applied.forced_decoder_ids, config.forced_decoder_ids);
  config.exponential_decay_length_penalty.reset();
  config.sequence_bias.clear();
  config.forced_decoder_ids.clear();
  config.min_p = 0.05;
  config.typical_p = 0.9;
  config.epsilon_cutoff = 3e-4;
  config.eta_cutoff = 1e-3;
  const auto warped = model_generation_defaults(config);
  EXPECT_DOUBLE_EQ(warped.min_p, 0.05);
  EXPECT_DOUBLE_EQ(warped.typical_p, 0.9);
  EXPECT_DOUBLE_EQ(warped.epsilon_cutoff, 3e-4);
  EXPECT_DOUBLE_EQ(warped.eta_cutoff, 1e-3);
  config.min_p.reset();
  config.typical_p.reset();
  config.epsilon_cutoff.reset();
  config.eta_cutoff.reset();
  config.encoder_no_repeat_ngram_size.reset();
  config.encoder_repetition_penalty.reset();
  config.num_return_sequences = 3;
  EXPECT_FALSE(set.do_sample);
  config.do_sample = true;
  config.temperature = 0.7;
  config.top_k = 0;
  config.top_p = 0.9;
  config.repetition_penalty = 1.2;
  const auto sampled = model_generation_defaults(config);
  EXPECT_TRUE(sampled.do_sample);
  EXPECT_DOUBLE_EQ(sampled.temperature, 0.7);
  EXPECT_EQ(sampled.top_k, 0);
  EXPECT_DOUBLE_EQ(sampled.top_p, 0.9);
  EXPECT_DOUBLE_EQ(sampled.repetition_penalty, 1.2);
  EXPECT_EQ(sampled.num_beams, 4) << "beam sampling";
  EXPECT_EQ(sampled.num_return_sequences, 3);
  config.num_return_sequences = 6;
  EXPECT_EQ(model_generation_defaults(config).num_return_sequences, 4) << "beam sampling: at most one per beam";
  config.num_beams = 1;
  config.num_return_sequences = kMaxNumBeams + 1;
  EXPECT_EQ(model_generation_defaults(config).num_return_sequences, kMaxNumBeams) << "one beam: samples";
  config.num_return_sequences = 3;
  EXPECT_EQ(unsupported_generation_warning(config), "");
  config.unsupported_generation = {"penalty_alpha=0.6", "top_h=0.4"};
  EXPECT_NE(unsupported_generation_warning(config).find("set penalty_alpha=0.6, top_h=0.4, which srformer does "
                                                        "not implement"),
            std::string::npos)
      << unsupported_generation_warning(config);
}

// A checkpoint whose generation defaults validate() refuses is named with the file they come from (the
// server warns at start, the tools before running): every request leaving the option unset was refused,
// saying nothing of where the value came from. Lengths past the limits are clamped by the callers: usable.
TEST(ModelGenerationDefaults, UnusableOnesAreNamedWithTheirFile) {
  ModelConfig config;
  config.decoder_start_token_id = 0;
  EXPECT_EQ(unusable_generation_defaults(config), "");
  config.max_length = 1000000;
  EXPECT_EQ(unusable_generation_defaults(config), "") << "clamped to the limit, not refused";
  config.num_beams = 0;
  const auto beams = unusable_generation_defaults(config);
  EXPECT_NE(beams.find("generation defaults (generation_config.json, else config.json) are not usable"),
            std::string::npos)
      << beams;
  EXPECT_NE(beams.find("num_beams is 0"), std::string::npos) << beams;
  config.num_beams = 1;
  config.top_p = -1.0;
  EXPECT_EQ(unusable_generation_defaults(config), "") << "greedy search has no use for top_p";
  config.do_sample = true;
  EXPECT_NE(unusable_generation_defaults(config).find("top_p is -1"), std::string::npos);
}

// A checkpoint's no_repeat_ngram_size below 0 turns the processor off, as in Hugging Face (it applies
// only sizes > 0), and its length_penalty only matters with beams: neither made every request that left
// them unset refused any more.
TEST(ModelGenerationDefaults, NegativeNgramSizeIsOffAndLengthPenaltyNeedsBeams) {
  ModelConfig config;
  config.decoder_start_token_id = 0;
  config.no_repeat_ngram_size = -1;
  EXPECT_EQ(model_generation_defaults(config).no_repeat_ngram_size, 0);
  EXPECT_EQ(unusable_generation_defaults(config), "");
  config.length_penalty = 20.0;
  EXPECT_EQ(unusable_generation_defaults(config), "") << "greedy search has no use for length_penalty";
  config.num_beams = 4;
  EXPECT_NE(unusable_generation_defaults(config).find("length_penalty is 20"), std::string::npos);
}

}  // namespace
}  // namespace srformer
