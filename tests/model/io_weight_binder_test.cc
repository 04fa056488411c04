// WeightBinder: shapes, dtype conversion, aliases, and one error that lists every problem.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "model/io/checkpoint.h"
#include "model/io/load_error.h"
#include "model/io/safetensors.h"
#include "model/io/weight_binder.h"
#include "model/param_binder.h"
#include "tests/model/io_test_util.h"

namespace srformer {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::ScratchDir;

class WeightBinderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    save_safetensors(dir_ / "model.safetensors",
                     {{"shared.weight", torch::tensor({1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}).reshape({3, 2})},
                      {"enc.norm.weight", torch::tensor({0.5f, 0.25f})},
                      {"enc.fc.weight", torch::zeros({4, 2})},
                      {"enc.position_ids", torch::tensor({int64_t{0}, int64_t{1}})},
                      {"dec.raf.threshold", torch::tensor({0.125f})},
                      {"extra.one", torch::ones({1})},
                      {"extra.two", torch::ones({1})}});
    ckpt_ = std::make_unique<CheckpointReader>(CheckpointReader::open_dir(dir_.path()));
  }

  static std::string finish_error(const WeightBinder& binder) {
    try {
      binder.finish();
    } catch (const LoadError& e) {
      return e.what();
    }
    ADD_FAILURE() << "finish() did not throw";
    return "";
  }

  ScratchDir dir_;
  std::unique_ptr<CheckpointReader> ckpt_;
};

TEST_F(WeightBinderTest, BindsEverythingAndConvertsFloatingPointDtypes) {
  WeightBinder binder(*ckpt_, torch::kFloat16, torch::kCPU);
  const torch::Tensor shared = binder.take("shared.weight", {3, 2});
  EXPECT_EQ(shared.scalar_type(), torch::kFloat16);
  EXPECT_TRUE(torch::equal(shared.to(torch::kFloat32).flatten(), torch::tensor({1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f})));
  EXPECT_EQ(binder.take("enc.norm.weight", {2}).scalar_type(), torch::kFloat16);
  EXPECT_EQ(binder.take("enc.fc.weight", {4, 2}).scalar_type(), torch::kFloat16);
  // take_fp32 keeps float32.
  const torch::Tensor threshold = binder.take_fp32("dec.raf.threshold", {1});
  EXPECT_EQ(threshold.scalar_type(), torch::kFloat32);
  EXPECT_EQ(threshold.item<float>(), 0.125f);
  binder.ignore("extra\\..*|enc\\.position_ids");
  EXPECT_NO_THROW(binder.finish());
  EXPECT_THAT(binder.used(), ElementsAre("shared.weight", "enc.norm.weight", "enc.fc.weight", "dec.raf.threshold"));
}

// A weight's name holding integers is named as such (it failed later, inside a product: "expected scalar
// type Long but found Float").
TEST_F(WeightBinderTest, AnIntegerTensorWhereAWeightGoesIsNamed) {
  WeightBinder binder(*ckpt_, torch::kFloat32, torch::kCPU);
  (void)binder.take("enc.position_ids", {2});
  binder.ignore("shared.*|enc.*|dec.*|extra.*");
  EXPECT_THAT(finish_error(binder),
              HasSubstr("enc.position_ids: the file holds Long numbers; a weight is F32, F16 or BF16"));
}

// A conversion (ParamBinder::take_raf with RafInit::kCreateMissing) takes the RAF parameters a checkpoint has as
// they are: 1 + 2^-12 is not a half-precision number, and a model loaded in fp16 must still see it.
TEST_F(WeightBinderTest, RafParametersTakenWhereTheCheckpointHasThemStayFloat32InAHalfModel) {
  const float exact = 1.0F + 1.0F / 4096;
  save_safetensors(dir_ / "model.safetensors", {{"dec.raf.leak", torch::tensor({exact})}});
  const auto ckpt = CheckpointReader::open_dir(dir_.path());
  WeightBinder binder(ckpt, torch::kFloat16, torch::kCPU);
  ParamBinder params(binder, RafInit::kCreateMissing);
  const auto leak = params.take_raf("dec.raf.leak", {1}, [] { return torch::zeros({1}); });
  EXPECT_EQ(leak.scalar_type(), torch::kFloat32);
  EXPECT_EQ(leak.item<float>(), exact);
  const auto absent = params.take_raf("dec.raf.threshold", {1}, [] { return torch::full({1}, 0.5F); });
  EXPECT_EQ(absent.item<float>(), 0.5F) << "initialised where the checkpoint lacks it";
  EXPECT_FALSE(binder.take_optional_fp32("dec.raf.leak", {2})) << "a wrong shape gives nothing";
}

TEST_F(WeightBinderTest, CollectsMissingMisshapedAndUnexpectedIntoOneError) {
  WeightBinder binder(*ckpt_, torch::kFloat32, torch::kCPU);
  const torch::Tensor missing = binder.take("dec.fc.weight", {5, 2});
  EXPECT_THAT(missing.sizes().vec(), ElementsAre(5, 2));
  EXPECT_TRUE(missing.eq(0).all().item<bool>());
  const torch::Tensor wrong = binder.take("shared.weight", {2, 3});
  EXPECT_THAT(wrong.sizes().vec(), ElementsAre(2, 3));
  EXPECT_TRUE(wrong.eq(0).all().item<bool>());
  binder.take_fp32("dec.raf.threshold", {1});
  binder.take("enc.norm.weight", {2});
  binder.ignore("extra\\.one|enc\\.position_ids");

  const std::string message = finish_error(binder);
  EXPECT_THAT(message, HasSubstr((dir_ / "model.safetensors (7 tensors)").string()));
  EXPECT_THAT(message, HasSubstr("1 missing, 1 with the wrong shape or type, 2 unexpected"));
  EXPECT_THAT(message, HasSubstr("dec.fc.weight: expected [5, 2]"));
  EXPECT_THAT(message, HasSubstr("shared.weight: expected [2, 3], file has [3, 2]"));
  EXPECT_THAT(message, AllOf(HasSubstr("enc.fc.weight"), HasSubstr("extra.two"), Not(HasSubstr("extra.one"))));
  EXPECT_THAT(message, HasSubstr("hint: check that config.json"));
}

TEST_F(WeightBinderTest, ResolvesAliasesInOrder) {
  WeightBinder binder(*ckpt_, torch::kFloat32, torch::kCPU);
  const torch::Tensor head = binder.take("lm_head.weight", {3, 2}, {"model.shared.weight", "shared.weight"});
  EXPECT_EQ(head[2][1].item<float>(), 6.0f);
  // The name itself wins over an alias when present.
  EXPECT_EQ(binder.take("enc.norm.weight", {2}, {"shared.weight"})[0].item<float>(), 0.5f);
  EXPECT_THAT(binder.used(), ElementsAre("shared.weight", "enc.norm.weight"));

  binder.take("dec.embed_tokens.weight", {3, 2}, {"decoder.embed_tokens.weight", "model.shared.weight"});
  binder.take("lm_head.bias", {2}, {"shared.weight"});
  const std::string message = finish_error(binder);
  EXPECT_THAT(message, HasSubstr("dec.embed_tokens.weight (also tried decoder.embed_tokens.weight, "
                                 "model.shared.weight): expected [3, 2]"));
  EXPECT_THAT(message, HasSubstr("lm_head.bias (via shared.weight): expected [2], file has [3, 2]"));
}

TEST_F(WeightBinderTest, OptionalTensors) {
  WeightBinder binder(*ckpt_, torch::kFloat32, torch::kCPU);
  EXPECT_FALSE(binder.take_optional("final_logits_bias", {1, 3}).has_value());
  const auto norm = binder.take_optional("enc.norm.weight", {2});
  ASSERT_TRUE(norm.has_value());
  EXPECT_EQ((*norm)[1].item<float>(), 0.25f);
  EXPECT_FALSE(binder.take_optional("enc.fc.weight", {2, 4}).has_value());
  binder.ignore(".*");
  const std::string message = finish_error(binder);
  EXPECT_THAT(message, HasSubstr("0 missing, 1 with the wrong shape or type, 0 unexpected"));
  EXPECT_THAT(message, HasSubstr("enc.fc.weight: expected [2, 4], file has [4, 2]"));
  EXPECT_THAT(message, Not(HasSubstr("final_logits_bias")));
}

TEST_F(WeightBinderTest, BadIgnoreRegexIsInvalidArgument) {
  WeightBinder binder(*ckpt_, torch::kFloat32, torch::kCPU);
  EXPECT_THROW(binder.ignore("extra.(one"), std::invalid_argument);
}

// A config far larger than its checkpoint (a d_model of 10^9, a billion layers) is refused with the
// problems found so far, before its stand-ins exhaust memory or its layers run for hours.
TEST_F(WeightBinderTest, AConfigFarLargerThanTheCheckpointStopsAtOnce) {
  {
    WeightBinder binder(*ckpt_, torch::kFloat32, torch::kCPU);
    try {
      binder.take("shared.weight", {1000000000, 1000000000});  // 4 EB as a stand-in
      FAIL() << "took it";
    } catch (const LoadError& e) {
      EXPECT_THAT(e.what(), HasSubstr("0 missing, 1 with the wrong shape or type (stopped at shared.weight"));
      EXPECT_THAT(e.what(), HasSubstr("over twice the 21 elements the checkpoint holds"));
      EXPECT_THAT(e.what(), HasSubstr("shared.weight: expected [1000000000, 1000000000], file has [3, 2]"));
    }
  }
  {
    WeightBinder binder(*ckpt_, torch::kFloat32, torch::kCPU);
    int64_t layers = 0;
    try {
      for (; layers < 1000000000; ++layers) binder.take("layers." + std::to_string(layers) + ".bias", {0});
      FAIL() << "took them all";
    } catch (const LoadError& e) {
      EXPECT_THAT(e.what(), HasSubstr("1001 missing, 0 with the wrong shape or type (stopped after 1000 problems"));
      EXPECT_THAT(e.what(), HasSubstr("layers.0.bias: expected [0]"));
    }
    EXPECT_EQ(layers, 1000);
  }
  // Within bounds, stand-ins go on so that finish() lists everything (as above): what the checkpoint
  // lacks may add up to twice what it holds.
  WeightBinder binder(*ckpt_, torch::kFloat32, torch::kCPU);
  EXPECT_NO_THROW(binder.take("dec.fc.weight", {21, 2}));
  EXPECT_THAT(finish_error(binder), HasSubstr("1 missing, 0 with the wrong shape or type, 7 unexpected"));
}

TEST(WeightBinder, ShortensVeryLongLists) {
  const ScratchDir dir;
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (int i = 0; i < 25; ++i) tensors.emplace_back("layer." + std::to_string(100 + i), torch::ones({1}));
  save_safetensors(dir / "model.safetensors", tensors);
  const CheckpointReader ckpt = CheckpointReader::open_dir(dir.path());
  const WeightBinder binder(ckpt, torch::kFloat32, torch::kCPU);
  try {
    binder.finish();
    FAIL();
  } catch (const LoadError& e) {
    EXPECT_THAT(e.what(), HasSubstr("25 unexpected"));
    EXPECT_THAT(e.what(), HasSubstr("layer.119"));
    EXPECT_THAT(e.what(), Not(HasSubstr("layer.120")));
    EXPECT_THAT(e.what(), HasSubstr("... and 5 more"));
  }
}

}  // namespace
}  // namespace srformer
