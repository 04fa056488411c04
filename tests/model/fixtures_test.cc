// Every fixture directory under ../shared/fixtures reproduces the authors' reference outputs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "model/fixture_check.h"
#include "model/kernels/bf16_linear.h"
#include "tests/support/fixture_dirs.h"
#include "tests/support/temp_dir.h"

namespace fs = std::filesystem;

using srformer::testing::fixture_dirs;

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

// The same fixtures with the CPU's bfloat16 projections: within the tolerance check_fixture widens to for
// bf16 (16 units in bfloat16's last place), which a GPU's fp16/bf16 replay uses too (tests/model/cuda_test.cc).
TEST(Fixtures, Bf16ProjectionsStayWithinTheWidenedTolerance) {
  const auto dirs = fixture_dirs();
  if (dirs.empty()) GTEST_SKIP() << "no fixtures found under " << SRFORMER_FIXTURES_DIR << " (shared/ absent)";
  if (!srformer::kernels::cpu_bf16_available()) GTEST_SKIP() << "this CPU has neither AMX-BF16 nor AVX512-BF16";
  srformer::LoadOptions bf16;
  bf16.dtype = torch::kBFloat16;
  for (const auto& dir : dirs) {
    SCOPED_TRACE(dir.string());
    const auto r = srformer::check_fixture(dir, bf16);
    EXPECT_TRUE(r.ok) << r.to_json().dump();
    EXPECT_EQ(r.dtype, "bf16");
    EXPECT_EQ(r.atol, srformer::half_precision_tolerance(torch::kBFloat16));
    EXPECT_FALSE(r.greedy_match) << "generation is not replayed in bf16";
    // bf16 does round: the logits are not the fp32 ones, only near them.
    EXPECT_GT(r.max_abs_diff_logits, srformer::check_fixture(dir).max_abs_diff_logits);
  }
}

namespace {

// A copy of a fixture whose case.json the test edits (the model and tensors are linked, not copied).
struct EditedFixture {
  srformer::testing::TempDir tmp{"fixture"};
  fs::path dir = tmp.path() / "t5-full";
  nlohmann::json meta;

  explicit EditedFixture(const fs::path& source) {
    fs::create_directories(dir);
    for (const char* name : {"model", "case.safetensors", "generate.safetensors"}) {
      fs::create_symlink(fs::absolute(source / name), dir / name);
    }
    std::ifstream(source / "case.json") >> meta;
  }
  void write() const { std::ofstream(dir / "case.json") << meta.dump(); }
};

std::string check_error(const fs::path& dir) {
  try {
    srformer::check_fixture(dir);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(Fixtures, AFixtureThatContradictsItselfIsNamedNotReplayed) {
  const fs::path source = fs::path(SRFORMER_FIXTURES_DIR) / "t5-full";
  if (!fs::exists(source / "case.json")) GTEST_SKIP() << "fixture t5-full not found under " << SRFORMER_FIXTURES_DIR;
  using ::testing::HasSubstr;
  {
    // Fewer beam scores than inputs (batch 2): read past the list's end before.
    for (const auto& scores : {nlohmann::json::array(), nlohmann::json::array({-1.0})}) {
      EditedFixture f(source);
      f.meta["generate_beam"]["sequences_scores"] = scores;
      f.write();
      const auto error = check_error(f.dir);
      EXPECT_THAT(error, HasSubstr("case.json: generate_beam.sequences_scores must list 2 numbers")) << error;
    }
  }
  {
    // Settings are read whole: 2^40 beams were read as 0 (an int), and reported so.
    EditedFixture f(source);
    f.meta["generate_beam"]["settings"]["num_beams"] = int64_t{1} << 40;
    f.write();
    EXPECT_THAT(check_error(f.dir), HasSubstr("num_beams is 1099511627776")) << check_error(f.dir);
  }
  {
    EditedFixture f(source);
    f.meta["generate_greedy"]["ids"] = nlohmann::json::array({f.meta["generate_greedy"]["ids"][0]});
    f.write();
    EXPECT_THAT(check_error(f.dir),
                HasSubstr("case.json: generate_greedy.ids must list 2 rows (one per input), it has 1"));
  }
  {
    EditedFixture f(source);
    f.meta["generate_greedy"].erase("ids");
    f.write();
    const auto error = check_error(f.dir);
    EXPECT_THAT(error, HasSubstr((f.dir / "case.json").string() + ": ")) << error;
    EXPECT_THAT(error, HasSubstr("'ids'")) << error;
  }
  {
    EditedFixture f(source);
    f.meta["generate_beam"]["sequences_scores"][1] = "high";
    f.write();
    EXPECT_THAT(check_error(f.dir), HasSubstr((f.dir / "case.json").string() + ": "));
  }
  {
    // The same files untouched replay fine: the edits above are what the errors are about.
    EditedFixture f(source);
    f.write();
    EXPECT_TRUE(srformer::check_fixture(f.dir).ok);
  }
}
