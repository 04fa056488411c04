#include "model/attention/cross_attention.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include "model/attention/products.h"
#include "model/attention/segments.h"
#include "model/attention/self_attention.h"
#include "model/autocast.h"
#include "model/kernels/attention_products.h"
#include "model/kernels/avx2.h"
#include "model/kernels/parallel.h"
#include "model/kernels/raf_update.h"
#include "model/layers.h"

namespace srformer {

namespace {

bool is_kind(CrossAttentionKind k, std::initializer_list<CrossAttentionKind> ks) {
  for (auto x : ks) {
    if (x == k) return true;
  }
  return false;
}

// Whether a segmented softmax's decode steps read each row's window where it lies in the row's slot of
// cross keys/values (kernels::window_attention) rather than from a per-row copy of it: CPU float32
// keys with the kernels on. The copies (LayerState::window_k/window_v, W/k of a request's cross
// keys/values) were a third of the bytes a row moves when it fills a leaving request's hole.
bool windows_in_place(const torch::Device& device, torch::ScalarType dtype, CrossAttentionKind kind) {
  return kind != CrossAttentionKind::kGlobalTokens && device.is_cpu() && dtype == torch::kFloat32 &&
         kernels::use_cpu_kernels();
}
bool windows_in_place(const torch::Tensor& cross_k, CrossAttentionKind kind) {
  return windows_in_place(cross_k.device(), cross_k.scalar_type(), kind);
}

// softmax(q kᵀ) v over each row's window of `width` keys from segment seg + offset, clipped to the
// row's real keys, read in the row's span (cross_start) of the head-major cross_k/cross_v pools
// [H, N, d]. q [B,H,1,d] -> [B,H,1,d].
torch::Tensor attend_window_in_place(const torch::Tensor& q, const LayerState& ls, const torch::Tensor& seg,
                                     const torch::Tensor& enc_len, int64_t segment_size, int64_t offset,
                                     int64_t width) {
  const int64_t B = q.size(0), H = q.size(1), d = q.size(3);
  const auto& k = ls.cross_k;
  const auto& v = ls.cross_v;
  if (!q.is_cpu() || q.scalar_type() != torch::kFloat32 || q.size(2) != 1 || k.dim() != 3 ||
      k.strides() != v.strides() || k.sizes() != v.sizes() || k.stride(2) != 1 || k.stride(1) != d || k.size(0) != H ||
      k.size(2) != d) {
    throw std::invalid_argument("cross-attention: in-place windows need CPU float32 q [B,H,1,d] and key pools");
  }
  const auto ranges = window_ranges(seg, enc_len, segment_size, offset, width);
  const auto starts = ls.cross_start.to(torch::kCPU, torch::kLong).contiguous();
  for (int64_t b = 0; b < B; ++b) {  // B integers: no read outside the pool whatever the schedule says
    const int64_t start = starts.data_ptr<int64_t>()[b];
    const auto i = static_cast<size_t>(b);
    if (start < 0 || (ranges.count[i] > 0 && start + ranges.first[i] + ranges.count[i] > k.size(1))) {
      throw std::out_of_range("cross-attention: a window outside the cross keys/values");
    }
  }
  const auto qc = q.stride(3) == 1 ? q : q.contiguous();
  auto out = torch::empty({B, 1, H, d}, qc.options());  // merging the heads afterwards is free
  // A span's position p is pool position start + p: the kernel's "row" (start) and key strides are both
  // the pool's position stride, its head stride the pool's.
  kernels::window_attention(qc.data_ptr<float>(), {qc.stride(0), qc.stride(1), qc.stride(2)}, k.data_ptr<float>(),
                            v.data_ptr<float>(), {k.stride(1), k.stride(0), k.stride(1)}, starts.data_ptr<int64_t>(),
                            ranges.first.data(), ranges.count.data(), out.data_ptr<float>(),
                            {out.stride(0), out.stride(2), out.stride(1)}, {B, H, d}, at::get_num_threads());
  return out.transpose(1, 2);
}

// Keys/values at idx [n,W] of n rows: from a pool [H,N,d] (LayerState::cross_start; `where` the
// rows' starts, `len` their lengths), or from dense [R,H,k,d] tensors (`where` the rows' indices
// into them, undefined: row j is row j).
torch::Tensor window_rows(const torch::Tensor& x, const torch::Tensor& idx, const torch::Tensor& where,
                          const torch::Tensor& len) {
  return x.dim() == 3 ? gather_span_rows(x, idx, where, len) : gather_rows(x, idx, where);
}

// Packs each row's real positions of dense keys/values [B,H,k,d] (mask [B,k], real positions first)
// into head-major pools [H, Σk_b, d], row after row; returns the rows' starts [B].
torch::Tensor pool_positions(torch::Tensor& keys, torch::Tensor& values, const torch::Tensor& enc_mask) {
  const auto real = enc_mask.to(torch::kBool);
  const auto len = real.sum(1).to(torch::kLong);
  using torch::indexing::Slice;
  keys = keys.transpose(0, 1).index({Slice(), real}).contiguous();
  values = values.transpose(0, 1).index({Slice(), real}).contiguous();
  return len.cumsum(0) - len;
}

// What a switch feeds the membrane, from K^T V and the segment's K_i^T V_i ([..., H, d, d] fp32):
// P_i W^T (ablation IV: K_i^T V_i W^T), or P_i itself for ablation III (no RAF: P is R).
// The product with W^T runs row by row with our kernel where it may (as prepare_recurrent_cpu's table
// does): one BLAS call over the n rows switching this step would sum a row in an order that depends on
// n, i.e. on which other requests switch segments in the same step (a row alone took another kernel).
torch::Tensor drive_from_products(const CrossAttention& a, const torch::Tensor& kv, torch::Tensor ksvs) {
  if (a.kv_clamp) ksvs = ksvs.clamp(-*a.kv_clamp, *a.kv_clamp);
  if (a.kind == CrossAttentionKind::kAblationIII) return kv - ksvs;
  const auto p = (a.kind == CrossAttentionKind::kAblationIV ? ksvs : kv - ksvs).contiguous();
  const int64_t d = a.raf.weight.size(0);
  if (p.dim() >= 2 && p.size(-1) == d && is_cpu_inference_float(p) && is_cpu_inference_float(a.raf.weight) &&
      kernels::use_cpu_kernels()) {
    const auto wt = a.raf.weight.t().contiguous();
    auto out = torch::empty_like(p);
    // Row r of P W^T: the rows of W^T weighted by row r of P (the same W^T for every row: stride 0).
    kernels::weighted_value_sum(p.data_ptr<float>(), wt.data_ptr<float>(), 0, p.numel() / d, d, d,
                                out.data_ptr<float>(), at::get_num_threads());
    return out;
  }
  return torch::matmul(p, a.raf.weight.t());
}

// The layer's cross keys and values in fp32 with padded positions zeroed ([B,H,k,d] each): what
// K^T V, ||K|| and every K_i^T V_i are computed from (DESIGN.md: padding is masked everywhere).
std::pair<torch::Tensor, torch::Tensor> masked_keys_values(const LayerState& ls, const torch::Tensor& enc_mask) {
  const auto w = enc_mask.to(torch::kFloat32).view({enc_mask.size(0), 1, -1, 1});
  return {ls.cross_k.to(torch::kFloat32) * w, ls.cross_v.to(torch::kFloat32) * w};
}

// One mean-pooled key/value per segment (LongT5-style global tokens) [B, H, mmax, d], zeros past a row's
// m. Each row is pooled over its own real positions in shapes that do not depend on the batch: a row's
// tokens are the same bits padded among longer rows as alone (a product over the padded length was not).
// `lengths`: each row's real positions, [B] int64 on the CPU.
torch::Tensor segment_means(const torch::Tensor& x, const torch::Tensor& lengths, int64_t segment_size, int64_t mmax) {
  std::vector<torch::Tensor> rows;
  for (int64_t b = 0; b < x.size(0); ++b) {
    const int64_t n = lengths.data_ptr<int64_t>()[b];
    const int64_t full = n / segment_size;
    const int64_t rest = n - full * segment_size;
    const auto row = x[b];  // [H, k, d]
    std::vector<torch::Tensor> parts;
    if (full > 0) {
      parts.push_back(row.narrow(1, 0, full * segment_size)
                          .contiguous()
                          .view({row.size(0), full, segment_size, row.size(2)})
                          .sum(2) /
                      static_cast<double>(segment_size));
    }
    if (rest > 0)
      parts.push_back(row.narrow(1, full * segment_size, rest).contiguous().sum(1, true) / static_cast<double>(rest));
    const int64_t m = full + (rest > 0 ? 1 : 0);
    if (m < mmax) parts.push_back(torch::zeros({row.size(0), mmax - m, row.size(2)}, x.options()));
    rows.push_back(torch::cat(parts, 1));
  }
  return torch::stack(rows);
}

}  // namespace

bool CrossAttention::recurrent() const {
  return is_kind(kind, {CrossAttentionKind::kSrformer, CrossAttentionKind::kAblationI, CrossAttentionKind::kAblationII,
                        CrossAttentionKind::kAblationIII, CrossAttentionKind::kAblationIV});
}

bool CrossAttention::has_softmax() const { return kind != CrossAttentionKind::kAblationI; }

bool CrossAttention::pooled(const torch::Device& device, torch::ScalarType dtype) const {
  return kind != CrossAttentionKind::kFull || windows_in_place(device, dtype, kind);
}

int64_t keys_read_per_step(CrossAttentionKind kind, int64_t segment_size, int64_t enc_len) {
  const int64_t s = segment_size;
  switch (kind) {
    case CrossAttentionKind::kFull:
      return enc_len;
    case CrossAttentionKind::kAblationI:
      return 0;
    case CrossAttentionKind::kXlMemory:
      return std::min(enc_len, 2 * s);
    case CrossAttentionKind::kGlobalTokens:
      return std::min(enc_len, s) + (enc_len + s - 1) / s;
    default:
      return std::min(enc_len, s);
  }
}

StateFootprint CrossAttention::footprint(const torch::Device& device, torch::ScalarType dtype) const {
  const auto element = static_cast<int64_t>(c10::elementSize(dtype));
  const int64_t features = heads * head_dim;
  StateFootprint f;
  f.per_encoder_position = 2 * features * element;  // cross K, V
  if (kind == CrossAttentionKind::kGlobalTokens) {  // one pooled key and value per segment
    f.per_row_encoder_position = (2 * features * element + segment_size - 1) / segment_size;
  }
  if (recurrent()) {
    const int64_t square = features * head_dim * 4;  // [H, d, d] fp32
    f.fixed += 2 * square + features * 4;            // membrane, R, ||K||
    if (precompute_switches) {
      f.per_switch = square;
      f.segment_size = segment_size;
    } else {
      f.fixed += square;  // K^T V
    }
  }
  if (pooled(device, dtype)) {  // LayerState::cross_start: a request's own length, shared by beams
    f.inputs_shared_by_beams = true;
    f.fixed += 8;                                          // the row's start in the key pools
    if (recurrent() && precompute_switches) f.fixed += 8;  // and in the switch table's
    if (kind != CrossAttentionKind::kFull && has_softmax() && !windows_in_place(device, dtype, kind)) {
      f.fixed += 2 * heads * window_width() * head_dim * element;  // window copies
    }
  }
  return f;
}

void CrossAttention::prepare(const torch::Tensor& enc_hidden, const torch::Tensor& enc_mask, const torch::Tensor& m,
                             LayerState& ls, const torch::Tensor& expected_len, const torch::Tensor& max_steps,
                             int64_t positions, const std::function<void()>& between) const {
  ls.cross_k = project_heads(k, enc_hidden, heads, positions, between);
  if (between) between();
  ls.cross_v = project_heads(v, enc_hidden, heads, positions, between);
  if (recurrent() && precompute_switches && expected_len.defined() && ls.cross_k.is_cpu() &&
      kernels::use_cpu_kernels()) {
    prepare_recurrent_cpu(ls, enc_mask.sum(1).to(torch::kLong), m, expected_len, max_steps);
  } else if (recurrent()) {
    // K^T V and ||K|| over real positions only, in fp32 (also under mixed-precision training).
    const Fp32Region fp32;
    const auto [kf, vf] = masked_keys_values(ls, enc_mask);
    auto kv = keys_values_product(kf, vf);
    if (kv_clamp) kv = kv.clamp(-*kv_clamp, *kv_clamp);
    ls.kv = kv;
    ls.knorm = key_norms(kf);
    ls.mem = torch::zeros_like(kv);
    ls.recur = torch::zeros_like(kv);
    if (precompute_switches && expected_len.defined()) {
      switch_table(ls, enc_mask.sum(1).to(torch::kLong), m, expected_len, max_steps);
      ls.kv = torch::Tensor();  // only switches read K^T V, and the table holds what they need of it
    }
  }
  if (kind == CrossAttentionKind::kGlobalTokens) {
    const int64_t mmax = (enc_mask.size(1) + segment_size - 1) / segment_size;
    const auto lengths = enc_mask.sum(1).to(torch::kCPU, torch::kLong).contiguous();
    ls.global_k = segment_means(ls.cross_k, lengths, segment_size, mmax);
    ls.global_v = segment_means(ls.cross_v, lengths, segment_size, mmax);
  }
  if (expected_len.defined() && kind != CrossAttentionKind::kFull && has_softmax() &&
      !windows_in_place(ls.cross_k, kind)) {
    // Filled at each row's first step (its segment changes from "none" to 0).
    const int64_t width = window_width();
    ls.window_k = torch::zeros({ls.cross_k.size(0), heads, width, head_dim}, ls.cross_k.options());
    ls.window_v = torch::zeros_like(ls.window_k);
  }
  if (expected_len.defined() && pooled(ls.cross_k.device(), ls.cross_k.scalar_type())) {
    // Each request's real positions go into pools (LayerState::cross_start); the switch table is one
    // already.
    ls.cross_start = pool_positions(ls.cross_k, ls.cross_v, enc_mask);
  }
}

torch::Tensor CrossAttention::switch_drive(const torch::Tensor& kv, const torch::Tensor& keys,
                                           const torch::Tensor& values, const torch::Tensor& seg,
                                           const torch::Tensor& enc_len, const torch::Tensor& rows) const {
  const bool pool = keys.dim() == 3;  // window_rows clamps into each row's span itself
  const auto win = segment_window(seg, enc_len, segment_size, 0, segment_size,
                                  pool ? std::numeric_limits<int64_t>::max() : keys.size(2));
  const auto w = win.valid.to(torch::kFloat32).view({seg.size(0), 1, -1, 1});
  // Read only the s rows of segment i of each changed row (never a copy of all k keys).
  const auto ki = window_rows(keys, win.idx, rows, enc_len).to(torch::kFloat32) * w;
  const auto vi = window_rows(values, win.idx, rows, enc_len).to(torch::kFloat32) * w;
  return drive_from_products(*this, kv, keys_values_product(ki, vi));
}

CrossAttention::Recurrent CrossAttention::recurrent_update(const torch::Tensor& kv, const torch::Tensor& keys,
                                                           const torch::Tensor& values, const torch::Tensor& mem,
                                                           const torch::Tensor& seg, const torch::Tensor& enc_len,
                                                           const torch::Tensor& rows) const {
  const auto drive = switch_drive(kv, keys, values, seg, enc_len, rows);
  if (kind == CrossAttentionKind::kAblationIII) {
    return {mem, drive, torch::zeros({seg.size(0)}, seg.options().dtype(torch::kFloat64))};
  }
  const auto r = raf_fire(raf, mem, drive);
  return {r.mem, r.out, r.fired.sum({1, 2, 3}).to(torch::kFloat64)};
}

namespace {

// The segments each row's schedule visits, in order, and where each row's entries start in a
// switch-table pool of them all, row after row (LayerState::drive_start).
struct Schedules {
  std::vector<std::vector<int64_t>> segs;
  std::vector<int64_t> starts;
  int64_t total = 0;
};

Schedules visited_schedules(const torch::Tensor& m, const torch::Tensor& expected_len, const torch::Tensor& max_steps) {
  const auto m_cpu = m.to(torch::kCPU, torch::kLong).contiguous();
  const auto L_cpu = expected_len.to(torch::kCPU, torch::kLong).contiguous();
  const auto steps_cpu = max_steps.defined() ? max_steps.to(torch::kCPU, torch::kLong).contiguous() : torch::Tensor();
  const int64_t B = m_cpu.numel();
  Schedules out;
  out.segs.resize(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    out.segs[b] = visited_segments(m_cpu.data_ptr<int64_t>()[b], std::max<int64_t>(1, L_cpu.data_ptr<int64_t>()[b]),
                                   steps_cpu.defined() ? steps_cpu.data_ptr<int64_t>()[b] : kUnboundedSteps);
    out.starts.push_back(out.total);
    out.total += static_cast<int64_t>(out.segs[b].size());
  }
  return out;
}

}  // namespace

void CrossAttention::switch_table(LayerState& ls, const torch::Tensor& enc_len, const torch::Tensor& m,
                                  const torch::Tensor& expected_len, const torch::Tensor& max_steps) const {
  const auto schedules = visited_schedules(m, expected_len, max_steps);
  const int64_t B = ls.kv.size(0);
  auto table = torch::empty({schedules.total, ls.kv.size(1), ls.kv.size(2), ls.kv.size(3)}, ls.kv.options());
  // Each row's entries in one batch of ops (the CPU form with our kernels is prepare_recurrent_cpu).
  for (int64_t b = 0; b < B; ++b) {
    const auto& segs = schedules.segs[static_cast<size_t>(b)];
    const auto n = static_cast<int64_t>(segs.size());
    const auto seg = torch::tensor(segs, torch::kLong).to(enc_len.device());
    const auto rows = torch::full({n}, b, seg.options());
    table.narrow(0, schedules.starts[static_cast<size_t>(b)], n)
        .copy_(switch_drive(ls.kv.narrow(0, b, 1).expand({n, -1, -1, -1}), ls.cross_k, ls.cross_v, seg,
                            enc_len.index_select(0, rows), rows));
  }
  ls.switch_drive = table;
  ls.drive_start = torch::tensor(schedules.starts, torch::kLong).to(m.device());
}

void CrossAttention::prepare_recurrent_cpu(LayerState& ls, const torch::Tensor& enc_len, const torch::Tensor& m,
                                           const torch::Tensor& expected_len, const torch::Tensor& max_steps) const {
  const auto schedules = visited_schedules(m, expected_len, max_steps);
  const auto& segs = schedules.segs;
  const auto keys = ls.cross_k.to(torch::kFloat32).contiguous();
  const auto values = ls.cross_v.to(torch::kFloat32).contiguous();
  const bool feeds_raf = kind != CrossAttentionKind::kAblationIII;  // ablation III has no RAF (and no W)
  const auto weight_t = feeds_raf ? raf.weight.to(torch::kFloat32).t().contiguous() : torch::Tensor();
  const auto k_cpu = enc_len.to(torch::kLong).contiguous();
  const auto m_cpu = m.to(torch::kLong).contiguous();
  const int64_t B = keys.size(0), H = keys.size(1), kmax = keys.size(2), d = keys.size(3);
  auto table = torch::empty({schedules.total, H, d, d}, keys.options());
  ls.knorm = torch::empty({B, H, d}, keys.options());
  const float* kp = keys.data_ptr<float>();
  const float* vp = values.data_ptr<float>();
  const float* wtp = feeds_raf ? weight_t.data_ptr<float>() : nullptr;
  const int64_t* k_len = k_cpu.data_ptr<int64_t>();
  const int64_t* m_row = m_cpu.data_ptr<int64_t>();
  float* out = table.data_ptr<float>();
  float* norm = ls.knorm.data_ptr<float>();
  const auto clamp = kv_clamp ? std::optional<float>(static_cast<float>(*kv_clamp)) : std::nullopt;
  const auto clamped = [&](float* p) {
    if (clamp) {
      for (int64_t x = 0; x < d * d; ++x) p[x] = std::clamp(p[x], -*clamp, *clamp);
    }
  };
  kernels::parallel_chunks(B * H, at::get_num_threads(), [&](int64_t begin, int64_t end) {
    std::vector<float> kv(static_cast<size_t>(d * d)), p(static_cast<size_t>(d * d));
    for (int64_t item = begin; item < end; ++item) {
      const int64_t b = item / H;
      const int64_t h = item % H;
      const int64_t k_b = std::min(k_len[b], kmax);
      const float* K = kp + item * kmax * d;
      const float* V = vp + item * kmax * d;
      for (int64_t a = 0; a < d; ++a) {  // ||K|| over the real keys
        float sq = 0.0F;
        for (int64_t t = 0; t < k_b; ++t) sq += K[t * d + a] * K[t * d + a];
        norm[item * d + a] = std::sqrt(sq);
      }
      const auto& visited = segs[static_cast<size_t>(b)];
      const auto n = static_cast<int64_t>(visited.size());
      const int64_t first_entry = schedules.starts[static_cast<size_t>(b)];
      const auto entry = [&](int64_t e) { return out + ((first_entry + e) * H + h) * d * d; };
      std::fill(kv.begin(), kv.end(), 0.0F);
      int64_t e = 0;
      for (int64_t j = 0; j < m_row[b]; ++j) {  // K^T V = sum of the segments' K_j^T V_j
        const int64_t first = j * segment_size;
        const int64_t len = std::min(segment_size, k_b - first);
        if (len <= 0) break;
        kernels::key_value_outer_sum(K + first * d, V + first * d, 1, len, d, p.data(), 1);
        for (int64_t x = 0; x < d * d; ++x) kv[x] += p[x];
        if (e < n && visited[static_cast<size_t>(e)] == j) std::copy(p.begin(), p.end(), entry(e++));
      }
      clamped(kv.data());
      for (e = 0; e < n; ++e) {
        float* dst = entry(e);
        std::copy(dst, dst + d * d, p.begin());
        clamped(p.data());
        if (kind != CrossAttentionKind::kAblationIV) {  // P_i = K^T V - K_i^T V_i (ablation IV feeds K_i^T V_i)
          for (int64_t x = 0; x < d * d; ++x) p[x] = kv[x] - p[x];
        }
        if (!feeds_raf) {
          std::copy(p.begin(), p.end(), dst);
        } else {  // P_i W^T: row a is the rows of W^T weighted by row a of P_i
          kernels::weighted_value_sum(p.data(), wtp, 0, d, d, d, dst, 1);
        }
      }
    }
  });
  ls.switch_drive = table;
  ls.drive_start = torch::tensor(schedules.starts, torch::kLong);
  ls.mem = torch::zeros({B, H, d, d}, keys.options());
  ls.recur = torch::zeros_like(ls.mem);
}

namespace {

// Where rows `rows` of the state find their cross keys/values: their starts in the pools
// (LayerState::cross_start), or the rows themselves in dense tensors.
torch::Tensor keys_of(const LayerState& ls, const torch::Tensor& rows) {
  return ls.cross_start.defined() ? ls.cross_start.index_select(0, rows) : rows;
}

// Copy-on-write for in-place updates: a tensor another state (a copy of this one) may also hold is
// replaced by its own copy first.
void make_exclusive(torch::Tensor& t) {
  if (!owns_storage(t) || !t.is_contiguous()) t = t.clone();
}

// Writes `values` into rows `rows` of t: in place when t is this state's own, else into a copy.
void overwrite_rows(torch::Tensor& t, const torch::Tensor& rows, const torch::Tensor& values) {
  if (rows.numel() == t.size(0)) {
    t = values;  // rows are the changed rows in order: all of them
    return;
  }
  make_exclusive(t);
  t.index_copy_(0, rows, values);
}

}  // namespace

int64_t CrossAttention::window_width() const {
  return kind == CrossAttentionKind::kXlMemory ? 2 * segment_size : segment_size;
}

void CrossAttention::refresh_windows(LayerState& ls, const torch::Tensor& idx, const torch::Tensor& rows,
                                     const torch::Tensor& enc_len) const {
  if (rows.numel() == 0) return;
  const auto picked = idx.index_select(0, rows);
  const auto where = keys_of(ls, rows);
  const auto len = enc_len.index_select(0, rows);
  overwrite_rows(ls.window_k, rows, window_rows(ls.cross_k, picked, where, len));
  overwrite_rows(ls.window_v, rows, window_rows(ls.cross_v, picked, where, len));
}

void CrossAttention::apply_switch_table(LayerState& ls, const torch::Tensor& changed_rows,
                                        const torch::Tensor& switches, torch::Tensor* fired) const {
  // Row b's entry e is pool entry drive_start[b] + e (LayerState::drive_start). The schedule bounds e
  // by the row's own entries (checked by the step); here the host holds the integers, the pool's end
  // is checked too.
  if (changed_rows.numel() == 0) return;
  const bool ablation3 = kind == CrossAttentionKind::kAblationIII;
  if (!ablation3 && is_cpu_inference_float(ls.mem) && kernels::use_cpu_kernels()) {
    // In place, one pass per changed row, from plain integers: the LibTorch form below costs ~20
    // small ops, more than the update itself.
    const int64_t entries = ls.switch_drive.size(0);
    const auto picked = changed_rows.to(torch::kLong).contiguous();
    const std::vector<int64_t> rows(picked.data_ptr<int64_t>(), picked.data_ptr<int64_t>() + picked.numel());
    const auto sw = switches.to(torch::kLong).contiguous();
    const int64_t* entry = sw.data_ptr<int64_t>();
    const auto starts = ls.drive_start.to(torch::kCPU, torch::kLong).contiguous();
    const int64_t* start = starts.data_ptr<int64_t>();
    const int64_t B = sw.numel();
    for (const int64_t b : rows) {
      if (b < 0 || b >= B || entry[b] < 0 || start[b] < 0 || start[b] + entry[b] >= entries) {
        throw std::logic_error("cross-attention: a row switched segments more often than the switch table holds");
      }
    }
    make_exclusive(ls.mem);
    make_exclusive(ls.recur);
    const auto table = ls.switch_drive.contiguous();
    const int64_t block = ls.mem.numel() / B;
    std::vector<kernels::RafBlock> blocks;
    blocks.reserve(rows.size());
    for (const int64_t b : rows) {
      blocks.push_back({ls.mem.data_ptr<float>() + b * block, ls.recur.data_ptr<float>() + b * block,
                        table.data_ptr<float>() + (start[b] + entry[b]) * block});
    }
    std::vector<int64_t> counts(rows.size());
    kernels::raf_accumulate_fire(blocks.data(), static_cast<int64_t>(blocks.size()), block, raf.leak.item<float>(),
                                 raf.threshold.item<float>(), counts.data(), at::get_num_threads());
    if (fired != nullptr) {
      make_exclusive(*fired);
      double* f = fired->data_ptr<double>();
      for (size_t j = 0; j < rows.size(); ++j) f[rows[j]] += static_cast<double>(counts[j]);
    }
    return;
  }
  const auto& rows = changed_rows;
  const auto at = ls.drive_start.index_select(0, rows) + switches.index_select(0, rows);
  const auto drive = ls.switch_drive.index_select(0, at);
  if (ablation3) {
    ls.recur = ls.recur.index_copy(0, rows, drive);
    return;
  }
  const auto r = raf_fire(raf, ls.mem.index_select(0, rows), drive);
  ls.mem = ls.mem.index_copy(0, rows, r.mem);
  ls.recur = ls.recur.index_copy(0, rows, r.out);
  if (fired != nullptr) *fired = fired->index_add(0, rows, r.fired.sum({1, 2, 3}).to(torch::kFloat64));
}

torch::Tensor CrossAttention::combine(const torch::Tensor& attn, const torch::Tensor& qr, const LayerState& ls) const {
  if (!recurrent()) return attn;
  auto rec = qr;
  if (kind != CrossAttentionKind::kAblationII) rec = rec / ls.knorm.unsqueeze(2);
  if (!has_softmax()) return rec.to(attn.scalar_type());
  return (attn.to(torch::kFloat32) + rec).to(attn.scalar_type());
}

torch::Tensor CrossAttention::forward(const torch::Tensor& x, const LayerState& ls, const torch::Tensor& enc_mask,
                                      const torch::Tensor& enc_len, const torch::Tensor& m, const torch::Tensor& seg,
                                      const torch::Tensor& changed, torch::Tensor* fired) const {
  auto qh = split_heads(q(x), heads);
  if (scale != 1.0) qh = qh * scale;
  const int64_t B = x.size(0);
  const int64_t Q = x.size(1);
  const int64_t kmax = enc_mask.size(1);

  torch::Tensor attn;
  if (kind == CrossAttentionKind::kFull) {
    attn = attend(qh, ls.cross_k, ls.cross_v, additive_mask(enc_mask.view({B, 1, 1, kmax}), qh.scalar_type()));
  } else if (has_softmax()) {
    // Parallel form: each position attends over the full key range masked to its segment(s).
    const auto key_seg = torch::div(torch::arange(kmax, seg.options()), segment_size, "floor").view({1, 1, kmax});
    auto allowed = key_seg.eq(seg.unsqueeze(2));
    if (kind == CrossAttentionKind::kXlMemory) allowed = allowed.logical_or(key_seg.eq(seg.unsqueeze(2) - 1));
    allowed = allowed.logical_and(enc_mask.view({B, 1, kmax}));
    auto keys = ls.cross_k;
    auto values = ls.cross_v;
    if (kind == CrossAttentionKind::kGlobalTokens) {
      const int64_t mmax = ls.global_k.size(2);
      const auto g_ok = torch::arange(mmax, m.options()).view({1, 1, mmax}).lt(m.view({B, 1, 1})).expand({B, Q, mmax});
      allowed = torch::cat({allowed, g_ok}, 2);
      keys = torch::cat({keys, ls.global_k}, 2);
      values = torch::cat({values, ls.global_v}, 2);
    }
    attn = attend(qh, keys, values, additive_mask(allowed.unsqueeze(1), qh.scalar_type()));
  } else {
    attn = torch::zeros_like(qh);
  }

  torch::Tensor qr;
  if (recurrent()) {
    const Fp32Region fp32;  // the RAF recurrence and q R stay fp32 under mixed-precision training
    qr = teacher_forced_recurrence(qh.to(torch::kFloat32), ls, enc_mask, seg, changed, fired);
  }
  return o(merge_heads(combine(attn, qr, ls)));
}

torch::Tensor CrossAttention::teacher_forced_recurrence(const torch::Tensor& qf, const LayerState& ls,
                                                        const torch::Tensor& enc_mask, const torch::Tensor& seg,
                                                        const torch::Tensor& changed, torch::Tensor* fired) const {
  const int64_t B = seg.size(0);
  const int64_t Q = seg.size(1);
  // Each row's switches (positions where its segment changes) in order, from plain integers.
  const auto ch_cpu = changed.to(torch::kCPU, torch::kBool).contiguous();
  const auto seg_cpu = seg.to(torch::kCPU, torch::kLong).contiguous();
  const bool* ch = ch_cpu.data_ptr<bool>();
  const int64_t* sg = seg_cpu.data_ptr<int64_t>();
  std::vector<int64_t> counts(static_cast<size_t>(B), 0);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < Q; ++t) counts[b] += ch[b * Q + t] ? 1 : 0;
  }
  const int64_t C = B == 0 ? 0 : *std::max_element(counts.begin(), counts.end());
  if (C == 0) return torch::matmul(qf, ls.recur);

  // K_i^T V_i for every segment of every row in one product over [B, H, mmax, s, d] views of the
  // (masked, zero-padded) keys and values, then every segment's drive.
  const int64_t H = ls.cross_k.size(1);
  const int64_t d = ls.cross_k.size(3);
  const int64_t kmax = enc_mask.size(1);
  const int64_t s = segment_size;
  const int64_t mmax = (kmax + s - 1) / s;
  auto [kf, vf] = masked_keys_values(ls, enc_mask);
  if (mmax * s != kmax) {
    kf = torch::constant_pad_nd(kf, {0, 0, 0, mmax * s - kmax});
    vf = torch::constant_pad_nd(vf, {0, 0, 0, mmax * s - kmax});
  }
  const auto ksvs = keys_values_product(kf.view({B, H, mmax, s, d}), vf.view({B, H, mmax, s, d}));
  const auto drives = drive_from_products(*this, ls.kv.unsqueeze(2), ksvs).transpose(1, 2).reshape({B * mmax, H, d, d});

  // Switch j of row b reads the drive of its segment; rows with fewer switches repeat their last
  // state (valid = false).
  std::vector<int64_t> pick(static_cast<size_t>(B * C), 0);
  std::vector<uint8_t> valid(static_cast<size_t>(B * C), 0);
  for (int64_t b = 0; b < B; ++b) {
    int64_t j = 0;
    for (int64_t t = 0; t < Q; ++t) {
      if (!ch[b * Q + t]) continue;
      pick[b * C + j] = b * mmax + sg[b * Q + t];
      valid[b * C + j] = 1;
      ++j;
    }
  }
  const auto dev = seg.device();
  const auto picked = drives.index_select(0, torch::tensor(pick, torch::kLong).to(dev)).view({B, C, H, d, d});
  const auto ok = torch::tensor(valid, torch::kBool).view({B, C}).to(dev);

  auto mem = ls.mem;
  auto recur = ls.recur;
  std::vector<torch::Tensor> states{recur};
  states.reserve(static_cast<size_t>(C + 1));
  for (int64_t j = 0; j < C; ++j) {
    const auto drive = picked.select(1, j);
    const auto ok_j = ok.select(1, j);
    const auto sel = ok_j.view({B, 1, 1, 1});
    if (kind == CrossAttentionKind::kAblationIII) {
      recur = torch::where(sel, drive, recur);
    } else {
      const auto r = raf_fire(raf, mem, drive);
      mem = torch::where(sel, r.mem, mem);
      recur = torch::where(sel, r.out, recur);
      if (fired != nullptr) {
        const auto n = r.fired.sum({1, 2, 3}).to(torch::kFloat64);
        *fired = *fired + torch::where(ok_j, n, torch::zeros_like(n));
      }
    }
    states.push_back(recur);
  }
  // Position t uses the state after the row's switches up to t: index cumsum(changed) in 0..C.
  const auto R = torch::stack(states, 1);                 // [B, C+1, H, d, d]
  const auto which = changed.to(torch::kLong).cumsum(1);  // [B, Q]
  if (C + 1 < d) {
    // Few states: q against every state ([B,H,C+1,Q,d]), then each position's own.
    const auto all = torch::matmul(qf.unsqueeze(2), R.transpose(1, 2));
    const auto idx = which.view({B, 1, 1, Q, 1}).expand({B, H, 1, Q, d});
    return all.gather(2, idx).squeeze(2);
  }
  // Many states: each position's R ([B,H,Q,d,d]) times its query, as an element-wise product and a
  // sum (a batched matmul would make one tiny BLAS call per position and head).
  const auto flat = (torch::arange(B, which.options()) * (C + 1)).view({B, 1}) + which;
  const auto Rt =
      R.reshape({B * (C + 1), H, d, d}).index_select(0, flat.view(-1)).view({B, Q, H, d, d}).transpose(1, 2);
  return (qf.unsqueeze(-1) * Rt).sum(-2);
}

torch::Tensor CrossAttention::step(const torch::Tensor& x, LayerState& ls, const torch::Tensor& enc_mask,
                                   const torch::Tensor& enc_len, const torch::Tensor& m, const torch::Tensor& seg,
                                   const torch::Tensor& changed_rows, const torch::Tensor& switches,
                                   torch::Tensor* fired) const {
  auto qh = split_heads(q(x), heads);
  if (scale != 1.0) qh = qh * scale;
  const int64_t B = x.size(0);
  const int64_t kmax = enc_mask.size(1);

  torch::Tensor attn;
  if (kind == CrossAttentionKind::kFull && ls.cross_start.defined()) {
    // Every real key of each row, read in its span of the pools as one window (with the kernels off
    // after the state started: gathered, padded to the longest and masked).
    if (windows_in_place(ls.cross_k, kind) && qh.scalar_type() == torch::kFloat32) {
      attn = attend_window_in_place(qh, ls, torch::zeros({B}, torch::kLong), enc_len, 0, 0, kmax);
    } else {
      const auto idx = torch::arange(kmax, enc_len.options()).unsqueeze(0).expand({B, kmax});
      attn = attend(qh, window_rows(ls.cross_k, idx, ls.cross_start, enc_len),
                    window_rows(ls.cross_v, idx, ls.cross_start, enc_len),
                    additive_mask(enc_mask.view({B, 1, 1, kmax}), qh.scalar_type()));
    }
  } else if (kind == CrossAttentionKind::kFull) {
    attn = attend(qh, ls.cross_k, ls.cross_v, additive_mask(enc_mask.view({B, 1, 1, kmax}), qh.scalar_type()));
  } else if (has_softmax()) {
    // Read only the rows of segment i (and i-1 / global tokens): s keys per step instead of k.
    const bool xl = kind == CrossAttentionKind::kXlMemory;
    if (!ls.window_k.defined() && ls.cross_start.defined() && windows_in_place(ls.cross_k, kind) &&
        qh.scalar_type() == torch::kFloat32) {
      attn = attend_window_in_place(qh, ls, seg, enc_len, segment_size, xl ? -1 : 0, window_width());
    } else {
      const auto win = segment_window(seg, enc_len, segment_size, xl ? -1 : 0, window_width(), kmax);
      if (ls.window_k.defined()) refresh_windows(ls, win.idx, changed_rows, enc_len);
      // Without windows (a state started with the kernels on, stepped with them off), from the pools.
      auto keys = ls.window_k.defined() ? ls.window_k : window_rows(ls.cross_k, win.idx, ls.cross_start, enc_len);
      auto values = ls.window_v.defined() ? ls.window_v : window_rows(ls.cross_v, win.idx, ls.cross_start, enc_len);
      auto allowed = win.valid;
      if (kind == CrossAttentionKind::kGlobalTokens) {
        const int64_t mmax = ls.global_k.size(2);
        allowed = torch::cat({allowed, torch::arange(mmax, m.options()).view({1, mmax}).lt(m.view({B, 1}))}, 1);
        keys = torch::cat({keys, ls.global_k}, 2);
        values = torch::cat({values, ls.global_v}, 2);
      }
      attn = attend(qh, keys, values, additive_mask(allowed.view({B, 1, 1, -1}), qh.scalar_type()));
    }
  } else {
    attn = torch::zeros_like(qh);
  }

  torch::Tensor qr;
  if (recurrent()) {
    const Fp32Region fp32;
    if (ls.switch_drive.defined()) {
      apply_switch_table(ls, changed_rows, switches, fired);
    } else if (const auto& rows = changed_rows; rows.numel() > 0) {
      // Only rows whose segment changed pay for K_i^T V_i and the RAF step.
      const auto upd =
          recurrent_update(ls.kv.index_select(0, rows), ls.cross_k, ls.cross_v, ls.mem.index_select(0, rows),
                           seg.index_select(0, rows), enc_len.index_select(0, rows), keys_of(ls, rows));
      ls.mem = ls.mem.index_copy(0, rows, upd.mem);
      ls.recur = ls.recur.index_copy(0, rows, upd.out);
      if (fired != nullptr) *fired = fired->index_add(0, rows, upd.fired_count);
    }
    qr = weights_value_product(qh.to(torch::kFloat32), ls.recur);
  }
  return o(merge_heads(combine(attn, qr, ls)));
}

}  // namespace srformer
