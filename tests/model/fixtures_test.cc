// Every fixture directory under ../shared/fixtures reproduces the authors' reference outputs.
#include <gtest/gtest.h>

#include <filesystem>

#include "model/fixture_check.h"

namespace fs = std::filesystem;

namespace {

std::vector<fs::path> fixture_dirs() {
  std::vector<fs::path> dirs;
  const fs::path root = SRFORMER_FIXTURES_DIR;
  if (!fs::is_directory(root)) return dirs;
  for (const auto& e : fs::directory_iterator(root)) {
    if (fs::exists(e.path() / "case.json") && fs::exists(e.path() / "model" / "config.json")) dirs.push_back(e.path());
  }
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

}  // namespace

TEST(Fixtures, EveryFixtureMatchesTheAuthorsOutputs) {
  const auto dirs = fixture_dirs();
  if (dirs.empty()) GTEST_SKIP() << "no fixtures found under " << SRFORMER_FIXTURES_DIR << " (shared/ absent)";
  for (const auto& dir : dirs) {
    SCOPED_TRACE(dir.string());
    const auto r = srformer::check_fixture(dir);
    EXPECT_TRUE(r.ok) << r.to_json().dump();
    EXPECT_LE(r.worst_excess_logits, 0.0);
    EXPECT_LE(r.worst_excess_encoder, 0.0);
    if (r.greedy_match) {
      EXPECT_TRUE(*r.greedy_match);
    }
    if (r.beam_match) {
      EXPECT_TRUE(*r.beam_match);
    }
  }
  // All four reference fixtures are expected when shared/ is present.
  EXPECT_GE(dirs.size(), 4u);
}
