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

namespace {

// Whether no replacement, in any of the ten rounds, can start before `cut` and end after it, whatever
// follows. Every replacement starts with a space and only removes spaces, so the characters that are not
// spaces stay, in order, in every round. s[cut - 1], not a space, is inside such a match only as one of its
// inner characters, and those are ' n v r (" ' ", " n't", " 'm", " 's", " 've", " 're"); and three that are
// not spaces before the cut leave no room for a match of at most four characters that starts with a
// space. `cut` must also be a character's start, so that what is returned is whole characters.
bool can_cut(std::string_view s, size_t cut) {
  if (cut < s.size() && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) return false;
  const char last = s[cut - 1];
  if (last == ' ') return false;
  if (last != '\'' && last != 'n' && last != 'v' && last != 'r') return true;
  return cut >= 3 && s[cut - 2] != ' ' && s[cut - 3] != ' ';
}

}  // namespace

std::string SpaceCleanupStream::push(std::string_view text) {
  // Whether a point can be cut depends only on what comes before it, so only the points `text` added are
  // looked at: those before were looked at by earlier pushes. (Scanning all that is held back at every push
  // was quadratic on text that never gives a cut, such as "a a a a ...".)
  const size_t old_size = pending_.size();
  pending_.append(text);
  size_t cut = pending_.size();
  while (cut > old_size && cut > 0 && !can_cut(pending_, cut)) --cut;
  if (cut <= old_size) return {};
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
