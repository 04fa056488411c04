// What a decoder cannot do is refused before it starts: BART's learned positions bound max_new_tokens,
// and a step past a row's segment schedule is refused before it changes the state.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <stdexcept>
#include <string>

#include "model/generation/generate.h"
#include "model/random_model.h"
#include "model/seq2seq.h"
#include "tests/support/kernel_switches.h"
#include "tests/support/temp_dir.h"

namespace srformer {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// New token n is decided at decoder position n - 1: a BART with P positions writes P tokens, the last
// at position P - 1, and a request for more is refused by the options, not by a step half-way.
TEST(DecoderLimits, ABartWritesAsManyTokensAsItHasPositionsAndNoMore) {
  testing::TempDir dir("positions");
  auto c = tiny_config(Architecture::kBart, CrossAttentionKind::kSrformer, 4);
  c.max_position_embeddings = 12;
  write_random_model(dir.path(), c, 3);
  auto model = load_model(dir.path());
  GenerationOptions o = model_generation_defaults(model->config());
  EXPECT_EQ(o.decoder_positions, 12);
  EXPECT_EQ(o.max_new_tokens, 12) << "the default of 128 is cut to the decoder's positions";
  o.min_new_tokens = 12;  // no EOS before the last position
  const auto ids = torch::randint(3, 90, {2, 7}, torch::kLong);
  const auto mask = torch::ones_like(ids);
  for (const int64_t beams : {1, 3}) {
    o.num_beams = beams;
    const auto results = generate(*model, ids, mask, o);
    ASSERT_EQ(results.size(), 2U);
    for (const auto& r : results) EXPECT_EQ(r.hypotheses.at(0).tokens.size(), 12U) << beams << " beams";
  }
  o.num_beams = 1;
  o.min_new_tokens = 0;
  o.max_new_tokens = 13;
  const auto refused = error_of([&] { (void)generate(*model, ids, mask, o); });
  EXPECT_NE(refused.find("max_new_tokens is 13 but this model has 12 decoder positions"), std::string::npos) << refused;

  // The model's own guard, for callers that step without options: position 12 does not exist.
  auto state = model->start(model->encode(ids, mask), torch::full({2}, 12, torch::kLong));
  const auto token = torch::full({2}, 5, torch::kLong);
  for (int t = 0; t < 12; ++t) (void)model->step(state, token);
  const auto past = error_of([&] { (void)model->step(state, token); });
  EXPECT_NE(past.find("decoder position exceeds this BART model's 12 positions"), std::string::npos) << past;

  // T5's relative positions set no such bound.
  auto t5 = tiny_config(Architecture::kT5, CrossAttentionKind::kSrformer, 4);
  t5.max_position_embeddings = 12;  // not T5's field: ignored
  EXPECT_EQ(model_generation_defaults(t5).decoder_positions, 0);
  EXPECT_EQ(model_generation_defaults(t5).max_new_tokens, 128);
}

// A step reads each changed row's switch-table entry at its segment_switches; one past the entries its
// schedule has (min(m, L + 1)) is refused, with either CPU path, before the step touches the state (on a
// GPU such a read would fault the device).
TEST(DecoderLimits, AStepPastARowsScheduleIsRefusedBeforeItChangesAnything) {
  testing::TempDir dir("schedule");
  write_random_model(dir.path(), tiny_config(Architecture::kT5, CrossAttentionKind::kSrformer, 4), 5);
  auto model = load_model(dir.path());
  const auto ids = torch::randint(3, 90, {2, 9}, torch::kLong);  // k = 9: m = 3 segments of 4
  const auto enc = model->encode(ids, torch::ones_like(ids));
  const auto first = torch::full({2}, model->config().decoder_start_token_id, torch::kLong);
  const testing::KernelSwitchesRestored restore;
  for (const bool kernels_on : {true, false}) {
    kernels::set_cpu_kernels(kernels_on);
    auto tampered = model->start(enc, torch::full({2}, 6, torch::kLong));  // L = 6: all 3 segments visited
    auto plain = model->start(enc, torch::full({2}, 6, torch::kLong));
    tampered.segment_switches = torch::tensor({int64_t{3}, int64_t{0}});  // row 0: its 3 entries used up
    const auto refused = error_of([&] { (void)model->step(tampered, first); });
    EXPECT_NE(refused.find("row 0 switched segments more often than its schedule (3 switches, m=3, L=6)"),
              std::string::npos)
        << refused;
    EXPECT_EQ(tampered.step[0].item<int64_t>(), 0);
    EXPECT_EQ(tampered.self_valid.size(1), 0);
    tampered.segment_switches = torch::zeros({2}, torch::kLong);
    EXPECT_TRUE(torch::equal(model->step(tampered, first), model->step(plain, first))) << "kernels " << kernels_on;
  }
}

}  // namespace
}  // namespace srformer
