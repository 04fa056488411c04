#pragma once
// How srformer-client and `srformer summarize` print a further result (the next best beam-search
// hypothesis, or a further sample) after the summary: one line each, numbered from 2.
#include <cstddef>
#include <ostream>
#include <string>
#include <string_view>

namespace srformer {

// A text on one line, for outputs of a line per result (srformer-client --batch's line per FILE, the
// alternatives' line each): a line break in it ("\n" from a byte-level BPE tokenizer) spread one result over
// several lines, and the lines after it were read as the next results. A line break is written \n (\r for a
// carriage return) and a backslash \\, so that the two characters \n in a text read back as themselves.
inline std::string one_line(std::string_view text) {
  std::string line;
  line.reserve(text.size());
  for (const char c : text) {
    if (c == '\\') {
      line += "\\\\";
    } else if (c == '\n') {
      line += "\\n";
    } else if (c == '\r') {
      line += "\\r";
    } else {
      line += c;
    }
  }
  return line;
}

// "[alternative RANK, score SCORE] TEXT\n"; the score as the response's float prints it, TEXT on one line.
inline void print_alternative_line(std::ostream& out, size_t rank, float score, std::string_view text) {
  out << "[alternative " << rank << ", score " << score << "] " << one_line(text) << "\n";
}

}  // namespace srformer
