// Every cross-attention variant, teacher-forced and one step at a time (with and without the switch
// table, with the CPU kernels on and off), against a direct double-precision transcription of
// DESIGN.md §1 written here, one row and head at a time: at shapes the model tests do not reach
// (head sizes that are no multiple of 8, one head, s = 1, k < s, a short last segment, L = 1, L < m,
// L beyond the steps taken, rows of very different lengths).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "model/attention/cross_attention.h"
#include "model/attention/segments.h"
#include "model/kernels/avx2.h"
#include "tests/support/kernel_switches.h"

namespace srformer {
namespace {

struct Shape {
  int64_t d_model, heads, head_dim, segment_size;
  std::vector<int64_t> enc_len;   // per row; the batch is padded to the longest
  std::vector<int64_t> expected;  // L per row
  int64_t steps;                  // decoder positions
  std::string name;
};

bool has_raf(CrossAttentionKind k) {
  return k == CrossAttentionKind::kSrformer || k == CrossAttentionKind::kAblationI ||
         k == CrossAttentionKind::kAblationII || k == CrossAttentionKind::kAblationIV;
}
bool recurrent(CrossAttentionKind k) { return has_raf(k) || k == CrossAttentionKind::kAblationIII; }

Linear random_linear(int64_t out, int64_t in, bool bias, double std) {
  Linear l;
  l.weight = torch::randn({out, in}) * std;
  if (bias) l.bias = torch::randn({out}) * std;
  return l;
}

CrossAttention make(CrossAttentionKind kind, const Shape& sh, bool bart) {
  CrossAttention a;
  const int64_t inner = sh.heads * sh.head_dim;
  a.q = random_linear(inner, sh.d_model, bart, 0.4);
  a.k = random_linear(inner, sh.d_model, bart, 0.4);
  a.v = random_linear(inner, sh.d_model, bart, 0.4);
  a.o = random_linear(sh.d_model, inner, bart, 0.4);
  a.heads = sh.heads;
  a.head_dim = sh.head_dim;
  a.scale = bart ? 1.0 / std::sqrt(static_cast<double>(sh.head_dim)) : 1.0;
  a.kind = kind;
  a.segment_size = kind == CrossAttentionKind::kFull ? 0 : sh.segment_size;
  if (bart) a.kv_clamp = 2.0;
  if (has_raf(kind)) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(sh.head_dim));
    a.raf.weight = torch::empty({sh.head_dim, sh.head_dim}).uniform_(-bound, bound);
    a.raf.threshold = torch::full({1}, 0.13);
    a.raf.leak = torch::full({1}, 0.6);
  }
  return a;
}

using Mat = std::vector<std::vector<double>>;

Mat rows_of(const torch::Tensor& t) {  // [n, c] -> double rows
  const auto c = t.to(torch::kFloat64).contiguous();
  Mat out(static_cast<size_t>(c.size(0)), std::vector<double>(static_cast<size_t>(c.size(1))));
  for (int64_t i = 0; i < c.size(0); ++i) {
    for (int64_t j = 0; j < c.size(1); ++j) out[i][j] = c.data_ptr<double>()[i * c.size(1) + j];
  }
  return out;
}

// DESIGN.md §1 for one row: enc [k_b, D] (its real positions), x [q, D] -> [q, D] in double.
torch::Tensor reference_row(const CrossAttention& a, const torch::Tensor& enc, const torch::Tensor& x, int64_t L) {
  const auto dbl = [](const Linear& l, const torch::Tensor& in) {
    auto y = torch::matmul(in.to(torch::kFloat64), l.weight.to(torch::kFloat64).t());
    if (l.bias.defined()) y = y + l.bias.to(torch::kFloat64);
    return y;
  };
  const int64_t H = a.heads, d = a.head_dim, kb = enc.size(0), Q = x.size(0);
  const int64_t s = a.segment_size;
  const int64_t m = a.kind == CrossAttentionKind::kFull ? 1 : (kb + s - 1) / s;
  const auto Kall = dbl(a.k, enc), Vall = dbl(a.v, enc), Qall = dbl(a.q, x) * a.scale;
  auto out = torch::zeros({Q, H * d}, torch::kFloat64);
  const Mat W = a.raf.weight.defined() ? rows_of(a.raf.weight) : Mat{};
  const double thr = a.raf.threshold.defined() ? a.raf.threshold.item<double>() : 0.0;
  const double leak = a.raf.leak.defined() ? a.raf.leak.item<double>() : 0.0;
  const auto clamp = [&](double v) { return a.kv_clamp ? std::clamp(v, -*a.kv_clamp, *a.kv_clamp) : v; };
  for (int64_t h = 0; h < H; ++h) {
    const Mat K = rows_of(Kall.narrow(1, h * d, d)), V = rows_of(Vall.narrow(1, h * d, d));
    const Mat Qh = rows_of(Qall.narrow(1, h * d, d));
    const auto outer = [&](int64_t lo, int64_t hi) {  // K[lo:hi]^T V[lo:hi]
      Mat p(d, std::vector<double>(d, 0.0));
      for (int64_t t = lo; t < hi; ++t) {
        for (int64_t i = 0; i < d; ++i) {
          for (int64_t j = 0; j < d; ++j) p[i][j] += K[t][i] * V[t][j];
        }
      }
      for (auto& r : p) {
        for (auto& v : r) v = clamp(v);
      }
      return p;
    };
    const Mat KV = outer(0, kb);
    std::vector<double> knorm(d, 0.0);
    for (int64_t i = 0; i < d; ++i) {
      for (int64_t t = 0; t < kb; ++t) knorm[i] += K[t][i] * K[t][i];
      knorm[i] = std::sqrt(knorm[i]);
    }
    // Global tokens: one mean key/value per segment.
    Mat GK, GV;
    for (int64_t j = 0; j < m && a.kind == CrossAttentionKind::kGlobalTokens; ++j) {
      const int64_t lo = j * s, hi = std::min(kb, lo + s);
      std::vector<double> gk(d, 0.0), gv(d, 0.0);
      for (int64_t t = lo; t < hi; ++t) {
        for (int64_t i = 0; i < d; ++i) gk[i] += K[t][i] / static_cast<double>(hi - lo);
        for (int64_t i = 0; i < d; ++i) gv[i] += V[t][i] / static_cast<double>(hi - lo);
      }
      GK.push_back(gk);
      GV.push_back(gv);
    }
    Mat mem(d, std::vector<double>(d, 0.0)), R(d, std::vector<double>(d, 0.0));
    int64_t prev = -1;
    for (int64_t t = 0; t < Q; ++t) {
      const int64_t i = a.kind == CrossAttentionKind::kFull ? 0 : std::min(t * m / L, m - 1);
      if (i != prev && recurrent(a.kind)) {
        const Mat Ki = outer(i * s, std::min(kb, (i + 1) * s));
        Mat P(d, std::vector<double>(d));
        for (int64_t r = 0; r < d; ++r) {
          for (int64_t c = 0; c < d; ++c)
            P[r][c] = a.kind == CrossAttentionKind::kAblationIV ? Ki[r][c] : KV[r][c] - Ki[r][c];
        }
        if (a.kind == CrossAttentionKind::kAblationIII) {
          R = P;
        } else {
          for (int64_t r = 0; r < d; ++r) {
            for (int64_t c = 0; c < d; ++c) {
              double drive = 0.0;
              for (int64_t e = 0; e < d; ++e) drive += P[r][e] * W[c][e];
              mem[r][c] = leak * mem[r][c] + drive;
              const double y = mem[r][c] / thr - 1.0;
              if (y > 0) mem[r][c] -= thr;
              R[r][c] = y > 0 ? y : 0.0;
            }
          }
        }
      }
      prev = i;
      // Softmax keys: which positions (and global tokens) this step reads.
      std::vector<const std::vector<double>*> keys, values;
      int64_t lo = 0, hi = kb;
      if (a.kind == CrossAttentionKind::kXlMemory) {
        lo = std::max<int64_t>(0, (i - 1) * s);
        hi = std::min(kb, (i + 1) * s);
      } else if (a.kind != CrossAttentionKind::kFull) {
        lo = i * s;
        hi = std::min(kb, (i + 1) * s);
      }
      if (a.kind != CrossAttentionKind::kAblationI) {
        for (int64_t p = lo; p < hi; ++p) {
          keys.push_back(&K[p]);
          values.push_back(&V[p]);
        }
        for (size_t g = 0; g < GK.size(); ++g) {
          keys.push_back(&GK[g]);
          values.push_back(&GV[g]);
        }
      }
      std::vector<double> o(d, 0.0);
      if (!keys.empty()) {
        std::vector<double> sc(keys.size());
        double mx = -1e300;
        for (size_t p = 0; p < keys.size(); ++p) {
          double v = 0.0;
          for (int64_t c = 0; c < d; ++c) v += Qh[t][c] * (*keys[p])[c];
          sc[p] = v;
          mx = std::max(mx, v);
        }
        double z = 0.0;
        for (auto& v : sc) z += (v = std::exp(v - mx));
        for (size_t p = 0; p < keys.size(); ++p) {
          for (int64_t c = 0; c < d; ++c) o[c] += sc[p] / z * (*values[p])[c];
        }
      }
      if (recurrent(a.kind)) {
        for (int64_t c = 0; c < d; ++c) {
          double qr = 0.0;
          for (int64_t r = 0; r < d; ++r) qr += Qh[t][r] * R[r][c];
          o[c] += a.kind == CrossAttentionKind::kAblationII ? qr : qr / knorm[c];
        }
      }
      for (int64_t c = 0; c < d; ++c) out[t][h * d + c] = o[c];
    }
  }
  return dbl(a.o, out.to(torch::kFloat32));
}

struct Inputs {
  torch::Tensor enc, mask, x, enc_len, L;
};

Inputs random_inputs(const Shape& sh) {
  const auto B = static_cast<int64_t>(sh.enc_len.size());
  const int64_t kmax = *std::max_element(sh.enc_len.begin(), sh.enc_len.end());
  Inputs in;
  in.enc = torch::randn({B, kmax, sh.d_model});
  in.mask = torch::zeros({B, kmax}, torch::kBool);
  for (int64_t b = 0; b < B; ++b) {
    in.mask[b].narrow(0, 0, sh.enc_len[b]).fill_(true);
    // Padding holds junk: it must not count anywhere.
    in.enc[b].narrow(0, sh.enc_len[b], kmax - sh.enc_len[b]).fill_(7.0);
  }
  in.x = torch::randn({B, sh.steps, sh.d_model});
  in.enc_len = torch::tensor(sh.enc_len, torch::kLong);
  in.L = torch::tensor(sh.expected, torch::kLong);
  return in;
}

torch::Tensor reference(const CrossAttention& a, const Inputs& in) {
  std::vector<torch::Tensor> rows;
  for (int64_t b = 0; b < in.enc.size(0); ++b) {
    const int64_t kb = in.enc_len[b].item<int64_t>();
    rows.push_back(reference_row(a, in.enc[b].narrow(0, 0, kb), in.x[b], in.L[b].item<int64_t>()));
  }
  return torch::stack(rows);
}

torch::Tensor segments_of(const CrossAttention& a, const torch::Tensor& enc_len) {
  return a.kind == CrossAttentionKind::kFull ? torch::ones_like(enc_len) : num_segments(enc_len, a.segment_size);
}

torch::Tensor teacher_forced(const CrossAttention& a, const Inputs& in, torch::Tensor* fired) {
  torch::NoGradGuard no_grad;
  const int64_t B = in.x.size(0), Q = in.x.size(1);
  const auto m = segments_of(a, in.enc_len);
  const auto t = torch::arange(Q, torch::kLong).view({1, Q});
  const auto seg = a.kind == CrossAttentionKind::kFull ? torch::zeros({B, Q}, torch::kLong)
                                                       : segment_schedule(t, m.view({B, 1}), in.L.view({B, 1}));
  const auto prev = torch::cat({torch::full({B, 1}, -1, torch::kLong), seg.narrow(1, 0, Q - 1)}, 1);
  LayerState ls;
  a.prepare(in.enc, in.mask, m, ls);
  *fired = torch::zeros({B}, torch::kFloat64);
  return a.forward(in.x, ls, in.mask, in.enc_len, m, seg, seg.ne(prev), fired);
}

// As EncoderDecoderModel::step keeps the schedule: steps `steps` positions (max_steps bounds the
// switch table where defined).
torch::Tensor incremental(const CrossAttention& a, const Inputs& in, torch::Tensor* fired,
                          const torch::Tensor& max_steps = {}) {
  torch::NoGradGuard no_grad;
  const int64_t B = in.x.size(0), Q = in.x.size(1);
  const auto m = segments_of(a, in.enc_len);
  LayerState ls;
  a.prepare(in.enc, in.mask, m, ls, in.L, max_steps);
  auto segment = torch::full({B}, -1, torch::kLong);
  auto switches = torch::zeros({B}, torch::kLong);
  std::vector<torch::Tensor> out;
  *fired = torch::zeros({B}, torch::kFloat64);
  for (int64_t t = 0; t < Q; ++t) {
    const auto step = torch::full({B}, t, torch::kLong);
    const auto seg =
        a.kind == CrossAttentionKind::kFull ? torch::zeros({B}, torch::kLong) : segment_schedule(step, m, in.L);
    const auto changed = seg.ne(segment);
    const auto rows = changed.nonzero().view(-1);
    out.push_back(a.step(in.x.narrow(1, t, 1), ls, in.mask, in.enc_len, m, seg, rows, switches, fired));
    switches = switches + changed.to(torch::kLong);
    segment = seg;
  }
  return torch::cat(out, 1);
}

constexpr CrossAttentionKind kKinds[] = {
    CrossAttentionKind::kFull,       CrossAttentionKind::kSegmented,  CrossAttentionKind::kSrformer,
    CrossAttentionKind::kAblationI,  CrossAttentionKind::kAblationII, CrossAttentionKind::kAblationIII,
    CrossAttentionKind::kAblationIV, CrossAttentionKind::kXlMemory,   CrossAttentionKind::kGlobalTokens,
};

const std::vector<Shape>& shapes() {
  static const std::vector<Shape> all{
      // d = 5, 3 heads, inner 15 != d_model 12 (T5's d_kv); s = 3; short last segments; L < m and L > m.
      {12, 3, 5, 3, {10, 4, 7}, {4, 9, 2}, 9, "odd_head_dim"},
      // One head of 17, s = 1 (every key a segment), L = 1 (the whole schedule jumps to the last).
      {16, 1, 17, 1, {6, 1, 3}, {1, 2, 8}, 7, "one_head_s1"},
      // k < s for every row (one short segment), L beyond the steps taken.
      {8, 2, 4, 16, {5, 9, 1}, {40, 3, 1}, 5, "k_below_s"},
      // k an exact multiple of s, head size 12 (one vector and a tail), a very long row among short ones.
      {24, 2, 12, 4, {64, 8, 4, 13}, {6, 30, 1, 2}, 11, "multiple_of_s"},
      // d = 9 (one vector and one float), long rows, L = 2 < m.
      {18, 2, 9, 5, {73, 2, 40}, {2, 5, 3}, 8, "d9_long"},
      // Head size 1 and 2 (the teacher-forced recurrence's many-states form: more switches than d).
      {4, 4, 1, 2, {9, 12, 3}, {9, 7, 12}, 12, "d1"},
      {6, 2, 2, 1, {12, 5, 11}, {12, 20, 6}, 12, "d2_s1"},
  };
  return all;
}

class CrossAttentionReference : public ::testing::TestWithParam<std::tuple<CrossAttentionKind, bool, size_t>> {};

TEST_P(CrossAttentionReference, EveryFormMatchesTheEquations) {
  const auto [kind, bart, which] = GetParam();
  const Shape& sh = shapes()[which];
  torch::manual_seed(static_cast<uint64_t>(which) * 31 + static_cast<uint64_t>(kind) * 7 + (bart ? 1 : 0));
  auto a = make(kind, sh, bart);
  const Inputs in = random_inputs(sh);
  const auto want = reference(a, in);
  const double tol = 2e-4 * (1.0 + want.abs().max().item<double>());
  const auto check = [&](const torch::Tensor& got, const std::string& what) {
    ASSERT_EQ(got.sizes(), want.sizes()) << what;
    EXPECT_LE((got.to(torch::kFloat64) - want).abs().max().item<double>(), tol) << what;
  };
  testing::KernelSwitchesRestored restore;
  for (const bool kernels_on : {true, false}) {
    kernels::set_cpu_kernels(kernels_on);
    const std::string path = kernels_on ? "kernels" : "libtorch";
    torch::Tensor tf_fired, fired;
    check(teacher_forced(a, in, &tf_fired), path + " teacher-forced");
    for (const bool table : {true, false}) {
      a.precompute_switches = table;
      const std::string form = path + (table ? " switch table" : " drives at switches");
      check(incremental(a, in, &fired), form + " incremental");
      EXPECT_TRUE(torch::equal(fired, tf_fired)) << form << ": membrane elements fired " << fired << " vs " << tf_fired;
      // A step bound below some rows' L: the table keeps only what those steps reach.
      check(incremental(a, in, &fired, torch::full({in.x.size(0)}, in.x.size(1), torch::kLong)), form + " bounded");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CrossAttentionReference,
                         ::testing::Combine(::testing::ValuesIn(kKinds), ::testing::Bool(),
                                            ::testing::Range<size_t>(0, 7)),
                         [](const auto& info) {
                           return std::string(to_string(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) ? "_bart_" : "_t5_") +
                                  shapes()[std::get<2>(info.param)].name;
                         });

}  // namespace
}  // namespace srformer
