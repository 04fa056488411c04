// Tokenizer::encode_word: a word as running text writes it after a space and straight after other text,
// without the special tokens encode() adds (Hugging Face's bad_words_ids of the word).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "model/tokenizer/byte_level_bpe.h"
#include "model/tokenizer/sentencepiece_tokenizer.h"
#include "tests/tokenizer/tokenizer_test_support.h"

namespace srformer {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

fs::path demo_model_dir() { return fs::path(SRFORMER_SOURCE_DIR) / "models" / "debian-synopsis-t5"; }

// encode()'s ids without the special tokens it puts around the text.
TokenIds inner(const Tokenizer& tok, const std::string& text, size_t leading, size_t trailing) {
  const TokenIds ids = tok.encode(text);
  return TokenIds(ids.begin() + static_cast<std::ptrdiff_t>(leading),
                  ids.end() - static_cast<std::ptrdiff_t>(trailing));
}

// BART's byte-level BPE: "Ġlow" after a space, "low" alone; never <s> or </s>, and no prefix space for the
// second form where the tokenizer adds one to every text.
TEST(EncodeWord, ByteLevelBpeGivesTheWordAfterASpaceAndAlone) {
  TempDir dir("bad-words-bpe");
  test::write_tiny_bpe_dir(dir.path());
  const auto tok = ByteLevelBpeTokenizer::load(dir.path());
  const int64_t space = 4 + ' ';
  EXPECT_EQ(tok->encode_word("low", true), (TokenIds{space, 261}));
  EXPECT_EQ(tok->encode_word("low", true), inner(*tok, " low", 1, 1));
  EXPECT_EQ(tok->encode_word("low", false), (TokenIds{261}));
  EXPECT_EQ(tok->encode_word("low", false), inner(*tok, "low", 1, 1));
  EXPECT_EQ(tok->encode_word(" low", false), (TokenIds{space, 261})) << "a word given with its space keeps it";
  EXPECT_EQ(tok->encode_word(" low", true), (TokenIds{space, 261})) << "and gets no second one";
  EXPECT_EQ(tok->encode_word("</s>", false), (TokenIds{2})) << "special tokens written out are matched, as in text";
  EXPECT_TRUE(tok->encode_word("", false).empty());

  test::write_file(dir.path() / "tokenizer_config.json", R"({"add_prefix_space": true})");
  const auto prefixing = ByteLevelBpeTokenizer::load(dir.path());
  ASSERT_EQ(inner(*prefixing, "low", 1, 1), (TokenIds{space, 261})) << "the tokenizer prefixes every text";
  EXPECT_EQ(prefixing->encode_word("low", true), (TokenIds{space, 261}));
  EXPECT_EQ(prefixing->encode_word("low", false), (TokenIds{261}));
}

// T5's SentencePiece (the demo model's): the pieces of "▁word" after a space, those of "word" without the
// dummy prefix straight after other text (as in "non-word"), never EOS.
TEST(EncodeWord, SentencePieceGivesThePiecesWithAndWithoutTheLeadingSpace) {
  const auto tok = SentencePieceTokenizer::load(demo_model_dir());
  const auto pieces = [&](const TokenIds& ids) {
    std::string out;
    for (const int64_t id : ids) out += tok->id_to_token(id) + "|";
    return out;
  };
  for (const std::string word : {"Debian", "library", "GNOME", "x"}) {
    const TokenIds spaced = tok->encode_word(word, true);
    const TokenIds bare = tok->encode_word(word, false);
    ASSERT_FALSE(spaced.empty() || bare.empty()) << word;
    EXPECT_EQ(spaced, inner(*tok, word, 0, 1)) << word << ": as encode() gives a text of it, EOS left out";
    EXPECT_EQ(tok->id_to_token(spaced.front()).rfind("\xE2\x96\x81", 0), 0u) << pieces(spaced);
    EXPECT_NE(tok->id_to_token(bare.front()).rfind("\xE2\x96\x81", 0), 0u) << pieces(bare);
    EXPECT_EQ(tok->decode(bare), word) << pieces(bare);
    EXPECT_EQ(std::count(spaced.begin(), spaced.end(), *tok->eos_id()), 0);
  }
  EXPECT_EQ(tok->encode_word(" Debian", false), tok->encode_word("Debian", true)) << "a word given with its space";
  EXPECT_EQ(tok->encode_word("</s>", false), (TokenIds{*tok->eos_id()}));
  // The first form is Hugging Face's T5 tokenizer's encode of the word without special tokens: the legacy
  // prefixing model's.
  EXPECT_EQ(tok->encode_word("packages", true), inner(*tok, "packages", 0, 1));
}

}  // namespace
}  // namespace srformer
