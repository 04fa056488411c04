// Training dropout (model/dropout.h): Hugging Face's config fields and defaults, the scope that alone
// turns it on, and every site of BART and T5 wired (each rate alone changes a forward; none, nothing).
#include "model/dropout.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include "model/random_model.h"
#include "model/seq2seq.h"
#include "tests/support/temp_dir.h"

namespace srformer {
namespace {

TEST(Dropout, ConfigFieldsAndHuggingFaceDefaults) {
  nlohmann::json t5 = {{"model_type", "t5"}, {"vocab_size", 64}, {"d_model", 32},  {"d_kv", 8},
                       {"num_heads", 4},     {"d_ff", 64},       {"num_layers", 2}};
  auto c = ModelConfig::from_json(t5);
  EXPECT_DOUBLE_EQ(c.dropout.hidden, 0.1);  // T5Config's dropout_rate default, for every site
  EXPECT_DOUBLE_EQ(c.dropout.attention, 0.1);
  EXPECT_DOUBLE_EQ(c.dropout.activation, 0.1);
  t5["dropout_rate"] = 0.25;
  c = ModelConfig::from_json(t5);
  EXPECT_DOUBLE_EQ(c.dropout.attention, 0.25);
  EXPECT_DOUBLE_EQ(ModelConfig::from_json(c.to_json()).dropout.activation, 0.25);  // saved and read back

  nlohmann::json bart = {
      {"model_type", "bart"},  {"vocab_size", 64},    {"d_model", 32},       {"encoder_attention_heads", 4},
      {"encoder_ffn_dim", 64}, {"encoder_layers", 2}, {"decoder_layers", 2}, {"max_position_embeddings", 64}};
  c = ModelConfig::from_json(bart);
  EXPECT_DOUBLE_EQ(c.dropout.hidden, 0.1);  // BartConfig: dropout 0.1, attention/activation 0
  EXPECT_DOUBLE_EQ(c.dropout.attention, 0.0);
  EXPECT_DOUBLE_EQ(c.dropout.activation, 0.0);
  bart["attention_dropout"] = 0.2;
  bart["activation_dropout"] = 0.3;
  c = ModelConfig::from_json(ModelConfig::from_json(bart).to_json());
  EXPECT_DOUBLE_EQ(c.dropout.attention, 0.2);
  EXPECT_DOUBLE_EQ(c.dropout.activation, 0.3);
  bart["dropout"] = 1.0;
  EXPECT_THROW(ModelConfig::from_json(bart), std::invalid_argument);
}

TEST(Dropout, OnlyInsideAScopeAtItsSiteRateAndScaled) {
  torch::manual_seed(3);
  const auto x = torch::ones({200, 100});
  EXPECT_TRUE(dropout(x, DropoutSite::kHidden).is_same(x));
  {
    const DropoutScope scope({0.25, 0.0, 0.5});
    const auto h = dropout(x, DropoutSite::kHidden);
    EXPECT_NEAR(h.eq(0).to(torch::kFloat64).mean().item<double>(), 0.25, 0.02);
    EXPECT_TRUE(h.masked_select(h.ne(0)).allclose(torch::full({1}, 1.0 / 0.75)));
    EXPECT_TRUE(dropout(x, DropoutSite::kAttention).is_same(x));  // rate 0: untouched
    EXPECT_NEAR(dropout(x, DropoutSite::kActivation).eq(0).to(torch::kFloat64).mean().item<double>(), 0.5, 0.02);
    EXPECT_TRUE(dropout_active(DropoutSite::kHidden));
    EXPECT_FALSE(dropout_active(DropoutSite::kAttention));
    {
      const DropoutScope none({0.0, 0.0, 0.0});
      EXPECT_TRUE(dropout(x, DropoutSite::kHidden).is_same(x));
    }
    EXPECT_TRUE(dropout_active(DropoutSite::kHidden));  // the outer scope again
  }
  EXPECT_FALSE(dropout_active(DropoutSite::kHidden));
  EXPECT_TRUE(dropout(x, DropoutSite::kActivation).is_same(x));
}

// Each rate alone changes a teacher-forced forward of BART and T5 (SRformer cross-attention: the
// segment softmax takes attention dropout too); all zero, or no scope, changes nothing.
TEST(Dropout, EverySiteOfBartAndT5IsWired) {
  testing::TempDir tmp("dropout");
  for (const auto arch : {Architecture::kBart, Architecture::kT5}) {
    SCOPED_TRACE(to_string(arch));
    write_random_model(tmp.path(), tiny_config(arch, CrossAttentionKind::kSrformer, 4), 7);
    auto model = load_model(tmp.path());
    const auto ids = torch::tensor({{5, 6, 7, 8, 9, 10, 11, 12, 13, 3}, {7, 8, 9, 10, 11, 3, 1, 1, 1, 1}});
    const auto mask = ids.ne(model->config().pad_token_id).to(torch::kLong);
    const auto dec = torch::tensor({{2, 5, 6, 7, 8}, {2, 9, 8, 7, 6}});
    const auto run = [&] {
      const auto enc = model->encode(ids, mask);
      return model->forward(enc, dec, torch::full({2}, 5, torch::kLong));
    };
    const auto plain = run();
    {
      const DropoutScope zero({0.0, 0.0, 0.0});
      EXPECT_TRUE(torch::equal(run(), plain));
    }
    for (const auto& [name, rates] : {std::pair<const char*, DropoutRates>{"hidden", {0.3, 0.0, 0.0}},
                                      {"attention", {0.0, 0.3, 0.0}},
                                      {"activation", {0.0, 0.0, 0.3}}}) {
      SCOPED_TRACE(name);
      torch::manual_seed(11);
      torch::Tensor a;
      {
        const DropoutScope scope(rates);
        a = run();
      }
      EXPECT_GT((a - plain).abs().max().item<double>(), 1e-3);
      torch::manual_seed(11);
      const DropoutScope scope(rates);
      EXPECT_TRUE(torch::equal(run(), a));  // the generator decides the masks
    }
    EXPECT_TRUE(torch::equal(run(), plain));
  }
}

}  // namespace
}  // namespace srformer
