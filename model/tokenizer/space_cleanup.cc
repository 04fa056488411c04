#include "model/tokenizer/space_cleanup.h"

#include <array>
#include <utility>

namespace srformer {

std::string clean_up_spaces(std::string_view text) {
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 10> kReplacements{{
      {" .", "."},
      {" ?", "?"},
      {" !", "!"},
      {" ,", ","},
      {" ' ", "'"},
      {" n't", "n't"},
      {" 'm", "'m"},
      {" 's", "'s"},
      {" 've", "'ve"},
      {" 're", "'re"},
  }};
  std::string s(text);
  for (const auto& [from, to] : kReplacements) {
    std::string out;
    out.reserve(s.size());
    size_t pos = 0;
    for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
      out.append(s, pos, hit - pos);
      out.append(to);
    }
    out.append(s, pos, std::string::npos);
    s.swap(out);
  }
  return s;
}

std::string SpaceCleanupStream::push(std::string_view text) {
  pending_.append(text);
  // The last point with three non-space characters before it: no replacement, in any of the ten rounds
  // (each only removes spaces), can start before it and end after it.
  size_t cut = pending_.size();
  while (cut >= 3 && (pending_[cut - 1] == ' ' || pending_[cut - 2] == ' ' || pending_[cut - 3] == ' ')) --cut;
  if (cut < 3) return {};
  std::string out = clean_up_spaces(std::string_view(pending_).substr(0, cut));
  pending_.erase(0, cut);
  return out;
}

std::string SpaceCleanupStream::finish() {
  std::string out = clean_up_spaces(pending_);
  pending_.clear();
  return out;
}

}  // namespace srformer
