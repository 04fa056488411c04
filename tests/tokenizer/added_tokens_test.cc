// AddedTokenSplitter: added tokens matched in text, longest first, with Hugging Face's lstrip, rstrip and
// single_word.
#include "model/tokenizer/added_tokens.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace srformer {
namespace {

// The split as text: plain segments as they are, tokens as [id].
std::string shown(const AddedTokenSplitter& s, std::string_view text) {
  std::string out;
  for (const auto& seg : s.split(text)) {
    out += seg.id ? "[" + std::to_string(*seg.id) + "]" : "<" + std::string(seg.text) + ">";
  }
  return out;
}

TEST(AddedTokens, LongestFirstWithStrippedWhitespace) {
  AddedToken mask{"<mask>", 7};
  mask.lstrip = true;
  const AddedTokenSplitter s({{"<s>", 0}, mask, {"<s>x", 9}});
  // <mask> takes the spaces before it.
  EXPECT_EQ(shown(s, "a <s>b <s>x  <mask>c"), "<a >[0]<b >[9][7]<c>");
}

// A single_word token stands only as a word of its own (Hugging Face: no \w just before or after the match,
// whatever the token's own ends are); inside "azq" or "zqa" it is ordinary text.
TEST(AddedTokens, ASingleWordTokenMatchesOnlyWhereNoWordRunsOnIntoIt) {
  AddedToken zq{"zq", 5};
  zq.single_word = true;
  const AddedTokenSplitter s({zq});
  EXPECT_EQ(shown(s, "azq zqa zq"), "<azq zqa >[5]");
  EXPECT_EQ(shown(s, "(zq), zq_x zq9 zq"), "<(>[5]<), zq_x zq9 >[5]");
  EXPECT_EQ(shown(s, "\u00e9zq zq\u00e9"), "<\u00e9zq zq\u00e9>") << "a non-ASCII letter is a word character";
  EXPECT_EQ(shown(s, "zq\u00a0zq"), "[5]<\u00a0>[5]") << "no-break space is not";
  // Typographic punctuation and emoji are not either (Hugging Face matches the token beside them).
  EXPECT_EQ(shown(s, "zq\u2014x zq\u2019s \U0001F600zq \u00abzq\u00bb"),
            "[5]<\u2014x >[5]<\u2019s \U0001F600>[5]< \u00ab>[5]<\u00bb>");
  EXPECT_EQ(shown(s, "\u0436zq zq\u0301"), "<\u0436zq zq\u0301>") << "a Cyrillic letter, a combining mark are";
  // A token with punctuation at an end needs a boundary there too (HF checks the text beside the match).
  AddedToken tag{"<zq", 6};
  tag.single_word = true;
  const AddedTokenSplitter t({tag});
  EXPECT_EQ(shown(t, "a<zq b<zqc (<zq)"), "<a<zq b<zqc (>[6]<)>");
  // A match left as text consumes its text: no shorter token at its start, none inside it.
  const AddedTokenSplitter u({zq, {"z", 7}, {"q", 8}});
  EXPECT_EQ(shown(u, "azq z"), "<azq >[7]");
  // Without the flag it matches inside words too.
  const AddedTokenSplitter plain({{"zq", 5}});
  EXPECT_EQ(shown(plain, "azqa"), "<a>[5]<a>");
}

// Hugging Face (added_vocabulary.rs, extract_and_normalize) matches the tokens that see the raw text
// (normalized false: special tokens as BART's files have them) over the whole text first, then the
// normalized ones (tokens added with add_tokens) in each piece between those matches, the piece a text of
// its own: a raw token wins over a normalized one that starts earlier and overlaps it, a normalized
// single_word token stands alone at a piece's ends, and a normalized lstrip token strips only within its piece.
TEST(AddedTokens, TokensOfTheRawTextAreMatchedBeforeNormalizedOnes) {
  AddedToken overlapping{"qx<s", 9}, word{"<w>", 8}, strip{"[L]", 7};
  overlapping.normalized = word.normalized = strip.normalized = true;
  word.single_word = true;
  strip.lstrip = true;
  AddedToken r{"[R]", 3};
  r.rstrip = true;
  const AddedTokenSplitter s({{"<s>", 0}, overlapping, word, strip, r, {"ab", 4}});
  EXPECT_EQ(shown(s, "aqx<s>"), "<aqx>[0]") << "the normalized qx<s would have come first";
  EXPECT_EQ(shown(s, "aqx<s"), "<a>[9]") << "it matches where no raw token overlaps it";
  EXPECT_EQ(shown(s, "ab<w>ab x<w>"), "[4][8][4]< x<w>>") << "beside raw tokens a piece ends";
  EXPECT_EQ(shown(s, "[R]  [L]x [L]"), "[3][7]<x>[7]") << "[R] took the spaces; [L] takes its piece's";
  // Without normalized tokens there is one pass, leftmost first.
  const AddedTokenSplitter one({{"<s>", 0}, {"qx<s", 9}});
  EXPECT_EQ(shown(one, "aqx<s>"), "<a>[9]<>>");
}

}  // namespace
}  // namespace srformer
