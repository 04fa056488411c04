// find_document_fault (what the server and `srformer summarize` refuse) and the UTF-8 helpers it and the
// server's responses rely on.
#include "model/tokenizer/document_check.h"

#include <gtest/gtest.h>

#include "model/tokenizer/utf8.h"

namespace srformer {
namespace {

using Kind = DocumentFault::Kind;

TEST(Utf8, ValidityFollowsRfc3629) {
  EXPECT_TRUE(utf8::is_valid("plain ascii"));
  EXPECT_TRUE(utf8::is_valid("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"));
  EXPECT_TRUE(utf8::is_valid(std::string("a\0b", 3)));
  EXPECT_FALSE(utf8::is_valid("\xFF"));
  EXPECT_FALSE(utf8::is_valid("\xC3"));              // cut short
  EXPECT_FALSE(utf8::is_valid("\xC0\xAF"));          // overlong '/'
  EXPECT_FALSE(utf8::is_valid("\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(utf8::is_valid("\xF4\x90\x80\x80"));  // over U+10FFFF
  // One U+FFFD per maximal subpart: a cut-short character is one, a stray byte one each.
  EXPECT_EQ(utf8::to_valid("a\xE2\x82"), "a\xEF\xBF\xBD");
  EXPECT_EQ(utf8::to_valid("\xFF\xFE"), "\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(DocumentCheck, TextPasses) {
  EXPECT_FALSE(find_document_fault("Debian is an operating system."));
  EXPECT_FALSE(
      find_document_fault("\xEF\xBB\xBF"
                          "caf\xC3\xA9 \xF0\x9F\x98\x80"));  // a BOM before text
  EXPECT_FALSE(find_document_fault(" \n x \t"));
}

TEST(DocumentCheck, EmptyAndBlankDocuments) {
  EXPECT_EQ(find_document_fault("")->kind, Kind::kEmpty);
  EXPECT_EQ(find_document_fault("")->what, "is empty");
  // ASCII whitespace, NBSP, ideographic space, zero-width space, a byte-order mark: nothing to read.
  for (const char* blank :
       {" ", "\n\t\r\v\f", "\xC2\xA0", "\xE3\x80\x80", "\xE2\x80\x8B", "\xEF\xBB\xBF", " \xEF\xBB\xBF\n"}) {
    const auto fault = find_document_fault(blank);
    ASSERT_TRUE(fault) << blank;
    EXPECT_EQ(fault->kind, Kind::kBlank) << blank;
    EXPECT_EQ(fault->what, "contains only whitespace");
  }
}

TEST(DocumentCheck, BadUtf8IsPlacedAndUtf16Named) {
  auto fault = find_document_fault("ok \xFF rest");
  ASSERT_TRUE(fault);
  EXPECT_EQ(fault->kind, Kind::kNotUtf8);
  EXPECT_EQ(fault->offset, 3u);
  EXPECT_EQ(fault->what, "is not valid UTF-8 (bad byte sequence at byte offset 3)");
  // Latin-1 "été": the first é is a lone lead byte.
  EXPECT_EQ(find_document_fault("abc \xE9t\xE9")->offset, 4u);
  // A cut-short last character.
  EXPECT_EQ(find_document_fault("abc \xE2\x82")->offset, 4u);
  // UTF-16 with its byte-order mark, little- and big-endian.
  for (const std::string& utf16 : {std::string("\xFF\xFEh\0i\0", 6), std::string("\xFE\xFF\0h\0i", 6)}) {
    fault = find_document_fault(utf16);
    ASSERT_TRUE(fault);
    EXPECT_EQ(fault->kind, Kind::kNotUtf8);
    EXPECT_EQ(fault->what,
              "is not valid UTF-8 (bad byte sequence at byte offset 0: it starts with a UTF-16 byte-order mark, "
              "the text is UTF-16)");
  }
}

// CESU-8 and Java's modified UTF-8 pass for UTF-8 in most places: the refusal says what they wrote instead.
TEST(DocumentCheck, SurrogatesAndModifiedUtf8NulAreNamed) {
  // U+1F600 as CESU-8: the surrogates D83D DE00 in three bytes each.
  auto fault = find_document_fault("ok \xED\xA0\xBD\xED\xB8\x80");
  ASSERT_TRUE(fault);
  EXPECT_EQ(fault->kind, Kind::kNotUtf8);
  EXPECT_EQ(fault->offset, 3u);
  EXPECT_EQ(fault->what,
            "is not valid UTF-8 (bad byte sequence at byte offset 3: the UTF-16 surrogate U+D83D in three bytes, as "
            "CESU-8 and Java's modified UTF-8 write half of a character above U+FFFF; UTF-8 writes such a character "
            "in one 4-byte sequence)");
  // A lone low surrogate.
  fault = find_document_fault("\xED\xBF\xBF");
  ASSERT_TRUE(fault);
  EXPECT_NE(fault->what.find("surrogate U+DFFF"), std::string::npos) << fault->what;
  fault = find_document_fault("a\xC0\x80");
  ASSERT_TRUE(fault);
  EXPECT_EQ(fault->what,
            "is not valid UTF-8 (bad byte sequence at byte offset 1: C0 80, Java's modified UTF-8 for NUL, which text "
            "does not hold)");
  // Other bad bytes, and a cut-short surrogate, stay unexplained.
  for (const char* other : {"\xED\xA0", "\xED\x9F", "\xC0\xAF", "\xE9t\xE9"}) {
    fault = find_document_fault(other);
    ASSERT_TRUE(fault) << other;
    EXPECT_EQ(fault->what, "is not valid UTF-8 (bad byte sequence at byte offset 0)") << other;
  }
}

TEST(DocumentCheck, ANulByteIsRefused) {
  // UTF-16 without a byte-order mark is valid UTF-8 with a NUL after every ASCII letter.
  const auto fault = find_document_fault(std::string("h\0i\0", 4));
  ASSERT_TRUE(fault);
  EXPECT_EQ(fault->kind, Kind::kNul);
  EXPECT_EQ(fault->offset, 1u);
  EXPECT_NE(fault->what.find("NUL byte (at byte offset 1)"), std::string::npos) << fault->what;
  EXPECT_EQ(find_document_fault(std::string("\0", 1))->kind, Kind::kNul) << "a NUL alone is no blank";
}

}  // namespace
}  // namespace srformer
