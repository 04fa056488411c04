// bf16 on the CPU: both backends of the bfloat16 projection (model/kernels/bf16_linear.h: AMX tiles,
// AVX512-BF16 dot products), each that this CPU has, against products of the bfloat16-rounded factors
// computed in double, over shapes that reach every padding and blocking path (inputs not a multiple
// of 32, outputs not a multiple of 16 or 64, rows not a multiple of 6 or 16); that a row's result does
// not depend on the other rows or on the thread count; and what a model loaded with --dtype bf16 does
// with it, on each backend.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "model/attention/self_attention.h"
#include "model/kernels/bf16_linear.h"
#include "model/layers.h"
#include "model/random_model.h"
#include "model/seq2seq.h"
#include "tests/model/attention_kernel_check.h"
#include "tests/support/temp_dir.h"

namespace srformer {
namespace {

using kernels::amx_available;
using kernels::Bf16PackedMatrix;

// The bf16 backends this CPU has: "amx" and/or "avx512-bf16".
std::vector<std::string> cpu_bf16_backends() {
  std::vector<std::string> out;
  if (kernels::amx_available()) out.emplace_back("amx");
  if (kernels::dot_bf16_available()) out.emplace_back("avx512-bf16");
  return out;
}

// Makes `backend` the one that multiplies (AMX wins whenever it is on), until destroyed.
class UseBackend {
 public:
  explicit UseBackend(const std::string& backend) {
    kernels::set_amx(backend == "amx");
    kernels::set_dot_bf16(backend == "avx512-bf16");
  }
  UseBackend(const UseBackend&) = delete;
  UseBackend& operator=(const UseBackend&) = delete;
  ~UseBackend() {
    kernels::set_amx(true);
    kernels::set_dot_bf16(true);
  }
};

#define SKIP_WITHOUT_BF16()                                                     \
  if (cpu_bf16_backends().empty())                                              \
  GTEST_SKIP() << "this CPU has neither AMX-BF16 nor AVX512-BF16: the kernels " \
                  "never run here and bf16 models are refused at load "         \
                  "(LoadBf16.FailsClearlyWithoutBf16Units)"

torch::Tensor multiply(const Bf16PackedMatrix& m, const torch::Tensor& x, int threads) {
  auto y = torch::full({x.size(0), m.out()}, std::numeric_limits<float>::quiet_NaN());
  m.multiply(x.data_ptr<float>(), x.size(0), y.data_ptr<float>(), threads);
  return y;
}

Bf16PackedMatrix pack(const torch::Tensor& w, const torch::Tensor& b) {
  return Bf16PackedMatrix(w.data_ptr<float>(), w.size(0), w.size(1), b.defined() ? b.data_ptr<float>() : nullptr);
}

TEST(Bf16Linear, MatchesDoubleProductOfBf16RoundedFactors) {
  SKIP_WITHOUT_BF16();
  torch::manual_seed(3);
  for (const auto& backend : cpu_bf16_backends()) {
    const UseBackend use(backend);
    for (const int64_t in : {3, 32, 45, 64, 100, 775}) {
      for (const int64_t out : {1, 16, 17, 37, 70, 130}) {  // 70, 130: a partial register block of tiles
        const auto w = torch::randn({out, in});
        const auto b = torch::randn({out});
        for (const bool with_bias : {false, true}) {
          const auto bias = with_bias ? b : torch::Tensor();
          const auto m = pack(w, bias);
          for (const int64_t rows : {1, 5, 6, 7, 15, 16, 17, 33, 70, 600}) {  // 600: two passes of 512 rows
            const auto x = torch::randn({rows, in});
            // The factors as the kernel sees them: rounded to nearest even (LibTorch rounds the same way).
            const auto xr = x.to(torch::kBFloat16).to(torch::kFloat64);
            const auto wr = w.to(torch::kBFloat16).to(torch::kFloat64);
            auto ref = torch::matmul(xr, wr.t());
            if (with_bias) ref = ref + b.to(torch::kFloat64);
            // fp32 sums over `in` products: allow a few ulps of the sum of magnitudes.
            auto bound = torch::matmul(xr.abs(), wr.abs().t()) * 1e-6 + 1e-6;
            if (with_bias) bound = bound + b.abs().to(torch::kFloat64) * 1e-6;
            for (const int threads : {1, 2}) {
              const auto y = multiply(m, x, threads).to(torch::kFloat64);
              EXPECT_TRUE(((y - ref).abs() <= bound).all().item<bool>())
                  << backend << " in=" << in << " out=" << out << " rows=" << rows << " threads=" << threads
                  << " bias=" << with_bias << " max |diff| " << (y - ref).abs().max().item<double>();
            }
          }
        }
      }
    }
  }
}

TEST(Bf16Linear, RowResultDoesNotDependOnOtherRowsOrThreads) {
  SKIP_WITHOUT_BF16();
  torch::manual_seed(4);
  const auto w = torch::randn({130, 100});
  const auto b = torch::randn({130});
  const auto m = pack(w, b);
  const auto x = torch::randn({37, 100});
  for (const auto& backend : cpu_bf16_backends()) {
    const UseBackend use(backend);
    const auto together = multiply(m, x, 2);
    for (int64_t r = 0; r < x.size(0); ++r) {
      const auto alone = multiply(m, x.narrow(0, r, 1).contiguous(), 1);
      EXPECT_TRUE(torch::equal(alone[0], together[r])) << backend << " row " << r;
    }
  }
}

TEST(Bf16Linear, RoundsInputsToNearestEven) {
  SKIP_WITHOUT_BF16();
  // One input, weight 1: the output is the input as bfloat16. 1 + 3·2^-9 lies between 1 + 2^-8 and
  // 1 + 2^-7 (nearer the second); truncation would give 1 + 2^-8.
  const auto w = torch::ones({1, 1});
  const auto m = pack(w, torch::Tensor());
  const auto x = torch::tensor({{1.0F + 3.0F / 512.0F}, {1.0F + 1.0F / 512.0F}, {-2.5F}});
  for (const auto& backend : cpu_bf16_backends()) {
    const UseBackend use(backend);
    const auto y = multiply(m, x, 1);
    EXPECT_EQ(y[0][0].item<float>(), 1.0F + 1.0F / 128.0F) << backend;
    EXPECT_EQ(y[1][0].item<float>(), 1.0F) << backend;  // a tie goes to the even neighbour
    EXPECT_EQ(y[2][0].item<float>(), -2.5F) << backend;
  }
}

TEST(Bf16Linear, TrackedProductsTakeLibTorchsFp32Path) {
  SKIP_WITHOUT_BF16();
  torch::manual_seed(5);
  Linear l;
  l.weight = torch::randn({20, 40}).requires_grad_(true);
  l.bias = torch::randn({20});
  l.pack_bf16();
  const auto x = torch::randn({3, 40});
  // Training must see the fp32 weights it updates, with gradients.
  const auto y = l(x);
  ASSERT_TRUE(y.requires_grad());
  EXPECT_TRUE(torch::equal(y, torch::linear(x, l.weight, l.bias)));
  y.sum().backward();
  EXPECT_TRUE(l.weight.grad().defined());
  // Inference goes through the bfloat16 product: bf16 error, not fp32's.
  torch::NoGradGuard no_grad;
  const auto fast = l(x);
  const auto exact = torch::linear(x, l.weight, l.bias);
  EXPECT_FALSE(torch::equal(fast, exact));
  EXPECT_TRUE(torch::allclose(fast, exact, 2e-2, 2e-2));
}

TEST(Bf16Linear, NoBackendIsAClearError) {
  const Bf16PackedMatrix m(std::vector<float>(4, 1.0F).data(), 2, 2, nullptr);
  const UseBackend none("none");
  std::vector<float> x(2, 1.0F);
  std::vector<float> y(2);
  EXPECT_FALSE(kernels::cpu_bf16_available());
  EXPECT_STREQ(kernels::cpu_bf16_backend(), "none");
  EXPECT_THROW(m.multiply(x.data(), 1, y.data(), 1), std::logic_error);
}

TEST(Bf16Attention, MatchesFp32AttentionWithMasksAndPositionBias) {
  SKIP_WITHOUT_BF16();
  for (const auto& backend : cpu_bf16_backends()) {
    SCOPED_TRACE(backend);
    const UseBackend use(backend);
    // bfloat16 factors: ~4e-3 relative per product; a wrong key, head or mask would be O(1).
    testing::expect_attention_kernel_matches_attend(attend_bf16, 3e-2);
  }
}

// Keys and values converted once for several blocks of queries: the same bits as one call.
TEST(Bf16Attention, KeysPreparedOnceGiveEveryBlockOfQueriesTheSameBits) {
  SKIP_WITHOUT_BF16();
  for (const auto& backend : cpu_bf16_backends()) {
    SCOPED_TRACE(backend);
    const UseBackend use(backend);
    testing::expect_prepared_keys_give_the_same_bits(kernels::bf16_attention, kernels::bf16_attention_keys,
                                                     kernels::bf16_attention);
  }
}

TEST(Bf16Attention, QueryWithEveryKeyMaskedGetsZeros) {
  SKIP_WITHOUT_BF16();
  for (const auto& backend : cpu_bf16_backends()) {
    SCOPED_TRACE(backend);
    const UseBackend use(backend);
    testing::expect_fully_masked_query_gets_zeros(attend_bf16);
  }
}

TEST(LoadBf16, ModelKeepsFp32ParametersAndReportsBf16) {
  SKIP_WITHOUT_BF16();
  testing::TempDir dir("bf16");
  write_random_model(dir.path(), tiny_config(Architecture::kBart, CrossAttentionKind::kSrformer, 4), 8);
  LoadOptions o;
  o.dtype = torch::kBFloat16;
  const auto bf16 = load_model(dir.path(), o);
  const auto fp32 = load_model(dir.path());
  EXPECT_EQ(bf16->dtype(), torch::kBFloat16);
  for (const auto& [name, t] : bf16->named_parameters()) EXPECT_EQ(t.scalar_type(), torch::kFloat32) << name;
  // The bf16 tiles are held beside the fp32 parameters, in about half their projections' bytes (tiles
  // pad each matrix to 16 outputs x 32 inputs); both counted, and the same parameters either way.
  EXPECT_GT(bf16->packed_weight_bytes(), 0);
  EXPECT_LT(bf16->packed_weight_bytes(), bf16->parameter_bytes());
  EXPECT_EQ(bf16->parameter_bytes(), fp32->parameter_bytes());
  EXPECT_EQ(bf16->parameter_bytes(), 4 * bf16->parameter_count());

  torch::NoGradGuard no_grad;
  torch::manual_seed(6);
  const auto ids = torch::randint(3, 96, {2, 19}, torch::kLong);
  const auto mask = torch::ones({2, 19}, torch::kLong);
  const auto dec = torch::randint(3, 96, {2, 7}, torch::kLong);
  const auto b = fp32->forward(fp32->encode(ids, mask), dec);
  // The same loaded model on each backend (the encoder's attention on each too).
  for (const auto& backend : cpu_bf16_backends()) {
    const UseBackend use(backend);
    const auto a = bf16->forward(bf16->encode(ids, mask), dec);
    // Close to fp32 (bfloat16 keeps 8 bits of each factor), but not fp32: the bf16 kernel did the products.
    const double scale = b.abs().max().item<double>();
    EXPECT_LT((a - b).abs().max().item<double>(), 0.05 * scale) << backend;
    EXPECT_GT((a - b).abs().max().item<double>(), 0.0) << backend;
  }
}

// What load_model says when a tiny model is loaded as `dtype` on the CPU ("loaded" when it loads).
std::string cpu_load_error(torch::ScalarType dtype) {
  testing::TempDir dir("dtype");
  write_random_model(dir.path(), tiny_config(Architecture::kT5, CrossAttentionKind::kFull, 0), 8);
  LoadOptions o;
  o.dtype = dtype;
  try {
    load_model(dir.path(), o);
    return "loaded";
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
}

TEST(LoadBf16, Fp16OnTheCpuIsAClearError) {
  const auto message = cpu_load_error(torch::kFloat16);
  EXPECT_NE(message.find("fp16 is for CUDA devices"), std::string::npos) << message;
}

TEST(LoadModel, CudaWithoutCudaIsAClearErrorNotALibTorchDump) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "CUDA is available here: the device loads";
  testing::TempDir dir("nocuda");
  write_random_model(dir.path(), tiny_config(Architecture::kT5, CrossAttentionKind::kFull, 0), 8);
  LoadOptions o;
  o.device = torch::Device("cuda:0");
  try {
    load_model(dir.path(), o);
    FAIL() << "loaded on a CUDA device without CUDA";
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("device cuda:0: this build or machine has no CUDA"), std::string::npos) << message;
    EXPECT_NE(message.find("use --device cpu"), std::string::npos) << message;
    EXPECT_LT(message.size(), 300U) << "a sentence, not LibTorch's backend list";
  }
}

TEST(LoadBf16, FailsClearlyWithoutBf16Units) {
  // As on a CPU with neither AMX nor AVX512-BF16 (or with SRFORMER_CPU_AMX=0 SRFORMER_CPU_BF16_DOT=0).
  const UseBackend none("none");
  const auto message = cpu_load_error(torch::kBFloat16);
  EXPECT_NE(message.find("needs Intel AMX"), std::string::npos) << message;
  EXPECT_NE(message.find("AVX512-BF16"), std::string::npos) << message;
  EXPECT_NE(message.find("use fp32"), std::string::npos) << message;
}

}  // namespace
}  // namespace srformer
