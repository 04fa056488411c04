// load_pytorch_bin: our zip reader and restricted unpickler on archives written as torch.save writes
// them, on LibTorch's own pickle_save output, and on damaged files (which must throw, never crash).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/serialize.h>
#include <torch/torch.h>

#include <random>

#include "model/io/load_error.h"
#include "model/io/pytorch_bin.h"
#include "model/io/torch_unpickler.h"
#include "model/io/zip_archive.h"
#include "tests/model/io_test_util.h"
#include "tests/model/torch_save_writer.h"

namespace srformer {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using namespace std::string_literals;
using testing::le_bytes;
using testing::SavedTensor;
using testing::ScratchDir;
using testing::torch_save_pickle;
using testing::torch_save_records;
using testing::write_bytes;
using testing::zip_records;

std::string tensor_bytes(const torch::Tensor& t) {
  const torch::Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.nbytes());
}

std::string load_error(const std::filesystem::path& file) {
  try {
    load_pytorch_bin(file);
  } catch (const LoadError& e) {
    return e.what();
  }
  ADD_FAILURE() << "load_pytorch_bin(" << file << ") succeeded";
  return "";
}

// A state dict of four dtypes, one storage each, as torch.save writes it.
struct Sample {
  std::vector<SavedTensor> tensors;
  std::map<std::string, std::string> storages;
  std::map<std::string, torch::Tensor> expected;

  Sample() {
    add("enc.weight", "FloatStorage", torch::arange(6, torch::kFloat).reshape({2, 3}) / 4);
    add("enc.half", "HalfStorage", torch::tensor({1.5, -2.0, 65504.0, 0.25}, torch::kHalf));
    add("enc.bf16", "BFloat16Storage", torch::tensor({3.0, -0.5, 1e30}, torch::kBFloat16));
    add("ids", "LongStorage", torch::tensor({int64_t{1} << 40, int64_t{-7}}));
  }
  void add(const std::string& name, const std::string& storage_class, const torch::Tensor& t) {
    const std::string key = std::to_string(storages.size());
    tensors.push_back({name, key, storage_class, t.numel(), 0, t.sizes().vec(), t.strides().vec()});
    storages[key] = tensor_bytes(t);
    expected[name] = t;
  }
  std::string pickle() const { return torch_save_pickle(tensors); }
  std::string archive(bool zip64 = false) const { return zip_records(torch_save_records(pickle(), storages), zip64); }
};

void expect_same(const std::map<std::string, torch::Tensor>& got, const std::map<std::string, torch::Tensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, t] : want) {
    const auto it = got.find(name);
    ASSERT_NE(it, got.end()) << name;
    EXPECT_EQ(it->second.scalar_type(), t.scalar_type()) << name;
    EXPECT_EQ(it->second.sizes(), t.sizes()) << name;
    EXPECT_EQ(it->second.strides(), t.strides()) << name;
    EXPECT_TRUE(torch::equal(it->second, t)) << name;
  }
}

TEST(PytorchBin, ReadsWhatTorchSaveWrites) {
  const ScratchDir dir;
  const Sample sample;
  for (const bool zip64 : {false, true}) {
    write_bytes(dir / "pytorch_model.bin", sample.archive(zip64));
    expect_same(load_pytorch_bin(dir / "pytorch_model.bin"), sample.expected);
  }
}

TEST(PytorchBin, ReadsAnOlderArchiveNamedAfterTheFile) {
  const ScratchDir dir;
  const Sample sample;
  write_bytes(dir / "pytorch_model.bin",
              zip_records(torch_save_records(sample.pickle(), sample.storages, "pytorch_model/")));
  expect_same(load_pytorch_bin(dir / "pytorch_model.bin"), sample.expected);
}

// A file whose data.pkl Python's own pickle module wrote (tests/data/torch_save/README.md).
TEST(PytorchBin, ReadsTheStdlibPickledFixture) {
  const auto got =
      load_pytorch_bin(std::filesystem::path(SRFORMER_SOURCE_DIR) / "tests/data/torch_save/state_dict.bin");
  const torch::Tensor weight = torch::arange(12, torch::kFloat).reshape({3, 4}) / 4;
  std::map<std::string, torch::Tensor> expected = {
      {"shared.weight", weight},
      {"lm_head.weight", weight},
      {"row", weight[2]},
      {"transposed", weight.t()},
      {"half", torch::tensor({1.5, -2.0, 65504.0}, torch::kHalf)},
      {"bf16", torch::tensor({3.0, -0.5, 256.0, 1.0}, torch::kBFloat16).reshape({2, 2})},
      {"ids", torch::tensor({int64_t{1} << 40, int64_t{-7}})},
      {"empty", torch::zeros({0, 5})},
      {"param", weight[1]},
  };
  expect_same(got, expected);
  EXPECT_EQ(got.at("shared.weight").storage().data(), got.at("lm_head.weight").storage().data()) << "tied";
  EXPECT_EQ(got.at("row").storage_offset(), 8);
}

// Tied weights and views: three tensors over one storage of 12 floats, at offsets and with a transposed
// (non-contiguous) stride, must share that storage as in Python.
TEST(PytorchBin, TensorsSharingAStorageShareIt) {
  const ScratchDir dir;
  const torch::Tensor all = torch::arange(12, torch::kFloat);
  const std::vector<SavedTensor> tensors = {
      {"shared", "0", "FloatStorage", 12, 0, {2, 3}, {3, 1}},
      {"tail", "0", "FloatStorage", 12, 6, {6}, {1}},
      {"transposed", "0", "FloatStorage", 12, 0, {3, 2}, {1, 3}},
      {"empty", "1", "FloatStorage", 0, 0, {0, 4}, {4, 1}},
      {"scalar", "2", "LongStorage", 1, 0, {}, {}},
  };
  write_bytes(dir / "pytorch_model.bin",
              zip_records(torch_save_records(torch_save_pickle(tensors),
                                             {{"0", tensor_bytes(all)}, {"1", ""}, {"2", le_bytes(42, 8)}})));
  const auto got = load_pytorch_bin(dir / "pytorch_model.bin");
  EXPECT_TRUE(torch::equal(got.at("shared"), all.slice(0, 0, 6).reshape({2, 3})));
  EXPECT_TRUE(torch::equal(got.at("tail"), all.slice(0, 6, 12)));
  EXPECT_TRUE(torch::equal(got.at("transposed"), all.slice(0, 0, 6).reshape({2, 3}).t()));
  EXPECT_FALSE(got.at("transposed").is_contiguous());
  EXPECT_EQ(got.at("tail").storage_offset(), 6);
  EXPECT_EQ(got.at("shared").storage().data(), got.at("tail").storage().data()) << "one storage per key";
  EXPECT_EQ(got.at("shared").storage().data(), got.at("transposed").storage().data());
  EXPECT_EQ(got.at("empty").sizes(), (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(got.at("scalar").dim(), 0);
  EXPECT_EQ(got.at("scalar").item<int64_t>(), 42);
}

// The comparison with LibTorch's own reader, on valid files only (it is what may crash on the others).
TEST(PytorchBin, ReadsLibTorchPickleSaveAsPickleLoadDoes) {
  const ScratchDir dir;
  c10::Dict<std::string, torch::Tensor> dict;
  const torch::Tensor base = torch::randn({4, 5});
  dict.insert("base", base);
  dict.insert("base.t", base.t());
  dict.insert("row", base[2]);
  dict.insert("half", torch::randn({3, 2}).to(torch::kHalf));
  dict.insert("bf16", torch::randn({7}).to(torch::kBFloat16));
  dict.insert("ids", torch::tensor({int64_t{1} << 40, int64_t{-3}}));
  dict.insert("mask", torch::tensor({true, false, true}));
  dict.insert("bytes", torch::tensor({1, 2, 250}, torch::kByte));
  dict.insert("empty", torch::zeros({0, 3}));
  const std::vector<char> bytes = torch::pickle_save(torch::IValue(dict));
  write_bytes(dir / "pytorch_model.bin", std::string(bytes.begin(), bytes.end()));

  std::map<std::string, torch::Tensor> expected;
  for (const auto& item : torch::pickle_load(bytes).toGenericDict()) {
    expected[item.key().toStringRef()] = item.value().toTensor();
  }
  ASSERT_EQ(expected.size(), 9u);
  const auto got = load_pytorch_bin(dir / "pytorch_model.bin");
  expect_same(got, expected);
  EXPECT_EQ(got.at("base").storage().data(), got.at("row").storage().data());
  EXPECT_EQ(got.at("row").storage_offset(), 10);
}

TEST(PytorchBin, RefusesArchivesThatAreNotPlainStateDicts) {
  const ScratchDir dir;
  const Sample sample;
  const auto refused = [&](const std::string& archive, const std::string& why) {
    write_bytes(dir / "pytorch_model.bin", archive);
    const std::string message = load_error(dir / "pytorch_model.bin");
    EXPECT_THAT(message, HasSubstr(why));
    EXPECT_THAT(message, HasSubstr((dir / "pytorch_model.bin").string()));
    // srformer convert reads the file through this same code: pointing to it sent the user in a circle.
    EXPECT_THAT(message, Not(HasSubstr("srformer convert")));
  };
  {
    auto records = torch_save_records(sample.pickle(), sample.storages);
    records.erase(records.begin());
    refused(zip_records(records), "has no archive/data.pkl");
  }
  {
    auto records = torch_save_records(sample.pickle(), sample.storages);
    records[2].method = 8;
    refused(zip_records(records), "entry 'archive/data/0' is compressed (deflate)");
  }
  {
    auto records = torch_save_records(sample.pickle(), sample.storages);
    records[1].bytes = "big";
    refused(zip_records(records), "byteorder record says 'big'");
  }
  {
    auto records = torch_save_records(sample.pickle(), sample.storages);
    records[3].bytes.resize(records[3].bytes.size() - 1);  // enc.half's storage, one byte short
    refused(zip_records(records), "record archive/data/1 holds 7 bytes, but the pickle declares 4 elements of 2 bytes");
  }
  {
    auto records = torch_save_records(sample.pickle(), sample.storages);
    records.erase(records.begin() + 2);
    refused(zip_records(records), "storage '0' has no record archive/data/0");
  }
  {
    auto records = torch_save_records(sample.pickle(), sample.storages);
    records.push_back({"elsewhere/x", "1"});
    refused(zip_records(records), "not in one top-level directory");
  }
  {
    // A view reaching past its storage: 2x3 floats over a storage of 6 at offset 1.
    auto tensors = sample.tensors;
    tensors[0].offset = 1;
    refused(zip_records(torch_save_records(torch_save_pickle(tensors), sample.storages)),
            "tensor 'enc.weight' reads 28 bytes of a storage of 24 (a damaged file)");
  }
  {
    // The pickle a malicious file would hold: os.system('...') instead of a tensor.
    testing::PickleWriter w;
    w.proto();
    w.global("os", "system");
    w.str("touch /tmp/srformer-pwned");
    w.op('\x85');
    w.op('R');
    w.op('.');
    refused(zip_records(torch_save_records(w.bytes, {})), "refuses the global 'os.system'");
    EXPECT_FALSE(std::filesystem::exists("/tmp/srformer-pwned"));
  }
  {
    testing::PickleWriter w;
    w.proto();
    w.integer(3);
    w.op('.');
    refused(zip_records(torch_save_records(w.bytes, {})), "expected a {name: tensor} dict, got a int");
  }
}

// Every prefix of an archive is a truncated file: each must be refused, none may crash.
TEST(PytorchBin, EveryTruncationIsRefused) {
  const ScratchDir dir;
  for (const bool zip64 : {false, true}) {
    const std::string full = Sample().archive(zip64);
    for (size_t length = 0; length < full.size(); ++length) {
      write_bytes(dir / "pytorch_model.bin", full.substr(0, length));
      EXPECT_THROW(load_pytorch_bin(dir / "pytorch_model.bin"), LoadError) << "length " << length;
    }
  }
}

// Random damage either loads (a flip in tensor data, which no checksum covers) or throws LoadError; the
// loaded tensors are read in full so that a view outside its bytes shows under ASan. Returns whether it
// loaded.
bool expect_damage_is_handled(const ScratchDir& dir, const std::string& bytes, const std::string& what) {
  write_bytes(dir / "pytorch_model.bin", bytes);
  try {
    for (const auto& [name, t] : load_pytorch_bin(dir / "pytorch_model.bin")) {
      (void)t.to(torch::kDouble).sum().item<double>();
    }
    return true;
  } catch (const LoadError&) {
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": not a LoadError: " << e.what();
  }
  return false;
}

// With its fixed seed the damage lands both in tensor data (loads) and in what the reader checks (refused):
// a reader that refused everything, or checked nothing, fails here.
TEST(PytorchBin, RandomByteFlipsLoadOrThrow) {
  const ScratchDir dir;
  const Sample sample;
  std::mt19937 rng(20240611);
  for (const bool zip64 : {false, true}) {
    const std::string archive = sample.archive(zip64);
    const int rounds = 1500;
    int loaded = 0;
    for (int round = 0; round < rounds; ++round) {
      std::string damaged = archive;
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int i = 0; i < flips; ++i) {
        damaged[rng() % damaged.size()] ^= static_cast<char>(1 + rng() % 255);
      }
      loaded += expect_damage_is_handled(dir, damaged, "round " + std::to_string(round)) ? 1 : 0;
    }
    EXPECT_GT(loaded, 0) << "zip64 " << zip64 << ": no damaged file loaded";
    EXPECT_LT(loaded, rounds) << "zip64 " << zip64 << ": no damage was refused";
  }
}

// The same inside data.pkl, re-archived with a matching CRC so that the unpickler sees the damage.
TEST(PytorchBin, RandomPickleDamageLoadsOrThrows) {
  const ScratchDir dir;
  const Sample sample;
  const std::string pickle = sample.pickle();
  std::mt19937 rng(7);
  int loaded = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string damaged = pickle;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < flips; ++i) damaged[rng() % damaged.size()] ^= static_cast<char>(1 + rng() % 255);
    if (round % 3 == 0) damaged.resize(rng() % damaged.size());
    const std::string archive = zip_records(torch_save_records(damaged, sample.storages));
    write_bytes(dir / "pytorch_model.bin", archive);
    try {
      for (const auto& [name, t] : load_pytorch_bin(dir / "pytorch_model.bin")) {
        (void)t.to(torch::kDouble).sum().item<double>();
      }
      ++loaded;
    } catch (const LoadError&) {
    } catch (const std::exception& e) {
      ADD_FAILURE() << "round " << round << ": not a LoadError: " << e.what();
    }
  }
  EXPECT_LT(loaded, 3000) << "the damage must be seen";
}

// Zip-level damage the reader names instead of reading out of bounds.
TEST(PytorchBin, ZipDamageIsNamed) {
  const ScratchDir dir;
  const Sample sample;
  const std::string archive = sample.archive();
  {
    std::string damaged = archive;
    // The local header's name of the first record, "archive/data.pkl": change one letter.
    damaged[30 + 8] = 'D';
    write_bytes(dir / "pytorch_model.bin", damaged);
    EXPECT_THAT(load_error(dir / "pytorch_model.bin"), HasSubstr("another name in its local header"));
  }
  {
    std::string damaged = archive;
    damaged[archive.find("\x80\x02") + 3] ^= 0x20;  // inside data.pkl
    write_bytes(dir / "pytorch_model.bin", damaged);
    EXPECT_THAT(load_error(dir / "pytorch_model.bin"), HasSubstr("'archive/data.pkl' does not match its CRC-32"));
  }
  {
    write_bytes(dir / "pytorch_model.bin", archive + "trailing");
    EXPECT_THAT(load_error(dir / "pytorch_model.bin"), HasSubstr("no end-of-central-directory record"));
  }
}

// The unpickler alone, on pickles no writer makes.
std::string unpickle_error(const std::string& pickle) {
  try {
    unpickle_state_dict(pickle, [](const std::string&, torch::ScalarType dtype, uint64_t numel) {
      return torch::zeros({static_cast<int64_t>(numel)}, dtype);
    });
  } catch (const LoadError& e) {
    return e.what();
  }
  ADD_FAILURE() << "the pickle was read";
  return "";
}

TEST(TorchUnpickler, RefusesMalformedPickles) {
  EXPECT_THAT(unpickle_error("\x80\x02h\x05."s), HasSubstr("byte 2: memo entry 5 was never stored"));
  EXPECT_THAT(unpickle_error("\x80\x02."), HasSubstr("stack underflow"));
  EXPECT_THAT(unpickle_error("\x80\x02(."), HasSubstr("stack underflow"));  // STOP may not reach below a MARK
  EXPECT_THAT(unpickle_error("\x80\x02K\x01\x86."), HasSubstr("stack underflow"));
  EXPECT_THAT(unpickle_error("\x80\x02t."), HasSubstr("no MARK"));
  EXPECT_THAT(unpickle_error("\x80\x02}"), HasSubstr("ends before its STOP opcode"));
  EXPECT_THAT(unpickle_error("\x80\x02X\xff\xff\xff\x7f"), HasSubstr("ends inside its opcode"));
  EXPECT_THAT(unpickle_error("\x80\x09}."), HasSubstr("pickle protocol 9 is newer than 5"));
  EXPECT_THAT(unpickle_error("\x80\x02S'a'\n."), HasSubstr("opcode 0x53 is not one"));
  EXPECT_THAT(unpickle_error("\x80\x02\x8a\x09" + std::string(9, '\1') + "."), HasSubstr("9 bytes is too large"));
  EXPECT_THAT(unpickle_error("\x80\x02" + std::string(2000, '(') + "."), HasSubstr("nesting deeper than 1024"));
  EXPECT_THAT(unpickle_error("\x80\x02K\x00K\x01K\x02s."s), HasSubstr("what SETITEM fills must be a dict, not a int"));
  EXPECT_THAT(unpickle_error("\x80\x02K\x01}b."), HasSubstr("BUILD sets the state of a int"));
  EXPECT_THAT(unpickle_error("\x80\x02"
                             "ctorch\nFloatStorage\n)R."),
              HasSubstr("not something to call"));
  EXPECT_THAT(unpickle_error("\x80\x02"
                             "cbuiltins\neval\n."),
              HasSubstr("refuses the global 'builtins.eval'"));
  EXPECT_THAT(unpickle_error("\x80\x02"
                             "ccollections\nOrderedDict\nK\x01\x85R."),
              HasSubstr("collections.OrderedDict takes 0 arguments, not 1"));
  EXPECT_THAT(unpickle_error("\x80\x02(X\x07\0\0\0storageK\x01X\x01\0\0\0"
                             "0X\x03\0\0\0"
                             "cpuK\x01tQ."s),
              HasSubstr("storage type must be a torch storage class"));
  EXPECT_THAT(unpickle_error("\x80\x02}X\x01\0\0\0aK\x01s."s), HasSubstr("found an entry of kind str -> int"));
  // A container holding itself (through the memo) is refused, not followed.
  EXPECT_THAT(unpickle_error("\x80\x02]q\x00h\x00\x61."s), HasSubstr("got a list"));
}

TEST(TorchUnpickler, EmptyViewsWithNegativeOffsetsOrStridesAreRefused) {
  EXPECT_THAT(unpickle_error(torch_save_pickle({{"a", "0", "FloatStorage", 4, -1, {0}, {1}}})),
              HasSubstr("tensor 'a' starts at a negative offset"));
  EXPECT_THAT(unpickle_error(torch_save_pickle({{"a", "0", "FloatStorage", 4, 0, {0, 2}, {1, -1}}})),
              HasSubstr("tensor 'a' has a negative stride"));
}

TEST(TorchUnpickler, StorageDeclaredTwiceDifferentlyIsRefused) {
  std::vector<SavedTensor> tensors = {{"a", "0", "FloatStorage", 4, 0, {4}, {1}},
                                      {"b", "0", "HalfStorage", 4, 0, {4}, {1}}};
  EXPECT_THAT(unpickle_error(torch_save_pickle(tensors)),
              HasSubstr("storage '0' is declared twice with different types or sizes"));
}

}  // namespace
}  // namespace srformer
