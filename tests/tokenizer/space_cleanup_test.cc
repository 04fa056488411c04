// clean_up_spaces and SpaceCleanupStream: Hugging Face's clean_up_tokenization_spaces, whole and streamed.
#include "model/tokenizer/space_cleanup.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace srformer {
namespace {

// Python's str.replace, transcribed: every non-overlapping occurrence, left to right.
std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  std::string out;
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out += s.substr(pos, hit - pos) + to;
  }
  return out + s.substr(pos);
}

// transformers' clean_up_tokenization, as it is written: a chain of str.replace calls.
std::string reference(const std::string& s) {
  const auto r = [](const std::string& text, const char* from, const char* to) { return replace_all(text, from, to); };
  return r(
      r(r(r(r(r(r(r(r(r(s, " .", "."), " ?", "?"), " !", "!"), " ,", ","), " ' ", "'"), " n't", "n't"), " 'm", "'m"),
          " 's", "'s"),
        " 've", "'ve"),
      " 're", "'re");
}

TEST(SpaceCleanup, RemovesTheSpaceBeforePunctuationAndContractions) {
  EXPECT_EQ(clean_up_spaces("Hello , world . It is n't so ; I 'm sure he 's done ! We 've and they 're ?"),
            "Hello, world. It isn't so ; I'm sure he's done! We've and they're?");
  EXPECT_EQ(clean_up_spaces("a ' b"), "a'b");
  EXPECT_EQ(clean_up_spaces("  ."), " .") << "one pass per replacement, as Python's: the space it exposes stays";
  EXPECT_EQ(clean_up_spaces(""), "");
}

// Streamed in random pieces, text of the characters the replacements are made of gives, concatenated,
// what the whole text does.
TEST(SpaceCleanup, AStreamInAnyPiecesGivesTheWholeTextsCleanup) {
  const std::string alphabet = " .?!,'ntmsvreab\u00e9";
  std::mt19937 rng(11);
  for (int run = 0; run < 20000; ++run) {
    std::string text;
    const int length = static_cast<int>(rng() % 40);
    for (int i = 0; i < length; ++i) {
      const size_t k = rng() % (alphabet.size() - 1);
      text += alphabet[k] == '\xc3' ? std::string("\u00e9") : std::string(1, alphabet[k]);
    }
    SpaceCleanupStream stream;
    std::string streamed;
    for (size_t pos = 0; pos < text.size();) {
      const size_t n = std::min<size_t>(text.size() - pos, rng() % 5);
      streamed += stream.push(std::string_view(text).substr(pos, n));
      pos += n;
    }
    streamed += stream.finish();
    ASSERT_EQ(clean_up_spaces(text), reference(text)) << text;
    ASSERT_EQ(streamed, reference(text)) << text;
  }
}

TEST(SpaceCleanup, AStreamHoldsBackOnlyWhatAReplacementCouldStillReach) {
  SpaceCleanupStream stream;
  EXPECT_EQ(stream.push("The cat"), "The cat");
  EXPECT_EQ(stream.push(" is"), "") << "\" is\" could still become \" isn't\"... or anything";
  EXPECT_EQ(stream.push(" n"), "");
  EXPECT_EQ(stream.push("'t here"), " isn't here");
  EXPECT_EQ(stream.push(" ."), "");
  EXPECT_EQ(stream.finish(), ".");
}

}  // namespace
}  // namespace srformer
