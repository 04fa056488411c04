// CheckpointReader: single files, sharded directories, pytorch_model.bin, and the errors for each.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/serialize.h>
#include <torch/torch.h>

#include <map>
#include <string>
#include <tuple>

#include "model/io/checkpoint.h"
#include "model/io/load_error.h"
#include "model/io/pytorch_bin.h"
#include "model/io/safetensors.h"
#include "model/io/view_bounds.h"
#include "tests/model/io_test_util.h"
#include "tests/support/lfs_pointer.h"

namespace srformer {
namespace {

using ::testing::ElementsAre;
using testing::fixtures_dir;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::ScratchDir;
using testing::write_bytes;

std::string load_error(const std::filesystem::path& dir) {
  try {
    CheckpointReader::open_dir(dir);
  } catch (const LoadError& e) {
    return e.what();
  }
  ADD_FAILURE() << "open_dir(" << dir << ") succeeded";
  return "";
}

const char* kIndex = R"({
  "metadata": {"total_size": 28},
  "weight_map": {
    "a": "model-00001-of-00002.safetensors",
    "b": "model-00001-of-00002.safetensors",
    "c": "model-00002-of-00002.safetensors"
  }
})";

void write_sharded(const ScratchDir& dir) {
  save_safetensors(dir / "model-00001-of-00002.safetensors",
                   {{"a", torch::tensor({1.0f, 2.0f})}, {"b", torch::tensor({3.0f, 4.0f, 5.0f}).reshape({3, 1})}});
  save_safetensors(dir / "model-00002-of-00002.safetensors", {{"c", torch::tensor({int64_t{6}})}});
  write_bytes(dir / "model.safetensors.index.json", kIndex);
}

TEST(CheckpointReader, ReadsASingleSafetensorsFile) {
  const ScratchDir dir;
  save_safetensors(dir / "model.safetensors", {{"z.weight", torch::ones({2, 2})}, {"a.bias", torch::tensor({7.0f})}});
  const CheckpointReader ckpt = CheckpointReader::open_dir(dir.path());
  EXPECT_THAT(ckpt.names(), ElementsAre("a.bias", "z.weight"));
  EXPECT_TRUE(ckpt.contains("z.weight"));
  EXPECT_FALSE(ckpt.contains("z"));
  EXPECT_THAT(ckpt.shape("z.weight"), ElementsAre(2, 2));
  EXPECT_EQ(ckpt.get("a.bias").item<float>(), 7.0f);
  EXPECT_EQ(ckpt.describe(), "model.safetensors (2 tensors)");
  EXPECT_THROW(ckpt.get("nope"), LoadError);
  EXPECT_THROW(ckpt.shape("nope"), LoadError);
}

TEST(CheckpointReader, ReadsShardsNamedByTheIndex) {
  const ScratchDir dir;
  write_sharded(dir);
  const CheckpointReader ckpt = CheckpointReader::open_dir(dir.path());
  EXPECT_THAT(ckpt.names(), ElementsAre("a", "b", "c"));
  EXPECT_THAT(ckpt.shape("b"), ElementsAre(3, 1));
  EXPECT_TRUE(torch::equal(ckpt.get("a"), torch::tensor({1.0f, 2.0f})));
  EXPECT_TRUE(torch::equal(ckpt.get("b").flatten(), torch::tensor({3.0f, 4.0f, 5.0f})));
  EXPECT_EQ(ckpt.get("c").scalar_type(), torch::kInt64);
  EXPECT_EQ(ckpt.get("c").item<int64_t>(), 6);
  EXPECT_EQ(ckpt.describe(), "model.safetensors.index.json (2 shards, 3 tensors)");
}

// A shard holding a tensor its index's weight_map does not list (an index edited or merged by hand): it was
// left out, so a model needing it was refused as "has no tensor named" it though the shard holds it.
// transformers 5 (and 4 before 4.50) reads every tensor of every shard the index names; a name the index
// lists still comes from the shard it names.
TEST(CheckpointReader, AShardsTensorTheIndexDoesNotListIsReadAsTransformersReadsIt) {
  const ScratchDir dir;
  write_sharded(dir);
  save_safetensors(dir / "model-00002-of-00002.safetensors",
                   {{"c", torch::tensor({int64_t{6}})}, {"unlisted", torch::tensor({8.0f})}, {"a", torch::zeros({2})}});
  const CheckpointReader ckpt = CheckpointReader::open_dir(dir.path());
  EXPECT_THAT(ckpt.names(), ElementsAre("a", "b", "c", "unlisted"));
  EXPECT_EQ(ckpt.get("unlisted").item<float>(), 8.0f);
  EXPECT_TRUE(torch::equal(ckpt.get("a"), torch::tensor({1.0f, 2.0f}))) << "the index puts 'a' in the first shard";
  EXPECT_EQ(ckpt.describe(), "model.safetensors.index.json (2 shards, 4 tensors)");
}

TEST(CheckpointReader, PrefersSafetensorsOverPytorchBin) {
  const ScratchDir dir;
  save_safetensors(dir / "model.safetensors", {{"w", torch::ones({1})}});
  write_bytes(dir / "pytorch_model.bin", "not a pickle");
  EXPECT_EQ(CheckpointReader::open_dir(dir.path()).describe(), "model.safetensors (1 tensors)");
}

TEST(CheckpointReader, EmptyDirectoryListsTheFilesItLookedFor) {
  const ScratchDir dir;
  const std::string message = load_error(dir.path());
  EXPECT_THAT(message, HasSubstr(dir.path().string()));
  EXPECT_THAT(message, HasSubstr("no weights found"));
  for (const char* name :
       {"model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json"}) {
    EXPECT_THAT(message, HasSubstr(name));
  }
}

// A repository with only TensorFlow's or Flax's weights (Flax community T5s) is told how to convert them; it
// was told only that no weights were found.
TEST(CheckpointReader, TensorFlowOrFlaxWeightsAloneAreNamedWithTheirConversion) {
  for (const auto& [file, flag] :
       {std::pair{"tf_model.h5", "from_tf=True"}, std::pair{"flax_model.msgpack", "from_flax=True"}}) {
    const ScratchDir dir;
    write_bytes(dir / file, "weights");
    const std::string message = load_error(dir.path());
    EXPECT_THAT(message, HasSubstr(dir.path().string() + ": no PyTorch weights, only"));
    EXPECT_THAT(message, HasSubstr(std::string("'s ") + file + "; convert them once with transformers 4"));
    EXPECT_THAT(message, HasSubstr(std::string("from_pretrained('") + dir.path().string() + "', " + flag +
                                   ").save_pretrained('" + dir.path().string() + "')"));
    save_safetensors(dir / "model.safetensors", {{"w", torch::ones({1})}});  // PyTorch's weights come first
    EXPECT_EQ(CheckpointReader::open_dir(dir.path()).describe(), "model.safetensors (1 tensors)");
  }
}

// TensorFlow's and Flax's save_pretrained also write model.safetensors, marked "format": "tf" or "flax", with
// their own names and transposed kernels. It was read as PyTorch's, and loading a model then named every
// tensor missing.
TEST(CheckpointReader, TensorFlowOrFlaxSafetensorsAreNamedWithTheirConversion) {
  for (const auto& [format, framework, tensor] :
       {std::tuple{"tf", "TensorFlow", "encoder/block_._0/layer_._0/SelfAttention/q/kernel:0"},
        std::tuple{"flax", "Flax", "encoder.block.0.layer.0.SelfAttention.q.kernel"}}) {
    const ScratchDir dir;
    save_safetensors(dir / "model.safetensors", {{tensor, torch::ones({2, 2})}}, {{"format", format}});
    const std::string message = load_error(dir.path());
    EXPECT_THAT(message, HasSubstr((dir / "model.safetensors").string() + " holds " + framework + "'s weights"));
    EXPECT_THAT(message, HasSubstr(std::string("\"format\": \"") + format + "\""));
    EXPECT_THAT(message, HasSubstr("from_pretrained('" + dir.path().string() + "').save_pretrained('" +
                                   dir.path().string() + "-pytorch')"));
  }
  // PyTorch's own mark, MLX's (PyTorch's names), or none: read as they are.
  for (const std::map<std::string, std::string>& metadata :
       {std::map<std::string, std::string>{}, std::map<std::string, std::string>{{"format", "mlx"}}}) {
    const ScratchDir dir;
    save_safetensors(dir / "model.safetensors", {{"w", torch::ones({1})}}, metadata);
    EXPECT_EQ(CheckpointReader::open_dir(dir.path()).describe(), "model.safetensors (1 tensors)");
  }
}

// Any "__metadata__" mark but "pt" and "mlx" was read as PyTorch's: PaddleNLP's and MindSpore's "np" (linear
// weights stored [in, out], so a square projection was taken transposed without a word), or a "__metadata__"
// without "format". transformers refuses both ("Incompatible safetensors file. File metadata is not ['pt', 'tf',
// 'flax', 'mlx'] but np"); a header without "__metadata__" is PyTorch's there, and here.
TEST(CheckpointReader, ASafetensorsMarkOtherThanPytorchsIsRefusedAsTransformersRefusesIt) {
  for (const auto& [metadata, said] : {std::pair{R"({"format": "np"})", R"(says "format": "np"; )"},
                                       std::pair{R"({"format": "paddle"})", R"(says "format": "paddle"; )"},
                                       std::pair{R"({"total_size": "4"})", R"(says no "format"; )"}}) {
    for (const bool sharded : {false, true}) {
      const ScratchDir dir;
      const std::string file = sharded ? "model-00001-of-00001.safetensors" : "model.safetensors";
      write_bytes(dir / file,
                  testing::safetensors_bytes(std::string(R"({"__metadata__": )") + metadata +
                                                 R"(, "w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})",
                                             std::string(4, '\0')));
      if (sharded) write_bytes(dir / "model.safetensors.index.json", R"({"weight_map": {"w": ")" + file + "\"}}");
      const std::string message = load_error(dir.path());
      EXPECT_THAT(message, HasSubstr((dir / file).string() + ": its header's \"__metadata__\" " + said +
                                     "transformers reads only \"pt\" (PyTorch's) and \"mlx\" and refuses it too"));
      EXPECT_THAT(message, HasSubstr("save_file(load_file(p), p, metadata={'format': 'pt'})"));
      EXPECT_EQ(message.find("PaddleNLP") != std::string::npos, std::string(metadata).find("np") != std::string::npos)
          << message;
    }
  }
  const ScratchDir dir;
  write_bytes(dir / "model.safetensors",
              testing::safetensors_bytes(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})",
                                         std::string(4, '\0')));
  EXPECT_EQ(CheckpointReader::open_dir(dir.path()).describe(), "model.safetensors (1 tensors)");
}

TEST(CheckpointReader, MissingDirectoryIsALoadError) {
  const ScratchDir dir;
  EXPECT_THAT(load_error(dir / "absent"), HasSubstr("not a directory"));
}

TEST(CheckpointReader, CorruptSingleFileNamesTheFile) {
  const ScratchDir dir;
  write_bytes(dir / "model.safetensors", "abc");
  const std::string message = load_error(dir.path());
  EXPECT_THAT(message, HasSubstr((dir / "model.safetensors").string()));
  EXPECT_THAT(message, HasSubstr("too short"));
}

TEST(CheckpointReader, ShardErrorsNameTheShard) {
  {
    const ScratchDir dir;
    write_sharded(dir);
    std::filesystem::remove(dir / "model-00002-of-00002.safetensors");
    const std::string message = load_error(dir.path());
    EXPECT_THAT(message, HasSubstr("shard model-00002-of-00002.safetensors (1 tensors) is missing"));
  }
  {
    const ScratchDir dir;
    write_sharded(dir);
    // A name the index lists but its shard lacks is absent (as the Hub's conversions list tied weights
    // stored once), not an error: the model that needs it says so (load_model_test.cc). "d", which the index
    // does not list, is read all the same.
    save_safetensors(dir / "model-00002-of-00002.safetensors", {{"d", torch::ones({1})}});
    const CheckpointReader ckpt = CheckpointReader::open_dir(dir.path());
    EXPECT_THAT(ckpt.names(), ElementsAre("a", "b", "d"));
    EXPECT_EQ(ckpt.shard_lacking("c"), "model-00002-of-00002.safetensors");
    EXPECT_EQ(ckpt.shard_lacking("a"), std::nullopt);
    EXPECT_EQ(ckpt.shard_lacking("d"), std::nullopt);
  }
  {
    const ScratchDir dir;
    write_bytes(dir / "model.safetensors.index.json", R"({"weight_map": {"a": "../elsewhere.safetensors"}})");
    EXPECT_THAT(load_error(dir.path()), HasSubstr("shards must be plain file names"));
  }
  {
    const ScratchDir dir;
    write_bytes(dir / "model.safetensors.index.json", R"({"weight_map": {"a": "/tmp/x.safetensors"}})");
    EXPECT_THAT(load_error(dir.path()), HasSubstr("shards must be plain file names"));
  }
  {
    const ScratchDir dir;
    write_bytes(dir / "model.safetensors.index.json", R"({"weight_map": [1]})");
    EXPECT_THAT(load_error(dir.path()), HasSubstr("\"weight_map\" object"));
  }
  {
    const ScratchDir dir;
    write_bytes(dir / "model.safetensors.index.json", R"({"weight_map": {"a": 3}})");
    EXPECT_THAT(load_error(dir.path()), HasSubstr("must name a shard file"));
  }
  {
    const ScratchDir dir;
    write_bytes(dir / "model.safetensors.index.json", "{\"weight_map\": ");
    EXPECT_THAT(load_error(dir.path()), HasSubstr("not valid JSON"));
  }
}

TEST(CheckpointReader, UnreadablePytorchBinExplainsHowToConvert) {
  for (const std::string& bytes : {std::string("\x80\x02}q\x00.", 6), std::string("PK\x03\x04garbage-zip", 15)}) {
    const ScratchDir dir;
    write_bytes(dir / "pytorch_model.bin", bytes);
    const std::string message = load_error(dir.path());
    EXPECT_THAT(message, HasSubstr((dir / "pytorch_model.bin").string()));
    EXPECT_THAT(message, HasSubstr("python -c"));
    EXPECT_THAT(message, HasSubstr("save_file"));
    // Not `srformer convert`, which reads the file through the same code and refuses it alike (the hint
    // said "or with our tool: srformer convert DIR", which also lacked its DST_DIR).
    EXPECT_THAT(message, Not(HasSubstr("srformer convert")));
  }
}

// A checkout made without Git LFS holds pointers in place of the weights: the message says so and how
// to fetch them, for a single file, a shard and pytorch_model.bin alike.
TEST(CheckpointReader, AGitLfsPointerIsNamedWithTheFix) {
  constexpr int64_t kSize = 557971229;
  const std::string pointer = testing::lfs_pointer_text(kSize);
  const auto expect_pointer_message = [](const std::string& message, const std::string& file) {
    testing::expect_lfs_pointer_message(message, file, kSize);
  };
  {
    const ScratchDir dir;
    write_bytes(dir / "model.safetensors", pointer);
    expect_pointer_message(load_error(dir.path()), (dir / "model.safetensors").string());
  }
  {
    const ScratchDir dir;
    write_sharded(dir);
    write_bytes(dir / "model-00002-of-00002.safetensors", pointer);
    expect_pointer_message(load_error(dir.path()), (dir / "model-00002-of-00002.safetensors").string());
  }
  {
    const ScratchDir dir;
    write_bytes(dir / "pytorch_model.bin", pointer);
    expect_pointer_message(load_error(dir.path()), (dir / "pytorch_model.bin").string());
  }
  {
    // Text that only starts like one is still reported as what it is.
    const ScratchDir dir;
    write_bytes(dir / "model.safetensors", "version 2 of my weights");
    EXPECT_THAT(load_error(dir.path()), Not(HasSubstr("Git LFS")));
  }
}

// A zip-format pickle of a plain {name: tensor} dict, as LibTorch's own pickle_save writes it (the same
// container torch.save uses).
TEST(CheckpointReader, ReadsAZipFormatPytorchBin) {
  const ScratchDir dir;
  c10::Dict<std::string, torch::Tensor> dict;
  dict.insert("encoder.w", torch::tensor({1.0f, 2.0f, 3.0f}).reshape({3, 1}));
  dict.insert("ids", torch::tensor({int64_t{4}, int64_t{5}}));
  const std::vector<char> bytes = torch::pickle_save(torch::IValue(dict));
  write_bytes(dir / "pytorch_model.bin", std::string(bytes.begin(), bytes.end()));

  const CheckpointReader ckpt = CheckpointReader::open_dir(dir.path());
  EXPECT_EQ(ckpt.describe(), "pytorch_model.bin (2 tensors)");
  EXPECT_THAT(ckpt.names(), ElementsAre("encoder.w", "ids"));
  EXPECT_THAT(ckpt.shape("encoder.w"), ElementsAre(3, 1));
  EXPECT_TRUE(torch::equal(ckpt.get("encoder.w").flatten(), torch::tensor({1.0f, 2.0f, 3.0f})));
  EXPECT_EQ(ckpt.get("ids").scalar_type(), torch::kInt64);
}

// A tensor's view (offset, sizes, strides) comes from the file: one reaching past its storage was read
// past its end under LibTorch's unpickler (ASan, fuzzing: heap-buffer-overflow when the weights were
// packed). The reader checks each view (view_outside_bytes) before making it.
TEST(CheckpointReader, APytorchBinViewReachingPastItsStorageIsNamed) {
  // Float elements in a storage of 1,024 bytes (256 floats).
  const auto view = [](int64_t offset, std::vector<int64_t> sizes, std::vector<int64_t> strides) {
    return view_outside_bytes(offset, sizes, strides, sizeof(float), 1024);
  };
  EXPECT_EQ(view(0, {16, 16}, {16, 1}), "");
  EXPECT_EQ(view(100, {12, 13}, {13, 1}), "") << "ends at 255";
  EXPECT_EQ(view(100, {16, 16}, {16, 1}), "reads 1424 bytes of a storage of 1024");
  EXPECT_EQ(view(0, {16, 16}, {int64_t{1} << 40, 1}), "reads 65970697666624 bytes of a storage of 1024");
  EXPECT_EQ(view(0, {4, 16}, {int64_t{1} << 62, 1}), "reaches past any storage");
  EXPECT_EQ(view(int64_t{1} << 40, {2}, {1}), "reads 4398046511112 bytes of a storage of 1024");
  EXPECT_EQ(view(0, {0, 16}, {16, 1}), "") << "nothing to read";
}

TEST(CheckpointReader, PytorchBinThatIsNotATensorDictIsRefused) {
  const ScratchDir dir;
  const std::vector<char> bytes = torch::pickle_save(torch::IValue(int64_t{3}));
  write_bytes(dir / "pytorch_model.bin", std::string(bytes.begin(), bytes.end()));
  EXPECT_THAT(load_error(dir.path()), HasSubstr("expected a {name: tensor} dict"));
}

TEST(CheckpointReader, ReadsTheFixtureModels) {
  struct Expected {
    const char* fixture;
    size_t tensors;  // counted from the file header with Python's json module
    const char* shared;
  };
  for (const Expected& e :
       {Expected{"t5-full", 56, "shared.weight"}, Expected{"bart-full", 101, "model.shared.weight"}}) {
    const auto dir = fixtures_dir() / e.fixture / "model";
    if (!std::filesystem::is_directory(dir)) GTEST_SKIP() << "fixture directory " << dir << " is absent";
    const CheckpointReader ckpt = CheckpointReader::open_dir(dir);
    EXPECT_EQ(ckpt.describe(), "model.safetensors (" + std::to_string(e.tensors) + " tensors)");
    EXPECT_TRUE(ckpt.contains(e.shared)) << e.fixture;
    EXPECT_EQ(ckpt.get(e.shared).scalar_type(), torch::kFloat32);
  }
}

}  // namespace
}  // namespace srformer
