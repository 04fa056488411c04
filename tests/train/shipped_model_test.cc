// The model that ships in models/debian-synopsis-t5: trained by `srformer train` on Debian package
// descriptions (its README.md is the model card). These tests hold it to what the card and the README's
// demo promise, on descriptions written for this test (not from the training data).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>

#include "model/data/examples.h"
#include "model/eval/batch_summarize.h"
#include "model/eval/rouge.h"
#include "model/generation/generate.h"
#include "model/seq2seq.h"
#include "model/train/trainer.h"

namespace srformer::train {
namespace {

namespace fs = std::filesystem;

const fs::path kModel = fs::path(SRFORMER_SOURCE_DIR) / "models" / "debian-synopsis-t5";
const fs::path kHeldOut = fs::path(SRFORMER_SOURCE_DIR) / "tests" / "train" / "heldout_descriptions.jsonl";

TEST(ShippedModel, IsASmallSrformerT5WithTheTrainingLengthAsItsDefault) {
  ASSERT_TRUE(fs::exists(kModel / "config.json")) << kModel;
  EXPECT_LE(fs::file_size(kModel / "model.safetensors"), 30u << 20);
  const auto model = load_model(kModel);
  const auto& c = model->config();
  EXPECT_EQ(c.arch, Architecture::kT5);
  EXPECT_EQ(c.srformer.cross_attention, CrossAttentionKind::kSrformer);
  ASSERT_TRUE(c.max_length.has_value());
  EXPECT_EQ(c.srformer.expected_length, *c.max_length - 1);  // serving's L = the L it was trained with
}

TEST(ShippedModel, TeacherForcedLossOnUnseenDescriptionsIsFarBelowChance) {
  auto model = load_model(kModel);
  const auto tok = load_tokenizer(kModel);
  TrainOptions o;
  o.max_input_tokens = 256;
  o.max_target_tokens = model->config().srformer.expected_length;
  const double loss = validation_loss(*model, *tok, data::read_examples(kHeldOut.string()), o);
  const double chance = std::log(static_cast<double>(tok->vocab_size()));
  EXPECT_LT(loss, 0.6 * chance) << "loss " << loss << " vs uniform " << chance;
}

TEST(ShippedModel, SummariesFitTheirOwnDocumentBetterThanOthers) {
  auto model = load_model(kModel);
  const auto tok = load_tokenizer(kModel);
  const auto examples = data::read_examples(kHeldOut.string());
  std::vector<std::string> docs, refs;
  for (const auto& e : examples) {
    docs.push_back(e.document);
    refs.push_back(e.summary);
  }
  GenerationOptions g;
  g.max_new_tokens = model->config().srformer.expected_length;
  g = with_model_tokens(g, model->config());
  g.vocab_limit = tok->vocab_size();
  const auto out = eval::summarize_all(*model, *tok, docs, g, 4, 256);
  double matched = 0, mismatched = 0;
  const size_t n = refs.size();
  for (size_t i = 0; i < n; ++i) {
    EXPECT_FALSE(out.predictions[i].empty()) << examples[i].id;
    matched += eval::score_pair(refs[i], out.predictions[i])[eval::RougeType::kRouge1].fmeasure / n;
    mismatched += eval::score_pair(refs[(i + 1) % n], out.predictions[i])[eval::RougeType::kRouge1].fmeasure / n;
  }
  std::string all;
  for (size_t i = 0; i < n; ++i) all += examples[i].id + ": " + out.predictions[i] + "\n";
  EXPECT_GT(matched, mismatched + 0.1) << all;
  EXPECT_GT(matched, 0.2) << all;
}

}  // namespace
}  // namespace srformer::train
