// Mixed-precision building blocks: the autocast scopes (model/autocast.h) and fp16's dynamic loss
// scaling (model/train/loss_scaler.h). Training runs under autocast are in trainer_test.cc.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <stdexcept>

#include "model/autocast.h"
#include "model/kernels/avx2.h"
#include "model/random_model.h"
#include "model/seq2seq.h"
#include "model/train/loss_scaler.h"
#include "tests/support/kernel_switches.h"
#include "tests/support/temp_dir.h"

namespace srformer {
namespace {

TEST(LossScaler, HalvesAndSkipsOnOverflowAndDoublesAfterARunOfGoodUpdates) {
  train::LossScaler s(true, 1024.0, 0, 3);
  EXPECT_EQ(s.scale(), 1024.0);
  EXPECT_TRUE(s.update(true));
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 1024.0);
  EXPECT_TRUE(s.update(true));  // third good update in a row
  EXPECT_EQ(s.scale(), 2048.0);
  EXPECT_EQ(s.good_updates(), 0);
  EXPECT_TRUE(s.update(true));
  EXPECT_FALSE(s.update(false));  // overflow: skip, halve, start counting again
  EXPECT_EQ(s.scale(), 1024.0);
  EXPECT_EQ(s.good_updates(), 0);
  EXPECT_TRUE(s.update(true));
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 1024.0);
  EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.scale(), 512.0);

  // Resumed state carries on where it stopped.
  train::LossScaler resumed(true, 512.0, 2, 3);
  EXPECT_TRUE(resumed.update(true));
  EXPECT_EQ(resumed.scale(), 1024.0);

  // Disabled (fp32, bf16): scale 1 and every update applies, as before mixed precision existed.
  train::LossScaler off(false);
  EXPECT_EQ(off.scale(), 1.0);
  EXPECT_TRUE(off.update(false));
  EXPECT_EQ(off.scale(), 1.0);
  EXPECT_THROW(train::LossScaler(true, 0.0), std::invalid_argument);
}

TEST(Autocast, ParsesItsNamesAndSaysWhatRunsWhere) {
  EXPECT_FALSE(parse_autocast("off").has_value());
  EXPECT_EQ(parse_autocast("bf16"), c10::ScalarType::BFloat16);
  EXPECT_EQ(parse_autocast("fp16"), c10::ScalarType::Half);
  try {
    parse_autocast("fp8");
    FAIL() << "fp8 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("off, bf16 or fp16"), std::string::npos) << e.what();
  }
  EXPECT_EQ(autocast_unsupported_reason(c10::DeviceType::CPU, c10::ScalarType::BFloat16), "");
  EXPECT_NE(autocast_unsupported_reason(c10::DeviceType::CPU, c10::ScalarType::Half).find("CUDA"), std::string::npos);
  EXPECT_EQ(autocast_unsupported_reason(c10::DeviceType::CUDA, c10::ScalarType::Half), "");
}

TEST(Autocast, ScopeRunsProductsInItsTypeAndAnFp32RegionTurnsItOffUntilItEnds) {
  const auto a = torch::randn({4, 8});
  const auto b = torch::randn({8, 3});
  ASSERT_FALSE(autocast_enabled(c10::DeviceType::CPU));
  {
    const AutocastScope scope(c10::DeviceType::CPU, c10::ScalarType::BFloat16);
    EXPECT_TRUE(autocast_enabled(c10::DeviceType::CPU));
    EXPECT_EQ(torch::matmul(a, b).scalar_type(), torch::kBFloat16);
    EXPECT_EQ((a + 1).scalar_type(), torch::kFloat32);  // element-wise maths keeps its type
    {
      const Fp32Region fp32;
      EXPECT_FALSE(autocast_enabled(c10::DeviceType::CPU));
      const auto c = torch::matmul(a, b);
      EXPECT_EQ(c.scalar_type(), torch::kFloat32);
      EXPECT_TRUE(torch::equal(c, torch::matmul(a, b)));
    }
    EXPECT_TRUE(autocast_enabled(c10::DeviceType::CPU));
    EXPECT_EQ(torch::matmul(a, b).scalar_type(), torch::kBFloat16);
  }
  EXPECT_FALSE(autocast_enabled(c10::DeviceType::CPU));
  EXPECT_EQ(torch::matmul(a, b).scalar_type(), torch::kFloat32);
}

// Under bf16 autocast the model's projections run in bf16, but what SRformer accumulates per request
// (K^T V or the switch table, ||K||, membrane, R) is computed and held in fp32. LibTorch's path (the
// one training takes; the CPU kernels compute in fp32 by construction).
TEST(Autocast, SrformerStateStaysFp32UnderBf16) {
  const testing::KernelSwitchesRestored restore_switches;
  testing::TempDir tmp("autocast");
  for (const bool table : {true, false}) {
    auto c = tiny_config(Architecture::kT5, CrossAttentionKind::kSrformer, 4, 64);
    write_random_model(tmp.path(), c, 5);
    LoadOptions lo;
    lo.precompute_switches = table;
    auto model = load_model(tmp.path(), lo);
    kernels::set_cpu_kernels(false);
    const auto ids = torch::tensor({{5, 6, 7, 8, 9, 10, 11, 12, 13, 1}, {7, 8, 9, 10, 11, 1, 0, 0, 0, 0}});
    DecoderState st;
    {
      const AutocastScope scope(c10::DeviceType::CPU, c10::ScalarType::BFloat16);
      const auto enc = model->encode(ids, ids.ne(0).to(torch::kLong));
      st = model->start(enc, torch::full({2}, 6, torch::kLong));
      model->step(st, torch::zeros({2}, torch::kLong));
    }
    SCOPED_TRACE(table ? "switch table" : "K^T V");
    for (const auto& ls : st.layers) {
      EXPECT_EQ(ls.cross_k.scalar_type(), torch::kBFloat16);  // autocast did reach the projections
      for (const auto* t : {&ls.kv, &ls.knorm, &ls.mem, &ls.recur, &ls.switch_drive}) {
        if (t->defined()) {
          EXPECT_EQ(t->scalar_type(), torch::kFloat32);
        }
      }
      EXPECT_EQ(ls.switch_drive.defined(), table);
      EXPECT_EQ(ls.kv.defined(), !table);
    }
  }
}

}  // namespace
}  // namespace srformer
