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
  EXPECT_EQ(stream.push(" is"), " is") << "no replacement has an s inside it: nothing after can reach back past it";
  EXPECT_EQ(stream.push(" n"), "") << "\" n\" could still become \"n't\"";
  EXPECT_EQ(stream.push("'t here"), "n't here");
  EXPECT_EQ(stream.push(" ."), ".");
  EXPECT_EQ(stream.push(" I 've"), " I've");
  EXPECT_EQ(stream.push(" 'r"), "") << "\" 'r\" could still become \"'re\"";
  EXPECT_EQ(stream.push("e"), "'re");
  EXPECT_EQ(stream.push(" caf\u00e9"), " caf\u00e9");
  EXPECT_EQ(stream.finish(), "");
}

// Text of short words ("a a a ...") never has three characters that are not spaces in a row, which was the
// only point a stream cut at: it held all of it back to the end, and looked over all it held at every push
// (quadratic: 20,000 pieces took seconds). It streams each word as it comes now.
TEST(SpaceCleanup, AStreamOfShortWordsStreamsAsItComes) {
  SpaceCleanupStream stream;
  std::string streamed;
  std::string text;
  size_t late = 0;  // pushes whose last character (never a space) did not stream
  for (int i = 0; i < 20000; ++i) {
    const std::string piece = i % 3 == 0 ? " a" : i % 3 == 1 ? " b ," : " ?";
    text += piece;
    streamed += stream.push(piece);
    if (streamed.empty() || streamed.back() != piece.back()) ++late;
  }
  EXPECT_EQ(late, 0u);
  streamed += stream.finish();
  EXPECT_EQ(streamed, reference(text));
}

// Text that can never be cut (" n n n ...": each n could still become "n't") is held back to the end, but
// each push looks only at what it added: at a million pushes, looking over all that is held back at every
// push would take an hour (10^12 characters).
TEST(SpaceCleanup, AStreamThatCannotCutLooksAtEachCharacterOnce) {
  SpaceCleanupStream stream;
  std::string streamed;
  constexpr int kPushes = 1000000;
  for (int i = 0; i < kPushes; ++i) streamed += stream.push(" n");
  EXPECT_EQ(streamed, "");
  streamed += stream.push("'t");
  streamed += stream.finish();
  std::string expected;
  for (int i = 0; i < kPushes - 1; ++i) expected += " n";
  EXPECT_EQ(streamed, expected + "n't");
}

}  // namespace
}  // namespace srformer
