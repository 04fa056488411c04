#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>

#include "model/attention/self_attention.h"
#include "model/kernels/avx2.h"
#include "model/t5.h"
#include "tests/support/kernel_switches.h"

namespace srformer {
namespace {

// The decoder bias in one pass gives the bits of LibTorch's form (bucket embedding, permute, plus the
// additive mask), distances past the table and keys after the query included.
TEST(T5DecoderBias, OnePassEqualsEmbeddingPlusAdditiveMask) {
  SKIP_WITHOUT_CPU_KERNELS();
  torch::manual_seed(3);
  const int64_t nb = 32, max_distance = 128, H = 4, B = 3, q = 2, T = 300;
  const auto table = torch::randn({nb, H});
  table[0][1] = -0.0f;  // -0.0 + 0.0 is +0.0 in both forms
  const auto relative = torch::randint(-(T + 40), 5, {B, q, T}, torch::kLong);
  const auto allowed = torch::rand({B, q, T}).gt(0.3);
  const auto buckets = t5_decoder_buckets(nb, max_distance);
  const auto fast = t5_decoder_bias(table, buckets, relative, allowed, torch::kFloat32);
  ASSERT_TRUE(fast.has_value());
  const auto reference =
      torch::embedding(table, relative_position_bucket(relative, false, nb, max_distance)).permute({0, 3, 1, 2}) +
      additive_mask(allowed.unsqueeze(1), torch::kFloat32);
  ASSERT_EQ(fast->sizes(), reference.sizes());
  EXPECT_TRUE(fast->is_contiguous());
  EXPECT_EQ(std::memcmp(fast->data_ptr<float>(), reference.contiguous().data_ptr<float>(),
                        static_cast<size_t>(reference.numel()) * sizeof(float)),
            0);
  // Elsewhere (bf16, other layouts) the caller takes LibTorch's form.
  EXPECT_FALSE(t5_decoder_bias(table, buckets, relative, allowed, torch::kBFloat16).has_value());
}

// Training: the one pass writes through raw pointers, which autograd cannot follow, so a table that
// requires grad takes LibTorch's form and the relative_attention_bias still learns.
TEST(T5DecoderBias, ATrainedTableTakesTheFormAutogradFollows) {
  SKIP_WITHOUT_CPU_KERNELS();
  const auto table = torch::randn({32, 2}).requires_grad_(true);
  const auto relative = torch::randint(-20, 1, {1, 3, 5}, torch::kLong);
  const auto allowed = torch::ones({1, 3, 5}, torch::kBool);
  const auto buckets = t5_decoder_buckets(32, 128);
  EXPECT_FALSE(t5_decoder_bias(table, buckets, relative, allowed, torch::kFloat32).has_value());
  const torch::NoGradGuard no_grad;
  EXPECT_TRUE(t5_decoder_bias(table, buckets, relative, allowed, torch::kFloat32).has_value()) << "inference";
}

}  // namespace
}  // namespace srformer
