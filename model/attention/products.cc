#include "model/attention/products.h"

#include <torch/torch.h>

#include <cmath>
#include <vector>

#include "model/kernels/attention_products.h"
#include "model/kernels/avx2.h"
#include "model/kernels/parallel.h"
#include "model/layers.h"

namespace srformer {

namespace {

// One query per group, the same groups on both sides, a's last size matching b's size `b_inner`.
bool single_query(const torch::Tensor& a, const torch::Tensor& b, int64_t b_inner) {
  return a.dim() == 4 && b.dim() == 4 && a.size(2) == 1 && a.size(0) == b.size(0) && a.size(1) == b.size(1) &&
         a.size(3) == b.size(b_inner) && is_cpu_inference_float(a) && is_cpu_inference_float(b) &&
         kernels::use_cpu_kernels();
}

}  // namespace

int64_t uniform_group_stride(const torch::Tensor& t) {
  const int64_t T = t.size(2);
  const int64_t d = t.size(3);
  const bool rows_packed = t.stride(3) == 1 && (T == 0 || t.stride(2) == d);
  const bool heads_even = t.size(0) <= 1 || t.stride(0) == t.size(1) * t.stride(1);
  return rows_packed && heads_even && t.stride(1) >= T * d ? t.stride(1) : 0;
}

torch::Tensor keys_values_product(const torch::Tensor& k, const torch::Tensor& v) {
  // The kernel at any T: each sum is one chain over t = 0, 1, ... from zero, so the zero-padded positions
  // of a batch's longer rows change no bits. (BLAS above some T summed a row in another order padded to a
  // long document than alone: K^T V, with --precompute-switches false, depended on the batch.)
  const bool kernel = k.dim() == 4 && k.sizes() == v.sizes() && is_cpu_inference_float(k) &&
                      is_cpu_inference_float(v) && kernels::use_cpu_kernels();
  if (!kernel) return torch::matmul(k.transpose(-1, -2), v);
  const auto kc = k.contiguous();
  const auto vc = v.contiguous();
  const int64_t B = k.size(0), H = k.size(1), T = k.size(2), d = k.size(3);
  auto out = torch::empty({B, H, d, d}, kc.options());
  kernels::key_value_outer_sum(kc.data_ptr<float>(), vc.data_ptr<float>(), B * H, T, d, out.data_ptr<float>(),
                               at::get_num_threads());
  return out;
}

torch::Tensor key_norms(const torch::Tensor& k) {
  if (k.dim() != 4 || !is_cpu_inference_float(k) || !kernels::use_cpu_kernels()) return k.pow(2).sum(2).sqrt();
  const auto kc = k.contiguous();
  const int64_t groups = k.size(0) * k.size(1), T = k.size(2), d = k.size(3);
  auto out = torch::empty({k.size(0), k.size(1), d}, kc.options());
  const float* kp = kc.data_ptr<float>();
  float* o = out.data_ptr<float>();
  kernels::parallel_chunks(groups, at::get_num_threads(), [&](int64_t begin, int64_t end) {
    std::vector<float> sq(static_cast<size_t>(d));
    for (int64_t g = begin; g < end; ++g) {
      std::fill(sq.begin(), sq.end(), 0.0F);
      const float* K = kp + g * T * d;
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t a = 0; a < d; ++a) sq[static_cast<size_t>(a)] += K[t * d + a] * K[t * d + a];
      }
      for (int64_t a = 0; a < d; ++a) o[g * d + a] = std::sqrt(sq[static_cast<size_t>(a)]);
    }
  });
  return out;
}

torch::Tensor query_key_product(const torch::Tensor& q, const torch::Tensor& k) {
  if (!single_query(q, k, 3)) return torch::matmul(q, k.transpose(-1, -2));
  const auto qc = q.contiguous();
  const int64_t stride = uniform_group_stride(k);
  const auto kc = stride > 0 ? k : k.contiguous();
  const int64_t B = q.size(0), H = q.size(1), T = k.size(2), d = k.size(3);
  auto scores = torch::empty({B, H, 1, T}, qc.options());
  kernels::query_key_scores(qc.data_ptr<float>(), kc.data_ptr<float>(), stride > 0 ? stride : T * d, B * H, T, d,
                            scores.data_ptr<float>(), at::get_num_threads());
  return scores;
}

torch::Tensor weights_value_product(const torch::Tensor& p, const torch::Tensor& v) {
  if (!single_query(p, v, 2)) return torch::matmul(p, v);
  const auto pc = p.contiguous();
  const int64_t stride = uniform_group_stride(v);
  const auto vc = stride > 0 ? v : v.contiguous();
  const int64_t B = p.size(0), H = p.size(1), T = v.size(2), d = v.size(3);
  auto out = torch::empty({B, H, 1, d}, pc.options());
  kernels::weighted_value_sum(pc.data_ptr<float>(), vc.data_ptr<float>(), stride > 0 ? stride : T * d, B * H, T, d,
                              out.data_ptr<float>(), at::get_num_threads());
  return out;
}

torch::Tensor softmax_last_dim(const torch::Tensor& scores) {
  const bool kernel = scores.dim() == 4 && scores.size(2) == 1 && scores.size(3) > 0 &&
                      is_cpu_inference_float(scores) && kernels::use_cpu_kernels();
  if (!kernel) return torch::softmax(scores, -1);
  auto probs = scores.clone(at::MemoryFormat::Contiguous);
  kernels::softmax_rows(probs.data_ptr<float>(), probs.numel() / probs.size(3), probs.size(3));
  return probs;
}

}  // namespace srformer
