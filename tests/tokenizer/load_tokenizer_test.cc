// load_tokenizer: picks the implementation from the files present and explains what is missing.
#include <gtest/gtest.h>

#include "model/tokenizer/byte_level_bpe.h"
#include "model/tokenizer/protobuf_wire.h"
#include "model/tokenizer/sentencepiece_tokenizer.h"
#include "model/tokenizer/tokenizer_error.h"
#include "tests/support/lfs_pointer.h"
#include "tests/tokenizer/tokenizer_test_support.h"

namespace srformer {
namespace {

using test::load_error;
using test::TempDir;

TEST(LoadTokenizer, PicksSentencePieceForSpieceModel) {
  const auto tok = load_tokenizer(test::t5_style_spm_dir());
  EXPECT_NE(dynamic_cast<const SentencePieceTokenizer*>(tok.get()), nullptr);
  EXPECT_EQ(tok->encode("").back(), 1);
}

TEST(LoadTokenizer, PicksByteLevelBpeForVocabAndMerges) {
  TempDir dir("load-bpe");
  test::write_tiny_bpe_dir(dir.path());
  const auto tok = load_tokenizer(dir.path());
  EXPECT_NE(dynamic_cast<const ByteLevelBpeTokenizer*>(tok.get()), nullptr);
  EXPECT_EQ(tok->encode("low"), (TokenIds{0, 261, 2}));
}

TEST(LoadTokenizer, ExplainsWhatIsMissing) {
  TempDir dir("load-missing");
  const auto empty = load_error(dir.path());
  EXPECT_NE(empty.find("spiece.model"), std::string::npos) << empty;
  EXPECT_NE(empty.find("vocab.json"), std::string::npos) << empty;
  EXPECT_NE(empty.find("merges.txt"), std::string::npos) << empty;

  const auto absent = load_error(dir.path() / "nope");
  EXPECT_NE(absent.find("does not exist"), std::string::npos) << absent;

  test::write_file(dir.path() / "vocab.json", "{}");
  const auto no_merges = load_error(dir.path());
  EXPECT_NE(no_merges.find("not merges.txt"), std::string::npos) << no_merges;
}

TEST(LoadTokenizer, CorruptSentencePieceModelIsALoadError) {
  TempDir dir("load-corrupt");
  test::write_file(dir.path() / "spiece.model", "this is not a protobuf");
  const auto msg = load_error(dir.path());
  const auto named = msg.find("spiece.model");
  EXPECT_NE(named, std::string::npos) << msg;
  EXPECT_EQ(msg.find("spiece.model", named + 1), std::string::npos) << "named twice: " << msg;
  EXPECT_NE(msg.find("is not a SentencePiece model: its protobuf encoding breaks off or is corrupt"), std::string::npos)
      << msg;
}

// A spiece.model cut short at a piece's end still parses: SentencePiece would load it with default
// special ids and no normalization, and the model would write nonsense. Cut after the pieces, after
// the trainer_spec, inside the last piece, and at 0 bytes, it is refused with the fix.
TEST(LoadTokenizer, ASentencePieceModelCutShortIsALoadError) {
  const auto file = test::t5_style_spm_dir() / "spiece.model";
  const std::string whole = test::read_file(file);
  const auto fields = wire::top_level_fields(whole);
  ASSERT_TRUE(fields.has_value()) << file;
  size_t pieces_end = 0;
  size_t trainer_end = 0;
  for (const auto& field : *fields) {
    if (field.number == 1) pieces_end = field.end;
    if (field.number == 2) trainer_end = field.end;
  }
  ASSERT_GT(pieces_end, 0U);
  ASSERT_GT(trainer_end, pieces_end);
  ASSERT_LT(trainer_end, whole.size());
  for (const auto& [bytes, says] :
       std::vector<std::pair<size_t, std::string>>{{pieces_end, "but no trainer_spec or normalizer_spec"},
                                                   {trainer_end, "but no normalizer_spec"},
                                                   {pieces_end - 1, "protobuf encoding breaks off"},
                                                   {0, "is empty"}}) {
    TempDir dir("spiece-cut-short");
    test::write_file(dir.path() / "spiece.model", whole.substr(0, bytes));
    const auto msg = load_error(dir.path());
    EXPECT_NE(msg.find((dir.path() / "spiece.model").string() + " "), std::string::npos) << msg;
    EXPECT_NE(msg.find(says), std::string::npos) << msg;
    EXPECT_NE(msg.find("download it again"), std::string::npos) << msg;
    // The tokenizer's own loader leaves the advice to its caller: init-model checks a file it wrote itself.
    try {
      (void)SentencePieceTokenizer::load(dir.path());
      ADD_FAILURE() << bytes << " bytes loaded";
    } catch (const TokenizerFileCutShortError& e) {
      EXPECT_EQ(std::string(e.what()).find("download it again"), std::string::npos) << e.what();
    }
  }
  TempDir whole_dir("spiece-whole");
  test::write_file(whole_dir.path() / "spiece.model", whole);
  EXPECT_EQ(load_tokenizer(whole_dir.path())->encode("").back(), 1);
}

TEST(LoadTokenizer, CorruptVocabJsonIsALoadError) {
  TempDir dir("load-badjson");
  test::write_tiny_bpe_dir(dir.path());
  test::write_file(dir.path() / "vocab.json", "{\"<s>\": 0,");
  const auto msg = load_error(dir.path());
  EXPECT_NE(msg.find("vocab.json is not valid JSON"), std::string::npos) << msg;
}

// A fast-tokenizer-only directory: tokenizer.json is read once, to pick the loader and by it.
TEST(LoadTokenizer, CorruptTokenizerJsonIsALoadError) {
  TempDir dir("load-badtokjson");
  test::write_file(dir.path() / "tokenizer.json", "{\"model\": {\"type\": \"Unigram\"");
  const auto msg = load_error(dir.path());
  EXPECT_NE(msg.find("tokenizer.json is not valid JSON"), std::string::npos) << msg;
  EXPECT_NE(msg.find("restore the file"), std::string::npos) << msg;
}

// Git LFS pointers in place of spiece.model (LFS-tracked in most T5 repositories), tokenizer.json, or
// vocab.json and merges.txt: the message names the file and the fix, not a parse error.
TEST(LoadTokenizer, AGitLfsPointerIsNamedWithTheFix) {
  constexpr int64_t kSize = 791656;
  const std::string pointer = testing::lfs_pointer_text(kSize);
  const auto expect_pointer = [](const std::string& msg, const std::string& file) {
    testing::expect_lfs_pointer_message(msg, file, kSize);
  };
  {
    TempDir dir("lfs-spiece");
    test::write_file(dir.path() / "spiece.model", pointer);
    expect_pointer(load_error(dir.path()), (dir.path() / "spiece.model").string());
  }
  {
    TempDir dir("lfs-tokenizer-json");
    test::write_file(dir.path() / "tokenizer.json", pointer);
    expect_pointer(load_error(dir.path()), (dir.path() / "tokenizer.json").string());
  }
  for (const std::string file : {"vocab.json", "merges.txt"}) {
    TempDir dir("lfs-bpe");
    test::write_tiny_bpe_dir(dir.path());
    test::write_file(dir.path() / file, pointer);
    expect_pointer(load_error(dir.path()), (dir.path() / file).string());
  }
}

}  // namespace
}  // namespace srformer
