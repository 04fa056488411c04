// add_bad_words: a request's banned words made Hugging Face's bad_words_ids with the model's tokenizer
// (Tokenizer::encode_word's two forms of each), and every word it cannot ban refused with what to do.
#include "model/generation/bad_words.h"

#include <gtest/gtest.h>

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

GenerationOptions bpe_options() {
  GenerationOptions o;
  o.eos_token_id = 2;  // the tiny BPE's </s>
  return o;
}

std::string refusal(GenerationOptions o, const std::vector<std::string>& words, const Tokenizer& tok,
                    int64_t vocab = 1000) {
  try {
    add_bad_words(o, words, tok, vocab, "bad_words", [](size_t i) { return "bad_words[" + std::to_string(i) + "]"; });
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "taken";
}

// Each word's two forms join the checkpoint's bad_words_ids, each distinct sequence once; a form holding an
// id the model has no row for is left out (the model never writes it).
TEST(BadWords, EachWordAddsItsFormsOnce) {
  TempDir dir("bad-words-add");
  test::write_tiny_bpe_dir(dir.path());
  const auto tok = ByteLevelBpeTokenizer::load(dir.path());
  const auto add = [&](GenerationOptions o, const std::vector<std::string>& words, int64_t vocab) {
    add_bad_words(o, words, *tok, vocab, "bad_words", [](size_t i) { return "bad_words[" + std::to_string(i) + "]"; });
    return o.bad_words_ids;
  };
  const int64_t space = 4 + ' ';
  GenerationOptions o = bpe_options();
  o.bad_words_ids = {{261}, {7, 8}};  // the checkpoint's
  EXPECT_EQ(add(o, {"low", "er", "low", " low"}, 1000),
            (std::vector<std::vector<int64_t>>{{261}, {7, 8}, {space, 261}, {space, 263}, {263}}));
  EXPECT_EQ(add(o, {"low lo"}, 1000),
            (std::vector<std::vector<int64_t>>{{261}, {7, 8}, {space, 261, space, 260}, {261, space, 260}}))
      << "a phrase is one sequence";
  EXPECT_EQ(add(o, {"low", "a"}, 200), (std::vector<std::vector<int64_t>>{{261}, {7, 8}, {space, 4 + 'a'}, {4 + 'a'}}))
      << "forms holding 261, past 200 rows, left out";
  EXPECT_EQ(add(o, {}, 1000), o.bad_words_ids);
}

// Every entry the server cannot ban is refused, naming it and saying what to do.
TEST(BadWords, EveryUnusableWordIsRefusedWithWhatToDo) {
  TempDir dir("bad-words-refused");
  test::write_tiny_bpe_dir(dir.path());
  const auto bpe = ByteLevelBpeTokenizer::load(dir.path());
  const GenerationOptions o = bpe_options();
  EXPECT_EQ(refusal(o, std::vector<std::string>(257, "low"), *bpe),
            "bad_words holds 257 words; at most 256 may be banned in one request: ban fewer");
  EXPECT_EQ(refusal(o, std::vector<std::string>(256, "low"), *bpe), "taken");
  EXPECT_EQ(refusal(o, {"low", ""}, *bpe), "bad_words[1] is empty; give a word or phrase to ban, or leave it out");
  EXPECT_EQ(refusal(o, {" \t\n"}, *bpe),
            "bad_words[0] contains only whitespace; give a word or phrase to ban, or leave it out");
  EXPECT_EQ(refusal(o, {"\xE2\x80\x8B"}, *bpe),
            "bad_words[0] contains only whitespace; give a word or phrase to ban, or leave it out")
      << "a zero-width space, blank as in a document";
  EXPECT_NE(refusal(o, {std::string("lo\0w", 4)}, *bpe).find("bad_words[0] contains a NUL byte"), std::string::npos);
  EXPECT_EQ(refusal(o, {std::string(257, 'a')}, *bpe),
            "bad_words[0] is 257 bytes; at most 256: ban a shorter word or phrase");
  EXPECT_EQ(refusal(o, {std::string(32, 'a')}, *bpe),
            "bad_words[0] \"" + std::string(32, 'a') +
                "\" is 33 tokens with this model's tokenizer; at most 32: ban a shorter phrase")
      << "after a space: 33 tokens";
  EXPECT_EQ(refusal(o, {std::string(31, 'a')}, *bpe), "taken");
  EXPECT_EQ(refusal(o, {"</s>"}, *bpe),
            "bad_words[0] \"</s>\" holds the end-of-sequence token '</s>' (id 2): banning it would keep the model "
            "from ending its summary; leave it out (max_new_tokens bounds the length)");
  EXPECT_NE(refusal(o, {"low</s>"}, *bpe).find("holds the end-of-sequence token"), std::string::npos);
  GenerationOptions several = o;
  several.extra_eos_token_ids = {261};
  EXPECT_NE(refusal(several, {"low"}, *bpe).find("holds the end-of-sequence token 'low' (id 261)"), std::string::npos)
      << "any of the model's EOS ids";

  const auto t5 = SentencePieceTokenizer::load(demo_model_dir());
  GenerationOptions t5_options;
  t5_options.eos_token_id = *t5->eos_id();
  EXPECT_EQ(refusal(t5_options, {"\x7F"}, *t5),
            "bad_words[0] \"\x7F\" gives no tokens with this model's tokenizer; leave it out")
      << "T5's normalizer removes the character";
  EXPECT_NE(
      refusal(t5_options, {"</s>"}, *t5).find("bad_words[0] \"</s>\" holds the end-of-sequence token '</s>' (id 1)"),
      std::string::npos);
  EXPECT_EQ(refusal(t5_options, {"Debian"}, *t5), "taken");
}

}  // namespace
}  // namespace srformer
