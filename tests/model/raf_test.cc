// RAF against a direct, element-by-element transcription of the paper's Appendix A.2.
#include "model/attention/raf.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "model/kernels/raf_update.h"

namespace {

// Appendix A.2, one element at a time: mem = leak*mem + x; spike = mem/threshold - 1 > 0;
// mem = mem - threshold*spike; out = relu(mem_before_reset/threshold - 1).
void reference_raf(std::vector<double>& mem, const std::vector<double>& xw, double thr, double leak,
                   std::vector<double>& out, std::vector<int>& fired) {
  for (size_t i = 0; i < mem.size(); ++i) {
    mem[i] = leak * mem[i] + xw[i];
    const double y = mem[i] / thr - 1.0;
    fired[i] = y > 0 ? 1 : 0;
    if (y > 0) mem[i] -= thr;
    out[i] = y > 0 ? y : 0.0;
  }
}

}  // namespace

TEST(Raf, MatchesElementwiseTranscriptionOverSeveralSteps) {
  torch::manual_seed(7);
  const int64_t d = 5;
  srformer::RafParams p{torch::randn({d, d}) * 0.4, torch::full({1}, 0.15), torch::full({1}, 0.6)};
  auto mem = torch::zeros({2, 3, d, d});
  std::vector<double> ref_mem(static_cast<size_t>(mem.numel()), 0.0);
  for (int step = 0; step < 6; ++step) {
    const auto x = torch::randn({2, 3, d, d});
    const auto xw = torch::matmul(x, p.weight.t()).contiguous();  // the Linear, then elementwise RAF
    std::vector<double> xw_v(xw.data_ptr<float>(), xw.data_ptr<float>() + xw.numel());
    std::vector<double> ref_out(ref_mem.size());
    std::vector<int> ref_fired(ref_mem.size());
    reference_raf(ref_mem, xw_v, 0.15, 0.6, ref_out, ref_fired);
    const auto r = srformer::raf_step(p, mem, x);
    mem = r.mem;
    const auto m = r.mem.contiguous();
    const auto o = r.out.contiguous();
    const auto f = r.fired.contiguous();
    int fired_count = 0;
    for (int64_t i = 0; i < m.numel(); ++i) {
      ASSERT_NEAR(m.data_ptr<float>()[i], ref_mem[static_cast<size_t>(i)], 1e-5) << "step " << step << " elem " << i;
      ASSERT_NEAR(o.data_ptr<float>()[i], ref_out[static_cast<size_t>(i)], 1e-5);
      ASSERT_EQ(f.data_ptr<bool>()[i] ? 1 : 0, ref_fired[static_cast<size_t>(i)]);
      fired_count += ref_fired[static_cast<size_t>(i)];
    }
    if (step > 0) {
      EXPECT_GT(fired_count, 0) << "the test should exercise firing";
    }
  }
}

TEST(Raf, OutputIsRealValuedNotBinary) {
  srformer::RafParams p{torch::eye(2), torch::full({1}, 0.1), torch::full({1}, 0.5)};
  const auto r = srformer::raf_step(p, torch::zeros({2, 2}), torch::full({2, 2}, 0.35));
  // mem = 0.35, y = 0.35/0.1 - 1 = 2.5 -> R = 2.5, mem after reset = 0.25
  EXPECT_NEAR(r.out[0][0].item<float>(), 2.5f, 1e-5);
  EXPECT_NEAR(r.mem[0][0].item<float>(), 0.25f, 1e-6);
}

// The in-place kernel the decode step uses with precomputed switch drives gives raf_fire's results
// (same operations in the same order), block by block, whatever the thread count.
TEST(Raf, InPlaceKernelMatchesRafFire) {
  torch::manual_seed(11);
  const int64_t blocks = 5;
  const int64_t size = 3 * 16 * 16;
  srformer::RafParams p{torch::Tensor(), torch::full({1}, 0.2), torch::full({1}, 0.7)};
  for (const int threads : {1, 2}) {
    auto mem = torch::randn({blocks, size}) * 0.3;
    auto out = torch::full({blocks, size}, 7.0F);
    for (int step = 0; step < 4; ++step) {
      const auto drive = torch::randn({blocks, size}) * 0.4;
      const auto expected = srformer::raf_fire(p, mem, drive);
      std::vector<srformer::kernels::RafBlock> b;
      for (int64_t j = 0; j < blocks; ++j) {
        b.push_back(
            {mem.data_ptr<float>() + j * size, out.data_ptr<float>() + j * size, drive.data_ptr<float>() + j * size});
      }
      std::vector<int64_t> fired(blocks, -1);
      srformer::kernels::raf_accumulate_fire(b.data(), blocks, size, 0.7F, 0.2F, fired.data(), threads);
      EXPECT_TRUE(torch::equal(mem, expected.mem)) << "threads " << threads << " step " << step;
      EXPECT_TRUE(torch::equal(out, expected.out));
      const auto per_block = expected.fired.sum(1);
      int64_t total = 0;
      for (int64_t j = 0; j < blocks; ++j) {
        EXPECT_EQ(fired[static_cast<size_t>(j)], per_block[j].item<int64_t>());
        total += fired[static_cast<size_t>(j)];
      }
      EXPECT_GT(total, 0) << "the test should exercise firing";
    }
  }
}
