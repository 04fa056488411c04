#pragma once
// Grouping rows of different lengths for the CPU, where a padded position costs as much as a real one
// and batching rows of one length gains nothing (`srformer bench --only encode`).
#include <cstdint>
#include <vector>

namespace srformer {

// Indices of `lengths` in groups of similar length, longest first: a row joins the current group while
// it is at least 7/8 as long as the group's longest (at most 1/8 of a group's positions are padding).
std::vector<std::vector<int64_t>> length_groups(const std::vector<int64_t>& lengths);

}  // namespace srformer
