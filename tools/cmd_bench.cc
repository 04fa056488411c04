// `srformer bench`: model-level figures on random weights in BART-base and T5-small shapes,
// printed side by side in one run (figures, never assertions: machines are shared and noisy).
#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "model/attention/cross_attention.h"
#include "model/attention/segments.h"
#include "model/dtype_name.h"
#include "model/generation/generate.h"
#include "model/generation/searcher.h"
#include "model/io/atomic_file.h"
#include "model/kernels/avx2.h"
#include "model/kernels/bf16_linear.h"
#include "model/kernels/serial_region.h"
#include "model/layers.h"
#include "model/openmp_env.h"
#include "model/random_model.h"
#include "model/seq2seq.h"
#include "model/usable_cpus.h"
#include "tools/arg_reader.h"
#include "tools/device_flag.h"

namespace srformer::tools {

namespace {

using Clock = std::chrono::steady_clock;

struct BenchOptions {
  bool json = false;
  int threads = 0;
  int64_t steps = 16;
  std::vector<int64_t> batches{1, 8, 32};
  std::vector<int64_t> cross_lengths{1024, 4096, 16384};
  std::vector<int64_t> long_lengths{4096, 8192};  // T5 documents encoded with the server's pauses
  int64_t segment_size = 64;
  int64_t input_tokens = 1024;  // k of the decode figures
  bool quick = false;
  std::string model;                        // empty: all three decode models
  std::string trace;                        // chrome://tracing file of the timed decode steps (LibTorch's profiler)
  std::vector<bool> kernel_settings{true};  // decode steps with our CPU kernels on and/or off
  std::vector<torch::ScalarType> dtypes{torch::kFloat32};  // decode models loaded as fp32, fp16 and/or bf16
  torch::Device device = torch::kCPU;                      // where the decode models run
  std::filesystem::path cache;                             // TMPDIR/srformer-bench-models
  std::vector<std::string> search_cases;                   // --only search's cases by label (empty: all)
  std::vector<std::filesystem::path> generate_models;      // --only generate's model directories
};

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// The CPU time of every thread of the process so far: on a machine shared with other work a call's wall
// time includes the time it waited for a core.
double process_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return 1e3 * static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_nsec);
}

// A CUDA device runs what it was given after the call returns: wait for it before reading the clock.
void finish_work(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

void emit(const BenchOptions& o, const nlohmann::json& j, const std::string& human) {
  if (o.json) {
    std::cout << j.dump() << std::endl;
  } else {
    std::cout << human << std::endl;
  }
}

// A LibTorch profiler trace (chrome://tracing) of what runs between its start and finish(), written to
// `path` through an AtomicFile: a --trace PREFIX that cannot be written is an error naming the file and why
// (RecordProfile's own file logged "Could not open file" with a stack trace, no path or reason, and the
// bench exited 0 without its traces), and a trace is whole or absent.
class Trace {
 public:
  explicit Trace(const std::string& path) : file_(path) { profile_.emplace(text_); }
  void finish() {
    profile_.reset();  // writes the trace's text
    const auto text = text_.str();
    file_.write(text.data(), text.size());
    file_.commit();
  }

 private:
  AtomicFile file_;
  std::ostringstream text_;
  std::optional<torch::autograd::profiler::RecordProfile> profile_;
};

// The cached model's config.json as written, or null when there is none or it does not parse.
nlohmann::json cached_config(const std::filesystem::path& dir) {
  std::ifstream in(dir / "config.json");
  if (!in) return nullptr;
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

// The cache is shared by every checkout on the machine (and kept across versions): a directory whose
// config.json is not this version's NAME (another shape or variant, or one cut short) is written again,
// not benchmarked under NAME's label.
std::filesystem::path ensure_model(const BenchOptions& o, const std::string& name, const ModelConfig& c) {
  const auto dir = o.cache / name;
  if (!std::filesystem::exists(dir / "model.safetensors")) {
    std::cerr << "writing random " << name << " weights to " << dir << " (once)\n";
    write_random_model(dir, c, 1234, 0.02);
  } else if (cached_config(dir) != c.to_json()) {
    std::cerr << "writing random " << name << " weights to " << dir
              << " again: the config.json there describes another model\n";
    write_random_model(dir, c, 1234, 0.02);
  }
  return dir;
}

// The part of a --trace file's name that tells runs apart which would otherwise write the same file:
// the dtype under --dtype with several, the kernels under --kernels both (one run each wrote over the other's).
std::string trace_setting(const BenchOptions& o, std::optional<torch::ScalarType> dtype, std::optional<bool> kernels) {
  std::string s;
  if (dtype && o.dtypes.size() > 1) s += "." + dtype_name(*dtype);
  if (kernels && o.kernel_settings.size() > 1) s += *kernels ? ".kernels-on" : ".kernels-off";
  return s;
}

void bench_model_as(const BenchOptions& o, const std::string& name, const ModelConfig& c, int64_t k,
                    torch::ScalarType dtype) {
  LoadOptions lo;
  lo.dtype = dtype;
  lo.device = o.device;
  auto model = load_model(ensure_model(o, name, c), lo);
  const auto dtype_label = dtype_name(dtype);
  const auto device_label = o.device.str();
  torch::NoGradGuard no_grad;
  for (const int64_t B : o.batches) {
    const auto ids = torch::randint(3, c.vocab_size, {B, k}, torch::kLong);
    const auto mask = torch::ones({B, k}, torch::kLong);
    // The best of three after one untimed encode: the first pays for page faults and thread start-up.
    auto enc = model->encode(ids, mask);
    std::optional<Trace> encode_profile;
    if (!o.trace.empty()) {
      encode_profile.emplace(o.trace + "." + name + ".b" + std::to_string(B) + trace_setting(o, dtype, {}) +
                             ".encode.json");
    }
    double enc_ms = std::numeric_limits<double>::infinity();
    for (int rep = 0; rep < 3; ++rep) {
      const auto t0 = Clock::now();
      enc = model->encode(ids, mask);
      finish_work(o.device);
      enc_ms = std::min(enc_ms, ms_since(t0));
    }
    if (encode_profile) encode_profile->finish();
    for (const bool kernels_on : o.kernel_settings) {
      kernels::set_cpu_kernels(kernels_on);
      std::optional<Trace> start_profile;
      const std::string trace_name =
          o.trace + "." + name + ".b" + std::to_string(B) + trace_setting(o, dtype, kernels_on);
      if (!o.trace.empty()) start_profile.emplace(trace_name + ".start.json");
      auto t0 = Clock::now();
      auto st = model->start(enc, torch::full({B}, 128, torch::kLong));
      finish_work(o.device);
      const double start_ms = ms_since(t0);
      if (start_profile) start_profile->finish();
      auto tok = torch::full({B}, c.decoder_start_token_id, torch::kLong);
      tok = model->step(st, tok).argmax(-1);  // warm-up
      finish_work(o.device);
      std::optional<Trace> profile;
      if (!o.trace.empty()) profile.emplace(trace_name + ".json");
      t0 = Clock::now();
      for (int64_t s = 0; s < o.steps; ++s) tok = model->step(st, tok).argmax(-1);
      finish_work(o.device);
      const double step_ms = ms_since(t0) / static_cast<double>(o.steps);
      if (profile) profile->finish();
      const double tps = 1000.0 * static_cast<double>(B) / step_ms;
      const bool used = kernels_on && kernels::avx2_fma_available() && o.device.is_cpu();
      nlohmann::json j{{"bench", "decode"},
                       {"model", name},
                       {"cross_attention", to_string(c.srformer.cross_attention)},
                       {"input_tokens", k},
                       {"batch", B},
                       {"steps", o.steps},
                       {"dtype", dtype_label},
                       {"device", device_label},
                       {"cpu_kernels", used},
                       {"encode_ms", enc_ms},
                       {"start_ms", start_ms},
                       {"step_ms", step_ms},
                       {"tokens_per_s", tps},
                       {"state_bytes_per_request", st.bytes() / B}};
      std::ostringstream h;
      h << std::fixed << std::setprecision(2) << std::left << std::setw(26) << name << " k=" << std::setw(6) << k
        << " batch=" << std::setw(3) << B << " " << device_label << " " << dtype_label << " kernels " << std::setw(4)
        << (used ? "on" : "off") << " encode " << std::setw(9) << enc_ms << " ms  start " << std::setw(8) << start_ms
        << " ms  step " << std::setw(8) << step_ms << " ms  " << std::setw(8) << tps << " tok/s  state/request "
        << (st.bytes() / B) / 1024 << " KiB";
      emit(o, j, h.str());
    }
    kernels::set_cpu_kernels(true);
  }
}

void bench_model(const BenchOptions& o, const std::string& name, const ModelConfig& c, int64_t k) {
  if (!o.model.empty() && o.model != name) return;
  for (const auto dtype : o.dtypes) bench_model_as(o, name, c, k, dtype);
}

CrossAttention random_cross(CrossAttentionKind kind, int64_t D, int64_t H, int64_t d, int64_t s) {
  CrossAttention a;
  auto lin = [&](int64_t out, int64_t in) {
    Linear l;
    l.weight = torch::randn({out, in}) * 0.02;
    return l;
  };
  a.q = lin(H * d, D);
  a.k = lin(H * d, D);
  a.v = lin(H * d, D);
  a.o = lin(D, H * d);
  a.heads = H;
  a.head_dim = d;
  a.kind = kind;
  a.segment_size = kind == CrossAttentionKind::kFull ? 0 : s;
  a.raf = {torch::randn({d, d}) * 0.1, torch::full({1}, 0.1), torch::full({1}, 0.5)};
  return a;
}

// Per-step cross-attention time of one layer (T5-small shape) as k grows; RAF steps at the
// schedule's rate (one segment switch every L/m steps, L = 128). Median of 9 whole schedules.
// SRformer runs twice: switch drives precomputed when the row starts (the default) and computed at
// each switch; the row's layer state and the start-up (prepare) time of each are reported beside.
void bench_cross(const BenchOptions& o) {
  const int64_t D = 512, H = 8, d = 64, s = o.segment_size, L = 128, q = 128;
  struct Variant {
    const char* name;
    CrossAttentionKind kind;
    bool precompute;
  };
  const Variant variants[] = {{"full", CrossAttentionKind::kFull, false},
                              {"segmented", CrossAttentionKind::kSegmented, false},
                              {"srformer", CrossAttentionKind::kSrformer, true},
                              {"srformer_on_switch", CrossAttentionKind::kSrformer, false}};
  for (const bool kernels_on : o.kernel_settings) {
    kernels::set_cpu_kernels(kernels_on);
    for (const int64_t k : o.cross_lengths) {
      const auto enc = torch::randn({1, k, D});
      const auto mask = torch::ones({1, k}, torch::kBool);
      const auto enc_len = torch::full({1}, k, torch::kLong);
      const auto m = num_segments(enc_len, s);
      const auto expected = torch::full({1}, L, torch::kLong);
      const bool used = kernels_on && kernels::avx2_fma_available();
      nlohmann::json row{{"bench", "cross_attention_step"}, {"k", k}, {"segment_size", s}, {"cpu_kernels", used}};
      std::ostringstream h;
      h << std::fixed << std::setprecision(3) << "cross-attention step (T5-small layer, kernels "
        << (used ? "on" : "off") << ") k=" << std::setw(6) << k;
      struct Run {
        const Variant* variant;
        CrossAttention attention;
        LayerState state;
        std::vector<double> round_us;
      };
      std::vector<Run> runs;
      torch::NoGradGuard no_grad;
      for (const auto& v : variants) {
        Run run{&v, random_cross(v.kind, D, H, d, s), {}, {}};
        run.attention.precompute_switches = v.precompute;
        const auto segments = v.kind == CrossAttentionKind::kFull ? torch::ones({1}, torch::kLong) : m;
        run.attention.prepare(enc, mask, segments, run.state, expected);  // warm-up: first calls pay set-up
        const auto t_prepare = Clock::now();
        run.attention.prepare(enc, mask, segments, run.state, expected);
        row[std::string(v.name) + "_prepare_ms"] = ms_since(t_prepare);
        int64_t state_bytes = 0;
        const auto& ls = run.state;
        for (const auto* t : {&ls.cross_k, &ls.cross_v, &ls.kv, &ls.knorm, &ls.mem, &ls.recur, &ls.switch_drive}) {
          if (t->defined()) state_bytes += static_cast<int64_t>(t->numel() * t->element_size());
        }
        row[std::string(v.name) + "_state_bytes"] = state_bytes;
        runs.push_back(std::move(run));
      }
      const auto x = torch::randn({1, 1, D});
      // Whole schedules of L steps (the switch rate depends on t). The variants take turns round by
      // round, so that the machine's slow spells (single rounds vary by 2x here) hit all of them, and
      // each reports its median round.
      const int64_t steps = o.quick ? 16 : L;
      const int rounds = o.quick ? 1 : 9;
      std::optional<Trace> profile;
      if (!o.trace.empty()) {
        profile.emplace(o.trace + ".cross.k" + std::to_string(k) + trace_setting(o, {}, kernels_on) + ".json");
      }
      for (int round = 0; round < rounds; ++round) {
        for (auto& run : runs) {
          auto prev = torch::full({1}, -1, torch::kLong);
          auto switches = torch::zeros({1}, torch::kLong);
          const auto t0 = Clock::now();
          for (int64_t t = 0; t < steps; ++t) {
            const auto seg = segment_schedule(torch::full({1}, t, torch::kLong), m, expected);
            const auto changed = seg.ne(prev);
            (void)run.attention.step(x, run.state, mask, enc_len, m, seg, changed.nonzero().view(-1), switches,
                                     nullptr);
            switches = switches + changed.to(torch::kLong);
            prev = seg;
          }
          run.round_us.push_back(1000.0 * ms_since(t0) / static_cast<double>(steps));
        }
      }
      if (profile) profile->finish();
      for (auto& run : runs) {
        std::sort(run.round_us.begin(), run.round_us.end());
        const double us = run.round_us[run.round_us.size() / 2];
        const std::string name = run.variant->name;
        row[name + "_us"] = us;
        // In KiB, as the decode figures' state: whole MiB printed a state under 1 MiB (each variant's but
        // srformer's at k = 128) as 0.
        h << "  " << name << " " << std::setw(9) << us << " us (state "
          << row[name + "_state_bytes"].get<int64_t>() / 1024 << " KiB)";
      }
      // Paper Table 1 (per head, q queries): full qkd, segmented qsd, SRformer qsd + kd^2.
      const double full = static_cast<double>(q * k * d);
      const double seg = static_cast<double>(q * s * d);
      const double sr = seg + static_cast<double>(k * d * d);
      row["table1_madds_full"] = full;
      row["table1_madds_segmented"] = seg;
      row["table1_madds_srformer"] = sr;
      row["table1_ratio_srformer_over_full"] = sr / full;
      row["measured_ratio_srformer_over_full"] = row["srformer_us"].get<double>() / row["full_us"].get<double>();
      h << "  | srformer/full measured " << row["measured_ratio_srformer_over_full"].get<double>()
        << " vs Table 1 (q=128, incl. K^T V) " << sr / full;
      emit(o, row, h.str());
    }
  }
  kernels::set_cpu_kernels(true);
}

// The projections of a decode step: LibTorch's linear (OpenBLAS sgemm; matrix-vector for one row)
// against srformer::linear (the weight-streaming kernel for few rows), side by side per shape and row count.
void bench_linear(const BenchOptions& o) {
  struct Shape {
    const char* name;
    int64_t out, in;
  };
  const Shape shapes[] = {{"bart-base q/k/v/o", 768, 768},
                          {"bart-base fc1", 3072, 768},
                          {"bart-base fc2", 768, 3072},
                          {"bart-base lm_head", 50265, 768}};
  torch::NoGradGuard no_grad;
  for (const auto& sh : shapes) {
    const auto w = torch::randn({sh.out, sh.in}) * 0.02;
    const auto bias = torch::randn({sh.out}) * 0.02;
    Linear bf16;  // the same weights in bfloat16 (AMX or AVX512-BF16), where the CPU has either
    bf16.weight = w;
    bf16.bias = bias;
    if (kernels::cpu_bf16_available()) bf16.pack_bf16();
    Linear packed;  // the same weights in fp32 panels (kernels/fp32_packed_linear.h), where the CPU has AVX2
    packed.weight = w;
    packed.bias = bias;
    packed.pack_fp32();
    for (const int64_t rows : {1, 2, 4, 8, 16, 32, 64, 512, 2048}) {
      const auto x = torch::randn({rows, 1, sh.in});
      const int reps = o.quick ? 3 : (sh.out > 10000 ? 10 : 50);
      auto time_ms = [&](auto&& f) {
        (void)f();  // warm-up
        const auto t0 = Clock::now();
        for (int i = 0; i < reps; ++i) (void)f();
        return ms_since(t0) / reps;
      };
      const double torch_ms = time_ms([&] { return torch::linear(x, w, bias); });
      const double ours_ms = time_ms([&] { return srformer::linear(x, w, bias); });
      const auto reference = torch::linear(x, w, bias);
      const double diff = (reference - srformer::linear(x, w, bias)).abs().max().item<double>();
      const double gb = static_cast<double>(w.numel() * 4) / 1e9;
      nlohmann::json j{{"bench", "linear"}, {"shape", sh.name},     {"out", sh.out},          {"in", sh.in},
                       {"rows", rows},      {"torch_ms", torch_ms}, {"srformer_ms", ours_ms}, {"max_abs_diff", diff}};
      std::ostringstream h;
      h << std::fixed << std::setprecision(3) << std::left << std::setw(20) << sh.name << " rows=" << std::setw(3)
        << rows << " torch::linear " << std::setw(8) << torch_ms << " ms  srformer::linear " << std::setw(8) << ours_ms
        << " ms  speed-up " << std::setw(6) << torch_ms / ours_ms << " weights at " << std::setprecision(1)
        << gb / (ours_ms / 1000.0) << " GB/s  max |diff| " << std::scientific << std::setprecision(1) << diff;
      const double flop = 2.0 * static_cast<double>(rows * sh.out * sh.in);
      j["srformer_gflops"] = 1e-6 * flop / ours_ms;
      if (packed.packed_fp32) {
        const double packed_ms = time_ms([&] { return packed(x); });
        const double packed_diff = (reference - packed(x)).abs().max().item<double>();
        j["packed_ms"] = packed_ms;
        j["packed_max_abs_diff"] = packed_diff;
        j["packed_gflops"] = 1e-6 * flop / packed_ms;
        h << std::fixed << std::setprecision(3) << "  packed " << packed_ms << " ms, " << std::setprecision(2)
          << ours_ms / packed_ms << "x (" << std::setprecision(0) << j["packed_gflops"].get<double>()
          << " GFLOP/s), max |diff| " << std::scientific << std::setprecision(1) << packed_diff;
      }
      if (bf16.packed) {
        const double bf16_ms = time_ms([&] { return bf16(x); });
        const double bf16_diff = (reference - bf16(x)).abs().max().item<double>();
        j["bf16_backend"] = kernels::cpu_bf16_backend();
        j["bf16_ms"] = bf16_ms;
        j["bf16_max_abs_diff"] = bf16_diff;
        j["bf16_gflops"] = 1e-6 * flop / bf16_ms;
        h << std::fixed << std::setprecision(3) << "  bf16 (" << kernels::cpu_bf16_backend() << ") " << bf16_ms
          << " ms, " << std::setprecision(2) << ours_ms / bf16_ms << "x fp32 (" << std::setprecision(0)
          << j["srformer_gflops"].get<double>() << " -> " << j["bf16_gflops"].get<double>() << " GFLOP/s), max |diff| "
          << std::scientific << std::setprecision(1) << bf16_diff;
      }
      emit(o, j, h.str());
    }
  }
}

// The engine's per-request work after a decode step, per row: a greedy decision (processors,
// argmax, log-prob) with and without a no-repeat-ngram rule, with a tokenizer of 4,000 pieces (the
// serving benchmarks' models: the rest of the embedding rows are excluded), a 4-beam step with and
// without n-gram bans, a sample with the usual warpers, four samples, and a 4-beam sampling step.
void bench_search(const BenchOptions& o) {
  struct Case {
    std::string label;
    int64_t beams = 1, ngram = 0, limit = 0, samples = 0, top_k = 0;
    double top_p = 1.0;
    int64_t bias = 0;  // sequence_bias pairs
  };
  const std::vector<Case> cases{{"greedy"},
                                {"greedy+ngram3", 1, 3},
                                {"greedy+vocab4k", 1, 0, 4000},
                                {"beam4", 4},
                                {"beam4+ngram3", 4, 3},
                                {"sample", 1, 0, 0, 1},
                                {"sample+topk50", 1, 0, 0, 1, 50},
                                {"sample+topp0.9", 1, 0, 0, 1, 0, 0.9},
                                {"sample4+topk50", 1, 0, 0, 4, 50},
                                {"beam4+sample", 4, 0, 0, 1},
                                {"beam4+sample+k50", 4, 0, 0, 1, 50},
                                {"greedy+bias64", 1, 0, 0, 0, 0, 1.0, 64},
                                {"beam4+bias64", 4, 0, 0, 0, 0, 1.0, 64}};
  for (const int64_t vocab : {32128, 50265}) {
    for (const auto& c : cases) {
      if (!o.search_cases.empty() &&
          std::find(o.search_cases.begin(), o.search_cases.end(), c.label) == o.search_cases.end()) {
        continue;
      }
      GenerationOptions g;
      g.max_new_tokens = kMaxNewTokensLimit;
      g.num_beams = c.beams;
      g.no_repeat_ngram_size = c.ngram;
      g.vocab_limit = c.limit;
      g.do_sample = c.samples > 0;
      g.num_return_sequences = std::max<int64_t>(c.samples, 1);
      g.top_k = c.top_k;
      g.top_p = c.top_p;
      g.seed = 1;
      g.min_new_tokens = kMaxNewTokensLimit;  // never finishes early
      // A checkpoint's sequence_bias: sequences of one to three tokens (a longer one biases where the
      // history ends with the rest of it), the last repeating the first.
      for (int64_t i = 0; i < c.bias; ++i) {
        std::vector<int64_t> sequence;
        for (int64_t k = 0; k <= i % 3; ++k) sequence.push_back(1 + (i * 7919 + k * 104729) % 30000);
        g.sequence_bias.emplace_back(i + 1 == c.bias ? g.sequence_bias.front().first : sequence,
                                     (i % 2 ? -1.0 : 1.0) * static_cast<double>(1 + i % 5));
      }
      auto searcher = make_searcher(g);
      const int64_t rows = searcher->num_rows();
      const int64_t steps = o.quick ? 32 : 1024;
      std::vector<torch::Tensor> logits;
      for (int i = 0; i < 8; ++i) logits.push_back(torch::randn({rows, vocab}) * 3.0);
      const kernels::SerialRegion serial;  // as the engine and generate() run it
      for (int64_t s = 0; s < 16; ++s) (void)searcher->advance(logits[static_cast<size_t>(s % 8)]);  // warm-up
      const auto t0 = Clock::now();
      const double cpu0 = process_cpu_ms();
      for (int64_t s = 0; s < steps; ++s) (void)searcher->advance(logits[static_cast<size_t>(s % 8)]);
      const double us = 1000.0 * ms_since(t0) / static_cast<double>(steps);
      const double cpu_us = 1000.0 * (process_cpu_ms() - cpu0) / static_cast<double>(steps);
      nlohmann::json j{{"bench", "search_step"},
                       {"vocab", vocab},
                       {"search", c.label},
                       {"us_per_request", us},
                       {"cpu_us_per_request", cpu_us}};
      std::ostringstream h;
      h << std::fixed << std::setprecision(1) << "search step " << std::left << std::setw(18) << c.label << " vocab "
        << std::setw(6) << vocab << " " << us << " us per request (CPU time " << cpu_us << " us)";
      emit(o, j, h.str());
    }
  }
}

// Whole generate() calls (encode, start, steps, searchers, state reordering) on a model directory, as
// `srformer summarize` runs them but with B documents of random ids at once: greedy and 4-beam search, the
// model's generation defaults otherwise (its n-gram bans among them), exactly --steps new tokens per row.
// Median of 3 timed calls after an untimed one.
void bench_generate(const BenchOptions& o) {
  for (const auto& dir : o.generate_models) {
    auto model = load_model(dir, {});
    const auto& c = model->config();
    for (const int64_t beams : {1, 4}) {
      const std::string search = beams == 1 ? "greedy" : "beam" + std::to_string(beams);
      if (!o.search_cases.empty() &&
          std::find(o.search_cases.begin(), o.search_cases.end(), search) == o.search_cases.end()) {
        continue;
      }
      for (const int64_t B : o.batches) {
        GenerationOptions g = model_generation_defaults(c);
        g.num_beams = beams;
        g.num_beam_groups = 1;  // plain beam search, whatever groups the checkpoint's beams have
        g.diversity_penalty = 0.0;
        g.num_return_sequences = 1;
        g.do_sample = false;
        g.max_new_tokens = g.min_new_tokens = o.steps;
        const auto ids = torch::randint(3, c.vocab_size, {B, o.input_tokens}, torch::kLong);
        const auto mask = torch::ones({B, o.input_tokens}, torch::kLong);
        (void)generate(*model, ids, mask, g);
        std::vector<double> runs_ms, runs_cpu_ms;
        for (int rep = 0; rep < 3; ++rep) {
          const auto t0 = Clock::now();
          const double cpu0 = process_cpu_ms();
          (void)generate(*model, ids, mask, g);
          runs_cpu_ms.push_back(process_cpu_ms() - cpu0);
          runs_ms.push_back(ms_since(t0));
        }
        std::sort(runs_ms.begin(), runs_ms.end());
        std::sort(runs_cpu_ms.begin(), runs_cpu_ms.end());
        const double ms = runs_ms[1], cpu_ms = runs_cpu_ms[1];
        nlohmann::json j{{"bench", "generate"},
                         {"model", dir.string()},
                         {"search", search},
                         {"batch", B},
                         {"input_tokens", o.input_tokens},
                         {"new_tokens", o.steps},
                         {"ms", ms},
                         {"cpu_ms", cpu_ms},
                         {"ms_per_step", ms / static_cast<double>(o.steps)}};
        std::ostringstream h;
        h << std::fixed << std::setprecision(2) << "generate " << dir.filename().string() << " " << std::left
          << std::setw(7) << search << " batch=" << std::setw(3) << B << " k=" << o.input_tokens << " " << o.steps
          << " new tokens: " << ms << " ms (" << ms / static_cast<double>(o.steps) << " ms per step), CPU time "
          << cpu_ms << " ms";
        emit(o, j, h.str());
      }
    }
  }
}

}  // namespace

std::vector<int64_t> int_list(const std::string& flag, const std::string& csv) {
  std::vector<int64_t> out;
  std::istringstream list(csv);
  for (std::string v; std::getline(list, v, ',');) {
    out.push_back(parse_integer(flag, v));
    if (out.back() < 1) throw std::invalid_argument(flag + " takes positive integers, got " + v);
  }
  if (out.empty()) throw std::invalid_argument(flag + " needs a comma-separated list of positive integers");
  return out;
}

// One encode() call over documents of mixed lengths, padded to the longest (which the CPU encodes in
// groups of similar length), against one call per document; and the same with documents of one length.
// Best of 3.
void bench_encode(const BenchOptions& o, const std::string& name, const ModelConfig& c) {
  if (!o.model.empty() && o.model != name) return;
  auto model = load_model(ensure_model(o, name, c), {});
  torch::NoGradGuard no_grad;
  const std::vector<int64_t> mixed{96, 160, 256, 384, 512, 640, 768, 1024};
  const std::vector<int64_t> equal(mixed.size(), 512);
  const auto best_of_3 = [](const auto& run) {
    run();  // page faults, thread start-up
    double best = std::numeric_limits<double>::infinity();
    for (int rep = 0; rep < 3; ++rep) {
      const auto t0 = Clock::now();
      run();
      best = std::min(best, ms_since(t0));
    }
    return best;
  };
  for (const auto& [label, lengths] : {std::pair{"mixed", mixed}, std::pair{"equal", equal}}) {
    const int64_t B = static_cast<int64_t>(lengths.size());
    const int64_t kmax = *std::max_element(lengths.begin(), lengths.end());
    const auto ids = torch::randint(3, c.vocab_size, {B, kmax}, torch::kLong);
    auto mask = torch::zeros({B, kmax}, torch::kLong);
    int64_t real = 0;
    for (int64_t i = 0; i < B; ++i) {
      mask[i].narrow(0, 0, lengths[i]).fill_(1);
      real += lengths[i];
    }
    const double one_call_ms = best_of_3([&] { (void)model->encode(ids, mask); });
    const double alone_ms = best_of_3([&] {
      for (int64_t i = 0; i < B; ++i) {
        (void)model->encode(ids[i].narrow(0, 0, lengths[i]).unsqueeze(0),
                            mask[i].narrow(0, 0, lengths[i]).unsqueeze(0));
      }
    });
    const double padding = 1.0 - static_cast<double>(real) / static_cast<double>(B * kmax);
    nlohmann::json j{{"bench", "encode"},
                     {"model", name},
                     {"lengths", label},
                     {"documents", B},
                     {"real_tokens", real},
                     {"padding", padding},
                     {"one_call_ms", one_call_ms},
                     {"one_by_one_ms", alone_ms},
                     {"ratio", one_call_ms / alone_ms}};
    std::ostringstream h;
    h << std::fixed << std::setprecision(1) << std::left << std::setw(26) << name << " " << B << " documents, " << label
      << " lengths (" << real << " tokens, " << 100.0 * padding << "% padding): one call " << one_call_ms
      << " ms, one call each " << alone_ms << " ms (" << std::setprecision(2) << one_call_ms / alone_ms << "x)";
    emit(o, j, h.str());
  }
}

// One long T5 document encoded as the server encodes it, a stop hook asked at every pause, by a model
// that runs the sublayers of such an input whole and by one that runs them in pieces (the default,
// LoadOptions::encode_piece_scores): the time, the pauses and the longest stretch without one, which is
// how long the server's running streams may wait on that encode; then the same of start() on its output
// (each decoder layer's cross keys and values, whole or by blocks of positions). Alternating, best of 2 each.
void bench_long_encode_as(const BenchOptions& o, const std::string& name, const ModelConfig& c, Seq2SeqModel& whole,
                          Seq2SeqModel& pieces) {
  c10::InferenceMode inference;  // as the server encodes
  for (auto* m : {&whole, &pieces}) (void)m->encode(torch::randint(3, c.vocab_size, {1, 512}), torch::ones({1, 512}));
  // One call given a stop hook that never stops: its time, its pauses and the longest stretch without one.
  struct Paused {
    double ms = std::numeric_limits<double>::infinity(), longest_ms = 0;
    int64_t pauses = 0;
  };
  const auto paused = [](const auto& call) {
    Paused r;
    const auto t0 = Clock::now();
    auto last = t0;
    call(EncodeStop([&] {
      r.longest_ms = std::max(r.longest_ms, ms_since(last));
      ++r.pauses;
      last = Clock::now();
      return false;
    }));
    r.longest_ms = std::max(r.longest_ms, ms_since(last));
    r.ms = ms_since(t0);
    return r;
  };
  // The encode, then start() on its output (each decoder layer's cross keys/values and switch table).
  struct Run {
    Paused encode, start;
  };
  for (const int64_t k : o.long_lengths) {
    const auto ids = torch::randint(3, c.vocab_size, {1, k}, torch::kLong);
    const auto mask = torch::ones({1, k}, torch::kLong);
    const auto expected = torch::full({1}, 128, torch::kLong);
    const auto time = [&](Seq2SeqModel& model, Run& best) {
      Run run;
      EncoderOutput enc;
      run.encode = paused([&](const EncodeStop& stop) { enc = model.encode(ids, mask, stop); });
      run.start = paused([&](const EncodeStop& stop) { (void)model.start(enc, expected, stop); });
      if (run.encode.ms < best.encode.ms) best = run;
    };
    Run w, p;
    for (int rep = 0; rep < 2; ++rep) {
      time(whole, w);
      time(pieces, p);
    }
    if (o.json) {
      for (const auto& [label, r] : {std::pair{"whole", w}, std::pair{"pieces", p}}) {
        std::cout << nlohmann::json{{"bench", "long_encode"},
                                    {"model", name},
                                    {"input_tokens", k},
                                    {"sublayers", label},
                                    {"ms", r.encode.ms},
                                    {"pauses", r.encode.pauses},
                                    {"longest_stretch_ms", r.encode.longest_ms},
                                    {"start_ms", r.start.ms},
                                    {"start_pauses", r.start.pauses},
                                    {"start_longest_stretch_ms", r.start.longest_ms},
                                    {"ratio_to_whole", r.encode.ms / w.encode.ms}}
                         .dump()
                  << std::endl;
      }
      continue;
    }
    std::ostringstream h;
    h << std::fixed << std::setprecision(1) << std::left << std::setw(26) << name << " one document of " << k
      << " tokens, paused as the server does: sublayers whole " << w.encode.ms << " ms, " << w.encode.pauses
      << " pauses, longest stretch " << w.encode.longest_ms << " ms | in pieces " << p.encode.ms << " ms ("
      << std::setprecision(3) << p.encode.ms / w.encode.ms << "x), " << p.encode.pauses << " pauses, longest stretch "
      << std::setprecision(1) << p.encode.longest_ms << " ms; then start() " << w.start.ms << " ms, " << w.start.pauses
      << " pauses, longest stretch " << w.start.longest_ms << " ms | " << p.start.ms << " ms, " << p.start.pauses
      << " pauses, longest stretch " << p.start.longest_ms << " ms";
    std::cout << h.str() << std::endl;
  }
}

void bench_long_encode(const BenchOptions& o, const std::string& name, const ModelConfig& c) {
  if (!o.model.empty() && o.model != name) return;
  const auto dir = ensure_model(o, name, c);
  for (const auto dtype : o.dtypes) {
    if (dtype == torch::kBFloat16 && !kernels::cpu_bf16_available()) continue;
    LoadOptions pieces_options;
    pieces_options.dtype = dtype;
    LoadOptions whole_options = pieces_options;
    whole_options.encode_piece_scores = whole_options.encode_piece_positions = std::numeric_limits<int64_t>::max();
    const auto whole = load_model(dir, whole_options);
    const auto pieces = load_model(dir, pieces_options);
    bench_long_encode_as(o, name + " " + dtype_name(dtype), c, *whole, *pieces);
  }
}

// The random models' cache under TMPDIR (else /tmp), or an error naming TMPDIR.
std::filesystem::path bench_cache() {
  std::error_code ec;
  const auto tmp = std::filesystem::temp_directory_path(ec);
  if (ec) {
    const char* tmpdir = std::getenv("TMPDIR");
    throw std::invalid_argument("the random models are cached under TMPDIR, and TMPDIR='" +
                                std::string(tmpdir ? tmpdir : "") + "' is not a directory (" + ec.message() + ")");
  }
  return tmp / "srformer-bench-models";
}

int run_bench(const std::vector<std::string>& args) {
  BenchOptions o;
  std::string only, dtype_flag;
  // Given flags win over --quick's settings whichever comes first.
  std::optional<int64_t> steps_flag;
  std::optional<std::vector<int64_t>> batch_flag;
  for (ArgReader r(args); r.next();) {
    const auto& a = r.arg();
    if (a == "--help" || a == "-h") {
      std::cout
          << "usage: srformer bench [--json] [--threads N] [--steps N] [--only "
             "decode|encode|cross|linear|search|generate] [--quick]\n"
             "                       [--batch N[,N...]] [--model bart-base-srformer-s64|bart-base-full|\n"
             "                        t5-small-srformer-s64] [--trace PREFIX] [--kernels on|off|both]\n"
             "                       [--lengths K[,K...]] [--input-tokens K] [--dtype fp32|bf16|both]\n"
             "                       [--long-lengths K[,K...]] [--device cpu|cuda[:N]] [--search CASE[,CASE...]]\n"
             "                       [--generate-model DIR[,DIR...]]\n"
             "  Random weights in BART-base and T5-small shapes (cached under TMPDIR, else /tmp). Prints\n"
             "  encoder time, decode step time and tokens/s at batch 1/8/32, per-step cross-attention time of full,\n"
             "  segmented and srformer as k grows (1k/4k/16k) beside the paper's Table 1 ratio, and the\n"
             "  bytes of per-request state; the decode step's projections through LibTorch and through\n"
             "  our few-rows kernel; one encoder call over 8 documents of mixed lengths padded to the\n"
             "  longest against one call each, and one long T5 document encoded with the server's pauses, its\n"
             "  sublayers whole and in pieces, then start() on it likewise (--only encode). --json: one JSON\n"
             "  object per measurement.\n"
             "  --trace PREFIX: LibTorch profiler trace of the timed decode steps,\n"
             "  PREFIX.<model>.b<batch>.json (chrome://tracing; with several --dtype or --kernels both,\n"
             "  .<dtype> and .kernels-on/off before .json), of start() and the encode likewise (.start.json,\n"
             "  .encode.json), and of the cross-attention steps (PREFIX.cross.k<k>.json). --kernels:\n"
             "  decode steps with our AVX2 CPU kernels (on, the default), through LibTorch only, or both.\n"
             "  --lengths: the input lengths of the cross-attention figures (default 1024,4096,16384).\n"
             "  --input-tokens: the input length of the decode figures (default 1024).\n"
             "  --long-lengths: the lengths of the long T5 documents (default 4096,8192).\n"
             "  --generate-model: --only generate times whole generate() calls on these model directories\n"
             "  (greedy and 4 beams, --batch documents of --input-tokens random ids, --steps new tokens each).\n"
             "  --search: only these cases of --only search or generate (their labels as printed, e.g. beam4,sample).\n"
             "  --dtype: decode models and long documents in fp32 (default), bf16 (projections in bfloat16 on "
             "AMX or AVX512-BF16)\n"
             "  or both. --only linear adds the packed fp32 product (AVX2/AVX-512) and the bf16 one (AMX or\n"
             "  AVX512-BF16) beside LibTorch's and the row-major kernel's where the CPU has them. Models load\n"
             "  with packed fp32 projections where the CPU has AVX2 unless SRFORMER_CPU_PACKED=0;\n"
             "  SRFORMER_CPU_AVX512=0 runs every kernel with AVX2 only.\n"
             "  --quick: fewer and shorter measurements, decode figures at batch 1,8 with 4 steps (--batch\n"
             "  and --steps still set those, before or after --quick).\n"
             "  --device cuda[:N]: the decode figures on that GPU (the other parts are the CPU's own), with\n"
             "  --dtype fp32, fp16, bf16 or a comma-separated list of them (default fp16).\n";
      return 0;
    }
    if (a == "--json") {
      o.json = true;
    } else if (a == "--threads") {
      o.threads = r.threads_value();
    } else if (a == "--steps") {
      steps_flag = r.int_value(1);
    } else if (a == "--only") {
      only = r.value();
      static const char* kParts[] = {"decode", "encode", "cross", "linear", "search", "generate"};
      if (std::find(std::begin(kParts), std::end(kParts), only) == std::end(kParts)) {
        throw std::invalid_argument("--only takes decode, encode, cross, linear, search or generate, got '" + only +
                                    "'");
      }
    } else if (a == "--quick") {
      o.quick = true;
    } else if (a == "--batch") {
      batch_flag = int_list(a, r.value());
    } else if (a == "--input-tokens") {
      o.input_tokens = r.int_value(1);
    } else if (a == "--lengths") {
      o.cross_lengths = int_list(a, r.value());
    } else if (a == "--long-lengths") {
      o.long_lengths = int_list(a, r.value());
    } else if (a == "--model") {
      o.model = r.value();
      static const char* kModels[] = {"bart-base-srformer-s64", "bart-base-full", "t5-small-srformer-s64"};
      if (std::find(std::begin(kModels), std::end(kModels), o.model) == std::end(kModels)) {
        throw std::invalid_argument(
            "--model takes bart-base-srformer-s64, bart-base-full or t5-small-srformer-s64, got '" + o.model + "'");
      }
    } else if (a == "--search") {
      std::istringstream names(r.value());
      for (std::string name; std::getline(names, name, ',');) o.search_cases.push_back(name);
    } else if (a == "--generate-model") {
      std::istringstream dirs(r.value());
      for (std::string dir; std::getline(dirs, dir, ',');) o.generate_models.emplace_back(dir);
    } else if (a == "--trace") {
      o.trace = r.value();
    } else if (a == "--kernels") {
      const auto v = r.value();
      if (v != "on" && v != "off" && v != "both") throw std::invalid_argument("--kernels takes on, off or both");
      o.kernel_settings = v == "both" ? std::vector<bool>{false, true} : std::vector<bool>{v == "on"};
    } else if (a == "--dtype") {
      const auto v = r.value();
      dtype_flag = v;
      if (v == "both") {
        o.dtypes = {torch::kFloat32, torch::kBFloat16};
      } else {
        o.dtypes.clear();
        std::istringstream names(v);
        for (std::string name; std::getline(names, name, ',');) {
          const auto t = float_dtype_from_name(name);
          if (!t)
            throw std::invalid_argument("--dtype takes fp32, fp16, bf16, a list of them or both, got '" + v + "'");
          o.dtypes.push_back(*t);
        }
      }
    } else if (a == "--device") {
      o.device = device_from_flag(r.value());
    } else {
      throw unknown_option(a);
    }
  }
  if (o.quick) {
    o.batches = {1, 8};
    o.steps = 4;
  }
  if (batch_flag) o.batches = *batch_flag;
  if (steps_flag) o.steps = *steps_flag;
  if (o.device.is_cuda()) {
    check_device_available(o.device);
    if (!only.empty() && only != "decode") {
      throw std::invalid_argument("--device " + o.device.str() + " times the decode figures only (--only decode)");
    }
    only = "decode";
    if (dtype_flag.empty()) o.dtypes = {torch::kFloat16};
  } else if (std::find(o.dtypes.begin(), o.dtypes.end(), torch::kFloat16) != o.dtypes.end()) {
    throw std::invalid_argument("--dtype fp16 is for --device cuda; on the CPU use fp32 or bf16");
  }
  o.cache = bench_cache();
  at::set_num_threads(o.threads > 0 ? o.threads : default_intra_op_threads());
  std::cerr << "intra-op threads: " << at::get_num_threads() << ", OpenMP wait policy: " << openmp_wait_policy()
            << "\n";
  torch::manual_seed(0);
  if (only.empty() || only == "decode") {
    bench_model(o, "bart-base-srformer-s64", bart_base_config(CrossAttentionKind::kSrformer, 64), o.input_tokens);
    bench_model(o, "bart-base-full", bart_base_config(CrossAttentionKind::kFull, 0), o.input_tokens);
    bench_model(o, "t5-small-srformer-s64", t5_small_config(CrossAttentionKind::kSrformer, 64), o.input_tokens);
  }
  if (only.empty() || only == "encode") {
    bench_encode(o, "bart-base-srformer-s64", bart_base_config(CrossAttentionKind::kSrformer, 64));
    bench_encode(o, "t5-small-srformer-s64", t5_small_config(CrossAttentionKind::kSrformer, 64));
    bench_long_encode(o, "t5-small-srformer-s64", t5_small_config(CrossAttentionKind::kSrformer, 64));
  }
  if (only.empty() || only == "cross") bench_cross(o);
  if (only.empty() || only == "linear") bench_linear(o);
  if (only.empty() || only == "search") bench_search(o);
  if (only == "generate" && o.generate_models.empty()) {
    throw std::invalid_argument("--only generate needs --generate-model DIR (e.g. models/debian-synopsis-t5)");
  }
  if (only.empty() || only == "generate") bench_generate(o);
  return 0;
}

}  // namespace srformer::tools
