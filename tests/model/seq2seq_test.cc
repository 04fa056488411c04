// Properties of the incremental decoding API on random tiny models, for every cross-attention
// variant: incremental == teacher-forced, batching/padding never change a row, one segment == full.
#include "model/seq2seq.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "model/attention/segments.h"
#include "model/attention/self_attention.h"
#include "model/kernels/avx2.h"
#include "model/kernels/bf16_linear.h"
#include "model/random_model.h"
#include "tests/support/kernel_switches.h"
#include "tests/support/temp_dir.h"

namespace srformer {
namespace {

using testing::TempDir;

constexpr CrossAttentionKind kAllKinds[] = {
    CrossAttentionKind::kFull,       CrossAttentionKind::kSegmented,  CrossAttentionKind::kSrformer,
    CrossAttentionKind::kAblationI,  CrossAttentionKind::kAblationII, CrossAttentionKind::kAblationIII,
    CrossAttentionKind::kAblationIV, CrossAttentionKind::kXlMemory,   CrossAttentionKind::kGlobalTokens,
};

struct Case {
  Architecture arch;
  CrossAttentionKind kind;
  torch::ScalarType dtype = torch::kFloat32;  // bf16: the CPU's bfloat16 projections (kernels/amx_linear.h)
  // Head shapes the kernels' vector loops do not divide: T5 3 heads of d_kv 5 (inner 15, d_model 16),
  // BART one head of 20 (16 + a tail of 4). Else tiny_config's 4 heads of 8.
  bool odd_heads = false;
};

ModelConfig config_of(const Case& c) {
  auto config = tiny_config(c.arch, c.kind, /*segment_size=*/4);
  if (c.odd_heads) {
    config.num_heads = c.arch == Architecture::kT5 ? 3 : 1;
    config.head_dim = c.arch == Architecture::kT5 ? 5 : 20;
    config.d_model = c.arch == Architecture::kT5 ? 16 : 20;
  }
  return config;
}

std::vector<int64_t> ints(const torch::Tensor& t) {
  const auto c = t.to(torch::kCPU, torch::kLong).contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

std::string name_of(const ::testing::TestParamInfo<Case>& info) {
  return std::string(to_string(info.param.arch)) + "_" + to_string(info.param.kind) +
         (info.param.dtype == torch::kBFloat16 ? "_bf16" : "") + (info.param.odd_heads ? "_odd_heads" : "");
}

class Seq2SeqProperties : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (GetParam().dtype == torch::kBFloat16 && !kernels::cpu_bf16_available()) {
      GTEST_SKIP() << "this CPU has neither AMX-BF16 nor AVX512-BF16: bf16 models cannot load here";
    }
    torch::manual_seed(1);
    write_random_model(dir_.path(), config_of(GetParam()), 42);
    LoadOptions o;
    o.dtype = GetParam().dtype;
    model_ = load_model(dir_.path(), o);
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
  // Two computations of the same logits differ by fp32 rounding (`fp32`); with bf16 projections a
  // rounding difference can also move an input of a projection to the neighbouring bfloat16 (2^-8
  // relative), which the next layers carry on: a fraction of 2^-8 of the logits' size (`ref`), still
  // far below what a wrong segment or state gives.
  // With the CPU kernels off (SRFORMER_CPU_KERNELS=0: LibTorch's path, which a GPU takes) a batch
  // sums in another order than a row alone, and bf16 rounds each product's output: 4x.
  double tolerance(double fp32, const torch::Tensor& ref) const {
    const double path = kernels::use_cpu_kernels() ? 1.0 : 4.0;
    return path * (GetParam().dtype == torch::kBFloat16 ? 2e-3 * (1.0 + ref.abs().max().item<double>()) : fp32);
  }
  // The same row's logits from two batches: bit for bit with the CPU kernels, to rounding without.
  void expect_same_row(const torch::Tensor& got, const torch::Tensor& want) const {
    if (kernels::use_cpu_kernels()) {
      EXPECT_TRUE(torch::equal(got, want));
    } else {
      EXPECT_LE((got - want).abs().max().item<double>(), tolerance(1e-5, want));
    }
  }
  // The same model loaded with --precompute-switches false: each switch computes its drive then.
  std::unique_ptr<Seq2SeqModel> without_switch_table() const {
    LoadOptions o;
    o.precompute_switches = false;
    o.dtype = GetParam().dtype;
    return load_model(dir_.path(), o);
  }
  TempDir dir_{"seq2seq"};
  std::unique_ptr<Seq2SeqModel> model_;
};

// A teacher-forced forward over no decoder positions, or over other rows than the encoder output's, is
// refused with what is wrong: it failed inside LibTorch ("start (0) + length (-1) exceeds dimension size
// (0)", shapes that do not broadcast).
TEST_P(Seq2SeqProperties, TeacherForcedInputsOfTheWrongShapeAreClearErrors) {
  const auto enc = model_->encode(random_ids(2, 9), torch::ones({2, 9}, torch::kLong));
  const auto message = [&](const torch::Tensor& dec) -> std::string {
    try {
      model_->forward(enc, dec);
    } catch (const std::invalid_argument& e) {
      return e.what();
    } catch (const std::exception& e) {
      return std::string("not std::invalid_argument: ") + e.what();
    }
    return "no error";
  };
  EXPECT_EQ(message(torch::zeros({2, 0}, torch::kLong)),
            "decoder_input_ids holds no positions; a teacher-forced forward needs at least one (the decoder start "
            "token)");
  EXPECT_EQ(message(random_ids(3, 4)), "decoder_input_ids has 3 rows but the encoder output 2");
  try {
    model_->forward(enc, random_ids(2, 4), torch::full({3}, 4, torch::kLong));
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "expected_length holds 3 values for 2 rows");
  }
  EXPECT_EQ(model_->forward(enc, random_ids(2, 4)).sizes(), (std::vector<int64_t>{2, 4, model_->config().vocab_size}));
}

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
  EXPECT_LE((tf - inc).abs().max().item<double>(), tolerance(1e-5, inc));
  if (model_->config().srformer.segmented()) {
    // Row 1 visits segments 0, 2, 4, 5 (t*6/3): the schedule really skipped some.
    EXPECT_EQ(st.segment[1].item<int64_t>(), 5);
    EXPECT_EQ(st.segment_switches[1].item<int64_t>(), 4);
  }
}

// The teacher-forced recurrence multiplies queries by their states in one of two ways, picked by how
// many states a row goes through against the head size (8 here): the test above has at most 7,
// this one 13 (m = 12 visited one by one, plus the initial state) next to a row with 4.
TEST_P(Seq2SeqProperties, IncrementalEqualsTeacherForcedWithManySwitches) {
  const auto ids = random_ids(2, 48);  // s = 4 -> m = 12
  auto mask = torch::ones({2, 48}, torch::kLong);
  mask[1].narrow(0, 14, 34).fill_(0);  // row 1: k = 14, m = 4
  const auto enc = model_->encode(ids, mask);
  const auto dec = random_ids(2, 14);
  const auto L = torch::tensor({12, 14}, torch::kLong);
  const auto tf = model_->forward(enc, dec, L);
  auto st = model_->start(enc, L);
  const auto inc = incremental(st, dec);
  EXPECT_LE((tf - inc).abs().max().item<double>(), tolerance(1e-5, inc));
  if (model_->config().srformer.segmented()) {
    EXPECT_EQ(st.segment_switches[0].item<int64_t>(), 12);
    EXPECT_EQ(st.segment_switches[1].item<int64_t>(), 4);
  }
}

// The model's schedule (start()'s and forward()'s, which the layer-level reference test does not run) at
// its edge shapes in one padded batch: an input shorter than one segment (k < s, m = 1), inputs an exact
// multiple of s, L = 1 (segment 0, then m - 1 from step 1 on), L far above m, L below m (skipped
// segments), and every row decoded past its L.
TEST_P(Seq2SeqProperties, IncrementalEqualsTeacherForcedAtEdgeShapes) {
  const std::vector<int64_t> lengths{3, 8, 12, 16};  // s = 4: m = 1, 2, 3, 4
  const int64_t B = 4, kmax = 16;
  auto ids = random_ids(B, kmax);
  auto mask = torch::zeros({B, kmax}, torch::kLong);
  for (int64_t b = 0; b < B; ++b) {
    mask[b].narrow(0, 0, lengths[b]).fill_(1);
    ids[b].narrow(0, lengths[b], kmax - lengths[b]).fill_(model_->config().pad_token_id);
  }
  const auto L = torch::tensor({5, 1, 40, 2}, torch::kLong);
  const auto dec = random_ids(B, 7);
  const auto enc = model_->encode(ids, mask);
  const auto tf = model_->forward(enc, dec, L);
  auto st = model_->start(enc, L);
  const auto inc = incremental(st, dec);
  EXPECT_LE((tf - inc).abs().max().item<double>(), tolerance(1e-5, inc));
  if (model_->config().srformer.segmented()) {
    // After 7 steps: row 0 stays in its one segment; row 1 (L = 1) went 0 -> 1; row 2 (L = 40) is still in
    // segment 0 (6 * 3 / 40 < 1); row 3 (L = 2) went 0 -> 2 -> 3.
    EXPECT_EQ(ints(st.segment), (std::vector<int64_t>{0, 1, 0, 3}));
    EXPECT_EQ(ints(st.segment_switches), (std::vector<int64_t>{1, 2, 1, 3}));
  }
}

// Every parameter of `got` under the name and with the bits of `want`'s, in the same order.
void expect_same_parameters(const Seq2SeqModel& got, const Seq2SeqModel& want) {
  ASSERT_EQ(got.named_parameters().size(), want.named_parameters().size());
  for (size_t i = 0; i < want.named_parameters().size(); ++i) {
    const auto& [name, t] = want.named_parameters()[i];
    EXPECT_EQ(got.named_parameters()[i].first, name);
    EXPECT_TRUE(torch::equal(got.named_parameters()[i].second, t)) << name;
  }
}

// A model written back (save_model, as `srformer convert` and training write it) reloads to the same
// variant and configuration and decodes to the same bits, teacher-forced and step by step.
TEST_P(Seq2SeqProperties, SaveThenReloadDecodesIdentically) {
  TempDir saved("saved");
  save_model(*model_, saved.path(), dir_.path());
  LoadOptions o;
  o.dtype = GetParam().dtype;
  const auto reloaded = load_model(saved.path(), o);
  const auto& a = model_->config().srformer;
  const auto& b = reloaded->config().srformer;
  EXPECT_EQ(b.cross_attention, a.cross_attention);
  EXPECT_EQ(b.segment_size, a.segment_size);
  EXPECT_EQ(b.kv_clamp, a.kv_clamp);
  expect_same_parameters(*reloaded, *model_);
  auto ids = random_ids(2, 14);
  auto mask = torch::ones({2, 14}, torch::kLong);
  mask[1].narrow(0, 9, 5).fill_(0);
  const auto dec = random_ids(2, 6);
  const auto L = torch::tensor({6, 3}, torch::kLong);
  EXPECT_TRUE(torch::equal(reloaded->forward(reloaded->encode(ids, mask), dec, L),
                           model_->forward(model_->encode(ids, mask), dec, L)));
  auto x = model_->start(model_->encode(ids, mask), L);
  auto y = reloaded->start(reloaded->encode(ids, mask), L);
  for (int64_t t = 0; t < dec.size(1); ++t) {
    EXPECT_TRUE(torch::equal(model_->step(x, dec.select(1, t)), reloaded->step(y, dec.select(1, t)))) << "step " << t;
  }
}

// `srformer convert` of a plain checkpoint into this variant (RAF parameters it lacks created, seeded),
// saved and reloaded without any option: the directory alone says the variant, holds the parameters the
// conversion drew, and decodes as the converted model did.
TEST_P(Seq2SeqProperties, APlainCheckpointConvertedSavedAndReloadedDecodesAsConverted) {
  TempDir plain("plain"), converted("converted");
  auto plain_config = config_of(GetParam());
  plain_config.srformer = tiny_config(GetParam().arch, CrossAttentionKind::kFull, 0).srformer;
  plain_config.srformer.from_block = false;
  write_random_model(plain.path(), plain_config, 9);
  LoadOptions o;
  o.dtype = GetParam().dtype;
  o.srformer = model_->config().srformer;
  o.raf_init = RafInit::kCreateMissing;
  o.seed = 7;
  const auto conversion = load_model(plain.path(), o);
  save_model(*conversion, converted.path(), plain.path());
  LoadOptions as_saved;
  as_saved.dtype = GetParam().dtype;
  const auto reloaded = load_model(converted.path(), as_saved);
  EXPECT_EQ(reloaded->config().srformer.cross_attention, GetParam().kind);
  EXPECT_EQ(reloaded->config().srformer.segment_size, model_->config().srformer.segment_size);
  expect_same_parameters(*reloaded, *conversion);
  const auto ids = random_ids(2, 11);
  const auto mask = torch::ones({2, 11}, torch::kLong);
  const auto dec = random_ids(2, 5);
  EXPECT_TRUE(torch::equal(reloaded->forward(reloaded->encode(ids, mask), dec),
                           conversion->forward(conversion->encode(ids, mask), dec)));
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
  EXPECT_LE((both[0] - alone[0]).abs().max().item<double>(), tolerance(1e-5, alone[0]));
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
  EXPECT_LE((torch::stack(ours, 0) - alone[0]).abs().max().item<double>(), tolerance(1e-5, alone[0]));
}

// A row leaving frees its span of the cross keys/values and switch-table pools (LayerState::cross_start;
// nothing moves), the next row to join is written into that hole, beams share their request's span,
// and every row still decodes as it does alone. Full attention pools them where the CPU kernels read
// every key in place; through LibTorch its rows stay dense.
TEST_P(Seq2SeqProperties, JoinIntoALeftRowsSpanEqualsRowAlone) {
  const auto ids = random_ids(3, 13);
  const auto joiner = random_ids(1, 9);
  const auto dec = random_ids(4, 8);  // tokens of rows 0..2, then of the joining row
  const auto alone = [&](const torch::Tensor& x, int64_t r, int64_t steps) {
    auto s = model_->start(model_->encode(x, torch::ones_like(x)), torch::tensor({6}, torch::kLong));
    return incremental(s, dec.narrow(0, r, 1).narrow(1, 0, steps))[0];  // [steps, V]
  };
  const auto row0_alone = alone(ids.narrow(0, 0, 1), 0, 7);
  const auto joiner_alone = alone(joiner, 3, 4);

  auto st = model_->start(model_->encode(ids, torch::ones_like(ids)), torch::full({3}, 6, torch::kLong));
  for (int64_t t = 0; t < 3; ++t) model_->step(st, dec.narrow(0, 0, 3).select(1, t));
  const bool pools = GetParam().kind != CrossAttentionKind::kFull || kernels::use_cpu_kernels();
  ASSERT_EQ(st.layers[0].cross_start.defined(), pools);
  const void* keys = st.layers[0].cross_k.data_ptr();
  const auto row2_keys = st.rows_of_layer(0).cross_k[2].clone();
  st.retain({0, 2});  // row 1 leaves; the engine moves the last row into its place
  st.append(model_->start(model_->encode(joiner, torch::ones_like(joiner)), torch::full({1}, 6, torch::kLong)));
  if (pools) {  // three requests of 13 positions, one of 9
    EXPECT_EQ(ints(st.layers[0].cross_start), (std::vector<int64_t>{0, 26, 13}))
        << "the joining row takes the span row 1 left";
    EXPECT_EQ(st.layers[0].cross_k.data_ptr(), keys) << "no keys moved or reallocated";
    EXPECT_EQ(st.layers[0].cross_k.size(1), 39);
  }
  EXPECT_TRUE(torch::equal(st.rows_of_layer(0).cross_k[1], row2_keys));

  std::vector<torch::Tensor> row0, joined;
  for (int64_t t = 0; t < 4; ++t) {
    const auto tok = torch::stack({dec[0][3 + t], dec[2][3 + t], dec[3][t]});
    const auto logits = model_->step(st, tok);
    row0.push_back(logits[0]);
    joined.push_back(logits[2]);
  }
  EXPECT_LE((torch::stack(row0, 0) - row0_alone.narrow(0, 3, 4)).abs().max().item<double>(),
            tolerance(1e-5, row0_alone.narrow(0, 3, 4)));
  EXPECT_LE((torch::stack(joined, 0) - joiner_alone).abs().max().item<double>(), tolerance(1e-5, joiner_alone));

  // Beams of the joined row: two rows reading one span, decoding alike; the span counts once.
  auto beams = st;
  beams.select(torch::tensor({2, 2}, torch::kLong));
  auto one = st;
  one.select(torch::tensor({2}, torch::kLong));
  int64_t span_bytes = 0;  // one's pools are its span alone (a quarter or less in use: copied out)
  for (const auto& l : one.layers) {
    for (const auto* t : {&l.cross_k, &l.cross_v, &l.switch_drive}) {
      span_bytes += t->defined() ? static_cast<int64_t>(t->nbytes()) : 0;
    }
  }
  EXPECT_EQ(beams.bytes(), 2 * one.bytes() - (pools ? span_bytes : 0));
  if (pools) {
    EXPECT_EQ(beams.layers[0].cross_k.size(1), 9) << "9 of 39 positions in use: those alone are kept";
    EXPECT_EQ(ints(beams.layers[0].cross_start), (std::vector<int64_t>{0, 0}));
  }
  const auto both = model_->step(beams, torch::full({2}, 5, torch::kLong));
  EXPECT_TRUE(torch::equal(both[0], both[1]));
  expect_same_row(both[0], model_->step(one, torch::full({1}, 5, torch::kLong))[0]);
}

// A long input that leaves does not leave the rows after it padded to its length: once the rest need
// at most half of the encoder positions (and switch-table entries), the state is cut to what they need,
// and they decode as they did.
TEST_P(Seq2SeqProperties, PaddingIsCutWhenTheLongestRowLeaves) {
  const auto long_ids = random_ids(1, 40);
  const auto short_ids = random_ids(1, 9);
  const auto dec = random_ids(1, 6);
  const auto one = [](const torch::Tensor& x) { return torch::ones_like(x); };
  auto alone = model_->start(model_->encode(short_ids, one(short_ids)), torch::full({1}, 12, torch::kLong));
  const auto want = incremental(alone, dec);  // [1, 6, V]

  auto st = model_->start(model_->encode(long_ids, one(long_ids)), torch::full({1}, 12, torch::kLong));
  st.append(model_->start(model_->encode(short_ids, one(short_ids)), torch::full({1}, 12, torch::kLong)));
  ASSERT_EQ(st.cross_valid.size(1), 40);
  std::vector<torch::Tensor> got;
  for (int64_t t = 0; t < 3; ++t) got.push_back(model_->step(st, torch::stack({dec[0][t], dec[0][t]}))[1]);
  st.retain({1});  // the long row leaves
  EXPECT_EQ(st.cross_valid.size(1), 9);
  for (const auto& l : st.layers) {
    if (l.cross_start.defined()) {  // pools: the long row's span given back, the short one's 9 kept
      EXPECT_EQ(l.cross_k.size(1), 9);
      EXPECT_EQ(l.cross_v.size(1), 9);
    } else {  // dense rows: cut to the short row's length
      EXPECT_EQ(l.cross_k.size(2), 9);
      EXPECT_EQ(l.cross_v.size(2), 9);
    }
    if (l.switch_drive.defined()) {  // the short row's schedule: segments 0, 1, 2 (m = 3 at s = 4)
      EXPECT_EQ(l.switch_drive.size(0), 3);
    }
  }
  for (int64_t t = 3; t < 6; ++t) got.push_back(model_->step(st, dec[0].narrow(0, t, 1))[0]);
  const auto ours = torch::stack(got, 0);
  EXPECT_LE((ours - want[0]).abs().max().item<double>(), tolerance(1e-5, want[0]));
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
    EXPECT_LE((a - b.flip(0)).abs().max().item<double>(), tolerance(1e-6, b.flip(0)));
  }
}

// Switch drives precomputed at start() (the default) and computed at each switch give the same
// logits, membranes and firing counts: rows of different k, rows that skip segments (L < m), rows
// decoded past L, with the CPU kernels on and off.
TEST_P(Seq2SeqProperties, PrecomputedSwitchDrivesEqualDrivesComputedAtEachSwitch) {
  const testing::KernelSwitchesRestored restore_switches;
  LoadOptions o;
  o.precompute_switches = false;
  o.dtype = GetParam().dtype;
  auto on_switch = load_model(dir_.path(), o);
  auto ids = random_ids(3, 26);
  auto mask = torch::ones({3, 26}, torch::kLong);
  mask[1].narrow(0, 19, 7).fill_(0);  // k = 19 -> m = 5 (short last segment)
  const auto enc = model_->encode(ids, mask);
  const auto L = torch::tensor({6, 3, 40}, torch::kLong);  // row 0 decodes past L; row 1 skips segments
  const auto dec = random_ids(3, 10);
  const bool recurrent = model_->config().srformer.uses_raf() ||
                         model_->config().srformer.cross_attention == CrossAttentionKind::kAblationIII;
  for (const bool kernels_on : {true, false}) {
    srformer::kernels::set_cpu_kernels(kernels_on);
    SCOPED_TRACE(kernels_on ? "kernels on" : "kernels off");
    auto a = model_->start(enc, L);
    auto b = on_switch->start(enc, L);
    EXPECT_EQ(a.layers[0].switch_drive.defined(), recurrent);
    EXPECT_FALSE(b.layers[0].switch_drive.defined());
    if (recurrent) {
      EXPECT_GT(a.bytes(), b.bytes());
      // One pool of the rows' schedules: row 0 (m = 7, L = 6) segments 0..6, row 1 (m = 5, L = 3)
      // 0, 1, 3, 4, row 2 (m = 7, L = 40) 0..6.
      EXPECT_EQ(a.layers[0].switch_drive.size(0), 7 + 4 + 7);
      EXPECT_EQ(ints(a.layers[0].drive_start), (std::vector<int64_t>{0, 7, 11}));
    }
    for (int64_t t = 0; t < dec.size(1); ++t) {
      const auto x = model_->step(a, dec.select(1, t));
      const auto y = on_switch->step(b, dec.select(1, t));
      ASSERT_LE((x - y).abs().max().item<double>(), tolerance(1e-6, y)) << "step " << t;
    }
    // The table's products run batched over all switches (another summation order): fp32 rounding.
    const auto close = [this](const torch::Tensor& x, const torch::Tensor& y) {
      return (x - y).abs().max().item<double>() <= tolerance(1e-6 * (1.0 + y.abs().max().item<double>()), y);
    };
    for (size_t l = 0; l < a.layers.size(); ++l) {
      if (!a.layers[l].mem.defined()) continue;
      EXPECT_TRUE(close(a.layers[l].mem, b.layers[l].mem)) << "layer " << l;
      EXPECT_TRUE(close(a.layers[l].recur, b.layers[l].recur)) << "layer " << l;
    }
    EXPECT_TRUE(torch::equal(a.raf_fired, b.raf_fired));
  }
}

// start() given each row's step bound (its max_new_tokens) builds only the switch-table entries those
// steps reach: with L above the bound the rest of the schedule never comes, and the state held it for
// nothing (the server budgeted and reported it too). The steps decode as without the bound, the
// footprint counts what the state holds, and a row stepped into a segment past its bound is refused.
TEST_P(Seq2SeqProperties, AStepBoundKeepsOnlyTheSwitchesItsStepsReach) {
  const auto ids = random_ids(3, 26);  // s = 4 -> m = 7
  const auto mask = torch::ones({3, 26}, torch::kLong);
  const auto enc = model_->encode(ids, mask);
  const auto L = torch::tensor({12, 40, 3}, torch::kLong);
  const auto steps = torch::tensor({7, 3, 2}, torch::kLong);
  auto bounded = model_->start(enc, L, steps);
  auto whole = model_->start(enc, L);
  const bool table = whole.layers[0].switch_drive.defined();
  if (table) {
    // Row 0 reaches segments 0..3 in steps 0..6 (of 0..6), row 1 segment 0 (of 0..6), row 2 0 and 2 (of 0, 2, 4, 6).
    EXPECT_EQ(whole.layers[0].switch_drive.size(0), 7 + 7 + 4);
    EXPECT_EQ(bounded.layers[0].switch_drive.size(0), 4 + 1 + 2);
    EXPECT_EQ(ints(bounded.layers[0].drive_start), (std::vector<int64_t>{0, 4, 5}));
    EXPECT_LT(bounded.bytes(), whole.bytes());
  }
  const auto f = model_->state_footprint();
  for (int64_t r = 0; r < 3; ++r) {
    const auto one = [&](const torch::Tensor& t) { return t.narrow(0, r, 1); };
    const auto alone = model_->start(model_->encode(one(ids), one(mask)), one(L), one(steps));
    const int64_t estimate = f.request_bytes(1, 26, f.switches(26, L[r].item<int64_t>(), steps[r].item<int64_t>()), 0);
    EXPECT_LE(std::abs(estimate - alone.bytes()), alone.bytes() / 100 + 400)
        << "row " << r << ": estimated " << estimate << ", holds " << alone.bytes();
  }
  // Each row up to its bound: the same logits as the whole table's.
  const auto dec = random_ids(3, 7);
  const auto same_step = [&](int64_t t) {
    const auto tok = dec.select(1, t).narrow(0, 0, bounded.batch_size());
    const auto x = model_->step(bounded, tok);
    const auto y = model_->step(whole, tok);
    ASSERT_LE((x - y).abs().max().item<double>(), tolerance(1e-6, y)) << "step " << t;
  };
  for (int64_t t = 0; t < 2; ++t) same_step(t);
  for (auto* st : {&bounded, &whole}) st->select(torch::tensor({0, 1}, torch::kLong));
  same_step(2);
  for (auto* st : {&bounded, &whole}) st->select(torch::tensor({0}, torch::kLong));
  for (int64_t t = 3; t < 7; ++t) same_step(t);
  if (model_->config().srformer.segmented()) {  // step 7 would enter segment 4, which 7 steps never reach
    EXPECT_THROW(model_->step(bounded, dec.select(1, 0).narrow(0, 0, 1)), std::logic_error);
  }
}

// Without the precomputed switch table (--precompute-switches false) a row decodes to the same bits alone
// and in a batch: the drive at a switch was one BLAS product over the rows switching in that step, and
// K^T V took BLAS once the batch held a document of over 512 positions (padding the short row to it).
TEST_P(Seq2SeqProperties, WithoutTheSwitchTableARowDecodesTheSameAloneAndInABatch) {
  if (!model_->config().srformer.segmented()) GTEST_SKIP() << "no segment switches";
  if (!kernels::use_cpu_kernels()) GTEST_SKIP() << "bit-identity is what the CPU kernels promise";
  const auto m = without_switch_table();
  const auto ids = random_ids(1, 17);
  const auto dec = random_ids(3, 8);
  auto alone = m->start(m->encode(ids, torch::ones({1, 17}, torch::kLong)), torch::tensor({8}, torch::kLong));
  // T5 reads any length; BART's learned positions end at 256 here.
  const int64_t n = m->config().arch == Architecture::kT5 ? 530 : m->config().max_input_tokens;
  auto batch_ids = random_ids(3, n);
  auto mask = torch::ones({3, n}, torch::kLong);
  batch_ids[0].narrow(0, 0, 17).copy_(ids[0]);
  batch_ids[0].narrow(0, 17, n - 17).fill_(m->config().pad_token_id);
  mask[0].narrow(0, 17, n - 17).fill_(0);
  mask[2].narrow(0, 23, n - 23).fill_(0);
  auto together = m->start(m->encode(batch_ids, mask), torch::tensor({8, 8, 8}, torch::kLong));
  for (int64_t t = 0; t < dec.size(1); ++t) {
    const auto a = m->step(alone, dec.narrow(0, 0, 1).select(1, t));
    const auto b = m->step(together, dec.select(1, t));
    ASSERT_TRUE(torch::equal(a[0], b[0])) << "step " << t << ": " << (a[0] - b[0]).abs().max().item<double>();
  }
}

// The same without the switch table for rows of other lengths and schedules, started together (a short
// row padded to a longer one: LibTorch's ||K|| summed its keys grouped by the padded length) or apart and
// joined, and one leaving midway.
TEST_P(Seq2SeqProperties, WithoutTheSwitchTableAPaddedRowDecodesTheSameAsAlone) {
  if (!model_->config().srformer.segmented()) GTEST_SKIP() << "no segment switches";
  if (!kernels::use_cpu_kernels()) GTEST_SKIP() << "bit-identity is what the CPU kernels promise";
  const auto m = without_switch_table();
  const auto a_ids = random_ids(1, 30), b_ids = random_ids(1, 37);
  const auto dec = random_ids(2, 20);
  for (const bool together : {true, false}) {
    SCOPED_TRACE(together ? "started together" : "joined");
    auto alone = m->start(m->encode(a_ids, torch::ones({1, 30}, torch::kLong)), torch::tensor({48}, torch::kLong));
    DecoderState both;
    if (together) {
      auto ids = torch::full({2, 37}, m->config().pad_token_id, torch::kLong);
      auto mask = torch::zeros({2, 37}, torch::kLong);
      ids[0].narrow(0, 0, 30).copy_(a_ids[0]);
      mask[0].narrow(0, 0, 30).fill_(1);
      ids[1].copy_(b_ids[0]);
      mask[1].fill_(1);
      both = m->start(m->encode(ids, mask), torch::tensor({48, 5}, torch::kLong));
    } else {
      both = m->start(m->encode(a_ids, torch::ones({1, 30}, torch::kLong)), torch::tensor({48}, torch::kLong));
      both.append(m->start(m->encode(b_ids, torch::ones({1, 37}, torch::kLong)), torch::tensor({5}, torch::kLong)));
    }
    for (int64_t t = 0; t < dec.size(1); ++t) {
      const bool b_in = t <= 5;
      const auto x = m->step(alone, dec.narrow(0, 0, 1).select(1, t));
      const auto y = m->step(both, b_in ? dec.select(1, t) : dec.narrow(0, 0, 1).select(1, t));
      ASSERT_TRUE(torch::equal(x[0], y[0])) << "step " << t << ": " << (x[0] - y[0]).abs().max().item<double>();
      if (t == 5) both.retain({0});  // the short row leaves
    }
  }
}

// With the CPU kernels on, a segmented softmax reads each row's window where it lies in the row's
// span of the cross keys/values pools (no per-row window copies in the state); the logits equal those
// of a state that keeps window copies (kernels off) for rows of different k, rows skipping segments and
// xl's clipped first window, also when the windowless state goes on with the kernels off (gathered
// from its spans).
TEST_P(Seq2SeqProperties, WindowsReadInPlaceEqualWindowCopies) {
  const testing::KernelSwitchesRestored restore_switches;
  const auto kind = GetParam().kind;
  const bool windows = kind != CrossAttentionKind::kFull && kind != CrossAttentionKind::kAblationI;
  if (!windows) GTEST_SKIP() << "no segmented softmax in this variant";
  if (!kernels::use_cpu_kernels()) GTEST_SKIP() << "windows are read in place only where the CPU kernels run";
  auto ids = random_ids(3, 26);
  auto mask = torch::ones({3, 26}, torch::kLong);
  mask[1].narrow(0, 19, 7).fill_(0);  // k = 19 -> m = 5 (short last segment)
  const auto enc = model_->encode(ids, mask);
  const auto L = torch::tensor({6, 3, 40}, torch::kLong);  // row 1 skips segments
  const auto dec = random_ids(3, 12);
  auto in_place = model_->start(enc, L);
  srformer::kernels::set_cpu_kernels(false);
  auto copies = model_->start(enc, L);
  srformer::kernels::set_cpu_kernels(true);
  const bool read_in_place = kind != CrossAttentionKind::kGlobalTokens;
  EXPECT_EQ(in_place.layers[0].window_k.defined(), !read_in_place);
  EXPECT_TRUE(copies.layers[0].window_k.defined());
  if (read_in_place) {
    EXPECT_LT(in_place.bytes(), copies.bytes()) << "no window copies held";
  }
  for (int64_t t = 0; t < dec.size(1); ++t) {
    const bool kernels_on_a = t < 8;  // the last steps: the windowless state with the kernels off
    srformer::kernels::set_cpu_kernels(kernels_on_a);
    const auto x = model_->step(in_place, dec.select(1, t));
    srformer::kernels::set_cpu_kernels(false);
    const auto y = model_->step(copies, dec.select(1, t));
    srformer::kernels::set_cpu_kernels(true);
    ASSERT_LE((x - y).abs().max().item<double>(), tolerance(1e-5, y)) << "step " << t;
  }
}

// The server stops a long encode whose requests are all gone, and steps its running rows in the pauses:
// the stop is asked before each layer's attention and feed-forward, an encode it never stops is the
// plain one, and one it stops throws there.
TEST_P(Seq2SeqProperties, EncodeAsksItsStopBeforeEachSublayerAndStopsWhereItSaysSo) {
  const auto ids = random_ids(2, 10);
  const auto mask = torch::ones({2, 10}, torch::kLong);
  const int64_t layers = model_->config().encoder_layers;
  ASSERT_GE(layers, 2);
  int64_t asked = 0;
  const auto never = model_->encode(ids, mask, [&asked] {
    ++asked;
    return false;
  });
  EXPECT_EQ(asked, 2 * layers);
  EXPECT_TRUE(torch::equal(never.hidden, model_->encode(ids, mask).hidden));
  asked = 0;
  EXPECT_THROW(model_->encode(ids, mask, [&asked] { return ++asked == 3; }), EncodeInterrupted);
  EXPECT_EQ(asked, 3) << "stopped before the second layer, not after the encoder";
  // start(): before each decoder layer's cross keys, and between its keys and values.
  const auto L = torch::full({2}, 6, torch::kLong);
  asked = 0;
  auto started = model_->start(never, L, [&asked] {
    ++asked;
    return false;
  });
  EXPECT_EQ(asked, 2 * model_->config().decoder_layers);
  auto plain = model_->start(never, L);
  const auto first = torch::full({2}, model_->config().decoder_start_token_id, torch::kLong);
  EXPECT_TRUE(torch::equal(model_->step(started, first), model_->step(plain, first)));
  asked = 0;
  EXPECT_THROW(model_->start(never, L, [&asked] { return ++asked == 3; }), EncodeInterrupted);
  EXPECT_EQ(asked, 3) << "stopped before the second layer";
}

// The server steps its running rows from inside an encode and a start (the hook above): neither may
// disturb the other. Rows decoded with an encode and a start of other rows between their steps give
// the logits they give alone, and that encode and start give what they give uninterrupted.
TEST_P(Seq2SeqProperties, StepsRunFromInsideAnEncodeAndAStartChangeNeither) {
  c10::InferenceMode inference;  // as the server runs (and grouped encodes, 26 and 9 tokens)
  const auto running_ids = random_ids(2, 14);
  const auto arriving = random_ids(2, 26);
  auto arriving_mask = torch::ones({2, 26}, torch::kLong);
  arriving_mask[1].narrow(0, 9, 17).zero_();
  const auto L = torch::full({2}, 8, torch::kLong);
  const auto start_token = torch::full({2}, model_->config().decoder_start_token_id, torch::kLong);
  const auto decode = [&](DecoderState& st, std::vector<torch::Tensor>& logits) {
    const auto tokens = logits.empty() ? start_token : std::get<1>(logits.back().max(-1));
    logits.push_back(model_->step(st, tokens));
  };
  // Alone: the running rows' steps, then the arriving rows' encode and start.
  auto alone = model_->start(model_->encode(running_ids, torch::ones_like(running_ids)), L);
  std::vector<torch::Tensor> alone_logits;
  for (int s = 0; s < 6; ++s) decode(alone, alone_logits);
  const auto enc_alone = model_->encode(arriving, arriving_mask);
  auto started_alone = model_->start(enc_alone, L);
  // Interleaved: a step at every pause of the encode and the start, as long as there are steps to take.
  auto running = model_->start(model_->encode(running_ids, torch::ones_like(running_ids)), L);
  std::vector<torch::Tensor> logits;
  decode(running, logits);
  const EncodeStop step_between = [&] {
    if (logits.size() < alone_logits.size()) decode(running, logits);
    return false;
  };
  const auto enc = model_->encode(arriving, arriving_mask, step_between);
  auto started = model_->start(enc, L, step_between);
  ASSERT_EQ(logits.size(), alone_logits.size()) << "the encode and start paused fewer than 5 times";
  for (size_t s = 0; s < logits.size(); ++s) {
    EXPECT_TRUE(torch::equal(logits[s], alone_logits[s])) << "step " << s;
  }
  EXPECT_TRUE(torch::equal(enc.hidden, enc_alone.hidden));
  EXPECT_TRUE(torch::equal(model_->step(started, start_token), model_->step(started_alone, start_token)));
}

// Without autograd, on the CPU, rows of much different lengths are encoded in groups of similar length
// (EncoderDecoderModel::encode): the stop is asked in each layer of each group, and every row's real
// positions come out as the row encoded alone, and as in one call over the padded batch.
TEST_P(Seq2SeqProperties, AnInferenceEncodeGroupsRowsBySimilarLengthAndEachRowEqualsTheRowAlone) {
  const std::vector<int64_t> lengths{20, 6, 19, 12};  // groups {20, 19}, {12}, {6}
  const int64_t B = static_cast<int64_t>(lengths.size()), k = 20, layers = model_->config().encoder_layers;
  auto ids = random_ids(B, k);
  auto mask = torch::zeros({B, k}, torch::kLong);
  for (int64_t i = 0; i < B; ++i) {
    mask[i].narrow(0, 0, lengths[i]).fill_(1);
    ids[i].narrow(0, lengths[i], k - lengths[i]).fill_(model_->config().pad_token_id);
  }
  const auto counting = [](int64_t& asked) {
    return [&asked] {
      ++asked;
      return false;
    };
  };
  int64_t one_call = 0;
  const auto padded = model_->encode(ids, mask, counting(one_call));  // autograd on: one call
  EXPECT_EQ(one_call, 2 * layers);
  c10::InferenceMode inference;
  int64_t grouped_asked = 0;
  const auto grouped = model_->encode(ids, mask, counting(grouped_asked));
  EXPECT_EQ(grouped_asked, 3 * 2 * layers) << "three groups of similar length";
  ASSERT_EQ(grouped.hidden.sizes(), padded.hidden.sizes());
  EXPECT_TRUE(torch::equal(grouped.mask, padded.mask));
  for (int64_t i = 0; i < B; ++i) {
    SCOPED_TRACE("row " + std::to_string(i));
    const auto real = grouped.hidden[i].narrow(0, 0, lengths[i]);
    const auto alone = model_->encode(ids[i].narrow(0, 0, lengths[i]).unsqueeze(0), torch::ones({1, lengths[i]}));
    expect_same_row(real, alone.hidden[0]);  // padded within its group: bit for bit with the kernels
    EXPECT_LE((real - padded.hidden[i].narrow(0, 0, lengths[i])).abs().max().item<double>(),
              tolerance(1e-5, alone.hidden));
  }
  // Rows of one length: one call.
  int64_t equal_asked = 0;
  (void)model_->encode(random_ids(3, 9), torch::ones({3, 9}), counting(equal_asked));
  EXPECT_EQ(equal_asked, 2 * layers);
}

// The footprint a server budgets with, against what states hold: rows of different lengths and
// schedules, alone and in one batch (padded to the longest input and schedule), with beams, at start
// (within 1% and 400 bytes a row: the global tokens' pooled keys come per segment, the estimate counts
// them per position; every other variant is exact to a few bytes) and after steps, where the caches'
// room makes the estimate an upper bound (by at most that room).
TEST_P(Seq2SeqProperties, StateFootprintEstimatesTheStateBytes) {
  const std::vector<int64_t> lengths = {40, 9, 23}, schedules = {12, 5, 30};
  const auto f = model_->state_footprint();
  const auto expect_near = [](int64_t estimate, int64_t actual, int64_t rows, const std::string& what) {
    EXPECT_LE(std::abs(estimate - actual), actual / 100 + 400 * rows)
        << what << ": estimated " << estimate << " bytes, the state holds " << actual;
  };
  DecoderState st;
  int64_t switches = 0, own_switches = 0;
  for (size_t r = 0; r < lengths.size(); ++r) {
    const auto ids = random_ids(1, lengths[r]);
    auto row = model_->start(model_->encode(ids, torch::ones_like(ids)), torch::full({1}, schedules[r], torch::kLong));
    const int64_t n = f.switches(lengths[r], schedules[r], kUnboundedSteps);
    expect_near(f.request_bytes(1, lengths[r], n, 0), row.bytes(), 1, "row " + std::to_string(r));
    switches = std::max(switches, n);
    own_switches += n;
    if (r == 0) {
      st = std::move(row);
    } else {
      st.append(std::move(row));
    }
  }
  const int64_t own_positions = 40 + 9 + 23;
  expect_near(f.bytes({3, 3, 40, switches, 0, own_positions, own_switches}), st.bytes(), 3, "the batch");
  const auto expect_bound = [&](int64_t requests, int64_t rows, int64_t slots, const std::string& what) {
    const int64_t estimate = f.bytes({requests, rows, 40, switches, slots, own_positions, own_switches});
    const int64_t actual = st.bytes();
    const int64_t room = rows * f.per_decoder_position * (cache_capacity(slots) - slots);
    EXPECT_GE(estimate, actual - actual / 100) << what << ": estimated " << estimate << ", holds " << actual;
    EXPECT_LE(estimate, actual + room + actual / 100 + 400 * rows)
        << what << ": estimated " << estimate << ", holds " << actual;
  };
  for (const int64_t steps : {20, 5}) {
    (void)incremental(st, random_ids(3, steps));
    expect_bound(3, 3, st.self_valid.size(1), "the batch after " + std::to_string(st.self_valid.size(1)) + " steps");
  }
  // Beams: the second request as three rows, the third as two (they share its span where the variant
  // pools cross keys/values, and each has its own caches), before and after a step.
  st.retain({0, 1, 1, 1, 2, 2});
  expect_bound(3, 6, 25, "the batch with beams");
  (void)incremental(st, random_ids(6, 1));
  expect_bound(3, 6, 26, "the batch with beams after a step");
  if (model_->config().srformer.uses_raf()) {
    EXPECT_GT(f.per_switch, 0);  // the switch table is what grows with the schedule
  }
}

// Continuous batching as a server drives it, at random: requests of random lengths, expected lengths
// and beam counts join in groups (encoded together, padded to the group's longest; switch tables
// bounded by each request's step limit, as the server starts them), every row steps,
// beams take other beams' places, requests finish or are cancelled and leave (the last rows moving into
// their holes, or the order shuffled), the self-attention slots compact now and then. Every row's
// logits at every step must equal those of its token history decoded alone. The pools see holes
// filled, growth and copies out; with the kernels off the LibTorch path (dense full-attention rows,
// window copies) runs the same churn.
TEST_P(Seq2SeqProperties, RandomChurnOfJoinsLeavesAndBeamsLeavesEveryRowAsAlone) {
  struct Request {
    torch::Tensor ids;  // [1, k]
    int64_t expected = 0, beams = 1, steps = 0;
  };
  struct Row {
    size_t request = 0;
    std::vector<int64_t> history;  // tokens fed so far
  };
  struct Record {
    size_t request = 0;
    std::vector<int64_t> history;
    torch::Tensor logits;
  };
  const testing::KernelSwitchesRestored restore_switches;  // also when an assertion ends the test early
  const bool kernels_available = kernels::use_cpu_kernels();
  const int64_t vocab = model_->config().vocab_size;
  // One run each way in CI; SRFORMER_TEST_CHURN_RUNS=N runs N (other seeds) for a longer search.
  // Each way: kernels on and off, and each with a bound on what the state holds of 1 byte (joins grow
  // buffers without room; leaving rows and growth give room and holes back: every copy path).
  const char* runs_env = std::getenv("SRFORMER_TEST_CHURN_RUNS");
  const int runs = runs_env != nullptr ? std::max(1, std::atoi(runs_env)) : 1;
  for (int run = 0; run < 4 * runs; ++run) {
    const bool kernels_on = run % 2 == 0;
    const int64_t held_limit = run % 4 >= 2 ? 1 : 0;
    if (kernels_on && !kernels_available) continue;
    kernels::set_cpu_kernels(kernels_on);
    std::mt19937 rng(static_cast<unsigned>(11 + run));
    SCOPED_TRACE("seed " + std::to_string(11 + run) + ", kernels " + (kernels_on ? "on" : "off") +
                 (held_limit > 0 ? ", held bound 1 byte" : ""));
    const auto uniform = [&rng](int64_t lo, int64_t hi) {  // [lo, hi]
      return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
    };
    std::vector<Request> requests(40);
    for (auto& r : requests) {
      r.ids = torch::randint(3, vocab, {1, uniform(1, 40)}, torch::kLong);
      r.expected = uniform(1, 14);
      r.beams = uniform(1, 3);
      r.steps = uniform(1, 10);
    }
    std::vector<int64_t> steps_left;
    for (const auto& r : requests) steps_left.push_back(r.steps);

    DecoderState st;
    st.set_held_limit(held_limit);
    // Under a bound the state gives back room and holes once they are an eighth of what it holds.
    const auto within_bound = [&] {
      if (held_limit == 0 || st.batch_size() == 0) return;
      ASSERT_EQ(st.held_limit(), held_limit);
      const int64_t held = st.held_bytes(), used = st.bytes();
      ASSERT_LT(8 * (held - used), held) << "holds " << held << " bytes for rows that use " << used;
    };
    std::vector<Row> rows;
    std::vector<Record> records;
    size_t next = 0;
    while (next < requests.size() || !rows.empty()) {
      if (next < requests.size() && (rows.empty() || uniform(0, 1) == 0)) {  // a group joins
        const size_t n = std::min<size_t>(requests.size() - next, static_cast<size_t>(uniform(1, 3)));
        int64_t kmax = 0;
        for (size_t i = 0; i < n; ++i) kmax = std::max(kmax, requests[next + i].ids.size(1));
        auto ids = torch::full({static_cast<int64_t>(n), kmax}, model_->config().pad_token_id, torch::kLong);
        auto mask = torch::zeros({static_cast<int64_t>(n), kmax}, torch::kLong);
        std::vector<int64_t> expected, bounds, expand;
        for (size_t i = 0; i < n; ++i) {
          const auto& r = requests[next + i];
          const auto row = static_cast<int64_t>(i);
          ids[row].narrow(0, 0, r.ids.size(1)).copy_(r.ids[0]);
          mask[row].narrow(0, 0, r.ids.size(1)).fill_(1);
          expected.push_back(r.expected);
          bounds.push_back(r.steps + uniform(0, 2));  // its max_new_tokens, as the server starts it
          for (int64_t b = 0; b < r.beams; ++b) {
            expand.push_back(row);
            rows.push_back({next + i, {}});
          }
        }
        // The switch tables hold what each row's bounded steps reach (the decode alone below holds every
        // switch): rows of tables cut short join, leave, move and are copied out with the others.
        auto joined = model_->start(model_->encode(ids, mask), torch::tensor(expected, torch::kLong),
                                    torch::tensor(bounds, torch::kLong));
        joined.select(torch::tensor(expand, torch::kLong));
        st.append(std::move(joined));  // into an empty state too (keeps the bound)
        ASSERT_NO_FATAL_FAILURE(within_bound());
        next += n;
      }
      ASSERT_EQ(st.batch_size(), static_cast<int64_t>(rows.size()));

      std::vector<int64_t> tokens;
      for (auto& row : rows) {
        tokens.push_back(uniform(3, vocab - 1));
        row.history.push_back(tokens.back());
      }
      const auto logits = model_->step(st, torch::tensor(tokens, torch::kLong));
      std::vector<size_t> order;  // requests in row order, once each
      for (size_t b = 0; b < rows.size(); ++b) {
        records.push_back({rows[b].request, rows[b].history, logits[static_cast<int64_t>(b)].clone()});
        if (order.empty() || order.back() != rows[b].request) order.push_back(rows[b].request);
      }

      // Who stays (finished requests and a few cancelled ones leave), in which order, on which parent.
      std::vector<size_t> staying;
      for (const size_t r : order) {
        if (--steps_left[r] > 0 && uniform(0, 14) > 0) staying.push_back(r);
      }
      if (uniform(0, 2) == 0) std::shuffle(staying.begin(), staying.end(), rng);
      std::vector<int64_t> index;
      std::vector<bool> same_request;
      std::vector<Row> kept;
      for (const size_t r : staying) {
        std::vector<int64_t> beams_of;
        for (size_t b = 0; b < rows.size(); ++b) {
          if (rows[b].request == r) beams_of.push_back(static_cast<int64_t>(b));
        }
        for (size_t j = 0; j < beams_of.size(); ++j) {
          const int64_t parent = beams_of[static_cast<size_t>(uniform(0, static_cast<int64_t>(beams_of.size()) - 1))];
          same_request.push_back(kept.size() < rows.size() && rows[kept.size()].request == r);
          index.push_back(parent);
          kept.push_back(rows[static_cast<size_t>(parent)]);
        }
      }
      rows = std::move(kept);
      if (rows.empty()) {
        st.clear();
      } else if (uniform(0, 3) == 0) {
        st.select(torch::tensor(index, torch::kLong));
      } else {
        st.retain(index, same_request);
      }
      ASSERT_NO_FATAL_FAILURE(within_bound());
      if (!rows.empty() && uniform(0, 4) == 0) st.compact();
      if (!rows.empty()) {
        ASSERT_GE(st.held_bytes(), st.bytes()) << "the rows use more than the state holds";
      }
    }

    // Each history decoded alone, once for the longest histories (their prefixes come along), each from a
    // fresh start() on its request's input encoded alone: once a request, not once a history (~4 each).
    std::map<std::pair<size_t, std::vector<int64_t>>, torch::Tensor> alone;
    std::map<size_t, EncoderOutput> encoded_alone;
    std::sort(records.begin(), records.end(),
              [](const Record& a, const Record& b) { return a.history.size() > b.history.size(); });
    // In inference mode, as a server decodes: the weights take no gradient, so the paths are the churn's
    // (one row: no grouped encode), without autograd's bookkeeping (~30% of this pass).
    const c10::InferenceMode inference;
    for (const auto& rec : records) {
      if (alone.count({rec.request, rec.history}) > 0) continue;
      const auto& r = requests[rec.request];
      auto enc = encoded_alone.find(rec.request);
      if (enc == encoded_alone.end()) {
        enc = encoded_alone.emplace(rec.request, model_->encode(r.ids, torch::ones_like(r.ids))).first;
      }
      auto s = model_->start(enc->second, torch::tensor({r.expected}));
      std::vector<int64_t> prefix;
      for (const int64_t token : rec.history) {
        prefix.push_back(token);
        alone[{rec.request, prefix}] = model_->step(s, torch::tensor({token}))[0];
      }
    }
    // With the kernels, a row's logits are the same bits in any batch as alone (the property that keeps
    // a served request's summary, scores and samples independent of its neighbours; until session 36 a
    // padded encoder row and global tokens were off in the last bits). LibTorch's matrix products may sum
    // in another order for one row than for many (a matrix-vector product against a blocked GEMM), and in
    // bf16 round each product's output to bf16, so with the kernels off rows agree to rounding of that
    // order only (seen up to 1.6e-5 in fp32 and 1.6x the bf16 bound over 25 seeds); a row reading
    // another's keys, state or slots is off by orders of magnitude more.
    const auto bound = [&](const torch::Tensor& want) { return kernels_on ? 0.0 : 4 * tolerance(2.5e-5, want); };
    for (const auto& rec : records) {
      const auto& want = alone.at({rec.request, rec.history});
      ASSERT_LE((rec.logits - want).abs().max().item<double>(), bound(want))
          << "request " << rec.request << " (input " << requests[rec.request].ids.size(1) << ", L "
          << requests[rec.request].expected << ", " << requests[rec.request].beams << " beams), step "
          << rec.history.size();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllVariants, Seq2SeqProperties, ::testing::ValuesIn([] {
                           std::vector<Case> cases;
                           for (auto arch : {Architecture::kBart, Architecture::kT5}) {
                             for (auto k : kAllKinds) cases.push_back({arch, k});
                           }
                           return cases;
                         }()),
                         name_of);

// The same properties with bf16 projections (AMX or AVX512-BF16): each row's products do not depend on the
// other rows of the call, so batching, padding and the incremental form agree as in fp32.
INSTANTIATE_TEST_SUITE_P(CpuBf16, Seq2SeqProperties, ::testing::ValuesIn([] {
                           std::vector<Case> cases;
                           for (auto arch : {Architecture::kBart, Architecture::kT5}) {
                             for (auto k : kAllKinds) cases.push_back({arch, k, torch::kBFloat16});
                           }
                           return cases;
                         }()),
                         name_of);

// The same properties at head shapes that leave remainders in every vector loop, fp32 and bf16.
INSTANTIATE_TEST_SUITE_P(OddHeads, Seq2SeqProperties, ::testing::ValuesIn([] {
                           std::vector<Case> cases;
                           for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
                             for (auto arch : {Architecture::kBart, Architecture::kT5}) {
                               for (auto k : kAllKinds) cases.push_back({arch, k, dtype, true});
                             }
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
  o.raf_init = RafInit::kCreateMissing;
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

// A paused inference encode of a long T5 input runs its sublayers in pieces (LoadOptions::
// encode_piece_scores, encode_piece_positions), asking the stop between them: the server's running rows
// then wait for a piece, not for a whole sublayer. Each position's result is the one of the whole
// sublayer, for an unpadded batch and for a padded one (the key mask in every piece), in fp32 and,
// where the CPU has it, with bf16 projections and attention.
TEST(EncodeInPieces, ALongT5InputPausesBetweenPiecesAndEncodesAsWhole) {
  TempDir d("pieces");
  write_random_model(d.path(), tiny_config(Architecture::kT5, CrossAttentionKind::kSrformer, 4), 11);
  std::vector<torch::ScalarType> dtypes{torch::kFloat32};
  if (kernels::cpu_bf16_available()) dtypes.push_back(torch::kBFloat16);
  for (const auto dtype : dtypes) {
    SCOPED_TRACE(dtype == torch::kFloat32 ? "fp32" : "bf16");
    constexpr int64_t B = 2, k = 40;
    LoadOptions o;
    o.dtype = dtype;
    o.encode_piece_scores = B * k * 8;  // attention: 8 queries a piece, 5 pieces
    o.encode_piece_positions = B * 16;  // feed-forward: 16 positions a piece, 3 pieces
    const auto model = load_model(d.path(), o);
    const int64_t layers = model->config().encoder_layers;
    torch::manual_seed(5);
    const auto ids = torch::randint(3, model->config().vocab_size, {B, k}, torch::kLong);
    const auto all_real = torch::ones({B, k}, torch::kLong);
    auto padded = all_real.clone();
    padded[1].narrow(0, 36, k - 36).zero_();  // lengths 40 and 36: one group (length_groups), a key mask
    int64_t asked = 0;
    const EncodeStop counting = [&asked] {
      ++asked;
      return false;
    };
    {
      c10::InferenceMode inference;  // as the server encodes
      for (const auto& mask : {all_real, padded}) {
        const auto whole = model->encode(ids, mask);
        asked = 0;
        const auto pieces = model->encode(ids, mask, counting);
        // Attention: keys and values projected in 3 blocks of positions each, then 5 blocks of queries.
        EXPECT_EQ(asked, layers * (2 + (3 + 3 + 5 - 1) + 2))
            << "each layer: its two sublayers, 10 attention and 2 feed-forward pauses";
        const auto pad = mask.eq(0).unsqueeze(-1);
        const double diff = (pieces.hidden - whole.hidden).masked_fill(pad, 0).abs().max().item<double>();
        const double scale = whole.hidden.abs().max().item<double>();
        EXPECT_LE(diff, (dtype == torch::kFloat32 ? 1e-6 : 4e-3) * scale);
        EXPECT_TRUE(torch::equal(pieces.mask, whole.mask));
      }
      // An empty input or batch has nothing to cut: with the hook it ends as it does without.
      for (const auto& sizes : {std::vector<int64_t>{B, 0}, std::vector<int64_t>{0, k}}) {
        const auto none = torch::zeros(sizes, torch::kLong);
        const auto outcome = [&](const EncodeStop& stop) -> std::string {
          try {
            return "encoded " + std::to_string(model->encode(none, none, stop).hidden.numel()) + " values";
          } catch (const std::exception& e) {
            const std::string what = e.what();
            return "threw: " + what.substr(0, what.find('\n'));  // LibTorch's backtrace differs by call site
          }
        };
        EXPECT_EQ(outcome(counting), outcome({})) << sizes[0] << " x " << sizes[1];
      }
      // Stopped between two pieces of the first attention sublayer: the encode ends there.
      asked = 0;
      EXPECT_THROW(model->encode(ids, all_real, [&asked] { return ++asked == 3; }), EncodeInterrupted);
      EXPECT_EQ(asked, 3);
    }
    // Autograd on (training, which pauses nothing): the sublayers stay whole.
    asked = 0;
    (void)model->encode(ids, all_real, counting);
    EXPECT_EQ(asked, 2 * layers);
  }
}

// start() with a stop hook projects each decoder layer's cross keys and values by blocks of positions,
// pausing between them: the state (keys, values, ||K||, switch table) and every step from it are the
// whole projection's, for BART and T5, padded rows included; a stop between two blocks ends start().
TEST(EncodeInPieces, StartProjectsALongInputsCrossKeysAndValuesInPieces) {
  for (const auto arch : {Architecture::kBart, Architecture::kT5}) {
    SCOPED_TRACE(to_string(arch));
    TempDir d("start-pieces");
    write_random_model(d.path(), tiny_config(arch, CrossAttentionKind::kSrformer, 4), 12);
    constexpr int64_t B = 2, k = 40;
    LoadOptions o;
    o.encode_piece_positions = B * 16;  // 16 positions a block: 3 blocks for the keys, 3 for the values
    const auto model = load_model(d.path(), o);
    const auto layers = static_cast<int64_t>(model->config().decoder_layers);
    torch::manual_seed(8);
    const auto ids = torch::randint(3, model->config().vocab_size, {B, k}, torch::kLong);
    auto mask = torch::ones({B, k}, torch::kLong);
    mask[1].narrow(0, 29, k - 29).zero_();
    c10::InferenceMode inference;
    const auto enc = model->encode(ids, mask);
    const auto L = torch::tensor({12, 5}, torch::kLong);
    int64_t asked = 0;
    auto whole = model->start(enc, L);
    auto pieces = model->start(enc, L, [&asked] {
      ++asked;
      return false;
    });
    EXPECT_EQ(asked, layers * 2 * 3) << "each layer: before it, and between any two of its 6 blocks";
    const auto close = [](const torch::Tensor& a, const torch::Tensor& b) {
      return a.sizes() == b.sizes() &&
             (a - b).abs().max().item<double>() <= 1e-6 * std::max(1e-30, b.abs().max().item<double>());
    };
    for (int64_t l = 0; l < layers; ++l) {
      const auto& p = pieces.layers[static_cast<size_t>(l)];
      const auto& w = whole.layers[static_cast<size_t>(l)];
      EXPECT_TRUE(close(p.cross_k, w.cross_k)) << "layer " << l;
      EXPECT_TRUE(close(p.cross_v, w.cross_v)) << "layer " << l;
      ASSERT_TRUE(w.switch_drive.defined() && w.knorm.defined());
      EXPECT_TRUE(close(p.switch_drive, w.switch_drive)) << "layer " << l;
      EXPECT_TRUE(close(p.knorm, w.knorm)) << "layer " << l;
    }
    const auto tokens = torch::randint(3, model->config().vocab_size, {B, 8}, torch::kLong);
    for (int64_t t = 0; t < tokens.size(1); ++t) {
      const auto x = model->step(pieces, tokens.select(1, t));
      const auto y = model->step(whole, tokens.select(1, t));
      ASSERT_TRUE(close(x, y)) << "step " << t;
    }
    asked = 0;
    EXPECT_THROW(model->start(enc, L, [&asked] { return ++asked == 3; }), EncodeInterrupted)
        << "stopped between the first layer's second and third blocks of keys";
    EXPECT_EQ(asked, 3);
  }
}

// The attention in pieces on its own: every block size of queries and of projected positions, including
// ones that do not divide the input and blocks of one, gives each query the output of the whole, with a
// key mask.
TEST(EncodeInPieces, SelfAttentionByQueryBlocksEqualsTheWholeAttention) {
  torch::manual_seed(6);
  constexpr int64_t B = 2, T = 23, D = 32, H = 4;
  SelfAttention a;
  a.heads = H;
  for (Linear* l : {&a.q, &a.k, &a.v, &a.o}) l->weight = torch::randn({D, D}) * 0.2;
  for (const bool kernel : {false, true}) {
    SCOPED_TRACE(kernel ? "our fp32 kernel" : "LibTorch");
    a.kernel_attention = kernel;
    c10::InferenceMode inference;
    const auto x = torch::randn({B, T, D});
    const DiagonalBias bias{torch::randn({H, 2 * T - 1}), T};
    auto allowed = torch::ones({B, T}, torch::kBool);
    allowed[1].narrow(0, 17, T - 17).fill_(false);
    const auto key_mask = additive_mask(allowed.view({B, 1, 1, T}), torch::kFloat32);
    const auto whole = a.forward(x, bias, key_mask);
    for (const int64_t queries : {1, 5, 8, 22, 23, 64}) {
      for (const int64_t positions : {1, 7, 23, 64}) {
        int64_t between = 0;
        const auto pieces = a.forward_in_pieces(x, bias, key_mask, queries, positions, [&between] { ++between; });
        const auto blocks = [](int64_t size) { return (T + size - 1) / size; };
        EXPECT_EQ(between, 2 * blocks(positions) + blocks(queries) - 1)
            << queries << " queries, " << positions << " positions a block: a pause between any two";
        // Rounding only: the blocks' products may sum in another order (a few float ulps of the output).
        EXPECT_LE((pieces - whole).abs().max().item<double>(), 1e-6 * whole.abs().max().item<double>())
            << queries << " queries, " << positions << " positions a block";
      }
    }
    EXPECT_THROW(a.forward_in_pieces(x, bias, key_mask, 0, 8, [] {}), std::invalid_argument);
    EXPECT_THROW(a.forward_in_pieces(x, bias, key_mask, 8, 0, [] {}), std::invalid_argument);
  }
}

// With a K^T V clamp that bites (the tiny models' products are ~1e-2), the switch table built in one
// pass per (row, head) at start() clamps K^T V and each K_i^T V_i as the drives computed at each switch
// do, for padded rows and rows that skip segments.
TEST(SwitchTableClamp, PrecomputedDrivesClampLikeDrivesComputedAtEachSwitch) {
  TempDir d("clamp");
  auto config = tiny_config(Architecture::kBart, CrossAttentionKind::kSrformer, 4);
  config.srformer.kv_clamp = 2e-3;
  write_random_model(d.path(), config, 17);
  auto precomputed = load_model(d.path());
  LoadOptions o;
  o.precompute_switches = false;
  auto on_switch = load_model(d.path(), o);
  const auto ids = torch::randint(3, 96, {2, 22}, torch::kLong);
  auto mask = torch::ones({2, 22}, torch::kLong);
  mask[1].narrow(0, 13, 9).fill_(0);
  const auto enc = precomputed->encode(ids, mask);
  auto a = precomputed->start(enc, torch::tensor({9, 2}, torch::kLong));
  auto b = on_switch->start(enc, torch::tensor({9, 2}, torch::kLong));
  const auto w = mask.to(torch::kFloat32).view({2, 1, -1, 1});
  const auto rows = b.rows_of_layer(0);
  const auto unclamped = torch::matmul((rows.cross_k * w).transpose(-1, -2), rows.cross_v * w);  // K^T V, real keys
  ASSERT_GT(unclamped.abs().max().item<double>(), 2e-3) << "the clamp must bite for this test to mean anything";
  const auto tokens = torch::randint(3, 96, {2, 8}, torch::kLong);
  for (int64_t t = 0; t < tokens.size(1); ++t) {
    const auto x = precomputed->step(a, tokens.select(1, t));
    const auto y = on_switch->step(b, tokens.select(1, t));
    ASSERT_LE((x - y).abs().max().item<double>(), 1e-6) << "step " << t;
  }
  // The two paths sum K^T V in different orders (our one-pass kernel, BLAS), and BLAS's order may
  // follow its threads: fp32 rounding, ~1e-7 here, up to the logits' bound.
  for (size_t l = 0; l < a.layers.size(); ++l) {
    EXPECT_LE((a.layers[l].mem - b.layers[l].mem).abs().max().item<double>(), 1e-6) << "layer " << l;
  }
}

// A request's bytes are its rows' shares of the batched tensors and its own spans of the pools: a short
// document beside a long one reports its own keys, not half of both (usage.state_bytes was the batch's
// bytes over its rows), and the requests' bytes add up to the state's.
TEST(StateBytes, ARequestCountsItsOwnSpansNotAShareOfOthers) {
  const testing::KernelSwitchesRestored restore_switches;
  kernels::set_cpu_kernels(true);
  TempDir d("request-bytes");
  write_random_model(d.path(), tiny_config(Architecture::kT5, CrossAttentionKind::kSrformer, 4), 9);
  auto model = load_model(d.path());
  const auto start = [&](int64_t k) {
    const auto ids = torch::randint(3, 96, {1, k}, torch::kLong);
    return model->start(model->encode(ids, torch::ones({1, k}, torch::kLong)), torch::full({1}, 8, torch::kLong));
  };
  auto alone = start(6);
  auto st = start(6);
  st.append(start(300));
  ASSERT_TRUE(st.layers[0].cross_start.defined()) << "the pools this test is about";
  const int64_t short_bytes = st.request_bytes(0, 1), long_bytes = st.request_bytes(1, 1);
  EXPECT_LT(4 * short_bytes, long_bytes);
  EXPECT_NEAR(static_cast<double>(short_bytes + long_bytes), static_cast<double>(st.bytes()), 2.0);
  // Beside the long row, the short one holds its padding of the batched tensors more than alone, and
  // the same spans.
  EXPECT_GE(short_bytes, alone.request_bytes(0, 1));
  EXPECT_LT(short_bytes, 2 * alone.request_bytes(0, 1));
  EXPECT_THROW((void)st.request_bytes(2, 1), std::out_of_range);
}

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
  auto dense = st;  // select() copies every tensor densely: the caches' free slots are gone
  dense.select(torch::tensor({0, 1, 2}, torch::kLong));
  EXPECT_GT(b1, dense.bytes()) << "the self-attention cache's free slots count as held";
  st.select(torch::tensor({2}, torch::kLong));
  EXPECT_EQ(st.batch_size(), 1);
  EXPECT_NEAR(static_cast<double>(st.bytes()), dense.bytes() / 3.0, 1.0);
  EXPECT_EQ(st.request_bytes(0, 1), st.bytes());
  EXPECT_THROW(st.select(torch::tensor({5}, torch::kLong)), std::out_of_range);
}

// held_bytes() is the memory behind the state, each buffer once: a state just started is what its rows
// use; a row that leaves leaves a hole (pools) and room (rows kept in place) that bytes() no longer
// counts; a copy of the state shares its buffers.
TEST(StateBytes, HeldCountsEachBufferOnceWithRoomAndHoles) {
  TempDir dir("held");
  write_random_model(dir.path(), tiny_config(Architecture::kT5, CrossAttentionKind::kSrformer, 4), 3);
  auto model = load_model(dir.path());
  const auto ids = torch::randint(3, 96, {3, 20}, torch::kLong);
  auto st = model->start(model->encode(ids, torch::ones_like(ids)), torch::full({3}, 6, torch::kLong));
  EXPECT_EQ(st.held_bytes(), st.bytes());
  for (int64_t t = 0; t < 3; ++t) model->step(st, torch::full({3}, 5, torch::kLong));
  const int64_t used = st.bytes();
  EXPECT_GE(st.held_bytes(), used);
  const auto copy = st;
  EXPECT_EQ(copy.held_bytes(), st.held_bytes()) << "a copy shares the buffers; each counts once";
  const int64_t held_before = st.held_bytes();
  st.retain({0, 2});  // row 1 leaves: its span is a hole, its rows' room stays
  EXPECT_LT(st.bytes(), used);
  EXPECT_GT(st.held_bytes(), st.bytes());
  EXPECT_LE(st.held_bytes(), held_before);
}

// A bound on what the state holds (set_held_limit): rows joining one at a time grow the buffers with
// room for as many again while that fits under the bound, with less near it, so the state holds no
// more than the bound while its rows use less; without the bound the same joins hold more. Rows
// leaving leave room and holes, which a state over its bound gives back. The rows decode as before.
TEST(StateBytes, AHeldBoundKeepsRoomAndHolesWithinIt) {
  TempDir dir("bound");
  write_random_model(dir.path(), tiny_config(Architecture::kT5, CrossAttentionKind::kSrformer, 4), 3);
  auto model = load_model(dir.path());
  const auto ids = torch::randint(3, 96, {10, 20}, torch::kLong);
  const auto row = [&](int64_t i) {
    return model->start(model->encode(ids.narrow(0, i, 1), torch::ones({1, 20}, torch::kLong)),
                        torch::full({1}, 6, torch::kLong));
  };
  const int64_t per_row = row(0).bytes();
  const int64_t bound = 10 * per_row;
  DecoderState bounded, free;
  bounded.set_held_limit(bound);
  for (int64_t i = 0; i < 9; ++i) {
    bounded.append(row(i));
    free.append(row(i));
    EXPECT_EQ(bounded.bytes(), free.bytes());
    EXPECT_LE(bounded.held_bytes(), bound) << "after " << i + 1 << " rows";
  }
  EXPECT_GT(free.held_bytes(), bound) << "without the bound the buffers keep room for as many rows again";
  EXPECT_GT(bounded.held_bytes(), bounded.bytes()) << "room while under the bound";
  // Three rows leave: in place, their rows and spans stay as room and holes, within the bound.
  bounded.retain({0, 2, 4, 6, 7, 8});
  EXPECT_LE(bounded.held_bytes(), bound);
  // Under a bound of the rows' own use, room and holes go.
  const int64_t tight = bounded.bytes();
  bounded.set_held_limit(tight);
  bounded.retain({0, 1, 2, 3, 5});  // the sixth row leaves
  EXPECT_LT(8 * (bounded.held_bytes() - bounded.bytes()), bounded.held_bytes());
  EXPECT_EQ(bounded.layers[0].cross_k.size(1), 5 * 20) << "the key pool holds the rows' spans and no hole";
  free.retain({0, 2, 4, 6, 7, 8});
  free.retain({0, 1, 2, 3, 5});
  const auto tokens = torch::randint(3, 96, {5}, torch::kLong);
  EXPECT_TRUE(torch::equal(model->step(bounded, tokens), model->step(free, tokens)));
  EXPECT_TRUE(torch::equal(bounded.rows_of_layer(1).cross_k, free.rows_of_layer(1).cross_k));
  EXPECT_TRUE(torch::equal(bounded.rows_of_layer(1).switch_drive, free.rows_of_layer(1).switch_drive));
  // Rows that use less than the bound give back whatever room takes the state over it, however
  // little: nine rows held exactly, one leaves (room: a ninth), the bound between eight and nine rows.
  DecoderState nine;
  nine.set_held_limit(1);  // joins grow buffers without room
  for (int64_t i = 0; i < 9; ++i) nine.append(row(i));
  ASSERT_EQ(nine.held_bytes(), nine.bytes());
  const int64_t nine_rows = nine.bytes();
  nine.set_held_limit(nine_rows - per_row / 2);
  nine.retain({0, 1, 2, 3, 4, 5, 6, 8});
  EXPECT_EQ(nine.held_bytes(), nine.bytes()) << "eight rows held exactly";
  EXPECT_LT(nine.held_bytes(), nine_rows - per_row / 2);
  bounded.clear();
  EXPECT_EQ(bounded.batch_size(), 0);
  EXPECT_EQ(bounded.held_limit(), tight) << "clear() keeps the bound";
}

// Dense cross keys/values (full attention through LibTorch: the kernels off, or a GPU) cut to the rows'
// length when the longest input leaves give the long input's buffer back, also for the last row of a
// one-head model: narrowing the keys of a [1, 1, k, d] tensor leaves a view LibTorch calls contiguous,
// and contiguous() kept the long input's buffer for as long as the row lived, which bytes() (what the
// server budgets) and held_bytes() counted: 12x the row's own use here.
TEST(StateBytes, PaddingCutForALastRowGivesTheLongInputsBufferBack) {
  const testing::KernelSwitchesRestored restore_switches;
  kernels::set_cpu_kernels(false);  // full attention keeps dense rows
  TempDir dir("trim");
  auto config = tiny_config(Architecture::kBart, CrossAttentionKind::kFull, 0);
  config.num_heads = 1;
  config.head_dim = config.d_model;
  write_random_model(dir.path(), config, 5);
  auto model = load_model(dir.path());
  const auto start = [&](int64_t k) {
    const auto ids = torch::randint(3, 96, {1, k}, torch::kLong);
    return model->start(model->encode(ids, torch::ones_like(ids)), torch::full({1}, 4, torch::kLong));
  };
  auto short_row = start(5);
  auto alone = short_row;
  DecoderState st;
  st.set_held_limit(1);  // hold what the rows use, no room
  st.append(start(60));
  st.append(std::move(short_row));
  ASSERT_FALSE(st.layers[0].cross_start.defined()) << "the dense rows this test is about";
  st.retain({1});  // the long row leaves
  ASSERT_EQ(st.cross_valid.size(1), 5);
  EXPECT_EQ(st.bytes(), alone.bytes()) << "the row counted as using the long input's keys";
  // Under the bound, room is given back once it is an eighth of what the state holds.
  EXPECT_LT(8 * (st.held_bytes() - st.bytes()), st.held_bytes())
      << "holds " << st.held_bytes() << " bytes for a row that uses " << st.bytes();
  const auto token = torch::full({1}, 7, torch::kLong);
  EXPECT_TRUE(torch::equal(model->step(st, token), model->step(alone, token)));
}

// A pool that grows for a join moves the spans in use into its new buffer densely: the holes leaving
// requests left do not outlive the growth.
TEST(StateBytes, APoolThatGrowsLeavesItsHolesBehind) {
  TempDir dir("grow");
  write_random_model(dir.path(), tiny_config(Architecture::kBart, CrossAttentionKind::kSrformer, 4), 4);
  auto model = load_model(dir.path());
  std::vector<torch::Tensor> inputs;
  for (const int64_t k : {8, 30, 9, 200}) inputs.push_back(torch::randint(3, 96, {1, k}, torch::kLong));
  const auto start = [&](size_t i, int64_t k) {
    const auto ids = inputs[i].narrow(1, 0, k);
    return model->start(model->encode(ids, torch::ones_like(ids)), torch::full({1}, 5, torch::kLong));
  };
  DecoderState st, reference;  // the same rows, each state its own buffers
  for (auto* s : {&st, &reference}) {
    for (size_t i = 0; i < 3; ++i) s->append(start(i, inputs[i].size(1)));
  }
  const int64_t capacity = st.layers[0].cross_k.stride(0) / st.layers[0].cross_k.size(2);
  ASSERT_LT(capacity, 200);
  st.retain({0, 2});  // the 30-position span is a hole now
  reference.select(torch::tensor({0, 2}, torch::kLong));
  const int64_t joining = capacity + 1;  // fits neither the hole nor the room
  st.append(start(3, joining));
  reference.append(start(3, joining));
  EXPECT_EQ(st.layers[0].cross_k.size(1), 8 + 9 + joining) << "no hole left";
  EXPECT_EQ(st.layers[0].cross_v.size(1), 8 + 9 + joining);
  for (size_t l = 0; l < st.layers.size(); ++l) {
    EXPECT_TRUE(torch::equal(st.rows_of_layer(l).cross_k, reference.rows_of_layer(l).cross_k)) << "layer " << l;
    EXPECT_TRUE(torch::equal(st.rows_of_layer(l).cross_v, reference.rows_of_layer(l).cross_v)) << "layer " << l;
    EXPECT_TRUE(torch::equal(st.rows_of_layer(l).switch_drive, reference.rows_of_layer(l).switch_drive));
  }
  const auto tokens = torch::randint(3, 96, {3}, torch::kLong);
  EXPECT_TRUE(torch::equal(model->step(st, tokens), model->step(reference, tokens)));
}

// A request leaving the end of a pool leaves a hole that runs on into the pool's room: a longer span
// joining starts in the hole and ends in the room, rather than after the hole.
TEST(StateBytes, ASpanFillsTheLastHoleAndTheRoomAfterIt) {
  TempDir dir("tail");
  write_random_model(dir.path(), tiny_config(Architecture::kBart, CrossAttentionKind::kSrformer, 4), 4);
  auto model = load_model(dir.path());
  const auto start = [&](int64_t k) {
    const auto ids = torch::randint(3, 96, {1, k}, torch::kLong);
    return model->start(model->encode(ids, torch::ones_like(ids)), torch::full({1}, 5, torch::kLong));
  };
  DecoderState st = start(8);
  st.append(start(30));  // grows with room: 38 positions in a buffer for 76
  st.append(start(9));   // into the room: positions 38..46
  ASSERT_EQ(ints(st.layers[0].cross_start), (std::vector<int64_t>{0, 8, 38}));
  ASSERT_GE(st.layers[0].cross_k.stride(0) / st.layers[0].cross_k.size(2), 58);
  const void* keys = st.layers[0].cross_k.data_ptr();
  st.retain({0, 1});  // the last span leaves: a hole of 9 at the end
  auto joining = start(20);
  auto alone = joining;
  st.append(std::move(joining));
  EXPECT_EQ(ints(st.layers[0].cross_start), (std::vector<int64_t>{0, 8, 38})) << "in the hole, on into the room";
  EXPECT_EQ(st.layers[0].cross_k.size(1), 58);
  EXPECT_EQ(st.layers[0].cross_k.data_ptr(), keys) << "no growth";
  const auto tokens = torch::full({3}, 5, torch::kLong);
  const auto got = model->step(st, tokens)[2];
  EXPECT_LE((got - model->step(alone, tokens.narrow(0, 0, 1))[0]).abs().max().item<double>(), 1e-5);
}

// Tensors a state may leave undefined (switch tables, windows: by variant and kernels) equal only undefined.
bool same_or_undefined(const torch::Tensor& x, const torch::Tensor& y) {
  return x.defined() == y.defined() && (!x.defined() || torch::equal(x, y));
}

// For each row list: retain() on a fresh started() state keeps its self-attention cache's storage
// (in place) and leaves what select() copies, row for row and layer for layer, and the next step with
// `tokens` (one per row, cut to the rows kept) gives the same logits.
void expect_retain_in_place_equals_select(Seq2SeqModel& model, const std::function<DecoderState()>& started,
                                          const std::vector<std::vector<int64_t>>& row_lists,
                                          const torch::Tensor& tokens) {
  for (const auto& rows : row_lists) {
    SCOPED_TRACE(::testing::PrintToString(rows));
    auto moved = started();
    auto copied = started();
    copied.select(torch::tensor(rows, torch::kLong));
    const auto* cache = moved.layers[0].self_k.storage().data();
    moved.retain(rows);
    EXPECT_EQ(moved.layers[0].self_k.storage().data(), cache) << "in place";
    ASSERT_EQ(moved.batch_size(), copied.batch_size());
    EXPECT_TRUE(same_or_undefined(moved.step, copied.step));
    EXPECT_TRUE(same_or_undefined(moved.self_valid, copied.self_valid));
    for (size_t l = 0; l < moved.layers.size(); ++l) {
      EXPECT_TRUE(same_or_undefined(moved.layers[l].self_k, copied.layers[l].self_k)) << l;
      EXPECT_TRUE(same_or_undefined(moved.layers[l].self_v, copied.layers[l].self_v)) << l;
      EXPECT_TRUE(same_or_undefined(moved.layers[l].mem, copied.layers[l].mem)) << l;
      EXPECT_TRUE(same_or_undefined(moved.layers[l].recur, copied.layers[l].recur)) << l;
      EXPECT_TRUE(same_or_undefined(moved.rows_of_layer(l).cross_k, copied.rows_of_layer(l).cross_k)) << l;
      EXPECT_TRUE(same_or_undefined(moved.rows_of_layer(l).switch_drive, copied.rows_of_layer(l).switch_drive)) << l;
    }
    const auto tok = tokens.narrow(0, 0, moved.batch_size());
    EXPECT_TRUE(same_or_undefined(model.step(moved, tok), model.step(copied, tok)));
  }
}

// Rows leaving after a step (retain with increasing rows) move down in place; the state then equals
// the one select() copies, decodes the same, never touches a copy taken before, and gives memory
// back once the kept rows would fill less than half of it.
TEST(StateRetain, LeavingRowsInPlaceEqualsSelect) {
  TempDir d("retain");
  write_random_model(d.path(), tiny_config(Architecture::kT5, CrossAttentionKind::kSrformer, 4), 9);
  auto model = load_model(d.path());
  const auto same = same_or_undefined;
  const auto enc = model->encode(torch::randint(3, 96, {5, 12}, torch::kLong), torch::ones({5, 12}, torch::kLong));
  const auto tokens = torch::randint(3, 96, {5, 6}, torch::kLong);
  const auto started = [&] {
    auto st = model->start(enc, torch::full({5}, 8, torch::kLong));
    for (int64_t t = 0; t < 2; ++t) model->step(st, tokens.select(1, t));
    return st;
  };
  auto copied = started();
  copied.select(torch::tensor({0, 2, 3, 4}, torch::kLong));

  auto in_place = started();
  const auto storage_before = in_place.layers[1].cross_k.storage().nbytes();
  const auto* cache_before = in_place.layers[1].self_k.storage().data();
  in_place.retain({0, 2, 3, 4});
  EXPECT_EQ(in_place.layers[1].cross_k.storage().nbytes(), storage_before) << "4 of 5 rows: nothing reallocated";
  EXPECT_EQ(in_place.layers[1].self_k.storage().data(), cache_before) << "the self-attention cache too";
  EXPECT_TRUE(same(in_place.layers[1].self_k, copied.layers[1].self_k));
  EXPECT_EQ(in_place.batch_size(), 4);
  EXPECT_TRUE(same(in_place.rows_of_layer(1).cross_k, copied.rows_of_layer(1).cross_k));
  EXPECT_TRUE(same(in_place.rows_of_layer(0).switch_drive, copied.rows_of_layer(0).switch_drive));
  EXPECT_TRUE(same(in_place.layers[0].mem, copied.layers[0].mem));
  EXPECT_TRUE(same(in_place.segment, copied.segment));

  auto shared = started();
  const DecoderState before = shared;  // holds the same tensors
  const auto cross_before = before.layers[1].cross_k.clone();
  shared.retain({0, 2, 3, 4});
  EXPECT_TRUE(same(shared.rows_of_layer(1).cross_k, copied.rows_of_layer(1).cross_k));
  EXPECT_TRUE(same(before.layers[1].cross_k, cross_before)) << "a state sharing the tensors is untouched";
  EXPECT_EQ(before.batch_size(), 5);

  const auto kept = torch::tensor({0, 2, 3, 4}, torch::kLong);
  for (int64_t t = 2; t < 6; ++t) {
    const auto tok = tokens.select(1, t).index_select(0, kept);
    EXPECT_LE((model->step(in_place, tok) - model->step(copied, tok)).abs().max().item<double>(), 1e-6);
  }
  // The last row moving into a leaving row's hole (what the engine does) is moved in place too, and
  // so are beams swapping, repeating or cycling their parents (rows overwritten before they are read
  // are staged first), with or without rows leaving at the same time.
  auto filled = started();
  auto filled_copy = started();
  filled_copy.select(torch::tensor({0, 4, 2, 3}, torch::kLong));
  filled.retain({0, 4, 2, 3});
  EXPECT_EQ(filled.layers[1].cross_k.storage().nbytes(), storage_before) << "last row into the hole: in place";
  EXPECT_TRUE(same(filled.rows_of_layer(1).cross_k, filled_copy.rows_of_layer(1).cross_k));
  EXPECT_EQ(filled.layers[0].window_k.defined(), filled_copy.layers[0].window_k.defined());
  if (filled.layers[0].window_k.defined()) {
    EXPECT_TRUE(same(filled.layers[0].window_k, filled_copy.layers[0].window_k));
  }
  EXPECT_TRUE(same(filled.step, filled_copy.step));
  expect_retain_in_place_equals_select(
      *model, started, {{1, 0, 2, 3, 4}, {2, 0, 1, 3, 4}, {1, 1, 0, 4, 4}, {1, 0, 0, 4}, {4, 3, 2, 1, 0}, {3, 3, 3}},
      tokens.select(1, 2));

  // Three beams of one request (rows replicated from one, then fed different tokens) reordered with
  // same_request: the caches stay where they are (the beams read each other's slots through
  // self_src), the row leaving moves the last row into its place, and the state equals select()'s copy.
  auto beams = started();
  beams.select(torch::tensor({0, 0, 0, 3, 4}, torch::kLong));
  model->step(beams, torch::tensor({5, 6, 7, 8, 9}, torch::kLong));
  auto beams_copy = beams;
  beams_copy.select(torch::tensor({2, 0, 0, 4}, torch::kLong));
  const auto caches_before = beams.layers[1].self_k.narrow(0, 0, 3).clone();
  beams.retain({2, 0, 0, 4}, {true, true, true, false});
  if (kernels::use_cpu_kernels()) {  // the steps read slots through self_src where the kernels run
    EXPECT_TRUE(same(beams.layers[1].self_k.narrow(0, 0, 3), caches_before)) << "the beams' caches stay";
    ASSERT_TRUE(beams.self_src.defined());
    EXPECT_EQ(beams.self_src[0][-1].item<int32_t>(), 2) << "beam 0's last slot is in row 2";
  }
  for (size_t l = 0; l < beams.layers.size(); ++l) {
    EXPECT_TRUE(same(beams.rows_of_layer(l).self_k, beams_copy.rows_of_layer(l).self_k)) << l;
    EXPECT_TRUE(same(beams.rows_of_layer(l).self_v, beams_copy.rows_of_layer(l).self_v)) << l;
    EXPECT_TRUE(same(beams.layers[l].mem, beams_copy.layers[l].mem)) << l;
    if (beams.layers[l].window_k.defined()) {
      EXPECT_TRUE(same(beams.layers[l].window_k, beams_copy.layers[l].window_k)) << l;
    }
  }
  EXPECT_TRUE(same(beams.step, beams_copy.step));
  EXPECT_FALSE(same(beams.rows_of_layer(0).self_k[0], beams.rows_of_layer(0).self_k[1])) << "beams that differ";
  const auto next = torch::tensor({10, 11, 12, 13}, torch::kLong);
  EXPECT_TRUE(same(model->step(beams, next), model->step(beams_copy, next)));
  // Another request's row moving into beam 0's place while a copy of the state shares the caches:
  // every row first takes its slots into its own row of a copy; the copy keeps reading its own.
  const DecoderState snapshot = beams;
  const auto snapshot_k = snapshot.rows_of_layer(0).self_k.clone();
  beams.retain({3, 1, 2}, {false, true, true});
  beams_copy.select(torch::tensor({3, 1, 2}, torch::kLong));
  EXPECT_TRUE(same(snapshot.rows_of_layer(0).self_k, snapshot_k)) << "the copy is untouched";
  for (size_t l = 0; l < beams.layers.size(); ++l) {
    EXPECT_TRUE(same(beams.rows_of_layer(l).self_k, beams_copy.rows_of_layer(l).self_k)) << l;
  }
  EXPECT_TRUE(same(beams.self_src, beams_copy.self_src)) << "every row reads its own slots again";
  EXPECT_THROW(beams.retain({0, 1}, {true}), std::invalid_argument);

  // 1 of 4 rows kept: a compact copy that returns the memory.
  in_place.retain({3});
  EXPECT_EQ(in_place.layers[1].cross_k.storage().nbytes(), in_place.layers[1].cross_k.nbytes());
  copied.select(torch::tensor({3}, torch::kLong));
  EXPECT_EQ(in_place.layers[1].cross_k.size(1), 12) << "one request's 12 positions of 60 in use: the rest given back";
  EXPECT_TRUE(same(in_place.rows_of_layer(1).cross_k, copied.rows_of_layer(1).cross_k));
  EXPECT_THROW(in_place.retain({0, 1}), std::out_of_range);
}

// A state whose rows hold megabytes (wide heads, many layers: the engine's case, ~3 MB per T5-small
// row) moves them in place: rows leaving, the last ones moving into their holes, and beams swapping
// (staged rows), each equal to select()'s copy and decoding the same.
TEST(StateRetain, RowsOfAWideStateMoveInPlaceAsSelectCopies) {
  TempDir d("retain-wide");
  auto config = tiny_config(Architecture::kT5, CrossAttentionKind::kSrformer, 4);
  config.d_model = 128;
  config.num_heads = 4;
  config.head_dim = 64;  // each layer's membrane and KᵀV: 64 KiB per row
  config.decoder_layers = 8;
  write_random_model(d.path(), config, 21);
  auto model = load_model(d.path());
  const auto enc = model->encode(torch::randint(3, 96, {6, 12}, torch::kLong), torch::ones({6, 12}, torch::kLong));
  const auto tokens = torch::randint(3, 96, {6, 3}, torch::kLong);
  const auto started = [&] {
    auto st = model->start(enc, torch::full({6}, 8, torch::kLong));
    for (int64_t t = 0; t < 2; ++t) model->step(st, tokens.select(1, t));
    return st;
  };
  ASSERT_GE(started().bytes() / 6, int64_t{1} << 20) << "a row of a megabyte or more";
  expect_retain_in_place_equals_select(*model, started, {{0, 5, 2, 4}, {1, 0, 3, 2, 5, 4}}, tokens.select(1, 2));
}

// Requests of one to three beams join, reorder their beams and leave (the last rows moving into the
// holes) in random order, as in the engine: a state whose beams share self-attention slots (retain
// with same_request) decodes like one that select() copies densely, and holds the same slots per row
// (gathered through self_src); where only beams reordered, no cache moved at all.
TEST(StateRetain, BeamsSharingSlotsDecodeAsDenseCopies) {
  if (!kernels::use_cpu_kernels()) GTEST_SKIP() << "beams share slots only where the CPU kernels run (AVX2 + FMA)";
  for (const auto arch : {Architecture::kT5, Architecture::kBart}) {
    SCOPED_TRACE(arch == Architecture::kT5 ? "t5" : "bart");
    TempDir d("share");
    write_random_model(d.path(), tiny_config(arch, CrossAttentionKind::kSrformer, 4), 23);
    auto model = load_model(d.path());
    std::mt19937 rng(7);
    const auto below = [&](size_t n) { return static_cast<int64_t>(rng() % n); };
    DecoderState shared, dense;
    std::vector<int64_t> request;  // per row: the request it is a beam of
    int64_t requests = 0, beam_steps = 0;
    for (int round = 0; round < 48; ++round) {
      SCOPED_TRACE("round " + std::to_string(round));
      if (request.empty() || (below(4) == 0 && request.size() < 10)) {
        const int64_t beams = 1 + below(3), len = 5 + below(10);
        const auto ids = torch::randint(3, 96, {1, len}, torch::kLong);
        const auto enc = model->encode(ids, torch::ones({1, len}, torch::kLong));
        for (auto* st : {&shared, &dense}) {
          auto joining = model->start(enc, torch::full({1}, 9, torch::kLong));
          joining.select(torch::zeros({beams}, torch::kLong));
          st->append(std::move(joining));
        }
        request.insert(request.end(), static_cast<size_t>(beams), requests++);
      }
      const int64_t B = shared.batch_size();
      const auto tok = torch::randint(3, 96, {B}, torch::kLong);
      ASSERT_LE((model->step(shared, tok) - model->step(dense, tok)).abs().max().item<double>(), 1e-5);
      // Maybe one request leaves; the last kept rows fill its holes; then beams pick their parents.
      std::vector<bool> leaves(static_cast<size_t>(B), false);
      if (below(5) == 0) {
        const int64_t gone = request[static_cast<size_t>(below(request.size()))];
        for (int64_t b = 0; b < B; ++b) leaves[static_cast<size_t>(b)] = request[static_cast<size_t>(b)] == gone;
      }
      const auto n = static_cast<int64_t>(std::count(leaves.begin(), leaves.end(), false));
      std::vector<int64_t> tail, rows;
      for (int64_t b = n; b < B; ++b) {
        if (!leaves[static_cast<size_t>(b)]) tail.push_back(b);
      }
      for (int64_t j = 0, next = 0; j < n; ++j) rows.push_back(leaves[static_cast<size_t>(j)] ? tail[next++] : j);
      std::vector<bool> same(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) {
        auto& r = rows[static_cast<size_t>(j)];
        std::vector<int64_t> siblings;
        for (int64_t b = 0; b < B; ++b) {
          if (request[static_cast<size_t>(b)] == request[static_cast<size_t>(r)]) siblings.push_back(b);
        }
        if (below(2) == 0) r = siblings[static_cast<size_t>(below(siblings.size()))];
        same[static_cast<size_t>(j)] = request[static_cast<size_t>(r)] == request[static_cast<size_t>(j)];
      }
      const bool beams_only = n == B && std::all_of(same.begin(), same.end(), [](bool x) { return x; });
      const auto caches = shared.layers[0].self_k.clone();
      shared.retain(rows, same);
      dense.select(torch::tensor(rows, torch::kLong));
      if (beams_only && !torch::equal(shared.self_src, dense.self_src)) {
        ++beam_steps;
        EXPECT_TRUE(torch::equal(shared.layers[0].self_k, caches)) << "beams reordered: no cache moves";
      }
      std::vector<int64_t> next_request;
      for (const int64_t r : rows) next_request.push_back(request[static_cast<size_t>(r)]);
      request = next_request;
      // The same slots per row (right-aligned: retain may have dropped leading slots no row uses;
      // softmax sums over fewer masked slots then differ in the last bits).
      for (size_t l = 0; l < shared.layers.size(); ++l) {
        const auto mine = shared.rows_of_layer(l).self_v, theirs = dense.rows_of_layer(l).self_v;
        const int64_t t = std::min(mine.size(2), theirs.size(2));
        const auto diff = mine.narrow(2, mine.size(2) - t, t) - theirs.narrow(2, theirs.size(2) - t, t);
        if (diff.numel() > 0) {
          ASSERT_LE(diff.abs().max().item<double>(), 1e-5) << "layer " << l;
        }
      }
    }
    EXPECT_GE(beam_steps, 10) << "the sequence must exercise beams sharing slots";
  }
}

// A decode step writes its key and value into the self-attention cache's free slot; the cache moves
// to a larger buffer only when full (half as large again), not at every step.
TEST(StateSelfCache, StepsWriteIntoRoomLeftInTheBuffer) {
  TempDir d("self_cache");
  write_random_model(d.path(), tiny_config(Architecture::kBart, CrossAttentionKind::kSrformer, 4), 10);
  auto model = load_model(d.path());
  const auto enc = model->encode(torch::randint(3, 96, {3, 12}, torch::kLong), torch::ones({3, 12}, torch::kLong));
  auto st = model->start(enc, torch::full({3}, 8, torch::kLong));
  int64_t moves = 0;
  const void* buffer = nullptr;
  for (int64_t t = 0; t < 40; ++t) {
    model->step(st, torch::randint(3, 96, {3}, torch::kLong));
    const auto& cache = st.layers[0].self_k;
    ASSERT_EQ(cache.size(2), t + 1);
    if (cache.storage().data() != buffer) ++moves;
    buffer = cache.storage().data();
    EXPECT_GE(static_cast<int64_t>(cache.storage().nbytes()), cache.stride(0) * 3 * 4);
  }
  EXPECT_LE(moves, 6) << "40 slots: buffers of 8, 20, 38, 65 slots (and room for joins), not 40 copies";
}

// Rows joining a running batch one at a time (as requests arrive) are written into spare rows of the
// state's buffers once there are some, instead of the whole state being copied at each join; each
// joined row still decodes as it does alone, also after a longer input pads every row's mask.
TEST(StateAppend, JoinsWriteIntoSpareRowsAndDecodeAsAlone) {
  TempDir d("append");
  write_random_model(d.path(), tiny_config(Architecture::kT5, CrossAttentionKind::kSrformer, 4), 11);
  auto model = load_model(d.path());
  const std::vector<int64_t> lengths{14, 9, 14, 11, 6, 20};  // the last one is longer than all before
  std::vector<torch::Tensor> ids, tokens, alone;
  for (size_t r = 0; r < lengths.size(); ++r) {
    ids.push_back(torch::randint(3, 96, {1, lengths[r]}, torch::kLong));
    tokens.push_back(torch::randint(3, 96, {16}, torch::kLong));
    auto st = model->start(model->encode(ids[r], torch::ones({1, lengths[r]}, torch::kLong)),
                           torch::full({1}, 6, torch::kLong));
    std::vector<torch::Tensor> out;
    for (int64_t t = 0; t < 16; ++t) out.push_back(model->step(st, tokens[r].narrow(0, t, 1))[0]);
    alone.push_back(torch::stack(out, 0));
  }
  DecoderState st;
  std::vector<int64_t> joined_at, done;  // per row: the batch step it joined at, steps decoded
  std::vector<std::vector<torch::Tensor>> got(lengths.size());
  int64_t cross_in_place = 0, caches_in_place = 0;
  for (size_t r = 0; r < lengths.size(); ++r) {
    const auto* cross = st.batch_size() > 0 ? st.layers[1].cross_k.storage().data() : nullptr;
    const auto* cache = st.batch_size() > 0 ? st.layers[1].self_k.storage().data() : nullptr;
    st.append(model->start(model->encode(ids[r], torch::ones({1, lengths[r]}, torch::kLong)),
                           torch::full({1}, 6, torch::kLong)));
    if (cross != nullptr && st.layers[1].cross_k.storage().data() == cross) ++cross_in_place;
    if (cache != nullptr && st.layers[1].self_k.storage().data() == cache) ++caches_in_place;
    done.push_back(0);
    for (int64_t t = 0; t < 2; ++t) {  // two steps before the next row arrives
      const int64_t B = st.batch_size();
      auto tok = torch::empty({B}, torch::kLong);
      for (int64_t b = 0; b < B; ++b) tok[b] = tokens[b][done[b]];
      const auto logits = model->step(st, tok);
      for (int64_t b = 0; b < B; ++b) got[b].push_back(logits[b]), ++done[b];
    }
  }
  // The key pool grows by positions (14, 9, 14, 11, 6, 20: room for 46, then 96), the caches by rows.
  EXPECT_GE(cross_in_place, 3) << "after the first joins grew the pool, most joins land in its room";
  EXPECT_GE(caches_in_place, 3) << "after the first join grew the caches, most joins land in spare rows";
  for (size_t r = 0; r < lengths.size(); ++r) {
    const auto n = static_cast<int64_t>(got[r].size());
    EXPECT_LE((torch::stack(got[r], 0) - alone[r].narrow(0, 0, n)).abs().max().item<double>(), 1e-5) << "row " << r;
  }
}

// A long input among short ones: with pooled keys/values (the segmented variants; full attention with
// the CPU kernels) the batch holds what its rows hold alone plus the longer mask, where dense rows (full
// attention through LibTorch) pad every row's keys to the longest.
TEST(StatePools, ALongInputDoesNotPadTheOtherRowsKeys) {
  const testing::KernelSwitchesRestored restore_switches;
  if (!kernels::use_cpu_kernels()) GTEST_SKIP() << "full attention pools its keys only where the CPU kernels run";
  for (const auto& [kind, kernels_on] :
       std::vector<std::pair<CrossAttentionKind, bool>>{{CrossAttentionKind::kSrformer, true},
                                                        {CrossAttentionKind::kFull, true},
                                                        {CrossAttentionKind::kFull, false}}) {
    SCOPED_TRACE(std::string(to_string(kind)) + (kernels_on ? ", kernels on" : ", kernels off"));
    kernels::set_cpu_kernels(kernels_on);
    TempDir d("long");
    write_random_model(d.path(), tiny_config(Architecture::kT5, kind, kind == CrossAttentionKind::kFull ? 0 : 4), 13);
    auto model = load_model(d.path());
    const auto start = [&](int64_t k) {
      const auto x = torch::randint(3, 96, {1, k}, torch::kLong);
      return model->start(model->encode(x, torch::ones_like(x)), torch::full({1}, 6, torch::kLong));
    };
    auto st = start(40);
    int64_t alone = st.bytes(), long_row = st.bytes();
    for (int i = 0; i < 3; ++i) {
      auto row = start(9);
      alone += row.bytes();
      st.append(std::move(row));
    }
    if (!kernels_on) {
      EXPECT_FALSE(st.layers[0].cross_start.defined());
      EXPECT_GE(st.bytes(), 4 * long_row - 4 * 40) << "every row padded to 40 positions";
    } else {
      EXPECT_TRUE(st.layers[0].cross_start.defined());
      EXPECT_GE(st.bytes(), alone);
      EXPECT_LE(st.bytes(), alone + 3 * 31 + 64) << "the short rows' masks padded to 40, nothing else";
    }
  }
}

// Under steady load the rows in flight swing around a level: spans freed at a low are kept for the
// next joins (until three quarters of a pool are free), joins fill the holes before growing the pool,
// and no span in use moves meanwhile; a state down to a quarter gives the rest back.
// (StateBytes.APoolThatGrowsLeavesItsHolesBehind: growth with holes left.)
TEST(StatePools, FreedSpansWaitForTheNextJoinsUntilThreeQuartersAreFree) {
  TempDir d("slots");
  write_random_model(d.path(), tiny_config(Architecture::kT5, CrossAttentionKind::kSrformer, 4), 12);
  auto model = load_model(d.path());
  const auto ids = torch::randint(3, 96, {7, 10}, torch::kLong);
  const auto start = [&](int64_t first, int64_t n) {
    const auto x = ids.narrow(0, first, n);
    return model->start(model->encode(x, torch::ones_like(x)), torch::full({n}, 6, torch::kLong));
  };
  auto st = start(0, 4);
  model->step(st, torch::full({4}, 5, torch::kLong));
  const void* keys = st.layers[0].cross_k.data_ptr();
  st.retain({0, 3});  // half the rows leave
  EXPECT_EQ(st.layers[0].cross_k.size(1), 40) << "20 of 40 positions free: kept";
  EXPECT_EQ(st.layers[0].cross_k.data_ptr(), keys) << "no span moved";
  st.append(start(4, 2));
  EXPECT_EQ(ints(st.layers[0].cross_start), (std::vector<int64_t>{0, 30, 10, 20}))
      << "two joining rows fill the hole of 20";
  EXPECT_EQ(st.layers[0].cross_k.data_ptr(), keys) << "in place";
  st.append(start(6, 1));  // fits no hole: the pool grows, the spans in use keep their order, densely
  EXPECT_EQ(ints(st.layers[0].cross_start), (std::vector<int64_t>{0, 30, 10, 20, 40}));
  EXPECT_EQ(st.layers[0].cross_k.size(1), 50);
  EXPECT_EQ(ints(st.layers[0].drive_start).size(), 5u);

  auto alone = start(6, 1);
  st.retain({4});  // four of five rows leave: the last joiner's span is copied out, the rest given back
  EXPECT_EQ(st.layers[0].cross_k.size(1), 10);
  EXPECT_EQ(ints(st.layers[0].cross_start), (std::vector<int64_t>{0}));
  const auto got = model->step(st, torch::full({1}, 7, torch::kLong));
  const auto want = model->step(alone, torch::full({1}, 7, torch::kLong));
  EXPECT_LE((got - want).abs().max().item<double>(), 1e-5);
}

// Two rows of the same document: the second joins `head_start` steps after the first, then both
// decode two steps. The first row's early self-attention slots are then used by it alone.
DecoderState second_row_joins_late(Seq2SeqModel& model, const torch::Tensor& ids, int64_t head_start) {
  const auto one = torch::ones_like(ids);
  auto st = model.start(model.encode(ids, one), torch::full({1}, 20, torch::kLong));
  for (int64_t t = 0; t < head_start; ++t) model.step(st, torch::full({1}, 5, torch::kLong));
  st.append(model.start(model.encode(ids, one), torch::full({1}, 20, torch::kLong)));
  for (int64_t t = 0; t < 2; ++t) model.step(st, torch::full({2}, 7, torch::kLong));
  return st;
}

// When the longest-running row leaves, retain() drops the self-attention slots only it used once
// they are a quarter of the slots (at least 8); until then they stay, masked, and change nothing.
TEST(StateRetain, CompactsSelfAttentionSlotsLazily) {
  TempDir d("lazy");
  write_random_model(d.path(), tiny_config(Architecture::kBart, CrossAttentionKind::kSrformer, 4), 9);
  auto model = load_model(d.path());
  const auto ids = torch::randint(3, 96, {1, 12}, torch::kLong);
  for (const int64_t head_start : {3, 12}) {
    auto st = second_row_joins_late(*model, ids, head_start);
    const int64_t slots = st.self_valid.size(1);
    auto compacted = st;
    compacted.select(torch::tensor({1}, torch::kLong));
    compacted.compact();
    st.retain({1});
    EXPECT_EQ(compacted.self_valid.size(1), 2);
    EXPECT_EQ(st.self_valid.size(1), head_start < 8 ? slots : 2) << "head start " << head_start;
    for (int64_t t = 0; t < 3; ++t) {
      const auto tok = torch::full({1}, 9 + t, torch::kLong);
      EXPECT_LE((model->step(st, tok) - model->step(compacted, tok)).abs().max().item<double>(), 1e-5);
    }
  }
}

// Compaction moves the used slots down inside the cache's own buffer (keeping its room for more
// slots) when the state alone holds it, copies when another state shares it, and both decode alike.
TEST(StateRetain, CompactionMovesSlotsWithinTheCacheBuffer) {
  TempDir d("in_place");
  write_random_model(d.path(), tiny_config(Architecture::kBart, CrossAttentionKind::kSrformer, 4), 9);
  auto model = load_model(d.path());
  const auto ids = torch::randint(3, 96, {1, 12}, torch::kLong);
  const auto make = [&] {
    auto st = second_row_joins_late(*model, ids, 12);
    st.select(torch::tensor({1}, torch::kLong));  // the longest-running row leaves
    return st;
  };
  auto in_place = make();
  auto copied = make();
  const DecoderState sharing = copied;  // holds copied's buffers too
  const void* buffer = in_place.layers[0].self_k.data_ptr();
  const int64_t room = in_place.layers[0].self_k.stride(1);
  ASSERT_EQ(in_place.self_valid.size(1), 14);
  in_place.compact();
  copied.compact();
  EXPECT_EQ(in_place.layers[0].self_k.data_ptr(), buffer);
  EXPECT_EQ(in_place.layers[0].self_k.stride(1), room);
  EXPECT_NE(copied.layers[0].self_k.data_ptr(), sharing.layers[0].self_k.data_ptr());
  EXPECT_EQ(in_place.self_valid.size(1), 2);
  EXPECT_EQ(copied.self_valid.size(1), 2);
  EXPECT_EQ(sharing.self_valid.size(1), 14);
  EXPECT_EQ(sharing.layers[0].self_k.size(2), 14);
  for (int64_t t = 0; t < 3; ++t) {
    const auto tok = torch::full({1}, 9 + t, torch::kLong);
    EXPECT_LE((model->step(in_place, tok) - model->step(copied, tok)).abs().max().item<double>(), 1e-6);
  }
}

// The switch table lists the segments segment_schedule visits, in order, for any m and L.
TEST(SwitchTable, VisitedSegmentsFollowTheSchedule) {
  EXPECT_EQ(visited_segments(6, 3), (std::vector<int64_t>{0, 2, 4, 5}));
  EXPECT_EQ(visited_segments(1, 50), (std::vector<int64_t>{0}));
  // A huge L costs what its segments do (it walked every step: minutes, and t * m overflowed).
  EXPECT_EQ(visited_segments(3, std::numeric_limits<int64_t>::max()), (std::vector<int64_t>{0, 1, 2}));
  for (int64_t m = 1; m <= 12; ++m) {
    for (int64_t L = 1; L <= 15; ++L) {
      const auto t = torch::arange(3 * L + 2, torch::kLong);
      const auto seg = segment_schedule(t, torch::full_like(t, m), torch::full_like(t, L));
      std::vector<int64_t> expected;
      for (int64_t i = 0; i < seg.numel(); ++i) {
        const int64_t s = seg[i].item<int64_t>();
        if (expected.empty() || expected.back() != s) expected.push_back(s);
      }
      EXPECT_EQ(visited_segments(m, L), expected) << "m " << m << " L " << L;
      EXPECT_EQ(visited_segment_count(m, L), static_cast<int64_t>(expected.size())) << "m " << m << " L " << L;
    }
  }
}

// A row ends after its max_new_tokens steps: with that bound the table lists what those steps visit,
// where it listed the whole schedule's segments (L = 2048 and 4 new tokens over a 4096-token input
// built 256 entries for the 1 the row reads).
TEST(SwitchTable, VisitedSegmentsStopAtTheRowsLastStep) {
  EXPECT_EQ(visited_segments(6, 3, 2), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(visited_segments(256, 2048, 4), (std::vector<int64_t>{0}));
  EXPECT_EQ(visited_segment_count(256, 2048, 4), 1);
  EXPECT_EQ(visited_segment_count(256, 32, 12), 12);
  EXPECT_EQ(visited_segment_count(7, 12, 0), 0);
  // Huge L and step counts: no overflow, and a bound past the schedule changes nothing.
  EXPECT_EQ(visited_segment_count(3, std::numeric_limits<int64_t>::max(), 5), 1);
  constexpr int64_t kHuge = std::numeric_limits<int64_t>::max() - 1;  // even
  EXPECT_EQ(visited_segment_count(1000, kHuge, kHuge / 2), 500);      // steps 0..L/2 - 1: segments 0..499
  EXPECT_EQ(visited_segment_count(1000, kHuge, kHuge), 1000);
  EXPECT_EQ(visited_segment_count(5, 3, std::numeric_limits<int64_t>::max()), 4);
  for (int64_t m = 1; m <= 12; ++m) {
    for (int64_t L = 1; L <= 15; ++L) {
      const auto t = torch::arange(3 * L + 2, torch::kLong);
      const auto seg = segment_schedule(t, torch::full_like(t, m), torch::full_like(t, L));
      std::vector<int64_t> expected;
      for (int64_t steps = 1; steps <= seg.numel(); ++steps) {
        const int64_t s = seg[steps - 1].item<int64_t>();
        if (expected.empty() || expected.back() != s) expected.push_back(s);
        EXPECT_EQ(visited_segments(m, L, steps), expected) << "m " << m << " L " << L << " steps " << steps;
        EXPECT_EQ(visited_segment_count(m, L, steps), static_cast<int64_t>(expected.size()))
            << "m " << m << " L " << L << " steps " << steps;
      }
    }
  }
}

// Stepping a state updates its membranes in place; a copy taken before (value semantics) keeps its own.
TEST(SwitchTable, SteppingAStateLeavesACopyOfItUntouched) {
  TempDir d("cow");
  write_random_model(d.path(), tiny_config(Architecture::kT5, CrossAttentionKind::kSrformer, 4), 9);
  auto model = load_model(d.path());
  const auto enc = model->encode(torch::randint(3, 96, {2, 12}, torch::kLong), torch::ones({2, 12}, torch::kLong));
  auto st = model->start(enc, torch::full({2}, 6, torch::kLong));
  model->step(st, torch::zeros({2}, torch::kLong));
  const auto copy = st;
  const auto mem_before = copy.layers[0].mem.clone();
  for (int t = 0; t < 4; ++t) model->step(st, torch::zeros({2}, torch::kLong));
  EXPECT_FALSE(torch::equal(st.layers[0].mem, mem_before)) << "the membrane should have moved";
  EXPECT_TRUE(torch::equal(copy.layers[0].mem, mem_before));
}

}  // namespace
}  // namespace srformer
