// The model on a CUDA device in fp32, fp16 and bf16, against itself and against the same weights on the
// CPU in fp32: the GPU half of the model library. The tests exist in builds against a CUDA LibTorch
// (PyTorch's, deploy/gpu/build.sh) and skip where that build finds no GPU. On a GPU machine:
// `ctest --test-dir build-gpu -R Cuda` (deploy/gpu/check.sh runs them first).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "model/decoder_state.h"
#include "model/dtype_name.h"
#include "model/fixture_check.h"
#include "model/generation/generate.h"
#include "model/random_model.h"
#include "model/seq2seq.h"
#include "tests/support/fixture_dirs.h"
#include "tests/support/temp_dir.h"

namespace srformer {
namespace {

struct CudaCase {
  Architecture arch;
  CrossAttentionKind kind;
  torch::ScalarType dtype;
};

[[maybe_unused]] std::string case_name(const ::testing::TestParamInfo<CudaCase>& info) {
  return std::string(to_string(info.param.arch)) + "_" + to_string(info.param.kind) + "_" +
         dtype_name(info.param.dtype);
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kCPU, torch::kFloat64) - b.to(torch::kCPU, torch::kFloat64)).abs().max().item<double>();
}

// Tiny random models (tests/model/seq2seq_test.cc's shapes, segment size 4), loaded on cuda:0 in the case's
// dtype and on the CPU in fp32.
class CudaModel : public ::testing::TestWithParam<CudaCase> {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device here: run on a GPU machine (deploy/gpu/)";
    torch::manual_seed(1);
    write_random_model(dir_.path(), tiny_config(GetParam().arch, GetParam().kind, /*segment_size=*/4), 42);
    LoadOptions o;
    o.device = torch::Device(torch::kCUDA, 0);
    o.dtype = GetParam().dtype;
    gpu_ = load_model(dir_.path(), o);
    cpu_ = load_model(dir_.path());
  }
  torch::Tensor random_ids(int64_t b, int64_t n) const {
    return torch::randint(3, cpu_->config().vocab_size, {b, n}, torch::kLong);
  }
  // Two computations of the same values: in fp32 they differ by summation order (cuBLAS against the CPU's
  // kernels, a batch against a row); in fp16/bf16 by the format's rounding (check_fixture's widened
  // tolerance), relative to the values' size.
  double tolerance(const torch::Tensor& ref) const {
    const double unit = GetParam().dtype == torch::kFloat32 ? 1e-4 : half_precision_tolerance(GetParam().dtype);
    return unit * (1.0 + ref.abs().max().item<double>());
  }
  // Feeds dec[:, t] step by step; returns [B,q,V].
  torch::Tensor incremental(Seq2SeqModel& m, DecoderState& st, const torch::Tensor& dec) const {
    std::vector<torch::Tensor> out;
    for (int64_t t = 0; t < dec.size(1); ++t) out.push_back(m.step(st, dec.select(1, t)));
    return torch::stack(out, 1);
  }
  testing::TempDir dir_{"cuda"};
  std::unique_ptr<Seq2SeqModel> gpu_, cpu_;
};

TEST_P(CudaModel, TeacherForcedOutputsMatchTheCpuModelAndLogitsAreFp32) {
  const auto ids = random_ids(2, 22);  // s = 4: m = 6 and, for the padded row (k = 15), 4
  auto mask = torch::ones({2, 22}, torch::kLong);
  mask[1].narrow(0, 15, 7).fill_(0);
  const auto dec = random_ids(2, 9);
  const auto L = torch::tensor({9, 3}, torch::kLong);  // row 1 skips segments
  const auto gpu_enc = gpu_->encode(ids, mask);
  const auto cpu_enc = cpu_->encode(ids, mask);
  EXPECT_TRUE(gpu_enc.hidden.is_cuda());
  const auto real = mask.ne(0).unsqueeze(-1).expand_as(cpu_enc.hidden);
  const auto gpu_hidden = gpu_enc.hidden.to(torch::kCPU, torch::kFloat32).masked_select(real);
  const auto cpu_hidden = cpu_enc.hidden.masked_select(real);
  EXPECT_LE(max_diff(gpu_hidden, cpu_hidden), tolerance(cpu_hidden));
  const auto gpu_logits = gpu_->forward(gpu_enc, dec, L);
  const auto cpu_logits = cpu_->forward(cpu_enc, dec, L);
  EXPECT_EQ(gpu_logits.scalar_type(), torch::kFloat32) << "logits are float32 in every dtype";
  EXPECT_TRUE(gpu_logits.is_cuda());
  EXPECT_LE(max_diff(gpu_logits, cpu_logits), tolerance(cpu_logits));
}

TEST_P(CudaModel, IncrementalEqualsTeacherForcedAndTheCpusSteps) {
  const auto ids = random_ids(2, 48);  // m = 12 for row 0; row 1: k = 14, m = 4
  auto mask = torch::ones({2, 48}, torch::kLong);
  mask[1].narrow(0, 14, 34).fill_(0);
  const auto dec = random_ids(2, 14);
  const auto L = torch::tensor({12, 3}, torch::kLong);
  const auto enc = gpu_->encode(ids, mask);
  const auto tf = gpu_->forward(enc, dec, L);
  auto st = gpu_->start(enc, L);
  const auto inc = incremental(*gpu_, st, dec);
  EXPECT_LE(max_diff(tf, inc), tolerance(inc));
  auto cpu_st = cpu_->start(cpu_->encode(ids, mask), L);
  const auto cpu_inc = incremental(*cpu_, cpu_st, dec);
  EXPECT_LE(max_diff(inc, cpu_inc), tolerance(cpu_inc));
  // The schedule is the CPU's: the same segments visited, the same RAF steps taken and fired.
  EXPECT_TRUE(torch::equal(st.segment.cpu(), cpu_st.segment.cpu()));
  EXPECT_TRUE(torch::equal(st.segment_switches.cpu(), cpu_st.segment_switches.cpu()));
  if (GetParam().dtype == torch::kFloat32) {
    // The same firings, but for a membrane element that another summation order puts on the other side of
    // its threshold (about 1e-7 of it): at most a couple in a layer.
    EXPECT_LE((st.raf_fired.cpu() - cpu_st.raf_fired.cpu()).abs().max().item<double>(), 2.0);
  }
}

TEST_P(CudaModel, ARowJoiningABatchAndLeftByOthersEqualsTheRowAlone) {
  const auto ids = random_ids(1, 17);
  const auto one = torch::ones({1, 17}, torch::kLong);
  const auto dec = random_ids(1, 8);
  auto alone_state = gpu_->start(gpu_->encode(ids, one), torch::tensor({8}, torch::kLong));
  const auto alone = incremental(*gpu_, alone_state, dec);
  auto ids2 = random_ids(2, 25);
  auto mask2 = torch::ones({2, 25}, torch::kLong);
  mask2[1].narrow(0, 11, 14).fill_(0);
  auto st = gpu_->start(gpu_->encode(ids2, mask2), torch::tensor({5, 12}, torch::kLong));
  const auto other_tokens = random_ids(2, 20);
  for (int64_t t = 0; t < 3; ++t) gpu_->step(st, other_tokens.select(1, t));
  st.append(gpu_->start(gpu_->encode(ids, one), torch::tensor({8}, torch::kLong)));
  std::vector<torch::Tensor> ours;
  for (int64_t t = 0; t < 8; ++t) {
    const int64_t B = st.batch_size();
    auto tok = torch::empty({B}, torch::kLong);
    tok.narrow(0, 0, B - 1).copy_(other_tokens.select(1, t + 3).narrow(0, 0, B - 1));
    tok[B - 1] = dec[0][t];
    ours.push_back(gpu_->step(st, tok)[B - 1]);
    if (t == 4) st.select(torch::tensor({1, 2}, torch::kLong));  // row 0 finishes
    if (t == 5) st.compact();
  }
  EXPECT_LE(max_diff(torch::stack(ours, 0), alone[0]), tolerance(alone[0]));
}

TEST_P(CudaModel, BeamReorderCarriesTheMembraneAlong) {
  const auto ids = random_ids(2, 16);
  const auto enc = gpu_->encode(ids, torch::ones({2, 16}, torch::kLong));
  const auto dec = random_ids(2, 7);
  auto st = gpu_->start(enc, torch::tensor({7, 7}, torch::kLong));
  for (int64_t t = 0; t < 3; ++t) gpu_->step(st, dec.select(1, t));
  auto swapped = st;
  swapped.select(torch::tensor({1, 0}, torch::kLong));
  for (int64_t t = 3; t < 7; ++t) {
    const auto a = gpu_->step(st, dec.select(1, t));
    const auto b = gpu_->step(swapped, dec.select(1, t).flip(0));
    EXPECT_LE(max_diff(a, b.flip(0)), tolerance(a)) << "step " << t;
  }
}

// fp16/bf16 multiply in the model's dtype, while the RAF membrane, K^T V, the key norms and the switch
// drives stay fp32 (the membrane integrates over segments: half precision would lose its small drives).
TEST_P(CudaModel, TheStateLivesOnTheDeviceWithRafAndKvInFp32) {
  EXPECT_TRUE(gpu_->device().is_cuda());
  EXPECT_EQ(gpu_->dtype(), GetParam().dtype);
  const auto ids = random_ids(2, 26);
  auto st = gpu_->start(gpu_->encode(ids, torch::ones({2, 26}, torch::kLong)), torch::tensor({6, 6}, torch::kLong));
  (void)incremental(*gpu_, st, random_ids(2, 4));
  const bool raf = gpu_->config().srformer.uses_raf();
  for (size_t l = 0; l < st.layers.size(); ++l) {
    SCOPED_TRACE("layer " + std::to_string(l));
    const auto& layer = st.layers[l];
    ASSERT_TRUE(layer.cross_k.defined());
    EXPECT_TRUE(layer.cross_k.is_cuda());
    EXPECT_EQ(layer.cross_k.scalar_type(), GetParam().dtype);
    EXPECT_EQ(layer.mem.defined(), raf);
    for (const auto* t : {&layer.kv, &layer.knorm, &layer.mem, &layer.recur, &layer.switch_drive}) {
      if (!t->defined()) continue;
      EXPECT_TRUE(t->is_cuda());
      EXPECT_EQ(t->scalar_type(), torch::kFloat32);
    }
  }
}

// Greedy decoding on the GPU in fp32 picks the CPU's tokens (random weights: a near-tie, which rounding
// could decide either way, would show as a difference; fp16/bf16 round far more, so they are not held
// to it).
TEST_P(CudaModel, GreedyGenerationInFp32PicksTheCpusTokens) {
  if (GetParam().dtype != torch::kFloat32) GTEST_SKIP() << "fp16/bf16 may decide a near-tie otherwise";
  const auto ids = random_ids(2, 21);
  auto mask = torch::ones({2, 21}, torch::kLong);
  mask[1].narrow(0, 9, 12).fill_(0);
  GenerationOptions o;
  o.max_new_tokens = 12;
  o.min_new_tokens = 12;
  o = with_model_tokens(o, cpu_->config());
  const auto on_gpu = generate(*gpu_, ids, mask, o);
  const auto on_cpu = generate(*cpu_, ids, mask, o);
  ASSERT_EQ(on_gpu.size(), on_cpu.size());
  for (size_t b = 0; b < on_cpu.size(); ++b) {
    EXPECT_EQ(on_gpu[b].hypotheses.at(0).tokens, on_cpu[b].hypotheses.at(0).tokens) << "row " << b;
  }
}

#if defined(SRFORMER_TORCH_CUDA)  // cmake/Dependencies.cmake: this build's LibTorch has CUDA
INSTANTIATE_TEST_SUITE_P(
    Cuda, CudaModel, ::testing::ValuesIn([] {
      std::vector<CudaCase> cases;
      for (auto arch : {Architecture::kBart, Architecture::kT5}) {
        for (auto kind : {CrossAttentionKind::kFull, CrossAttentionKind::kSegmented, CrossAttentionKind::kSrformer}) {
          for (auto dtype : {torch::kFloat32, torch::kFloat16, torch::kBFloat16}) {
            cases.push_back({arch, kind, dtype});
          }
        }
      }
      return cases;
    }()),
    case_name);
#else
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CudaModel);
#endif

// The authors' reference fixtures replayed on the GPU: in fp32 to their own tolerance with generation,
// in fp16/bf16 to the widened one.
class CudaFixtures : public ::testing::TestWithParam<torch::ScalarType> {};

TEST_P(CudaFixtures, EveryFixtureMatchesTheAuthorsOutputs) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device here: run on a GPU machine (deploy/gpu/)";
  const auto dirs = testing::fixture_dirs();
  if (dirs.empty()) GTEST_SKIP() << "no fixtures found under " << SRFORMER_FIXTURES_DIR << " (shared/ absent)";
  LoadOptions o;
  o.device = torch::Device(torch::kCUDA, 0);
  o.dtype = GetParam();
  for (const auto& dir : dirs) {
    SCOPED_TRACE(dir.string());
    const auto r = check_fixture(dir, o);
    EXPECT_TRUE(r.ok) << r.to_json().dump();
    EXPECT_EQ(r.device, "cuda:0");
    if (GetParam() == torch::kFloat32 && r.greedy_match) {
      EXPECT_TRUE(*r.greedy_match);
    }
  }
}

#if defined(SRFORMER_TORCH_CUDA)
INSTANTIATE_TEST_SUITE_P(Cuda, CudaFixtures, ::testing::Values(torch::kFloat32, torch::kFloat16, torch::kBFloat16),
                         [](const ::testing::TestParamInfo<torch::ScalarType>& info) {
                           return dtype_name(info.param);
                         });
#else
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CudaFixtures);
#endif

}  // namespace
}  // namespace srformer
