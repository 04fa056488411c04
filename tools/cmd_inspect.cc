// `srformer inspect DIR [--input-tokens K] [--new-tokens N] [--expected-length L]`: configuration, parameter
// count, limits, per-request state bytes.
#include <torch/torch.h>

#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "model/generation/generate.h"
#include "model/generation/options.h"
#include "model/limits.h"
#include "model/seq2seq.h"
#include "tools/arg_reader.h"
#include "tools/expected_length_flag.h"

namespace srformer::tools {

int run_inspect(const std::vector<std::string>& args) {
  std::string dir;
  int64_t k = 512;
  std::optional<int64_t> new_tokens_flag;  // else the model's own default, as a request that sets none
  std::optional<int64_t> expected_flag;    // else default_expected_length, as a request that sets none
  for (ArgReader r(args); r.next();) {
    const auto& a = r.arg();
    if (a == "--help" || a == "-h") {
      std::cout << "usage: srformer inspect DIR [--input-tokens K] [--new-tokens N] [--expected-length L]\n"
                   "  Prints the model's configuration, parameter count and the decoder state one request\n"
                   "  holds for K input tokens after N generated tokens, with the estimate the server budgets\n"
                   "  memory with and what it is made of (state_footprint; JSON).\n"
                   "  K defaults to 512; N to the model's own default max new tokens, what a request that sets\n"
                   "  none gets (generation_config.json's or config.json's max_length - 1, else 128; a server\n"
                   "  lowers it to its --max-new-tokens-cap), and the expected length L to the checkpoint's\n"
                   "  srformer.expected_length, else N, as the server's (an SRformer's switch table, part of the\n"
                   "  state, holds the segments its steps reach: with L above N, fewer). K and N above the\n"
                   "  model's limits (its input limit; a BART's decoder positions) are measured at those limits,\n"
                   "  as \"notes\" in the JSON and on stderr say.\n";
      return 0;
    }
    if (a == "--input-tokens") {
      k = r.int_value(1);
    } else if (a == "--new-tokens") {
      new_tokens_flag = r.int_value(0);
      // Each token is a real decoder step: the server's cap on max_new_tokens bounds it here too.
      if (*new_tokens_flag > kMaxNewTokensLimit) {
        throw std::invalid_argument("--new-tokens " + std::to_string(*new_tokens_flag) +
                                    " is more than a request may ask (" + std::to_string(kMaxNewTokensLimit) + ")");
      }
    } else if (a == "--expected-length") {
      expected_flag = r.integer_value();
    } else if (!a.empty() && a[0] == '-') {
      throw unknown_option(a);
    } else if (dir.empty()) {
      dir = a;
    } else {
      throw std::invalid_argument("unexpected argument '" + a + "': inspect takes one DIR (see --help)");
    }
  }
  if (dir.empty()) throw std::invalid_argument("missing model directory (see --help)");
  auto model = load_model(dir);
  const auto& c = model->config();
  // Measured within the model's limits, and said so: the JSON's figures were for fewer tokens than asked.
  std::vector<std::string> notes;
  if (const int64_t limit = input_limit_with(c, std::nullopt); k > limit) {
    notes.push_back("--input-tokens " + std::to_string(k) + " is more than the model's input limit of " +
                    std::to_string(limit) + ": measured at " + std::to_string(limit) + " input tokens");
    k = limit;
  }
  // The model's default, not a fixed 128: the demo model's is 32, and the estimate follows the length.
  const int64_t new_tokens = new_tokens_flag.value_or(model_generation_defaults(c).max_new_tokens);
  if (expected_flag) check_expected_length_flag(c, *expected_flag);
  const int64_t expected_length = expected_flag.value_or(default_expected_length(c, new_tokens));
  torch::NoGradGuard no_grad;
  const auto ids = torch::full({1, k}, c.eos_token_id, torch::kLong);
  const auto enc = model->encode(ids, torch::ones({1, k}, torch::kLong));
  const int64_t positions = decoder_positions(c);  // BART's learned ones; T5: 0, no limit
  const int64_t steps = positions > 0 ? std::min(new_tokens, positions) : new_tokens;
  // As the server starts it: the switch table holds what `steps` steps reach.
  auto state =
      model->start(enc, torch::full({1}, expected_length, torch::kLong), torch::full({1}, steps, torch::kLong));
  const int64_t start_bytes = state.bytes();
  auto tok = torch::full({1}, c.decoder_start_token_id, torch::kLong);
  if (steps < new_tokens) {
    notes.push_back("--new-tokens " + std::to_string(new_tokens) + " is more than the model's " +
                    std::to_string(positions) + " decoder positions: measured after " + std::to_string(steps) +
                    " new tokens");
  }
  for (int64_t t = 0; t < steps; ++t) tok = model->step(state, tok).argmax(-1);
  nlohmann::json j;
  j["model"] = dir;
  j["architecture"] = c.type_name();
  j["cross_attention"] = to_string(c.srformer.cross_attention);
  j["segment_size"] = c.srformer.segment_size;
  j["d_model"] = c.d_model;
  j["heads"] = c.num_heads;
  j["head_dim"] = c.head_dim;
  j["layers"] = {c.encoder_layers, c.decoder_layers};
  j["vocab_size"] = c.vocab_size;
  j["parameters"] = model->parameter_count();
  j["weight_bytes"] = model->parameter_bytes();               // as loaded (fp32 on the CPU, tied tensors once)
  j["packed_bytes"] = model->packed_weight_bytes();           // the projections' packed copies beside them
  j["max_input_tokens"] = input_limit_with(c, std::nullopt);  // what the server serves by default
  j["max_new_tokens"] = positions > 0 ? nlohmann::json(positions) : nlohmann::json(nullptr);  // null: no limit
  // What the server's --max-state-memory counts for such a request (one row; docs/OPERATIONS.md, "Memory").
  const auto f = model->state_footprint();
  j["state"] = {{"input_tokens", k},
                {"segments", state.num_segments[0].item<int64_t>()},
                {"bytes_at_start", start_bytes},
                {"bytes_after_new_tokens", state.bytes()},
                {"new_tokens", steps},
                {"expected_length", expected_length},
                {"estimated_bytes", f.request_bytes(1, k, f.switches(k, expected_length, steps), steps)}};
  j["state_footprint"] = {{"per_encoder_position", f.per_encoder_position},
                          {"per_switch", f.per_switch},
                          {"inputs_shared_by_beams", f.inputs_shared_by_beams},
                          {"per_row_encoder_position", f.per_row_encoder_position},
                          {"per_decoder_position", f.per_decoder_position},
                          {"fixed", f.fixed},
                          {"segment_size", f.segment_size}};
  j["notes"] = notes;
  for (const auto& n : notes) std::cerr << "note: " << n << "\n";
  std::cout << j.dump(2) << std::endl;
  return 0;
}

}  // namespace srformer::tools
