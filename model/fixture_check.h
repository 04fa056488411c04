#pragma once
// Replays a reference fixture directory (format: shared/fixtures/README.md): teacher-forced
// encoder states and logits, and, where recorded, greedy and beam generation.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace srformer {

struct FixtureReport {
  std::string fixture;
  double max_abs_diff_logits = 0;
  double max_abs_diff_encoder = 0;
  double worst_excess_logits = 0;  // max(|a-e| - (atol + rtol|e|)), <= 0 means within tolerance
  double worst_excess_encoder = 0;
  double max_abs_diff_greedy_step_logits = 0;  // against generate.safetensors, when present
  std::optional<bool> greedy_match, beam_match, greedy_step_logits_ok;
  std::optional<double> max_abs_diff_beam_scores;
  double atol = 1e-4, rtol = 1e-4;
  bool ok = false;
  std::string detail;  // what failed, for people

  nlohmann::json to_json() const;
};

FixtureReport check_fixture(const std::filesystem::path& dir);

}  // namespace srformer
