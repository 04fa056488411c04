#pragma once
// Deterministic stand-ins for a Seq2SeqModel and a Tokenizer, for engine/service tests that must not
// depend on real weights. The fake model's next token is a fixed function of the row's encoder input,
// its step t and its previous token, so any mix-up of rows (select/append/beam reordering) changes
// the output. Tokens map to lowercase letters and spaces; EOS comes at a document-dependent length.
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include "model/seq2seq.h"
#include "model/tokenizer/tokenizer.h"

namespace srformer::testing {

// Bytes: id = byte + 3; 0 pad, 1 eos, 2 decoder start. encode() appends EOS.
class FakeTokenizer : public Tokenizer {
 public:
  explicit FakeTokenizer(std::chrono::milliseconds long_text_delay = std::chrono::milliseconds(0))
      : long_text_delay_(long_text_delay) {}
  TokenIds encode(std::string_view text) const override {
    // A slow tokenizer for texts of 64 KiB and more (the server's long documents), as a real one is on a
    // document of megabytes.
    if (text.size() >= (size_t{64} << 10)) std::this_thread::sleep_for(long_text_delay_);
    TokenIds ids;
    for (const unsigned char c : text) ids.push_back(static_cast<int64_t>(c) + 3);
    ids.push_back(1);
    return ids;
  }
  // A byte each, " " before the word after a space.
  TokenIds encode_word(std::string_view word, bool after_space) const override {
    TokenIds ids;
    if (after_space && !word.empty() && word.front() != ' ') ids.push_back(' ' + 3);
    for (const unsigned char c : word) ids.push_back(static_cast<int64_t>(c) + 3);
    return ids;
  }
  std::string decode_raw(const TokenIds& ids, bool skip_special = true) const override {
    std::string out;
    for (const int64_t id : ids) {
      if (id >= 3) out.push_back(static_cast<char>(id - 3));
    }
    return out;
  }
  int64_t vocab_size() const override { return 259; }
  std::optional<int64_t> token_to_id(std::string_view token) const override {
    if (token.size() == 1) return static_cast<unsigned char>(token[0]) + 3;
    return std::nullopt;
  }
  std::string id_to_token(int64_t id) const override {
    return id >= 3 ? std::string(1, static_cast<char>(id - 3)) : "";
  }
  bool is_special(int64_t id) const override { return id < 3; }
  std::optional<int64_t> bos_id() const override { return std::nullopt; }
  std::optional<int64_t> eos_id() const override { return 1; }
  std::optional<int64_t> pad_id() const override { return 0; }

 private:
  std::chrono::milliseconds long_text_delay_;
};

struct FakeModelOptions {
  FakeModelOptions(int64_t max_input = 256, int64_t segment = 4,
                   std::chrono::milliseconds delay = std::chrono::milliseconds(0))
      : max_input_tokens(max_input), segment_size(segment), step_delay(delay) {}
  int64_t max_input_tokens;
  int64_t segment_size;
  std::chrono::milliseconds step_delay;  // makes requests long-lived for cancellation tests
  // A slow encoder: this many "layers" of encode_layer_delay each, the stop check asked before each
  // (each layer logged as 'l' in call_log).
  int encode_layers = 1;
  std::chrono::milliseconds encode_layer_delay{0};
  std::shared_ptr<std::atomic<int>> encode_layers_run = std::make_shared<std::atomic<int>>(0);  // shared with a test
  // A slow start(): this many decoder "layers" of cross keys/values, start_layer_delay each, the stop
  // check asked before each (logged as 'c'), as the real models' start() does.
  int start_layers = 0;
  std::chrono::milliseconds start_layer_delay{0};
  std::shared_ptr<std::atomic<int>> start_layers_run = std::make_shared<std::atomic<int>>(0);
  // Encoder calls over several rows, and those of them where over 1/8 of the positions are padding.
  std::shared_ptr<std::atomic<int>> batched_encodes = std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<std::atomic<int>> padded_encodes = std::make_shared<std::atomic<int>>(0);
  // Every encoder call ('e'), its layers ('l'), start()'s layers ('c') and decode steps ('s') in order,
  // for tests of what runs between encodes and between an encode's (or a start's) layers.
  struct CallLog {
    std::mutex mu;
    std::string calls;
    void add(char c) {
      std::lock_guard lock(mu);
      calls.push_back(c);
    }
    std::string get() {
      std::lock_guard lock(mu);
      return calls;
    }
  };
  std::shared_ptr<CallLog> call_log = std::make_shared<CallLog>();
  // The most encoder positions a decode step's state held: rows × the batch's (padded) input length.
  std::shared_ptr<std::atomic<int64_t>> max_step_positions = std::make_shared<std::atomic<int64_t>>(0);
  // The most rows one start() call began (an admission's batch, before beams are expanded).
  std::shared_ptr<std::atomic<int64_t>> max_start_rows = std::make_shared<std::atomic<int64_t>>(0);
  // What the engine budgets with (--max-state-memory): by default the fake state's own cross keys and
  // values ([B, 1, k, 1] fp32 each) and mask.
  StateFootprint footprint{/*per_encoder_position=*/9};
  // Faults, for tests that a failing model fails its requests and not the server: the Nth encoder call
  // or decode step (1-based; 0 = none) throws, or leaves a state the engine cannot read (the segment
  // index as floats).
  int fail_encode_call = 0;
  int fail_step_call = 0;
  int corrupt_state_at_step = 0;
  bool fail_steps_inside_encode = false;  // a step run between the encoder's layers throws
  // The Nth start() (1-based; 0 = none) returns rows a running batch cannot take (two layers to its one:
  // DecoderState::append throws, as it does out of memory).
  int fail_join_call = 0;
  // A hung decoder (a CUDA call that never returns): while set, a decode step waits in the model.
  std::shared_ptr<std::atomic<bool>> hang_steps = std::make_shared<std::atomic<bool>>(false);
  std::optional<int64_t> max_length;  // config generation defaults
  std::optional<int64_t> num_beams;
  std::optional<std::string> prefix;
  std::optional<int64_t> expected_length;  // srformer.expected_length
  std::optional<double> temperature;       // with do_sample set when given
  std::optional<double> repetition_penalty;
  std::optional<double> encoder_repetition_penalty;
  int64_t vocab_size = 259;  // the config's (embedding rows); FakeTokenizer has 259 tokens
};

class FakeModel : public Seq2SeqModel {
 public:
  explicit FakeModel(FakeModelOptions o = {}) : options_(o) {
    config_.arch = Architecture::kBart;
    config_.vocab_size = o.vocab_size;
    config_.pad_token_id = 0;
    config_.eos_token_id = 1;
    config_.decoder_start_token_id = 2;
    config_.max_input_tokens = o.max_input_tokens;
    config_.srformer.cross_attention = CrossAttentionKind::kSrformer;
    config_.srformer.segment_size = o.segment_size;
    config_.max_length = o.max_length;
    config_.num_beams = o.num_beams;
    config_.summarization_prefix = o.prefix;
    config_.srformer.expected_length = o.expected_length;
    config_.repetition_penalty = o.repetition_penalty;
    config_.encoder_repetition_penalty = o.encoder_repetition_penalty;
    if (o.temperature) {
      config_.do_sample = true;
      config_.temperature = o.temperature;
    }
  }
  const ModelConfig& config() const override { return config_; }
  torch::Device device() const override { return torch::kCPU; }
  torch::ScalarType dtype() const override { return torch::kFloat32; }
  int64_t parameter_count() const override { return 42; }
  StateFootprint state_footprint() const override { return options_.footprint; }
  const std::vector<std::pair<std::string, torch::Tensor>>& named_parameters() const override { return params_; }

  using Seq2SeqModel::encode;
  EncoderOutput encode(const torch::Tensor& ids, const torch::Tensor& mask, const EncodeStop& stop) override {
    if (++encode_calls == options_.fail_encode_call) throw std::runtime_error("fake encoder fault");
    options_.call_log->add('e');
    if (ids.size(0) > 1) {
      ++*options_.batched_encodes;
      if (8 * mask.ne(0).sum().item<int64_t>() < 7 * mask.numel()) ++*options_.padded_encodes;
    }
    run_layers(stop, options_.encode_layers, options_.encode_layer_delay, 'l', *options_.encode_layers_run);
    return {ids.to(torch::kFloat32).unsqueeze(-1), mask.to(torch::kBool)};
  }

  using Seq2SeqModel::start;
  DecoderState start(const EncoderOutput& enc, const torch::Tensor& expected_length, const torch::Tensor& max_steps,
                     const EncodeStop& stop) override {
    const int64_t b = enc.hidden.size(0);
    if (b > *options_.max_start_rows) *options_.max_start_rows = b;
    run_layers(stop, options_.start_layers, options_.start_layer_delay, 'c', *options_.start_layers_run);
    DecoderState s;
    LayerState layer;
    layer.cross_k = enc.hidden.unsqueeze(1);  // [B,1,k,1]
    layer.cross_v = enc.hidden.unsqueeze(1);
    s.layers.push_back(layer);
    s.self_valid = torch::zeros({b, 0}, torch::kBool);
    s.self_pos = torch::zeros({b, 0}, torch::kInt64);
    s.cross_valid = enc.mask;
    s.enc_len = enc.mask.sum(1).to(torch::kInt64);
    s.step = torch::zeros({b}, torch::kInt64);
    s.expected_len = expected_length.to(torch::kInt64);
    s.max_steps = max_steps;
    s.num_segments = (s.enc_len + options_.segment_size - 1).div(options_.segment_size, "floor");
    s.segment = torch::full({b}, -1, torch::kInt64);
    s.raf_fired = torch::zeros({b, 1}, torch::kFloat64);  // [B, layers]
    s.raf_total = torch::zeros({b}, torch::kFloat64);
    s.segment_switches = torch::zeros({b}, torch::kInt64);
    if (++start_calls == options_.fail_join_call) s.layers.push_back(layer);
    return s;
  }

  torch::Tensor step(DecoderState& s, const torch::Tensor& tokens) override {
    if (options_.step_delay.count() > 0) std::this_thread::sleep_for(options_.step_delay);
    while (options_.hang_steps->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (++steps == options_.fail_step_call || (inside_encode_ > 0 && options_.fail_steps_inside_encode)) {
      throw std::runtime_error("fake decoder fault");
    }
    options_.call_log->add('s');
    const int64_t b = s.batch_size();
    const auto k = s.cross_valid.size(1);
    for (int64_t seen = *options_.max_step_positions; b * k > seen;) {
      if (options_.max_step_positions->compare_exchange_weak(seen, b * k)) break;
    }
    const auto ids = s.layers[0].cross_k.index({torch::indexing::Slice(), 0, torch::indexing::Slice(), 0});
    const auto weights = torch::arange(1, k + 1, torch::kFloat32);
    const auto sig = ((ids * s.cross_valid.to(torch::kFloat32) * weights).sum(1).to(torch::kInt64)) % 997;
    auto logits = torch::full({b, 259}, -10.0f);
    auto la = logits.accessor<float, 2>();
    const auto sa = sig.accessor<int64_t, 1>();
    const auto ta = s.step.accessor<int64_t, 1>();
    const auto pa = tokens.accessor<int64_t, 1>();
    for (int64_t r = 0; r < b; ++r) {
      const int64_t t = ta[r];
      const int64_t x = sa[r] * 31 + t * 17 + pa[r] * 7;
      const int64_t letter = (t % 5 == 4) ? ' ' : 'a' + x % 26;
      const int64_t alt = 'a' + (x / 26) % 26;
      la[r][letter + 3] = 5.0f;
      la[r][alt + 3] = std::max(la[r][alt + 3], 3.5f);
      la[r][1] = t >= 5 + sa[r] % 12 ? 8.0f : -5.0f;
    }
    // Self cache grows one slot per step (so state bytes grow); segment follows t * m / L.
    s.self_valid = torch::cat({s.self_valid, torch::ones({b, 1}, torch::kBool)}, 1);
    s.self_pos = torch::cat({s.self_pos, s.step.unsqueeze(1)}, 1);
    s.segment =
        torch::minimum(torch::div(s.step * s.num_segments, s.expected_len.clamp_min(1), "floor"), s.num_segments - 1);
    s.raf_total += 10.0;
    s.raf_fired += ((sig + s.step) % 3).to(torch::kFloat64).unsqueeze(1);
    s.step += 1;
    if (steps == options_.corrupt_state_at_step) s.segment = s.segment.to(torch::kFloat32);
    return logits;
  }

  torch::Tensor forward(const EncoderOutput&, const torch::Tensor&, const std::optional<torch::Tensor>&) override {
    throw std::logic_error("FakeModel::forward is not used by the engine");
  }

  std::atomic<int> encode_calls{0};
  std::atomic<int> start_calls{0};
  std::atomic<int> steps{0};

 private:
  // `layers` pauses of an encode or a start, each asking `stop` (the engine may step the running rows,
  // or encode others, from it), then logging `mark` and sleeping `delay`.
  void run_layers(const EncodeStop& stop, int layers, std::chrono::milliseconds delay, char mark,
                  std::atomic<int>& run) {
    for (int layer = 0; layer < layers; ++layer) {
      ++inside_encode_;
      try {
        stop_if_asked(stop);
      } catch (...) {
        --inside_encode_;
        throw;
      }
      --inside_encode_;
      options_.call_log->add(mark);
      ++run;
      std::this_thread::sleep_for(delay);
    }
  }

  int inside_encode_ = 0;  // encodes in their stop hook (the engine's thread only; one may run in another's)
  FakeModelOptions options_;
  ModelConfig config_;
  std::vector<std::pair<std::string, torch::Tensor>> params_;
};

}  // namespace srformer::testing
