// Properties of the incremental decoding API on random tiny models, for every cross-attention
// variant: incremental == teacher-forced, batching/padding never change a row, one segment == full.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "model/random_model.h"
#include "model/seq2seq.h"
#include "tests/support/temp_dir.h"

namespace srformer {
namespace {

using testing::TempDir;

constexpr CrossAttentionKind kAllKinds[] = {
    CrossAttentionKind::kFull,        CrossAttentionKind::kSegmented,    CrossAttentionKind::kSrformer,
    CrossAttentionKind::kAblationI,   CrossAttentionKind::kAblationII,   CrossAttentionKind::kAblationIII,
    CrossAttentionKind::kAblationIV,  CrossAttentionKind::kXlMemory,     CrossAttentionKind::kGlobalTokens,
};

struct Case {
  Architecture arch;
  CrossAttentionKind kind;
};

std::string name_of(const ::testing::TestParamInfo<Case>& info) {
  return std::string(to_string(info.param.arch)) + "_" + to_string(info.param.kind);
}

class Seq2SeqProperties : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    torch::manual_seed(1);
    write_random_model(dir_.path(), tiny_config(GetParam().arch, GetParam().kind, /*segment_size=*/4), 42);
    model_ = load_model(dir_.path());
  }
  torch::Tensor random_ids(int64_t b, int64_t n) const {
    return torch::randint(3, model_->config().vocab_size, {b, n}, torch::kLong);
  }
  // Feeds dec[:, t] step by step; returns [B,q,V].
  torch::Tensor incremental(DecoderState& st, const torch::Tensor& dec) {
    std::vector<torch::Tensor> out;
    for (int64_t t = 0; t < dec.size(1); ++t) out.push_back(model_->step(st, dec.select(1, t)));
    return torch::stack(out, 1);
  }
  TempDir dir_{"seq2seq"};
  std::unique_ptr<Seq2SeqModel> model_;
};

TEST_P(Seq2SeqProperties, IncrementalEqualsTeacherForcedIncludingSkippedSegments) {
  const auto ids = random_ids(2, 22);  // k = 22, s = 4 -> m = 6
  const auto mask = torch::ones({2, 22}, torch::kLong);
  const auto enc = model_->encode(ids, mask);
  const auto dec = random_ids(2, 9);
  // Row 0: L = 9 (every segment visited); row 1: L = 3 < m (segment indices skipped).
  const auto L = torch::tensor({9, 3}, torch::kLong);
  const auto tf = model_->forward(enc, dec, L);
  auto st = model_->start(enc, L);
  const auto inc = incremental(st, dec);
  EXPECT_LE((tf - inc).abs().max().item<double>(), 1e-5);
  if (model_->config().srformer.segmented()) {
    // Row 1 visits segments 0, 2, 4, 5 (t*6/3): the schedule really skipped some.
    EXPECT_EQ(st.segment[1].item<int64_t>(), 5);
    EXPECT_EQ(st.segment_switches[1].item<int64_t>(), 4);
  }
}

TEST_P(Seq2SeqProperties, PaddedRowEqualsUnpaddedRow) {
  const auto ids = random_ids(1, 13);
  const auto dec = random_ids(1, 6);
  const auto alone = model_->forward(model_->encode(ids, torch::ones({1, 13}, torch::kLong)), dec);
  // Same row padded to 20 next to a longer row.
  auto padded = torch::full({2, 20}, model_->config().pad_token_id, torch::kLong);
  padded[0].narrow(0, 0, 13).copy_(ids[0]);
  padded[1].copy_(random_ids(1, 20)[0]);
  auto mask = torch::zeros({2, 20}, torch::kLong);
  mask[0].narrow(0, 0, 13).fill_(1);
  mask[1].fill_(1);
  const auto both = model_->forward(model_->encode(padded, mask), torch::cat({dec, random_ids(1, 6)}, 0));
  EXPECT_LE((both[0] - alone[0]).abs().max().item<double>(), 1e-5);
}

TEST_P(Seq2SeqProperties, RowInsideABatchOfOtherRowsEqualsRowAlone) {
  const auto ids = random_ids(1, 17);
  const auto one = torch::ones({1, 17}, torch::kLong);
  const auto dec = random_ids(1, 8);
  auto alone_state = model_->start(model_->encode(ids, one), torch::tensor({8}, torch::kLong));
  const auto alone = incremental(alone_state, dec);

  // A batch already running: two rows of other lengths, L and progress.
  auto ids2 = random_ids(2, 25);
  auto mask2 = torch::ones({2, 25}, torch::kLong);
  mask2[1].narrow(0, 11, 14).fill_(0);
  auto st = model_->start(model_->encode(ids2, mask2), torch::tensor({5, 12}, torch::kLong));
  auto other_tokens = random_ids(2, 20);
  for (int64_t t = 0; t < 3; ++t) model_->step(st, other_tokens.select(1, t));
  // Our row joins between steps, then decodes among them; a row leaves midway.
  st.append(model_->start(model_->encode(ids, one), torch::tensor({8}, torch::kLong)));
  std::vector<torch::Tensor> ours;
  for (int64_t t = 0; t < 8; ++t) {
    const int64_t B = st.batch_size();
    auto tok = torch::empty({B}, torch::kLong);
    tok.narrow(0, 0, B - 1).copy_(other_tokens.select(1, t + 3).narrow(0, 0, B - 1));
    tok[B - 1] = dec[0][t];
    const auto logits = model_->step(st, tok);
    ours.push_back(logits[B - 1]);
    if (t == 4) st.select(torch::tensor({1, 2}, torch::kLong));  // row 0 finishes
    if (t == 5) st.compact();
  }
  EXPECT_LE((torch::stack(ours, 0) - alone[0]).abs().max().item<double>(), 1e-5);
}

TEST_P(Seq2SeqProperties, BeamStyleReorderCarriesTheMembraneAlong) {
  const auto ids = random_ids(2, 16);
  const auto enc = model_->encode(ids, torch::ones({2, 16}, torch::kLong));
  const auto dec = random_ids(2, 7);
  auto st = model_->start(enc, torch::tensor({7, 7}, torch::kLong));
  for (int64_t t = 0; t < 3; ++t) model_->step(st, dec.select(1, t));
  auto swapped = st;
  swapped.select(torch::tensor({1, 0}, torch::kLong));
  for (int64_t t = 3; t < 7; ++t) {
    const auto a = model_->step(st, dec.select(1, t));
    const auto b = model_->step(swapped, dec.select(1, t).flip(0));
    EXPECT_LE((a - b.flip(0)).abs().max().item<double>(), 1e-6);
  }
}

INSTANTIATE_TEST_SUITE_P(AllVariants, Seq2SeqProperties,
                         ::testing::ValuesIn([] {
                           std::vector<Case> cases;
                           for (auto arch : {Architecture::kBart, Architecture::kT5}) {
                             for (auto k : kAllKinds) cases.push_back({arch, k});
                           }
                           return cases;
                         }()),
                         name_of);

class OneSegment : public ::testing::TestWithParam<Architecture> {};

TEST_P(OneSegment, SrformerWithSegmentCoveringTheInputEqualsFullAttention) {
  TempDir a("full");
  write_random_model(a.path(), tiny_config(GetParam(), CrossAttentionKind::kFull, 0), 5);
  auto full = load_model(a.path());
  // The same weights served as SRformer with s = 64 >= k (RAF parameters initialised).
  LoadOptions o;
  o.srformer = tiny_config(GetParam(), CrossAttentionKind::kSrformer, 64).srformer;
  o.init_missing_raf = true;
  auto sr = load_model(a.path(), o);
  ASSERT_EQ(sr->config().srformer.cross_attention, CrossAttentionKind::kSrformer);
  torch::manual_seed(3);
  const auto ids = torch::randint(3, 96, {2, 30}, torch::kLong);
  auto mask = torch::ones({2, 30}, torch::kLong);
  mask[1].narrow(0, 20, 10).fill_(0);
  const auto dec = torch::randint(3, 96, {2, 6}, torch::kLong);
  const auto x = full->forward(full->encode(ids, mask), dec);
  const auto y = sr->forward(sr->encode(ids, mask), dec);
  EXPECT_LE((x - y).abs().max().item<double>(), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Both, OneSegment, ::testing::Values(Architecture::kBart, Architecture::kT5),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST(StateBytes, GrowWithStepsAndShrinkWithRows) {
  TempDir d("bytes");
  write_random_model(d.path(), tiny_config(Architecture::kT5, CrossAttentionKind::kSrformer, 4), 9);
  auto model = load_model(d.path());
  const auto enc = model->encode(torch::randint(3, 96, {3, 12}, torch::kLong), torch::ones({3, 12}, torch::kLong));
  auto st = model->start(enc, torch::full({3}, 8, torch::kLong));
  const auto b0 = st.bytes();
  EXPECT_GT(b0, 0);
  model->step(st, torch::zeros({3}, torch::kLong));
  EXPECT_GT(st.bytes(), b0);
  const auto b1 = st.bytes();
  st.select(torch::tensor({2}, torch::kLong));
  EXPECT_EQ(st.batch_size(), 1);
  EXPECT_NEAR(static_cast<double>(st.bytes()), b1 / 3.0, 1.0);
  EXPECT_EQ(st.row_bytes(0), st.bytes());
  EXPECT_THROW(st.select(torch::tensor({5}, torch::kLong)), std::out_of_range);
}

}  // namespace
}  // namespace srformer
