// SafetensorsFile / save_safetensors: round trips, the on-disk layout, the fixtures' real files, and every
// malformed header the reader must refuse.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>

#include "model/io/load_error.h"
#include "model/io/safetensors.h"
#include "tests/model/io_test_util.h"

namespace srformer {
namespace {

using ::testing::ElementsAre;
using testing::fixtures_dir;
using ::testing::HasSubstr;
using testing::le64;
using testing::read_bytes;
using testing::safetensors_bytes;
using testing::ScratchDir;
using testing::write_bytes;

template <typename T>
std::vector<T> values(const torch::Tensor& t) {
  const torch::Tensor c = t.contiguous();
  return std::vector<T>(c.data_ptr<T>(), c.data_ptr<T>() + c.numel());
}

TEST(SafetensorsRoundTrip, KeepsDtypesShapesAndValues) {
  const ScratchDir dir;
  const auto path = dir / "t.safetensors";
  save_safetensors(path,
                   {{"f32", torch::tensor({1.5f, -2.0f, 3.25f, 0.0f, 1e-3f, 7.0f}).reshape({2, 3})},
                    {"f16", torch::tensor({0.5f, -1.0f, 65504.0f}).to(torch::kFloat16)},
                    {"bf16", torch::tensor({1.0f, -3.0f, 0.15625f, 2.0f}).to(torch::kBFloat16).reshape({2, 2})},
                    {"i64", torch::tensor({int64_t{1} << 40, int64_t{-5}, int64_t{0}}, torch::kInt64)},
                    {"i32", torch::tensor({7, -8}, torch::kInt32)},
                    {"mask", torch::tensor({true, false, true})},
                    {"empty", torch::zeros({0, 4})},
                    {"scalar", torch::tensor(42.0f)}},
                   {{"producer", "io-test"}});

  const SafetensorsFile file = SafetensorsFile::open(path);
  std::vector<std::string> names;
  for (const TensorInfo& info : file.tensors()) names.push_back(info.name);
  EXPECT_THAT(names, ElementsAre("bf16", "empty", "f16", "f32", "i32", "i64", "mask", "scalar"));
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_EQ(file.metadata().at("producer"), "io-test");
  EXPECT_EQ(file.path(), path);

  EXPECT_EQ(file.find("f32")->dtype, "F32");
  EXPECT_THAT(file.find("f32")->shape, ElementsAre(2, 3));
  EXPECT_THAT(values<float>(file.tensor("f32")), ElementsAre(1.5f, -2.0f, 3.25f, 0.0f, 1e-3f, 7.0f));

  EXPECT_EQ(file.find("f16")->dtype, "F16");
  EXPECT_EQ(file.tensor("f16").scalar_type(), torch::kFloat16);
  EXPECT_THAT(values<float>(file.tensor("f16").to(torch::kFloat32)), ElementsAre(0.5f, -1.0f, 65504.0f));

  EXPECT_EQ(file.find("bf16")->dtype, "BF16");
  EXPECT_EQ(file.tensor("bf16").scalar_type(), torch::kBFloat16);
  EXPECT_THAT(file.find("bf16")->shape, ElementsAre(2, 2));
  EXPECT_THAT(values<float>(file.tensor("bf16").to(torch::kFloat32)), ElementsAre(1.0f, -3.0f, 0.15625f, 2.0f));

  EXPECT_EQ(file.find("i64")->dtype, "I64");
  EXPECT_THAT(values<int64_t>(file.tensor("i64")), ElementsAre(int64_t{1} << 40, -5, 0));
  EXPECT_EQ(file.find("i32")->dtype, "I32");
  EXPECT_THAT(values<int32_t>(file.tensor("i32")), ElementsAre(7, -8));
  EXPECT_EQ(file.find("mask")->dtype, "BOOL");
  EXPECT_THAT(values<bool>(file.tensor("mask")), ElementsAre(true, false, true));

  EXPECT_THAT(file.find("empty")->shape, ElementsAre(0, 4));
  EXPECT_EQ(file.find("empty")->begin, file.find("empty")->end);
  EXPECT_EQ(file.tensor("empty").numel(), 0);
  EXPECT_THAT(file.tensor("empty").sizes().vec(), ElementsAre(0, 4));

  EXPECT_TRUE(file.find("scalar")->shape.empty());
  EXPECT_EQ(file.tensor("scalar").dim(), 0);
  EXPECT_EQ(file.tensor("scalar").item<float>(), 42.0f);

  EXPECT_EQ(file.find("nope"), nullptr);
  EXPECT_THROW(file.tensor("nope"), LoadError);
}

// The bytes on disk, checked against the format description rather than against our reader.
TEST(SafetensorsWriter, WritesTheStandardLayout) {
  const ScratchDir dir;
  const auto path = dir / "layout.safetensors";
  save_safetensors(path, {{"b", torch::tensor({1.0f}).to(torch::kBFloat16)},
                          {"a", torch::tensor({1.0f, -2.0f})},
                          {"h", torch::tensor({1.0f}).to(torch::kFloat16)}});
  const std::string bytes = read_bytes(path);
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ(n % 8, 0u) << "header must be padded to a multiple of 8";
  ASSERT_EQ(bytes.size(), 8 + n + 8 + 2 + 2);
  const std::string header_text = bytes.substr(8, n);
  const size_t json_end = header_text.find_last_not_of(' ') + 1;
  EXPECT_EQ(header_text[json_end - 1], '}');
  EXPECT_LT(n - json_end, 8u) << "padding is spaces, fewer than 8";
  const auto header = nlohmann::json::parse(header_text);
  EXPECT_EQ(header.at("__metadata__"), nlohmann::json({{"format", "pt"}}));
  EXPECT_EQ(header.at("a"), nlohmann::json::parse(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})"));
  EXPECT_EQ(header.at("b"), nlohmann::json::parse(R"({"dtype":"BF16","shape":[1],"data_offsets":[8,10]})"));
  EXPECT_EQ(header.at("h"), nlohmann::json::parse(R"({"dtype":"F16","shape":[1],"data_offsets":[10,12]})"));
  const std::string data = bytes.substr(8 + n);
  // 1.0f = 0x3f800000, -2.0f = 0xc0000000, bf16 1.0 = 0x3f80, f16 1.0 = 0x3c00; all little-endian.
  EXPECT_EQ(data, std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0\x80\x3f\x00\x3c", 12));
}

TEST(SafetensorsWriter, WritesNonContiguousTensorsInLogicalOrder) {
  const ScratchDir dir;
  const auto path = dir / "t.safetensors";
  const torch::Tensor base = torch::tensor({1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}).reshape({2, 3});
  save_safetensors(path, {{"t", base.t()}});
  const SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_THAT(file.find("t")->shape, ElementsAre(3, 2));
  EXPECT_THAT(values<float>(file.tensor("t")), ElementsAre(1.0f, 4.0f, 2.0f, 5.0f, 3.0f, 6.0f));
}

TEST(SafetensorsWriter, ReplacesAtomicallyAndLeavesNoTemporaryFiles) {
  const ScratchDir dir;
  const auto path = dir / "t.safetensors";
  save_safetensors(path, {{"x", torch::tensor({1.0f})}});
  save_safetensors(path, {{"y", torch::tensor({2.0f, 3.0f})}});
  const SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_EQ(file.find("x"), nullptr);
  EXPECT_THAT(values<float>(file.tensor("y")), ElementsAre(2.0f, 3.0f));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), std::filesystem::directory_iterator()), 1);
}

// A write killed half-way (Ctrl-C during srformer bench's random model, a checkpoint) left its temporary
// file for good; the next write of the same file removes it, and leaves a running process's alone.
TEST(SafetensorsWriter, RemovesTheTemporaryFilesOfEndedProcesses) {
  const ScratchDir dir;
  const auto path = dir / "model.safetensors";
  const pid_t ended = ::fork();
  if (ended == 0) ::_exit(0);
  ASSERT_GT(ended, 0);
  ASSERT_EQ(::waitpid(ended, nullptr, 0), ended);
  const auto abandoned = dir / ("model.safetensors.tmp." + std::to_string(ended) + ".0");
  const auto running = dir / ("model.safetensors.tmp." + std::to_string(::getppid()) + ".0");
  const auto other = dir / ("other.safetensors.tmp." + std::to_string(ended) + ".0");
  const auto not_a_pid = dir / "model.safetensors.tmp.99999999999999999999.0";
  for (const auto& p : {abandoned, running, other, not_a_pid}) write_bytes(p, "partial");
  save_safetensors(path, {{"x", torch::tensor({1.0f})}});
  EXPECT_FALSE(std::filesystem::exists(abandoned));
  EXPECT_TRUE(std::filesystem::exists(running));
  EXPECT_TRUE(std::filesystem::exists(other));
  EXPECT_TRUE(std::filesystem::exists(not_a_pid));
  EXPECT_TRUE(std::filesystem::exists(path));
}

TEST(SafetensorsWriter, RefusesBadInput) {
  const ScratchDir dir;
  const auto path = dir / "t.safetensors";
  EXPECT_THROW(save_safetensors(path, {{"a", torch::ones({1})}, {"a", torch::ones({1})}}), std::invalid_argument);
  EXPECT_THROW(save_safetensors(path, {{"__metadata__", torch::ones({1})}}), std::invalid_argument);
  EXPECT_THROW(save_safetensors(path, {{"", torch::ones({1})}}), std::invalid_argument);
  EXPECT_THROW(save_safetensors(path, {{"c", torch::ones({1}, torch::kComplexFloat)}}), std::invalid_argument);
  EXPECT_THROW(save_safetensors(path, {{"u", torch::Tensor()}}), std::invalid_argument);
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_THROW(save_safetensors(dir / "no-such-dir" / "t.safetensors", {{"a", torch::ones({1})}}), std::runtime_error);
}

TEST(SafetensorsFile, TensorsAreZeroCopyViewsThatOutliveTheFileObject) {
  const ScratchDir dir;
  const auto path = dir / "t.safetensors";
  save_safetensors(path, {{"w", torch::tensor({1.0f, 2.0f, 3.0f})}});
  torch::Tensor kept;
  {
    const SafetensorsFile file = SafetensorsFile::open(path);
    const torch::Tensor a = file.tensor("w");
    EXPECT_EQ(a.data_ptr(), file.tensor("w").data_ptr()) << "both views should point into the one mapping";
    kept = a;
  }
  EXPECT_THAT(values<float>(kept), ElementsAre(1.0f, 2.0f, 3.0f));
  // Writing through a view is private to the process: no crash, and the file keeps its bytes.
  kept.mul_(10);
  EXPECT_THAT(values<float>(kept), ElementsAre(10.0f, 20.0f, 30.0f));
  EXPECT_THAT(values<float>(SafetensorsFile::open(path).tensor("w")), ElementsAre(1.0f, 2.0f, 3.0f));
}

TEST(SafetensorsFile, ReadsUnalignedDataByCopying) {
  // Header of odd length: the F32 data starts at an odd file offset.
  const std::string header = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  ASSERT_NE(header.size() % 4, 0u);
  const ScratchDir dir;
  std::string data(8, '\0');
  const float v[2] = {0.25f, -4.0f};
  std::memcpy(data.data(), v, 8);
  write_bytes(dir / "u.safetensors", safetensors_bytes(header, data));
  const SafetensorsFile file = SafetensorsFile::open(dir / "u.safetensors");
  EXPECT_THAT(values<float>(file.tensor("x")), ElementsAre(0.25f, -4.0f));
  EXPECT_TRUE(file.metadata().is_object());
  EXPECT_TRUE(file.metadata().empty());
}

// ---- The fixtures' real files (written by Python's safetensors) ----

nlohmann::json read_json(const std::filesystem::path& path) { return nlohmann::json::parse(read_bytes(path)); }

class FixtureFiles : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = fixtures_dir() / GetParam();
    if (!std::filesystem::is_directory(dir_)) GTEST_SKIP() << "fixture directory " << dir_ << " is absent";
  }
  std::filesystem::path dir_;
};

// Our offsets and bytes agree with a separate, by-hand parse of the same file.
void expect_matches_independent_parse(const std::filesystem::path& path) {
  const SafetensorsFile file = SafetensorsFile::open(path);
  const std::string bytes = read_bytes(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  auto header = nlohmann::json::parse(bytes.substr(8, n));
  EXPECT_EQ(file.metadata(), header.at("__metadata__"));
  header.erase("__metadata__");
  ASSERT_EQ(file.tensors().size(), header.size()) << path;
  for (const auto& [name, entry] : header.items()) {
    const TensorInfo* info = file.find(name);
    ASSERT_NE(info, nullptr) << name;
    EXPECT_EQ(info->dtype, entry.at("dtype").get<std::string>()) << name;
    EXPECT_EQ(info->shape, entry.at("shape").get<std::vector<int64_t>>()) << name;
    const auto offsets = entry.at("data_offsets").get<std::vector<uint64_t>>();
    EXPECT_EQ(info->begin, offsets[0]) << name;
    EXPECT_EQ(info->end, offsets[1]) << name;
    const torch::Tensor t = file.tensor(name);
    ASSERT_EQ(static_cast<uint64_t>(t.nbytes()), offsets[1] - offsets[0]) << name;
    EXPECT_EQ(std::memcmp(t.data_ptr(), bytes.data() + 8 + n + offsets[0], t.nbytes()), 0) << name;
  }
}

TEST_P(FixtureFiles, ModelAndCaseFilesMatchAnIndependentParse) {
  expect_matches_independent_parse(dir_ / "model" / "model.safetensors");
  expect_matches_independent_parse(dir_ / "case.safetensors");
}

TEST_P(FixtureFiles, CaseTensorsHaveTheDocumentedDtypesAndShapes) {
  const auto config = read_json(dir_ / "model" / "config.json");
  const SafetensorsFile file = SafetensorsFile::open(dir_ / "case.safetensors");
  EXPECT_EQ(file.metadata().at("format"), "pt");
  for (const char* name : {"input_ids", "attention_mask", "decoder_input_ids"}) {
    ASSERT_NE(file.find(name), nullptr) << name;
    EXPECT_EQ(file.find(name)->dtype, "I64") << name;
    EXPECT_EQ(file.tensor(name).scalar_type(), torch::kInt64) << name;
  }
  const auto ids = file.find("input_ids")->shape;
  const auto dec = file.find("decoder_input_ids")->shape;
  ASSERT_EQ(ids.size(), 2u);
  ASSERT_EQ(dec.size(), 2u);
  EXPECT_EQ(file.find("attention_mask")->shape, ids);
  const int64_t d_model = config.at("d_model").get<int64_t>();
  const int64_t vocab = config.at("vocab_size").get<int64_t>();
  EXPECT_EQ(file.find("encoder_hidden")->dtype, "F32");
  EXPECT_EQ(file.find("encoder_hidden")->shape, (std::vector<int64_t>{ids[0], ids[1], d_model}));
  EXPECT_EQ(file.find("logits")->dtype, "F32");
  EXPECT_EQ(file.find("logits")->shape, (std::vector<int64_t>{dec[0], dec[1], vocab}));
  // README: decoder_input_ids start with decoder_start_token_id; the mask holds only 0 and 1.
  const auto start = config.at("decoder_start_token_id").get<int64_t>();
  EXPECT_TRUE(file.tensor("decoder_input_ids").select(1, 0).eq(start).all().item<bool>());
  const torch::Tensor mask = file.tensor("attention_mask");
  EXPECT_TRUE(mask.eq(0).logical_or(mask.eq(1)).all().item<bool>());
  EXPECT_TRUE(file.tensor("input_ids").lt(vocab).all().item<bool>());
}

TEST_P(FixtureFiles, ModelHoldsTheDocumentedFloat32Parameters) {
  const auto config = read_json(dir_ / "model" / "config.json");
  const SafetensorsFile file = SafetensorsFile::open(dir_ / "model" / "model.safetensors");
  const int64_t d_model = config.at("d_model").get<int64_t>();
  const int64_t vocab = config.at("vocab_size").get<int64_t>();
  for (const TensorInfo& info : file.tensors()) EXPECT_EQ(info.dtype, "F32") << info.name;
  const bool t5 = config.at("model_type") == "t5";
  const std::string shared = t5 ? "shared.weight" : "model.shared.weight";
  ASSERT_NE(file.find(shared), nullptr);
  EXPECT_THAT(file.find(shared)->shape, ElementsAre(vocab, d_model));
  const int64_t head_dim =
      t5 ? config.at("d_kv").get<int64_t>() : d_model / config.at("decoder_attention_heads").get<int64_t>();
  const std::string cross = t5 ? "decoder.block.0.layer.1.EncDecAttention." : "model.decoder.layers.0.encoder_attn.";
  ASSERT_NE(file.find(cross + "SNN_kv.weight"), nullptr);
  EXPECT_THAT(file.find(cross + "SNN_kv.weight")->shape, ElementsAre(head_dim, head_dim));
  EXPECT_THAT(file.find(cross + "threshold")->shape, ElementsAre(1));
  EXPECT_THAT(file.find(cross + "leak")->shape, ElementsAre(1));
  if (!t5) {
    EXPECT_THAT(file.find("final_logits_bias")->shape, ElementsAre(1, vocab));
  }
}

INSTANTIATE_TEST_SUITE_P(All, FixtureFiles, ::testing::Values("t5-full", "t5-srformer", "bart-full", "bart-srformer"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// ---- Malformed files ----

struct Malformed {
  const char* label;
  std::string bytes;
  const char* reason;  // must appear in the LoadError message
};

std::string f32_entry(const std::string& name, const std::string& shape, const std::string& offsets) {
  return "\"" + name + R"(":{"dtype":"F32","shape":)" + shape + R"(,"data_offsets":)" + offsets + "}";
}

std::vector<Malformed> malformed_cases() {
  const std::string eight(8, '\0');
  const auto file = [&](const std::string& header, const std::string& data = std::string(8, '\0')) {
    return safetensors_bytes(header, data);
  };
  return {
      {"empty_file", "", "too short for the 8-byte header length"},
      {"five_bytes", "abcde", "file is 5 bytes, too short"},
      {"header_longer_than_file", le64(100) + "{}", "header length 100 exceeds the 2 bytes"},
      {"absurd_header_length", le64(uint64_t{1} << 40) + "{}", "is absurd"},
      {"max_header_length", le64(~uint64_t{0}) + "{}", "is absurd"},
      {"not_json", file("{\"a\": [1, 2"), "header is not valid JSON"},
      {"not_json_binary", le64(4) + std::string("\xff\xfe\x00\x01", 4), "header is not valid JSON"},
      {"json_array", file("[1, 2, 3]"), "header must be a JSON object, got array"},
      {"json_string", file("\"hello\""), "header must be a JSON object, got string"},
      {"metadata_not_object", file(R"({"__metadata__":"pt"})"), "\"__metadata__\" must be a JSON object"},
      {"entry_not_object", file(R"({"x":[1,2]})"), "tensor 'x': entry must be a JSON object"},
      {"missing_dtype", file(R"({"x":{"shape":[2],"data_offsets":[0,8]}})"), "tensor 'x': missing \"dtype\""},
      {"missing_shape", file(R"({"x":{"dtype":"F32","data_offsets":[0,8]}})"), "tensor 'x': missing \"shape\""},
      {"missing_offsets", file(R"({"x":{"dtype":"F32","shape":[2]}})"), "tensor 'x': missing \"data_offsets\""},
      {"dtype_not_string", file(R"({"x":{"dtype":4,"shape":[2],"data_offsets":[0,8]}})"), "\"dtype\" must be a string"},
      {"unknown_dtype", file(R"({"x":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})"), "unknown dtype \"F33\""},
      {"unsupported_dtype", file(R"({"x":{"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]}})"),
       "unknown dtype \"F8_E4M3\""},
      {"shape_not_array", file("{" + f32_entry("x", "2", "[0,8]") + "}"), "\"shape\" must be an array"},
      {"shape_float", file("{" + f32_entry("x", "[2.0]", "[0,8]") + "}"), "\"shape\" must be an array"},
      {"shape_string", file("{" + f32_entry("x", "[\"2\"]", "[0,8]") + "}"), "\"shape\" must be an array"},
      {"negative_dim", file("{" + f32_entry("x", "[-2]", "[0,8]") + "}"), "negative or oversized dimension"},
      {"huge_dim", file("{" + f32_entry("x", "[18446744073709551615]", "[0,8]") + "}"),
       "negative or oversized dimension"},
      {"shape_overflow", file("{" + f32_entry("x", "[4294967296,4294967296]", "[0,8]") + "}"),
       "more elements than fit in 64 bits"},
      {"offsets_not_array", file("{" + f32_entry("x", "[2]", "8") + "}"), "\"data_offsets\" must be [begin, end]"},
      {"offsets_one_number", file("{" + f32_entry("x", "[2]", "[8]") + "}"), "\"data_offsets\" must be [begin, end]"},
      {"offsets_three_numbers", file("{" + f32_entry("x", "[2]", "[0,8,8]") + "}"),
       "\"data_offsets\" must be [begin, end]"},
      {"offsets_negative", file("{" + f32_entry("x", "[2]", "[-8,0]") + "}"), "\"data_offsets\" must be [begin, end]"},
      {"offsets_float", file("{" + f32_entry("x", "[2]", "[0,8.0]") + "}"), "\"data_offsets\" must be [begin, end]"},
      {"begin_after_end", file("{" + f32_entry("x", "[0]", "[8,0]") + "}"), "has begin > end"},
      {"end_beyond_data", file("{" + f32_entry("x", "[4]", "[0,16]") + "}"), "end beyond the data section (8 bytes"},
      {"end_beyond_data_huge", file("{" + f32_entry("x", "[2]", "[18446744073709551608,18446744073709551615]") + "}"),
       "end beyond the data section"},
      {"size_mismatch", file("{" + f32_entry("x", "[3]", "[0,8]") + "}"), "span 8 bytes but dtype F32 with shape [3]"},
      {"size_mismatch_zero_elements", file("{" + f32_entry("x", "[0,3]", "[0,4]") + "}"), "span 4 bytes"},
      {"overlap", file("{" + f32_entry("a", "[2]", "[0,8]") + "," + f32_entry("b", "[1]", "[4,8]") + "}"),
       "tensors 'a' [0, 8) and 'b' [4, 8) overlap"},
      {"duplicate_region", file("{" + f32_entry("a", "[2]", "[0,8]") + "," + f32_entry("b", "[2]", "[0,8]") + "}"),
       "overlap"},
  };
}

class MalformedFile : public ::testing::TestWithParam<Malformed> {};

TEST_P(MalformedFile, IsRefusedWithThePathAndReason) {
  const ScratchDir dir;
  const auto path = dir / (std::string(GetParam().label) + ".safetensors");
  write_bytes(path, GetParam().bytes);
  try {
    SafetensorsFile::open(path);
    FAIL() << "opened a malformed file";
  } catch (const LoadError& e) {
    EXPECT_THAT(e.what(), HasSubstr(path.string()));
    EXPECT_THAT(e.what(), HasSubstr(GetParam().reason));
  }
}

INSTANTIATE_TEST_SUITE_P(All, MalformedFile, ::testing::ValuesIn(malformed_cases()),
                         [](const auto& info) { return std::string(info.param.label); });

TEST(SafetensorsFile, AcceptsGapsAndTouchingAndEmptyTensors) {
  // Gap between a and b, b touching c, an empty tensor sitting inside a's range, trailing bytes.
  const std::string header = "{" + f32_entry("a", "[1]", "[0,4]") + "," + f32_entry("b", "[1]", "[8,12]") + "," +
                             f32_entry("c", "[1]", "[12,16]") + "," + f32_entry("e", "[0]", "[2,2]") + "}";
  std::string data(20, '\0');
  const float v[4] = {1.0f, 9.0f, 2.0f, 3.0f};
  std::memcpy(data.data(), v, 16);
  const ScratchDir dir;
  // Pad so the data section is 4-aligned and the views are zero-copy.
  std::string padded = header;
  padded.append((8 - padded.size() % 8) % 8, ' ');
  write_bytes(dir / "ok.safetensors", safetensors_bytes(padded, data));
  const SafetensorsFile file = SafetensorsFile::open(dir / "ok.safetensors");
  EXPECT_EQ(file.tensor("a").item<float>(), 1.0f);
  EXPECT_EQ(file.tensor("b").item<float>(), 2.0f);
  EXPECT_EQ(file.tensor("c").item<float>(), 3.0f);
  EXPECT_EQ(file.tensor("e").numel(), 0);
}

// Every strict prefix of a valid file is refused (our writer leaves no slack after the last tensor).
TEST(SafetensorsFile, EveryTruncationIsRefused) {
  const ScratchDir dir;
  save_safetensors(dir / "full.safetensors", {{"a", torch::ones({3, 2})}, {"b", torch::tensor({int64_t{7}})}});
  const std::string bytes = read_bytes(dir / "full.safetensors");
  for (size_t size = 0; size < bytes.size(); ++size) {
    write_bytes(dir / "cut.safetensors", bytes.substr(0, size));
    EXPECT_THROW(SafetensorsFile::open(dir / "cut.safetensors"), LoadError) << "prefix of " << size << " bytes";
  }
}

// Random byte corruption either still parses (and every tensor then reads within bounds) or is a LoadError;
// nothing else may escape. Run under -fsanitize=address to catch out-of-bounds reads.
TEST(SafetensorsFile, RandomCorruptionIsRefusedOrReadsInBounds) {
  const ScratchDir dir;
  save_safetensors(dir / "full.safetensors",
                   {{"a", torch::ones({3, 2})}, {"b", torch::tensor({int64_t{7}})}, {"c", torch::zeros({0})}});
  const std::string original = read_bytes(dir / "full.safetensors");
  std::mt19937 rng(1234);
  int opened = 0;
  for (int trial = 0; trial < 1500; ++trial) {
    std::string bytes = original;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < flips; ++i) {
      // Mostly hit the header and its digits, where corruption is interesting.
      const size_t at = rng() % std::min<size_t>(bytes.size(), 8 + 160);
      bytes[at] = (rng() % 2 == 0) ? static_cast<char>(rng()) : "0123456789[]{},-\"\" "[rng() % 18];
    }
    write_bytes(dir / "bad.safetensors", bytes);
    try {
      const SafetensorsFile file = SafetensorsFile::open(dir / "bad.safetensors");
      ++opened;
      for (const TensorInfo& info : file.tensors()) {
        const torch::Tensor t = file.tensor(info.name);
        EXPECT_EQ(static_cast<uint64_t>(t.nbytes()), info.end - info.begin) << info.name;
        EXPECT_LE(info.end, bytes.size()) << info.name;
        if (t.numel() > 0) t.sum().item<double>();  // touch every byte
      }
    } catch (const LoadError&) {
    }
  }
  EXPECT_GT(opened, 0) << "some corruptions (e.g. in padding or tensor data) leave a valid file";
}

TEST(SafetensorsFile, MissingFileAndDirectoryAreLoadErrors) {
  const ScratchDir dir;
  EXPECT_THROW(SafetensorsFile::open(dir / "absent.safetensors"), LoadError);
  try {
    SafetensorsFile::open(dir.path());
    FAIL();
  } catch (const LoadError& e) {
    EXPECT_THAT(e.what(), HasSubstr("not a regular file"));
  }
}

}  // namespace
}  // namespace srformer
