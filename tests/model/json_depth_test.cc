// JSON files nested past kMaxJsonDepth are refused before nlohmann parses them: its dump() and destructor
// recurse per level, and a few hundred KB of brackets overflowed the stack (found by fuzzing).
#include "model/io/json_depth.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "model/config.h"
#include "model/io/load_error.h"
#include "model/io/safetensors.h"
#include "tests/model/io_test_util.h"

namespace srformer {
namespace {

using testing::safetensors_bytes;
using testing::ScratchDir;
using testing::write_bytes;

std::string nested(size_t levels) { return std::string(levels, '[') + std::string(levels, ']'); }

TEST(JsonDepth, CountsArraysAndObjectsButNotBracketsInStrings) {
  EXPECT_EQ(json_nesting_depth(R"({"a": [1, {"b": []}], "c": {}})"), 4U);
  EXPECT_EQ(json_nesting_depth(R"({"a": "[[[{{{", "b": "\"[[", "c": "\\"})"), 1U);
  EXPECT_EQ(json_nesting_depth("42"), 0U);
  EXPECT_EQ(json_nesting_depth(nested(200000)), 200000U);
}

TEST(JsonDepth, ADeeplyNestedSafetensorsHeaderOrConfigIsRefusedNotACrash) {
  const ScratchDir dir;
  const std::string header = R"({"__metadata__": {"deep": )" + nested(200000) +
                             R"(}, "w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})";
  write_bytes(dir / "model.safetensors", safetensors_bytes(header, std::string(4, '\0')));
  try {
    (void)SafetensorsFile::open(dir / "model.safetensors");
    ADD_FAILURE() << "a header nested 200,000 deep was read";
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find("nests arrays and objects deeper than 64 levels"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("model.safetensors"), std::string::npos) << e.what();
  }
  // Just under the limit still reads.
  const std::string fine = R"({"__metadata__": {"deep": )" + nested(62) +
                           R"(}, "w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})";
  write_bytes(dir / "fine.safetensors", safetensors_bytes(fine, std::string(4, '\0')));
  EXPECT_NO_THROW((void)SafetensorsFile::open(dir / "fine.safetensors"));

  std::ofstream(dir / "config.json") << R"({"model_type": "t5", "x": )" << nested(200000) << "}";
  try {
    (void)ModelConfig::load(dir / "config.json");
    ADD_FAILURE() << "a config.json nested 200,000 deep was read";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("config.json: nests arrays and objects deeper than 64 levels"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace srformer
