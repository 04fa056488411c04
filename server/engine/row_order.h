#pragma once
// Where the requests that stay after a decode step go in the next step's batch.
#include <cstddef>
#include <vector>

namespace srformer::server {

// kept: the positions (ascending, in units of equal-sized slots) of the slots that stay, out of a
// batch where the others left. Returns, for each new position q, the index into `kept` of the
// slot that goes there: slots already inside the first kept.size() positions stay put, and the last
// ones fill the holes the leaving slots left. Only the moved slots' state rows are copied, instead
// of every row behind the first hole.
std::vector<size_t> fill_holes_from_tail(const std::vector<size_t>& kept);

}  // namespace srformer::server
