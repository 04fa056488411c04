#pragma once
// How srformer-client and `srformer summarize` print a further result (the next best beam-search
// hypothesis, or a further sample) after the summary: one line each, numbered from 2.
#include <cstddef>
#include <ostream>
#include <string_view>

namespace srformer {

// "[alternative RANK, score SCORE] TEXT\n"; the score as the response's float prints it.
inline void print_alternative_line(std::ostream& out, size_t rank, float score, std::string_view text) {
  out << "[alternative " << rank << ", score " << score << "] " << text << "\n";
}

}  // namespace srformer
