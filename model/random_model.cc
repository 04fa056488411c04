#include "model/random_model.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "model/io/atomic_file.h"
#include "model/io/safetensors.h"

namespace srformer {

namespace {

class Writer {
 public:
  // `hf`: Hugging Face's initialisation (zero biases, the RAF parameters' configured initial values);
  // otherwise every tensor is random, so that tests exercise biases and RAF parameters too.
  Writer(uint64_t seed, double std, bool hf) : gen_(at::detail::createCPUGenerator(seed)), std_(std), hf_(hf) {}
  bool hf() const { return hf_; }
  // With a fixed std, every matrix uses it; otherwise (Hugging Face's schemes) `hf_std`.
  void normal(const std::string& name, std::vector<int64_t> shape, double hf_std = 0.0) {
    const double std = std_ > 0 || hf_std <= 0 ? std_ : hf_std;
    out.emplace_back(name, torch::empty(shape).normal_(0.0, std, gen_));
  }
  void fill(const std::string& name, std::vector<int64_t> shape, double v) {
    out.emplace_back(name, torch::full(shape, v));
  }
  void uniform(const std::string& name, std::vector<int64_t> shape, double lo, double hi) {
    out.emplace_back(name, torch::empty(shape).uniform_(lo, hi, gen_));
  }
  void bias(const std::string& name, std::vector<int64_t> shape) {
    if (hf_) {
      fill(name, std::move(shape), 0.0);
    } else {
      normal(name, std::move(shape));
    }
  }
  std::vector<std::pair<std::string, torch::Tensor>> out;

 private:
  at::Generator gen_;
  double std_;
  bool hf_;
};

void raf(Writer& w, const std::string& prefix, int64_t d, const SrformerConfig& s) {
  // SNN_kv is an nn.Linear: PyTorch's default U(-1/sqrt(in), 1/sqrt(in)), times the configured scale.
  const double bound = (w.hf() ? s.raf_init_weight_scale : 1.0) / std::sqrt(static_cast<double>(d));
  w.uniform(prefix + "SNN_kv.weight", {d, d}, -bound, bound);
  if (w.hf()) {  // the authors' initial values (threshold 0.1; leak 0.1 for T5, 0.5 for BART)
    w.fill(prefix + "threshold", {1}, s.raf_init_threshold);
    w.fill(prefix + "leak", {1}, s.raf_init_leak);
  } else {
    w.uniform(prefix + "threshold", {1}, 0.1, 0.2);
    w.uniform(prefix + "leak", {1}, 0.4, 0.9);
  }
}

void bart(Writer& w, const ModelConfig& c) {
  const int64_t D = c.d_model;
  const int64_t I = c.inner_dim();
  w.normal("model.shared.weight", {c.vocab_size, D});
  if (w.hf() && c.pad_token_id >= 0 && c.pad_token_id < c.vocab_size) {
    w.out.back().second[c.pad_token_id].zero_();  // nn.Embedding(padding_idx=pad): its row starts at 0
  }
  w.bias("final_logits_bias", {1, c.vocab_size});  // a zero buffer in Hugging Face
  for (const std::string s : {"encoder", "decoder"}) {
    w.normal("model." + s + ".embed_positions.weight", {c.max_position_embeddings + 2, D});
    w.fill("model." + s + ".layernorm_embedding.weight", {D}, 1.0);
    w.fill("model." + s + ".layernorm_embedding.bias", {D}, 0.0);
    const int64_t layers = s == "encoder" ? c.encoder_layers : c.decoder_layers;
    for (int64_t i = 0; i < layers; ++i) {
      const auto p = "model." + s + ".layers." + std::to_string(i) + ".";
      std::vector<std::string> attns{"self_attn"};
      if (s == "decoder") attns.emplace_back("encoder_attn");
      for (const auto& a : attns) {
        for (const std::string proj : {"q_proj", "k_proj", "v_proj"}) {
          w.normal(p + a + "." + proj + ".weight", {I, D});
          w.bias(p + a + "." + proj + ".bias", {I});
        }
        w.normal(p + a + ".out_proj.weight", {D, I});
        w.bias(p + a + ".out_proj.bias", {D});
        w.fill(p + a + "_layer_norm.weight", {D}, 1.0);
        w.fill(p + a + "_layer_norm.bias", {D}, 0.0);
      }
      if (s == "decoder" && c.srformer.uses_raf()) raf(w, p + "encoder_attn.", c.head_dim, c.srformer);
      w.normal(p + "fc1.weight", {c.d_ff, D});
      w.bias(p + "fc1.bias", {c.d_ff});
      w.normal(p + "fc2.weight", {D, c.d_ff});
      w.bias(p + "fc2.bias", {D});
      w.fill(p + "final_layer_norm.weight", {D}, 1.0);
      w.fill(p + "final_layer_norm.bias", {D}, 0.0);
    }
  }
}

void t5(Writer& w, const ModelConfig& c) {
  const int64_t D = c.d_model;
  const int64_t I = c.inner_dim();
  // Hugging Face's T5PreTrainedModel._init_weights (factor 1) when no fixed std is given.
  const auto inv_sqrt = [](int64_t n) { return 1.0 / std::sqrt(static_cast<double>(n)); };
  w.normal("shared.weight", {c.vocab_size, D}, 1.0);
  if (!c.tie_word_embeddings) w.normal("lm_head.weight", {c.vocab_size, D}, 1.0);
  for (const std::string s : {"encoder", "decoder"}) {
    const int64_t layers = s == "encoder" ? c.encoder_layers : c.decoder_layers;
    for (int64_t i = 0; i < layers; ++i) {
      const auto p = s + ".block." + std::to_string(i) + ".layer.";
      std::vector<std::string> attns{"0.SelfAttention"};
      if (s == "decoder") attns.emplace_back("1.EncDecAttention");
      for (const auto& a : attns) {
        w.normal(p + a + ".q.weight", {I, D}, inv_sqrt(D * c.head_dim));
        w.normal(p + a + ".k.weight", {I, D}, inv_sqrt(D));
        w.normal(p + a + ".v.weight", {I, D}, inv_sqrt(D));
        w.normal(p + a + ".o.weight", {D, I}, inv_sqrt(I));
        w.fill(p + a.substr(0, 1) + ".layer_norm.weight", {D}, 1.0);
      }
      if (i == 0) {
        w.normal(p + "0.SelfAttention.relative_attention_bias.weight", {c.relative_attention_num_buckets, c.num_heads},
                 inv_sqrt(D));
      }
      if (s == "decoder" && c.srformer.uses_raf()) raf(w, p + "1.EncDecAttention.", c.head_dim, c.srformer);
      const auto f = p + (s == "decoder" ? "2" : "1");
      if (c.gated_ffn) {
        w.normal(f + ".DenseReluDense.wi_0.weight", {c.d_ff, D}, inv_sqrt(D));
        w.normal(f + ".DenseReluDense.wi_1.weight", {c.d_ff, D}, inv_sqrt(D));
      } else {
        w.normal(f + ".DenseReluDense.wi.weight", {c.d_ff, D}, inv_sqrt(D));
      }
      w.normal(f + ".DenseReluDense.wo.weight", {D, c.d_ff}, inv_sqrt(c.d_ff));
      w.fill(f + ".layer_norm.weight", {D}, 1.0);
    }
    w.fill(s + ".final_layer_norm.weight", {D}, 1.0);
  }
}

}  // namespace

void write_random_model(const std::filesystem::path& dir, const ModelConfig& config, uint64_t seed, double std) {
  std::filesystem::create_directories(dir);
  // BART's Hugging Face scheme is one std (init_std 0.02) for every matrix.
  Writer w(seed, std > 0 || config.arch == Architecture::kT5 ? std : 0.02, std <= 0);
  if (config.arch == Architecture::kBart) {
    bart(w, config);
  } else {
    t5(w, config);
  }
  save_safetensors(dir / "model.safetensors", w.out);
  // A failed write throws, naming the file and why: it went unchecked, and a full disk left an empty or cut
  // config.json beside the weights while `srformer init-model` said "wrote".
  write_file_atomically(dir / "config.json", config.to_json().dump(2) + "\n");
}

ModelConfig tiny_config(Architecture arch, CrossAttentionKind kind, int64_t segment_size, int64_t vocab_size) {
  ModelConfig c;
  c.arch = arch;
  c.vocab_size = vocab_size;
  c.d_model = 32;
  c.num_heads = 4;
  c.head_dim = 8;
  c.d_ff = 64;
  c.encoder_layers = 2;
  c.decoder_layers = 2;
  if (arch == Architecture::kBart) {
    c.pad_token_id = 1;
    c.eos_token_id = 2;
    c.bos_token_id = 0;
    c.decoder_start_token_id = 2;
    c.max_position_embeddings = 256;
    c.activation = "gelu";
    c.layer_norm_eps = 1e-5;
    c.srformer.kv_clamp = 2.0;
    c.srformer.raf_init_leak = 0.5;
  } else {
    c.pad_token_id = 0;
    c.eos_token_id = 1;
    c.decoder_start_token_id = 0;
    c.activation = "relu";
    c.layer_norm_eps = 1e-6;
    c.srformer.raf_init_leak = 0.1;
  }
  c.srformer.cross_attention = kind;
  c.srformer.segment_size = kind == CrossAttentionKind::kFull ? 0 : segment_size;
  return c;
}

ModelConfig bart_base_config(CrossAttentionKind kind, int64_t segment_size) {
  auto c = tiny_config(Architecture::kBart, kind, segment_size, 50265);
  c.d_model = 768;
  c.num_heads = 12;
  c.head_dim = 64;
  c.d_ff = 3072;
  c.encoder_layers = 6;
  c.decoder_layers = 6;
  c.max_position_embeddings = 1024;
  return c;
}

ModelConfig t5_small_config(CrossAttentionKind kind, int64_t segment_size) {
  auto c = tiny_config(Architecture::kT5, kind, segment_size, 32128);
  c.d_model = 512;
  c.num_heads = 8;
  c.head_dim = 64;
  c.d_ff = 2048;
  c.encoder_layers = 6;
  c.decoder_layers = 6;
  return c;
}

}  // namespace srformer
