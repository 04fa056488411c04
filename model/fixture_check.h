#pragma once
// Replays a reference fixture directory (format: shared/fixtures/README.md): teacher-forced
// encoder states and logits, and, where recorded, greedy and beam generation.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "model/seq2seq.h"

namespace srformer {

struct FixtureReport {
  std::string fixture;
  std::string device = "cpu", dtype = "fp32";  // where and in what the model ran
  double max_abs_diff_logits = 0;
  double max_abs_diff_encoder = 0;
  double worst_excess_logits = 0;  // max(|a-e| - (atol + rtol|e|)), <= 0 means within tolerance
  double worst_excess_encoder = 0;
  double max_abs_diff_greedy_step_logits = 0;  // against generate.safetensors, when present
  std::optional<bool> greedy_match, beam_match, greedy_step_logits_ok;
  std::optional<double> max_abs_diff_beam_scores;
  double atol = 1e-4, rtol = 1e-4;
  bool ok = false;
  std::string detail;  // what failed (and what was not replayed), for people

  nlohmann::json to_json() const;
};

// Loads DIR/model with `load` (device and dtype: a GPU replays the same fixtures). In fp16 or bf16 the
// encoder states and logits are compared with tolerances widened to that precision: relative
// half_precision_tolerance, and absolute that much of each tensor's largest reference value. Recorded
// generation is then not replayed: a near-tie between two tokens, which a rounding decides, changes the
// rest of a sequence.
FixtureReport check_fixture(const std::filesystem::path& dir, const LoadOptions& load = {});

// The relative tolerance a comparison with an fp32 reference takes in `dtype` (fp32: 0).
double half_precision_tolerance(torch::ScalarType dtype);

}  // namespace srformer
