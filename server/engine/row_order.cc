#include "server/engine/row_order.h"

#include <stdexcept>

namespace srformer::server {

std::vector<size_t> fill_holes_from_tail(const std::vector<size_t>& kept) {
  const size_t n = kept.size();
  std::vector<size_t> order(n, n);  // n: hole, not assigned yet
  size_t movers = n;                // first index into kept whose position lies past the new end
  for (size_t e = 0; e < n; ++e) {
    if (e > 0 && kept[e] <= kept[e - 1]) throw std::invalid_argument("fill_holes_from_tail: positions not ascending");
    if (kept[e] < n) {
      order[kept[e]] = e;
    } else if (movers == n) {
      movers = e;
    }
  }
  for (size_t q = 0; q < n; ++q) {
    if (order[q] == n) order[q] = movers++;
  }
  return order;
}

}  // namespace srformer::server
