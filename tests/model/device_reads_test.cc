// On a GPU every read of a device value by the host (Tensor::item, nonzero's size) waits for the queue
// of kernels. A decode step makes its one read before the layers (EncoderDecoderModel::step's plan) and
// none inside them: checked here on LibTorch's path (the CPU kernels off, the path a GPU takes) by
// counting the operators that read back, as LibTorch's RecordFunction reports them.
#include <ATen/record_function.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <cstring>

#include "model/kernels/avx2.h"
#include "model/random_model.h"
#include "model/seq2seq.h"
#include "tests/support/kernel_switches.h"
#include "tests/support/temp_dir.h"

namespace srformer {
namespace {

std::atomic<int> scalar_reads{0};  // aten::_local_scalar_dense: every Tensor::item
std::atomic<int> nonzeros{0};      // aten::nonzero: its output's size is read back

std::unique_ptr<at::ObserverContext> count_reads(const at::RecordFunction& fn) {
  const char* name = fn.name();
  if (std::strcmp(name, "aten::_local_scalar_dense") == 0) ++scalar_reads;
  if (std::strcmp(name, "aten::nonzero") == 0) ++nonzeros;
  return nullptr;
}

// Counts the reads on this thread while it lives.
class ReadCounter {
 public:
  ReadCounter() {
    scalar_reads = 0;
    nonzeros = 0;
  }
  ReadCounter(const ReadCounter&) = delete;
  ReadCounter& operator=(const ReadCounter&) = delete;
  ~ReadCounter() { at::removeCallback(handle_); }

 private:
  at::CallbackHandle handle_ =
      at::addThreadLocalCallback(at::RecordFunctionCallback(&count_reads).scopes({at::RecordScope::FUNCTION}));
};

class DeviceReads : public ::testing::TestWithParam<Architecture> {};

TEST_P(DeviceReads, ADecodeStepReadsNothingBackInsideItsLayers) {
  const testing::KernelSwitchesRestored restore;
  kernels::set_cpu_kernels(false);
  testing::TempDir dir("reads");
  write_random_model(dir.path(), tiny_config(GetParam(), CrossAttentionKind::kSrformer, 4), 7);
  auto model = load_model(dir.path());
  // Rows of different lengths and expected lengths, so that steps switch segments in some rows only.
  const auto ids = torch::randint(3, 90, {3, 13}, torch::kLong);
  auto mask = torch::ones({3, 13}, torch::kLong);
  mask.index_put_({1, torch::indexing::Slice(9, torch::indexing::None)}, 0);
  mask.index_put_({2, torch::indexing::Slice(5, torch::indexing::None)}, 0);
  auto state = model->start(model->encode(ids, mask), torch::tensor({int64_t{4}, int64_t{7}, int64_t{2}}));
  auto tokens = torch::full({3}, model->config().decoder_start_token_id, torch::kLong);
  int switched = 0;
  for (int t = 0; t < 6; ++t) {
    const auto before = state.segment_switches.clone();
    torch::Tensor logits;
    {
      const ReadCounter counter;
      logits = model->step(state, tokens);
      // The tokens' range check, on the caller's tokens (the engine's are on the host): a min and a max.
      EXPECT_EQ(scalar_reads.load(), 2) << "step " << t;
      EXPECT_EQ(nonzeros.load(), 0) << "step " << t;
    }
    switched += static_cast<int>(state.segment_switches.ne(before).sum().item<int64_t>());
    tokens = logits.argmax(-1);
  }
  EXPECT_GT(switched, 3) << "the steps took segment switches";
}

INSTANTIATE_TEST_SUITE_P(BartAndT5, DeviceReads, ::testing::Values(Architecture::kBart, Architecture::kT5),
                         [](const auto& info) { return info.param == Architecture::kBart ? "bart" : "t5"; });

}  // namespace
}  // namespace srformer
