// The one reader of model-directory JSON files: each way a file can be wrong is named with the file,
// through the caller's error type.
#include "model/io/json_file.h"

#include <gtest/gtest.h>

#include <fstream>
#include <stdexcept>
#include <string>

#include "model/config.h"
#include "model/io/load_error.h"
#include "tests/model/io_test_util.h"
#include "tests/support/lfs_pointer.h"

namespace srformer {
namespace {

using testing::ScratchDir;

template <typename Error>
std::string error_of(const std::filesystem::path& file, const std::string& role, const std::string& remedy = "") {
  try {
    (void)read_json_file<Error>(file, role, remedy);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << file << " was read";
  return "";
}

TEST(JsonFile, ReadsAValidFile) {
  const ScratchDir dir;
  std::ofstream(dir / "a.json") << R"({"x": [1, 2], "y": "z"})";
  const auto j = read_json_file<LoadError>(dir / "a.json", "a JSON file");
  EXPECT_EQ(j.at("x").at(1), 2);
  EXPECT_EQ(j.at("y"), "z");
}

TEST(JsonFile, NamesTheFileForEachProblem) {
  const ScratchDir dir;
  const auto missing = dir / "missing.json";
  EXPECT_EQ(error_of<LoadError>(missing, "x"), "cannot open " + missing.string() + ": No such file or directory");

  std::filesystem::create_directory(dir / "d.json");
  EXPECT_EQ(error_of<LoadError>(dir / "d.json", "the shard index"),
            (dir / "d.json").string() + " is a directory; it must be the shard index");

  std::ofstream(dir / "bad.json") << R"({"x": [1, 2)";
  const auto bad = error_of<std::invalid_argument>(dir / "bad.json", "x", "restore it");
  EXPECT_EQ(bad.rfind((dir / "bad.json").string() + " is not valid JSON (", 0), 0U) << bad;
  EXPECT_NE(bad.find("; restore it"), std::string::npos) << bad;

  std::ofstream(dir / "deep.json") << std::string(100, '[') << std::string(100, ']');
  EXPECT_NE(error_of<LoadError>(dir / "deep.json", "x").find("deep.json: nests arrays and objects deeper than 64"),
            std::string::npos);
}

TEST(JsonFile, AGitLfsPointerInPlaceOfConfigJsonSaysSo) {
  const ScratchDir dir;
  std::ofstream(dir / "config.json") << testing::lfs_pointer_text(1234);
  try {
    (void)ModelConfig::load(dir / "config.json");
    ADD_FAILURE() << "a pointer was read as config.json";
  } catch (const std::invalid_argument& e) {
    testing::expect_lfs_pointer_message(e.what(), (dir / "config.json").string(), 1234);
  }
}

}  // namespace
}  // namespace srformer
