#include "model/length_groups.h"

#include <algorithm>
#include <numeric>

namespace srformer {

std::vector<std::vector<int64_t>> length_groups(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> rows(lengths.size());
  std::iota(rows.begin(), rows.end(), int64_t{0});
  std::stable_sort(rows.begin(), rows.end(), [&](int64_t a, int64_t b) { return lengths[a] > lengths[b]; });
  std::vector<std::vector<int64_t>> groups;
  int64_t longest = 0;
  for (const int64_t r : rows) {
    if (groups.empty() || 8 * lengths[r] < 7 * longest) {
      groups.emplace_back();
      longest = lengths[r];
    }
    groups.back().push_back(r);
  }
  return groups;
}

}  // namespace srformer
