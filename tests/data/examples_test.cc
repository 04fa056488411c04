// model/data/examples.h: the {"id", "document", "summary"} JSONL reader of `srformer train` and `eval`.
#include "model/data/examples.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <stdexcept>
#include <string>

#include "tests/support/temp_dir.h"

namespace srformer::data {
namespace {

namespace fs = std::filesystem;

const std::string kTwoLines =
    "{\"id\": \"a\", \"document\": \"first document\", \"summary\": \"first\"}\n"
    "{\"id\": \"b\", \"document\": \"second document\", \"summary\": \"second\"}\n";

// The message read_examples(path) throws, or "" when it reads the file.
std::string refusal(const fs::path& path) {
  try {
    read_examples(path.string());
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

// A pipe (bash's `<(jq ...)`, /dev/stdin) is read as a file is: it was refused as "no such file".
TEST(ReadExamples, ReadsAPipe) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ASSERT_EQ(::write(fds[1], kTwoLines.data(), kTwoLines.size()), static_cast<ssize_t>(kTwoLines.size()));
  ::close(fds[1]);
  const auto examples = read_examples("/dev/fd/" + std::to_string(fds[0]));
  ::close(fds[0]);
  ASSERT_EQ(examples.size(), 2u);
  EXPECT_EQ(examples[1].id, "b");
  EXPECT_EQ(examples[1].document, "second document");
}

TEST(ReadExamples, AMissingPathOrADirectoryIsNamed) {
  testing::TempDir dir{"examples"};
  EXPECT_EQ(refusal(dir.path() / "nope.jsonl"),
            "cannot read '" + (dir.path() / "nope.jsonl").string() + "': no such file");
  EXPECT_EQ(refusal(dir.path()), "cannot read '" + dir.path().string() + "': a directory; pass a JSONL file");
}

// Lines whose document or summary is empty, blank or holds a NUL byte are refused, the first named and
// the rest counted: eval summarized a document the server refuses and scored an empty reference 0 into
// the mean, and train taught the model to end at once.
TEST(ReadExamples, EmptyOrBlankDocumentsAndSummariesAreRefused) {
  testing::TempDir dir{"examples"};
  const auto file = dir.path() / "data.jsonl";
  std::ofstream(file) << kTwoLines << "{\"id\": \"c\", \"document\": \"\", \"summary\": \"s\"}\n"
                      << "{\"id\": \"d\", \"document\": \"text\", \"summary\": \" \\u00a0\\t\"}\n"
                      << "{\"id\": \"e\", \"document\": \"a\\u0000b\", \"summary\": \"s\"}\n";
  const auto said = refusal(file);
  EXPECT_EQ(
      said.rfind(file.string() + ":3: the document is empty (and 2 more such lines); fix or remove such lines", 0), 0u)
      << said;
  std::ofstream(file) << kTwoLines << "{\"id\": \"d\", \"document\": \"text\", \"summary\": \"\\n\"}\n";
  EXPECT_EQ(refusal(file).rfind(file.string() + ":3: the summary contains only whitespace; fix", 0), 0u)
      << refusal(file);
  std::ofstream(file) << kTwoLines << "{\"id\": \"e\", \"document\": \"a\\u0000b\", \"summary\": \"s\"}\n";
  EXPECT_NE(refusal(file).find(":3: the document contains a NUL byte"), std::string::npos) << refusal(file);
  // Past --limit they are not read.
  EXPECT_EQ(read_examples(file.string(), 2).size(), 2u);
}

// A field given twice kept its last value without a word; nested objects may repeat their parent's keys.
TEST(ReadExamples, AFieldGivenTwiceIsRefused) {
  testing::TempDir dir{"examples"};
  const auto file = dir.path() / "data.jsonl";
  std::ofstream(file) << kTwoLines
                      << "{\"id\": \"c\", \"document\": \"d\", \"summary\": \"one\", \"summary\": \"two\"}\n";
  EXPECT_EQ(refusal(file), file.string() + ":3: field \"summary\" appears twice in the line's object; keep one");
  std::ofstream(file) << "{\"id\": \"c\", \"document\": \"d\", \"summary\": \"s\", \"meta\": {\"id\": 1, \"x\": "
                         "{\"id\": 2}}, \"list\": [{\"id\": 3}, {\"id\": 4}]}\n";
  const auto examples = read_examples(file.string());
  ASSERT_EQ(examples.size(), 1u);
  EXPECT_EQ(examples[0].id, "c");
}

// Datasets often number their examples: an integer id was refused ("must be a string"). It is read as its
// decimal text (so 7 and "7" are the same id); other types are still refused, naming the line.
TEST(ReadExamples, IntegerIdsAreReadAsTheirDecimalText) {
  testing::TempDir dir{"examples"};
  const auto file = dir.path() / "data.jsonl";
  std::ofstream(file) << "{\"id\": 7, \"document\": \"d\", \"summary\": \"s\"}\n"
                      << "{\"id\": -3, \"document\": \"d\", \"summary\": \"s\"}\n"
                      << "{\"id\": 18446744073709551615, \"document\": \"d\", \"summary\": \"s\"}\n"
                      << "{\"id\": \"x\", \"document\": \"d\", \"summary\": \"s\"}\n";
  const auto examples = read_examples(file.string());
  ASSERT_EQ(examples.size(), 4u);
  EXPECT_EQ(examples[0].id, "7");
  EXPECT_EQ(examples[1].id, "-3");
  EXPECT_EQ(examples[2].id, "18446744073709551615");
  EXPECT_EQ(examples[3].id, "x");

  std::ofstream(file) << "{\"id\": 7, \"document\": \"d\", \"summary\": \"s\"}\n"
                      << "{\"id\": \"7\", \"document\": \"d\", \"summary\": \"s\"}\n";
  EXPECT_EQ(refusal(file), file.string() + ":2: duplicate id '7' (first at " + file.string() + ":1)");

  for (const std::string id : {"7.5", "7.0", "1e3", "true", "null", "[1]", "{\"n\": 1}"}) {
    std::ofstream(file) << kTwoLines << "{\"id\": " << id << ", \"document\": \"d\", \"summary\": \"s\"}\n";
    const auto said = refusal(file);
    EXPECT_EQ(said.rfind(file.string() + ":3: field \"id\" must be a string or an integer, not ", 0), 0u) << said;
  }
  std::ofstream(file) << kTwoLines << "{\"id\": 7.5, \"document\": \"d\", \"summary\": \"s\"}\n";
  EXPECT_EQ(refusal(file), file.string() +
                               ":3: field \"id\" must be a string or an integer, not a number with a "
                               "fraction or exponent");
  // The other fields stay strings.
  std::ofstream(file) << "{\"id\": 1, \"document\": \"d\", \"summary\": 2}\n";
  EXPECT_EQ(refusal(file), file.string() + ":1: field \"summary\" must be a string");
}

// A number past double's range (1e999, a 400-digit integer) is valid JSON that nlohmann refuses with an
// out_of_range error: it left the reader unnamed, 'srformer eval: [json.exception.out_of_range.406] number
// overflow parsing ...' without the file or line.
TEST(ReadExamples, ANumberPastDoublesRangeNamesItsLine) {
  testing::TempDir dir{"examples"};
  const auto file = dir.path() / "data.jsonl";
  for (const std::string& number : {std::string("1e999"), std::string(400, '9'), std::string("-1e999")}) {
    std::ofstream(file) << kTwoLines << "{\"id\": \"c\", \"document\": \"d\", \"summary\": \"s\", \"n\": " << number
                        << "}\n";
    const auto said = refusal(file);
    EXPECT_EQ(said.rfind(file.string() + ":3: a number past the range of a double (", 0), 0u) << said;
  }
}

// A file in another encoding is named as such, with what to do: nlohmann's words named only a byte.
TEST(ReadExamples, AFileNotInUtf8SaysToReEncodeIt) {
  testing::TempDir dir{"examples"};
  const auto file = dir.path() / "data.jsonl";
  std::ofstream(file, std::ios::binary) << "{\"id\": \"a\", \"document\": \"caf\xE9\", \"summary\": \"s\"}\n";
  EXPECT_NE(refusal(file).find(":1: not valid JSON ("), std::string::npos) << refusal(file);
  EXPECT_NE(refusal(file).find("; the file must be UTF-8: re-encode it (iconv -f ENCODING -t UTF-8)"),
            std::string::npos)
      << refusal(file);
  std::string utf16 = "\xFF\xFE";
  for (const char c : std::string("{\"id\": \"a\"}\n")) utf16 += std::string{c, '\0'};
  std::ofstream(file, std::ios::binary) << utf16;
  EXPECT_NE(refusal(file).find("; the file is UTF-16: re-encode it as UTF-8 (iconv -f UTF-16 -t UTF-8)"),
            std::string::npos)
      << refusal(file);
}

// A compressed file is named as such: its first bytes read as "invalid literal", or as UTF-16 (xz's NUL).
TEST(ReadExamples, ACompressedFileSaysToDecompressIt) {
  testing::TempDir dir{"examples"};
  const auto file = dir.path() / "data.jsonl.gz";
  for (const auto& [bytes, says] : std::vector<std::pair<std::string, std::string>>{
           {std::string("\x1F\x8B\x08\0\0\0\0\0\0\x03", 10),
            "the file is gzip-compressed: decompress it, or pass <(zcat FILE)"},
           {std::string("\xFD"
                        "7zXZ\0\0\x04",
                        8),
            "the file is xz-compressed: decompress it, or pass <(xzcat FILE)"},
           {"BZh91AY&SY", "the file is bzip2-compressed"},
           {"\x28\xB5\x2F\xFD\x04", "the file is zstd-compressed"}}) {
    std::ofstream(file, std::ios::binary) << bytes << "\n";
    const auto said = refusal(file);
    EXPECT_NE(said.find(file.string() + ":1: not valid JSON ("), std::string::npos) << said;
    EXPECT_NE(said.find("; " + says), std::string::npos) << said;
    EXPECT_EQ(said.find("UTF-16"), std::string::npos) << said;
  }
}

// A JSON document (an array of the examples, or objects pretty-printed over several lines: Python's
// json.dump(rows, f, indent=2), `jq .`) is named as such, with the command that makes JSON Lines of it. It
// was refused as "unexpected end of input; expected '[', '{', or a literal" at a line holding '['.
TEST(ReadExamples, AJsonDocumentOverSeveralLinesSaysHowToMakeJsonLines) {
  testing::TempDir dir{"examples"};
  const auto file = dir.path() / "data.json";
  const std::string object = R"({"id": "a", "document": "first document", "summary": "first"})";
  for (const auto& [text, says] : std::vector<std::pair<std::string, std::string>>{
           {"[\n  {\n    \"id\": \"a\",\n    \"document\": \"d\",\n    \"summary\": \"s\"\n  }\n]\n",
            ":1: not valid JSON ("},
           {"\xEF\xBB\xBF[\r\n  " + object + "\r\n]\r\n", ":1: not valid JSON ("},
           {"{\n  \"id\": \"a\",\n  \"document\": \"d\",\n  \"summary\": \"s\"\n}\n", ":1: not valid JSON ("},
           {"[" + object + ", " + object + "]\n",
            ":1: expected a JSON object per line; this line is an array of "
            "objects: write one object per line (jq -c '.[]' FILE > NEW.jsonl)"}}) {
    std::ofstream(file, std::ios::binary) << text;
    const auto said = refusal(file);
    EXPECT_NE(said.find(file.string() + says), std::string::npos) << said;
    if (says.find("not valid JSON") != std::string::npos) {
      const std::string jq = text.find('[') < text.find('{') ? "jq -c '.[]' FILE" : "jq -c . FILE";
      EXPECT_NE(said.find("; the file looks like one JSON document over several lines, not JSON Lines (one object "
                          "per line): rewrite it with " +
                          jq + " > NEW.jsonl"),
                std::string::npos)
          << said;
    }
  }
  // An object cut short on the first line of a JSON Lines file is no such document: no hint.
  for (const std::string cut : {R"({"id": "a", "document": "first)", R"({"id": "a",)", "[{\"id\""}) {
    std::ofstream(file, std::ios::binary) << cut << "\n" << object << "\n";
    EXPECT_EQ(refusal(file).find("JSON document"), std::string::npos) << refusal(file);
  }
  // Nor is an array of other things.
  std::ofstream(file, std::ios::binary) << "[1, 2]\n";
  EXPECT_EQ(refusal(file).find("array of objects"), std::string::npos) << refusal(file);
}

// What editors and other tools write is read alike: CRLF line ends, a byte-order mark, blank lines and a
// last line without its newline.
TEST(ReadExamples, CrlfBomBlankLinesAndNoFinalNewline) {
  testing::TempDir dir{"examples"};
  const auto file = dir.path() / "data.jsonl";
  std::ofstream(file, std::ios::binary)
      << "\xEF\xBB\xBF{\"id\": \"a\", \"document\": \"first document\", \"summary\": \"first\"}\r\n\r\n  \n"
      << "{\"id\": \"b\", \"document\": \"second\", \"summary\": \"s\", \"extra\": 1}";
  const auto examples = read_examples(file.string());
  ASSERT_EQ(examples.size(), 2u);
  EXPECT_EQ(examples[0].id, "a");
  EXPECT_EQ(examples[0].summary, "first");
  EXPECT_EQ(examples[1].document, "second");
}

// Files joined with `cat` keep each one's byte-order mark at the start of a later line: read alike, also
// a mark on a line of its own (an empty file that had one) or twice (an empty one before another).
TEST(ReadExamples, ByteOrderMarksOfFilesJoinedWithCat) {
  testing::TempDir dir{"examples"};
  const auto file = dir.path() / "data.jsonl";
  const std::string bom = "\xEF\xBB\xBF";
  std::ofstream(file, std::ios::binary)
      << bom << "{\"id\": \"a\", \"document\": \"first document\", \"summary\": \"first\"}\n"
      << bom << "\r\n"
      << bom << bom << "{\"id\": \"b\", \"document\": \"second document\", \"summary\": \"second\"}\n"
      << bom << "{\"id\": \"c\", \"document\": \"third document\", \"summary\": \"third\"}\n";
  const auto examples = read_examples(file.string());
  ASSERT_EQ(examples.size(), 3u);
  EXPECT_EQ(examples[1].id, "b");
  EXPECT_EQ(examples[2].id, "c");
  EXPECT_EQ(examples[2].summary, "third");
  // A UTF-16 file joined after a UTF-8 one is named as such on its line, not only as the first.
  std::string utf16 = "\xFF\xFE";
  for (const char c : std::string("{\"id\": \"d\"}\n")) utf16 += std::string{c, '\0'};
  std::ofstream(file, std::ios::binary) << kTwoLines << utf16;
  EXPECT_NE(refusal(file).find(file.string() + ":3: not valid JSON ("), std::string::npos) << refusal(file);
  EXPECT_NE(refusal(file).find("; the file is UTF-16: re-encode it as UTF-8"), std::string::npos) << refusal(file);
}

// Lines ended by a carriage return alone (classic Mac OS) are one line to the reader: nlohmann's
// "unexpected '{'; expected end of input" at line 1 did not say why.
TEST(ReadExamples, LinesEndedByACarriageReturnAloneAreNamed) {
  testing::TempDir dir{"examples"};
  const auto file = dir.path() / "data.jsonl";
  std::string text = kTwoLines;
  for (auto& c : text) c = c == '\n' ? '\r' : c;
  std::ofstream(file, std::ios::binary) << text;
  const auto said = refusal(file);
  EXPECT_EQ(said.rfind(file.string() + ":1: not valid JSON (", 0), 0u) << said;
  EXPECT_NE(said.find("; its lines end in a carriage return alone (classic Mac OS): convert them to newlines "
                      "(tr '\\r' '\\n' < FILE > NEW.jsonl)"),
            std::string::npos)
      << said;
  // One line so ended is read (a CR is JSON whitespace), as is a CR before a newline.
  std::ofstream(file, std::ios::binary) << text.substr(0, text.find('\r') + 1);
  EXPECT_EQ(read_examples(file.string()).size(), 1u);
  // A CR inside a string is no line end: nlohmann's words say what is wrong.
  std::ofstream(file, std::ios::binary) << "{\"id\": \"a\", \"document\": \"a\rb\", \"summary\": \"s\"}\n";
  EXPECT_EQ(refusal(file).find("carriage return alone"), std::string::npos) << refusal(file);
}

}  // namespace
}  // namespace srformer::data
