#include "model/decoder_state.h"

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <unordered_set>

#include "model/attention/products.h"
#include "model/attention/segments.h"
#include "model/layers.h"

namespace srformer {

namespace {

bool pooled(const LayerState& l) { return l.cross_start.defined(); }

// Applies fn to every tensor of the state whose first dimension is the row (possibly undefined).
template <typename State, typename Fn>
void for_each_tensor(State& s, Fn&& fn) {
  for (auto* t : {&s.self_valid, &s.self_pos, &s.cross_valid, &s.enc_len, &s.step, &s.expected_len, &s.max_steps,
                  &s.num_segments, &s.segment, &s.raf_fired, &s.raf_total, &s.segment_switches}) {
    fn(*t);
  }
  for (auto& l : s.layers) {
    for (auto* t : {&l.self_k, &l.self_v, &l.kv, &l.knorm, &l.mem, &l.recur, &l.global_k, &l.global_v, &l.window_k,
                    &l.window_v, &l.cross_start, &l.drive_start}) {
      fn(*t);
    }
    if (!pooled(l)) {
      for (auto* t : {&l.cross_k, &l.cross_v, &l.switch_drive}) fn(*t);
    }
  }
}

// A request's span of a pool (LayerState::cross_start): [start, start + count).
struct Span {
  int64_t start = 0, count = 0;
};

// How many positions (keys) and switch-table entries each row's request holds in the pools.
struct RowCounts {
  std::vector<int64_t> keys, entries;
};

RowCounts row_counts(const DecoderState& s) {
  RowCounts out;
  const int64_t B = s.batch_size();
  if (B == 0) return out;
  const auto k = s.enc_len.to(torch::kCPU, torch::kLong).contiguous();
  out.keys.assign(k.data_ptr<int64_t>(), k.data_ptr<int64_t>() + B);
  if (s.num_segments.defined() && s.expected_len.defined()) {
    const auto m = s.num_segments.to(torch::kCPU, torch::kLong).contiguous();
    const auto L = s.expected_len.to(torch::kCPU, torch::kLong).contiguous();
    const auto steps = s.max_steps.defined() ? s.max_steps.to(torch::kCPU, torch::kLong).contiguous() : torch::Tensor();
    for (int64_t b = 0; b < B; ++b) {
      out.entries.push_back(visited_segment_count(m.data_ptr<int64_t>()[b],
                                                  std::max<int64_t>(1, L.data_ptr<int64_t>()[b]),
                                                  steps.defined() ? steps.data_ptr<int64_t>()[b] : kUnboundedSteps));
    }
  }
  return out;
}

// The spans the rows read (beams share theirs), in start order.
std::vector<Span> used_spans(const torch::Tensor& starts, const std::vector<int64_t>& counts) {
  const auto s = starts.to(torch::kCPU, torch::kLong).contiguous();
  std::vector<Span> spans;
  for (int64_t b = 0; b < s.numel(); ++b)
    spans.push_back({s.data_ptr<int64_t>()[b], counts.at(static_cast<size_t>(b))});
  std::sort(spans.begin(), spans.end(), [](const Span& x, const Span& y) { return x.start < y.start; });
  spans.erase(std::unique(spans.begin(), spans.end(), [](const Span& x, const Span& y) { return x.start == y.start; }),
              spans.end());
  return spans;
}

int64_t total_count(const std::vector<Span>& spans) {
  int64_t n = 0;
  for (const auto& s : spans) n += s.count;
  return n;
}

// Rewrites starts [B] through `moved` (old start -> new start).
torch::Tensor renumber_starts(const torch::Tensor& starts, const std::vector<std::pair<int64_t, int64_t>>& moved) {
  auto s = starts.to(torch::kCPU, torch::kLong).contiguous().clone();
  int64_t* p = s.data_ptr<int64_t>();
  for (int64_t b = 0; b < s.numel(); ++b) {
    const auto it = std::lower_bound(moved.begin(), moved.end(), std::make_pair(p[b], INT64_MIN));
    if (it == moved.end() || it->first != p[b]) throw std::logic_error("DecoderState: a row's span is not in its pool");
    p[b] = it->second;
  }
  return s.to(starts.device());
}

// The dimension of a pool's positions: keys/values are head-major [H, N, d] (a head's keys contiguous,
// as the per-head attention kernels read them), switch tables [E, H, d, d].
constexpr int64_t kKeyDim = 1, kEntryDim = 0;

// Copies the spans in use of `pools` (tensors sharing one layout of spans along `dim`, e.g. keys and
// values) densely, in start order, and points `starts` at their new places; the rest is given back.
void copy_used_spans(const std::vector<torch::Tensor*>& pools, const std::vector<Span>& used, torch::Tensor& starts,
                     int64_t dim) {
  std::vector<std::pair<int64_t, int64_t>> moved;
  int64_t next = 0;
  for (const auto& span : used) {
    moved.emplace_back(span.start, next);
    next += span.count;
  }
  for (auto* pool : pools) {
    std::vector<torch::Tensor> kept;
    for (const auto& span : used) kept.push_back(pool->narrow(dim, span.start, span.count));
    auto shape = pool->sizes().vec();
    shape[static_cast<size_t>(dim)] = 0;
    *pool = kept.empty() ? torch::empty(shape, pool->options()) : torch::cat(kept, dim);
  }
  starts = renumber_starts(starts, moved);
}

// Calls fn(pools, starts, counts, dim) for each pool a layer keeps: keys and values (one layout of
// spans) and the switch table, with their rows' starts, the rows' counts and the positions' dimension.
template <typename Fn>
void for_each_pool(LayerState& l, const RowCounts& counts, Fn&& fn) {
  if (!pooled(l)) return;
  fn(std::vector<torch::Tensor*>{&l.cross_k, &l.cross_v}, l.cross_start, counts.keys, kKeyDim);
  if (l.switch_drive.defined())
    fn(std::vector<torch::Tensor*>{&l.switch_drive}, l.drive_start, counts.entries, kEntryDim);
}

// After rows left or were reordered: once at most a quarter of a pool is in use, the spans in use
// are copied densely (copy_used_spans). Not at half: under steady load the rows in flight swing
// around a level, and room given back at a low swing was bought again at the next high one, a copy
// of every span in use into a grown buffer each time.
void release_layer_pools(LayerState& l, const RowCounts& counts) {
  for_each_pool(
      l, counts,
      [](const std::vector<torch::Tensor*>& pools, torch::Tensor& starts, const std::vector<int64_t>& n, int64_t dim) {
        const auto used = used_spans(starts, n);
        const int64_t size = pools.front()->size(dim);
        if (size > 0 && 4 * total_count(used) <= size) copy_used_spans(pools, used, starts, dim);
      });
}

torch::Tensor select_rows(const torch::Tensor& t, const torch::Tensor& rows) {
  return t.defined() ? t.index_select(0, rows.to(t.device())) : t;
}

// self_src where every row's slots are its own: [B, T] int32, row b filled with b.
torch::Tensor own_slots(int64_t rows, int64_t slots) {
  return torch::arange(rows, torch::kInt32).view({rows, 1}).expand({rows, slots}).contiguous();
}

// Rows that read each other's self-attention slots (directly or through others): a request's beams.
class SlotGroups {
 public:
  explicit SlotGroups(const torch::Tensor& self_src) : root_(static_cast<size_t>(self_src.size(0))) {
    std::iota(root_.begin(), root_.end(), 0);
    const int64_t B = self_src.size(0), T = self_src.size(1);
    const int32_t* src = self_src.data_ptr<int32_t>();
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t t = 0; t < T; ++t) unite(b, src[b * T + t]);
    }
  }
  int64_t find(int64_t row) {
    auto r = static_cast<size_t>(row);
    while (root_[r] != static_cast<int64_t>(r)) {
      root_[r] = root_[static_cast<size_t>(root_[r])];
      r = static_cast<size_t>(root_[r]);
    }
    return static_cast<int64_t>(r);
  }

 private:
  void unite(int64_t a, int64_t b) {
    const int64_t ra = find(a), rb = find(b);
    if (ra != rb) root_[static_cast<size_t>(std::max(ra, rb))] = std::min(ra, rb);
  }
  std::vector<int64_t> root_;
};

// Pads dimension `dim` of `t` to `size`, at the front (self-attention slots are right-aligned so
// that every row writes its next token into the same last slot) or at the back (encoder keys).
torch::Tensor pad_dim(const torch::Tensor& t, int64_t dim, int64_t size, bool front, double value = 0.0) {
  const int64_t have = t.size(dim);
  if (have == size) return t;
  auto shape = t.sizes().vec();
  shape[dim] = size - have;
  const auto pad = torch::full(shape, value, t.options());
  return front ? torch::cat({pad, t}, dim) : torch::cat({t, pad}, dim);
}

// Bytes a [B, ...] tensor holds for its rows: a self-attention cache with room for more slots holds
// stride(0) elements per row, not only the live ones.
int64_t tensor_bytes(const torch::Tensor& t) {
  if (!t.defined()) return 0;
  // An empty tensor holds its storage (a buffer's room, or nothing), not what its strides span.
  if (t.numel() == 0) return t.has_storage() ? static_cast<int64_t>(t.storage().nbytes()) : 0;
  const auto elem = static_cast<int64_t>(t.element_size());
  const auto n = static_cast<int64_t>(t.numel());
  if (t.dim() == 0 || t.size(0) == 0) return n * elem;
  return t.size(0) * std::max<int64_t>(t.stride(0), n / t.size(0)) * elem;
}

// How to keep `rows` (indices into the current rows, repeats allowed) within each tensor's storage:
// row j receives row rows[j], and only rows that change are copied. A source row that is itself
// overwritten (beams swapping or repeating parents) is staged first; one that is not (kept in place,
// or past the kept rows: the last rows moving into the holes of leaving ones) is read where it is.
struct RowMoves {
  std::vector<std::pair<int64_t, int64_t>> moves;  // (destination, source)
  std::vector<int64_t> staged;                     // sources copied aside before any row is written
  std::vector<int64_t> stage_slot;                 // per current row: its place among `staged`, or -1
};

// `skip`: destinations whose row need not move (empty: none).
RowMoves plan_row_moves(const std::vector<int64_t>& rows, int64_t before, const std::vector<bool>& skip = {}) {
  RowMoves plan;
  const auto n = static_cast<int64_t>(rows.size());
  plan.stage_slot.assign(static_cast<size_t>(before), -1);
  for (int64_t j = 0; j < n; ++j) {
    const int64_t src = rows[static_cast<size_t>(j)];
    if (src == j || (!skip.empty() && skip[static_cast<size_t>(j)])) continue;
    plan.moves.emplace_back(j, src);
    const bool overwritten =
        src < n && rows[static_cast<size_t>(src)] != src && (skip.empty() || !skip[static_cast<size_t>(src)]);
    if (overwritten && plan.stage_slot[static_cast<size_t>(src)] < 0) {
      plan.stage_slot[static_cast<size_t>(src)] = static_cast<int64_t>(plan.staged.size());
      plan.staged.push_back(src);
    }
  }
  return plan;
}

// Elements one row of a [B, ...] tensor spans in its storage (from its first to its last, plus one);
// 0 when a stride is not positive.
int64_t row_extent(const torch::Tensor& t) {
  int64_t extent = 1;
  for (int64_t i = 1; i < t.dim(); ++i) {
    if (t.size(i) == 0) return 0;
    if (t.stride(i) <= 0 && t.size(i) > 1) return 0;
    extent += (t.size(i) - 1) * t.stride(i);
  }
  return extent;
}

// The bytes between rows where retain_rows_in_place can keep n of t's rows, 0 where it cannot.
int64_t in_place_row_bytes(const torch::Tensor& t, int64_t n) {
  // Rows are slabs of stride(0) elements from the storage's start: dense tensors, and caches that
  // are views of a buffer with room for more slots per row.
  if (!t.is_cpu() || t.dim() == 0 || t.storage_offset() != 0 || !owns_storage(t)) {
    return 0;
  }
  const int64_t extent = row_extent(t);
  if (t.size(0) > 1 && (extent == 0 || t.stride(0) < extent)) return 0;
  const int64_t row_bytes = (t.size(0) > 1 ? t.stride(0) : extent) * static_cast<int64_t>(t.element_size());
  const auto storage_bytes = static_cast<int64_t>(t.storage().nbytes());
  if (row_bytes == 0 || t.size(0) * row_bytes > storage_bytes || 4 * n * row_bytes < storage_bytes) {
    return 0;
  }
  return row_bytes;
}

// Keeps the planned rows of a [B, ...] tensor within its storage; the tensor becomes a view of its
// first rows. Leaving rows is the common case of a decode step, beams reordering the next; a fresh
// copy of the whole state costs page faults on top of the copy (~0.5 ms per MB measured here), and
// in place only the rows that change position move (a BART-base beam is ~7 MB of state at 64 steps).
// Not done (returns false) off the CPU, when another state shares the storage (copy-on-write), or
// when the kept rows would fill less than a quarter of the storage (buffers grow to twice the rows
// they hold: the batch has halved since): then the caller's compact copy gives the memory back.
bool retain_rows_in_place(torch::Tensor& t, const RowMoves& plan, int64_t n) {
  const int64_t row_bytes = in_place_row_bytes(t, n);
  if (row_bytes == 0) return false;
  auto* base = static_cast<char*>(t.data_ptr());
  const auto bytes = static_cast<size_t>(row_bytes);
  // A cache with room holds each (row, head) group's live slots at the start of a longer stretch:
  // only those are copied (a third of a BART-base row's cache bytes are room).
  const auto element = static_cast<int64_t>(t.element_size());
  int64_t groups = 1;
  auto group_bytes = bytes;
  if (t.dim() >= 3 && t.size(1) > 1) {
    int64_t inner = 1;
    for (int64_t i = 2; i < t.dim(); ++i) inner += (t.size(i) - 1) * t.stride(i);
    if (inner < t.stride(1)) {
      groups = t.size(1);
      group_bytes = static_cast<size_t>(inner * element);
    }
  }
  const auto group_stride = static_cast<size_t>(t.dim() >= 2 ? t.stride(1) * element : 0);
  const auto copy_row = [&](char* to, const char* from) {
    if (groups == 1) {
      std::memcpy(to, from, group_bytes);
      return;
    }
    for (int64_t g = 0; g < groups; ++g) {
      std::memcpy(to + static_cast<size_t>(g) * group_stride, from + static_cast<size_t>(g) * group_stride,
                  group_bytes);
    }
  };
  thread_local std::vector<char> stage;  // reused: a beam step stages a few rows of every tensor
  stage.resize(plan.staged.size() * bytes);
  for (size_t k = 0; k < plan.staged.size(); ++k) copy_row(stage.data() + k * bytes, base + plan.staged[k] * row_bytes);
  for (const auto& [dst, src] : plan.moves) {
    const int64_t k = plan.stage_slot[static_cast<size_t>(src)];
    copy_row(base + dst * row_bytes, k >= 0 ? stage.data() + static_cast<size_t>(k) * bytes : base + src * row_bytes);
  }
  // Re-pointed rather than narrowed: a view would hold the old tensor as its base, and the storage
  // would no longer look exclusively this tensor's at the next retain or step.
  auto sizes = t.sizes().vec();
  sizes[0] = n;
  const auto strides = t.strides().vec();
  t.set_(t.storage(), 0, sizes, strides);
  return true;
}

// Appends `extra`'s rows to a [B, ...] tensor whose rows are slabs of stride(0) elements (dense
// tensors, caches with room). With spare rows in its storage the new rows are written in place;
// otherwise the tensor moves to a buffer with room for more rows (grown_join_capacity), keeping its
// inner strides (a cache keeps its free slots). Requests joining a running batch one admission at a
// time then cost their own rows instead of a copy of the whole batch each time, and a batch growing
// to N rows copies at most ~2N rows in all (~5N when buffers grew by a quarter: a BART-base request's
// cross keys/values at 576 tokens are 21 MB). The room costs address space only: its pages are not
// resident until rows are written there. Other tensors (another state's, off the CPU, other
// layouts) are concatenated as before.
// The rows (or positions) a buffer that must hold `needed` of them is grown to by a join: `room` (0..1)
// times as many again, at least 4 at room 1, so that a run of joins costs their own bytes rather than
// a copy of the buffer each; less room near a memory bound (DecoderState::set_held_limit).
int64_t grown_join_capacity(int64_t needed, double room) {
  return needed + static_cast<int64_t>(room * static_cast<double>(std::max<int64_t>(needed, 4)));
}

void append_rows(torch::Tensor& t, const torch::Tensor& extra, double room) {
  const int64_t B = t.size(0);
  const int64_t n = extra.size(0);
  const int64_t extent = row_extent(t);
  const int64_t row_stride = t.dim() > 0 ? t.stride(0) : 0;
  bool same_rows = t.dim() == extra.dim() && t.scalar_type() == extra.scalar_type() && t.device() == extra.device();
  for (int64_t i = 1; same_rows && i < t.dim(); ++i) same_rows = t.size(i) == extra.size(i);
  if (!same_rows || !t.is_cpu() || t.storage_offset() != 0 || extent == 0 || row_stride < extent || !owns_storage(t)) {
    t = torch::cat({t, extra}, 0);
    return;
  }
  auto sizes = t.sizes().vec();
  sizes[0] = B + n;
  const auto strides = t.strides().vec();
  const auto elem = static_cast<int64_t>(t.element_size());
  const int64_t rows_held = static_cast<int64_t>(t.storage().nbytes()) / (row_stride * elem);
  if (B + n > rows_held) {
    const int64_t capacity = grown_join_capacity(B + n, room);
    const auto buffer = torch::empty({capacity * row_stride}, t.options());
    torch::Tensor grown = torch::empty({0}, t.options());
    grown.set_(buffer.storage(), 0, sizes, strides);
    grown.narrow(0, 0, B).copy_(t);
    t = std::move(grown);
  } else {
    t.set_(t.storage(), 0, sizes, strides);
  }
  t.narrow(0, B, n).copy_(extra);
}

// Positions (keys: dim 1 of a head-major [H, N, d] pool whose heads lie stride(0) apart) or entries
// (dim 0 of a dense [E, ...] table) the pool's buffer has room for, where the buffer is this pool's
// alone and can be written past its size; its size otherwise.
int64_t pool_capacity(const torch::Tensor& t, int64_t dim) {
  const int64_t size = t.size(dim);
  if (t.storage_offset() != 0 || !owns_storage(t)) return size;
  const auto storage = static_cast<int64_t>(t.storage().nbytes()) / static_cast<int64_t>(t.element_size());
  if (dim == kKeyDim) {
    const int64_t d = t.size(2);
    if (t.dim() != 3 || d == 0 || t.stride(2) != 1 || t.stride(1) != d) return size;
    const int64_t per_head = t.stride(0) / d;
    return per_head >= size && (t.size(0) - 1) * t.stride(0) + per_head * d <= storage ? per_head : size;
  }
  const int64_t row = t.dim() > 1 ? t.stride(0) : 1;
  if (!t.is_contiguous() || row == 0 || row * size > storage) return size;
  return storage / row;
}

// A pool's tensor over the same buffer with `size` positions along `dim` (within pool_capacity).
void resize_pool(torch::Tensor& t, int64_t dim, int64_t size) {
  auto sizes = t.sizes().vec();
  sizes[static_cast<size_t>(dim)] = size;
  const auto strides = t.strides().vec();
  t.set_(t.storage(), 0, sizes, strides);
}

// Writes the spans `theirs` (in `their_pools`, starts `their_starts`) into `my_pools`, which hold the
// spans `mine` (starts `my_starts`): into holes (first fit; where the pools are this state's alone: a
// copy of the state may still read its holes), the last of which runs on into the room past the end
// (a span may start in the one and end in the other). When they do not all fit, the pools move to
// buffers with room (grown_join_capacity) holding the spans in use densely, theirs after mine, and
// my_starts are renumbered: holes never outlive a growth, whose copy then moves only what is in use.
// Points their_starts at the new places.
void join_spans(const std::vector<torch::Tensor*>& my_pools, torch::Tensor& my_starts, const std::vector<Span>& mine,
                const std::vector<torch::Tensor*>& their_pools, const std::vector<Span>& theirs,
                torch::Tensor& their_starts, int64_t dim, double room) {
  const int64_t size = my_pools.front()->size(dim);
  int64_t capacity = size;
  std::vector<Span> holes;
  if (std::all_of(my_pools.begin(), my_pools.end(), [](const torch::Tensor* t) { return owns_storage(*t); })) {
    capacity = INT64_MAX;
    for (const auto* pool : my_pools) capacity = std::min(capacity, pool_capacity(*pool, dim));
    int64_t at = 0;
    for (const auto& span : mine) {
      if (span.start > at) holes.push_back({at, span.start - at});
      at = std::max(at, span.start + span.count);
    }
    if (capacity > at) holes.push_back({at, capacity - at});  // the last hole runs on into the room
  }
  std::vector<std::pair<int64_t, int64_t>> moved;  // their start -> mine
  int64_t end = size;
  bool fits = true;
  for (const auto& span : theirs) {
    const auto hole = std::find_if(holes.begin(), holes.end(), [&](const Span& h) { return h.count >= span.count; });
    if (hole == holes.end()) {
      fits = false;
      break;
    }
    moved.emplace_back(span.start, hole->start);
    hole->start += span.count;
    hole->count -= span.count;
    end = std::max(end, hole->start);
  }
  if (fits) {
    for (auto* pool : my_pools) {
      if (end > size) resize_pool(*pool, dim, end);
    }
  } else {                                          // grow: mine densely from 0, theirs after
    std::vector<std::pair<int64_t, int64_t>> kept;  // my start -> new
    int64_t next = 0;
    for (const auto& span : mine) {
      kept.emplace_back(span.start, next);
      next += span.count;
    }
    moved.clear();
    for (const auto& span : theirs) {
      moved.emplace_back(span.start, next);
      next += span.count;
    }
    for (auto* pool : my_pools) {
      auto shape = pool->sizes().vec();
      shape[static_cast<size_t>(dim)] = grown_join_capacity(next, room);
      const auto buffer = torch::empty(shape, pool->options());
      torch::Tensor grown = torch::empty({0}, pool->options());
      shape[static_cast<size_t>(dim)] = next;
      grown.set_(buffer.storage(), 0, shape, buffer.strides());
      for (size_t j = 0; j < mine.size(); ++j) {
        grown.narrow(dim, kept[j].second, mine[j].count).copy_(pool->narrow(dim, mine[j].start, mine[j].count));
      }
      *pool = std::move(grown);
    }
    if (!kept.empty()) my_starts = renumber_starts(my_starts, kept);
  }
  for (size_t j = 0; j < my_pools.size(); ++j) {
    for (size_t i = 0; i < theirs.size(); ++i) {
      my_pools[j]
          ->narrow(dim, moved[i].second, theirs[i].count)
          .copy_(their_pools[j]->narrow(dim, theirs[i].start, theirs[i].count));
    }
  }
  std::sort(moved.begin(), moved.end());
  their_starts = renumber_starts(their_starts, moved);
}

// Joins a layer's pools (keys/values, switch table) of another state's rows into this state's.
void join_pools(LayerState& mine, const RowCounts& my_counts, LayerState& theirs, const RowCounts& their_counts,
                double room) {
  if (mine.switch_drive.defined() != theirs.switch_drive.defined()) {
    throw std::invalid_argument("DecoderState::append: states of different models or variants");
  }
  join_spans({&mine.cross_k, &mine.cross_v}, mine.cross_start, used_spans(mine.cross_start, my_counts.keys),
             {&theirs.cross_k, &theirs.cross_v}, used_spans(theirs.cross_start, their_counts.keys), theirs.cross_start,
             kKeyDim, room);
  if (mine.switch_drive.defined()) {
    join_spans({&mine.switch_drive}, mine.drive_start, used_spans(mine.drive_start, my_counts.entries),
               {&theirs.switch_drive}, used_spans(theirs.drive_start, their_counts.entries), theirs.drive_start,
               kEntryDim, room);
  }
}
}  // namespace

void DecoderState::select(const torch::Tensor& rows) {
  const auto idx = rows.to(torch::kLong);
  if (idx.numel() > 0) {
    const auto n = batch_size();
    const auto lo = idx.min().item<int64_t>();
    const auto hi = idx.max().item<int64_t>();
    if (lo < 0 || hi >= n) {
      throw std::out_of_range("DecoderState::select: row index outside [0, " + std::to_string(n) + ")");
    }
  }
  if (self_src.defined()) {  // rows are copied wholesale: each must hold its own slots first
    std::vector<int64_t> all(static_cast<size_t>(batch_size()));
    std::iota(all.begin(), all.end(), 0);
    own_self_slots(all);
  }
  const int64_t before = batch_size();
  for_each_tensor(*this, [&](torch::Tensor& t) { t = select_rows(t, idx); });
  release_pools();
  if (self_src.defined()) self_src = own_slots(idx.numel(), self_src.size(1));
  if (idx.numel() < before) trim_padding();
  keep_within_limit();
}

void DecoderState::append(DecoderState&& other) {
  if (other.batch_size() == 0) return;
  if (batch_size() == 0) {
    take_rows(std::move(other));
    keep_within_limit();
    return;
  }
  if (layers.size() != other.layers.size()) throw std::invalid_argument("DecoderState::append: layer count differs");
  for (size_t i = 0; i < layers.size(); ++i) {
    if (pooled(layers[i]) != pooled(other.layers[i])) {
      throw std::invalid_argument("DecoderState::append: states of different models or variants");
    }
  }
  const double room = join_room(other);
  // Self-attention slots: pad the shorter one at the front with invalid slots.
  const int64_t slots = std::max(self_valid.size(1), other.self_valid.size(1));
  const int64_t keys = std::max(cross_valid.size(1), other.cross_valid.size(1));
  auto align = [&](DecoderState& s) {
    s.self_valid = pad_dim(s.self_valid, 1, slots, true, 0);
    s.self_pos = pad_dim(s.self_pos, 1, slots, true, 0);
    s.cross_valid = pad_dim(s.cross_valid, 1, keys, false, 0);
    for (auto& l : s.layers) {
      if (l.self_k.defined()) {
        l.self_k = pad_dim(l.self_k, 2, slots, true);
        l.self_v = pad_dim(l.self_v, 2, slots, true);
      }
      if (!pooled(l)) {  // pools hold each request's own positions
        l.cross_k = pad_dim(l.cross_k, 2, keys, false);
        l.cross_v = pad_dim(l.cross_v, 2, keys, false);
      }
    }
  };
  align(*this);
  align(other);
  if (self_src.defined() != other.self_src.defined()) {
    throw std::invalid_argument("DecoderState::append: states of different models or variants");
  }
  if (self_src.defined()) {  // the joining rows' slots are in their own rows, now from row B on
    const int64_t B = batch_size(), n = other.batch_size();
    auto joined = own_slots(B + n, slots);
    joined.narrow(0, 0, B).narrow(1, slots - self_src.size(1), self_src.size(1)).copy_(self_src);
    joined.narrow(0, B, n).narrow(1, slots - other.self_src.size(1), other.self_src.size(1)).copy_(other.self_src + B);
    self_src = std::move(joined);
  }
  // Global tokens: pad at the back (tokens past a row's segments are masked).
  for (size_t i = 0; i < layers.size(); ++i) {
    auto& a = layers[i];
    auto& b = other.layers[i];
    if (a.global_k.defined()) {
      const int64_t m = std::max(a.global_k.size(2), b.global_k.size(2));
      a.global_k = pad_dim(a.global_k, 2, m, false);
      a.global_v = pad_dim(a.global_v, 2, m, false);
      b.global_k = pad_dim(b.global_k, 2, m, false);
      b.global_v = pad_dim(b.global_v, 2, m, false);
    }
  }
  if (std::any_of(layers.begin(), layers.end(), pooled)) {
    const auto my_counts = row_counts(*this), their_counts = row_counts(other);
    for (size_t i = 0; i < layers.size(); ++i) {
      if (pooled(layers[i])) join_pools(layers[i], my_counts, other.layers[i], their_counts, room);
    }
  }
  // Concatenate every tensor pairwise, in the same traversal order.
  std::vector<torch::Tensor*> mine;
  std::vector<torch::Tensor*> theirs;
  for_each_tensor(*this, [&](torch::Tensor& t) { mine.push_back(&t); });
  for_each_tensor(other, [&](torch::Tensor& t) { theirs.push_back(&t); });
  for (size_t i = 0; i < mine.size(); ++i) {
    if (mine[i]->defined() != theirs[i]->defined()) {
      throw std::invalid_argument("DecoderState::append: states of different models or variants");
    }
    if (mine[i]->defined()) append_rows(*mine[i], *theirs[i], room);
  }
  other = DecoderState{};
  keep_within_limit();
}

void DecoderState::clear() { take_rows(DecoderState{}); }

void DecoderState::take_rows(DecoderState&& rows) {
  const int64_t limit = held_limit_;
  *this = std::move(rows);
  held_limit_ = limit;
}

double DecoderState::join_room(const DecoderState& other) const {
  if (held_limit_ <= 0) return 1.0;
  // What the state would hold with other's rows and no room: the buffers that grow for them, all of
  // which are part of it, share what is left under the bound in proportion to their size.
  const auto exact = static_cast<double>(held_bytes() + other.bytes());
  return std::clamp((static_cast<double>(held_limit_) - exact) / exact, 0.0, 1.0);
}

void DecoderState::retain(const std::vector<int64_t>& rows, const std::vector<bool>& same_request) {
  const int64_t before = batch_size();
  const auto n = static_cast<int64_t>(rows.size());
  if (!same_request.empty() && same_request.size() != rows.size()) {
    throw std::invalid_argument("DecoderState::retain: same_request needs one entry per kept row");
  }
  bool identity = n == before;
  for (size_t i = 0; identity && i < rows.size(); ++i) identity = rows[i] == static_cast<int64_t>(i);
  if (identity) return;
  const bool in_range = std::all_of(rows.begin(), rows.end(), [before](int64_t r) { return r >= 0 && r < before; });
  if (!in_range || n > before) {  // select() reports rows out of range; more rows than before need room
    select(torch::tensor(rows, torch::kInt64));
  } else {
    const auto all_rows = plan_row_moves(rows, before);
    // Beams of one request differ only in their self-attention caches.
    const auto request_rows = same_request.empty() ? all_rows : plan_row_moves(rows, before, same_request);
    std::vector<const torch::Tensor*> caches;
    for (const auto& l : layers) caches.insert(caches.end(), {&l.self_k, &l.self_v});
    // ... and those stay where they are when beams share slots (self_src).
    std::vector<bool> keep_cache;
    if (self_src.defined()) {
      const bool in_place = std::all_of(caches.begin(), caches.end(), [n](const torch::Tensor* c) {
        return !c->defined() || in_place_row_bytes(*c, n) > 0;
      });
      keep_cache = share_beam_slots(rows, same_request, in_place);
    }
    const auto cache_rows = keep_cache.empty() ? all_rows : plan_row_moves(rows, before, keep_cache);
    // Made once (and copied to the model's device once), for tensors that cannot move in place.
    torch::Tensor idx, device_idx;
    for_each_tensor(*this, [&](torch::Tensor& t) {
      const bool cache = std::find(caches.begin(), caches.end(), &t) != caches.end();
      if (!t.defined() || retain_rows_in_place(t, cache ? cache_rows : request_rows, n)) return;
      if (!idx.defined()) idx = torch::tensor(rows, torch::kInt64);
      if (!t.is_cpu() && !device_idx.defined()) device_idx = idx.to(t.device());
      t = select_rows(t, t.is_cpu() ? idx : device_idx);
    });
    release_pools();
  }
  if (static_cast<int64_t>(rows.size()) < before && self_valid.defined()) {
    compact(std::max<int64_t>(8, self_valid.size(1) / 4));
  }
  if (static_cast<int64_t>(rows.size()) < before) {
    trim_padding();
    keep_within_limit();  // rows that leave leave room and holes; beams reordered in place add none
  }
}

void DecoderState::trim_padding() {
  if (batch_size() == 0 || !cross_valid.defined() || !enc_len.defined()) return;
  const int64_t keys = cross_valid.size(1);
  const int64_t needed_keys = std::max<int64_t>(1, enc_len.max().item<int64_t>());
  if (2 * needed_keys > keys) return;
  // Copies, never views: with one row (and one head) the cut is a view LibTorch calls contiguous, and
  // contiguous() would keep the long input's buffer, which bytes() and held_bytes() then count.
  const auto cut = [needed_keys](const torch::Tensor& t, int64_t dim) {
    return t.narrow(dim, 0, needed_keys).clone(at::MemoryFormat::Contiguous);
  };
  cross_valid = cut(cross_valid, 1);
  for (auto& l : layers) {
    if (pooled(l)) continue;  // pools hold no padding (switch tables are always pooled)
    l.cross_k = cut(l.cross_k, 2);
    l.cross_v = cut(l.cross_v, 2);
  }
}

void DecoderState::release_pools() {
  if (std::none_of(layers.begin(), layers.end(), pooled)) return;
  const auto counts = row_counts(*this);
  for (auto& l : layers) release_layer_pools(l, counts);
}

namespace {

// t's rows in a buffer of their own without room for more rows; the inner strides are kept (a
// self-attention cache keeps its room for more slots, which its next steps write).
torch::Tensor without_spare_rows(const torch::Tensor& t) {
  const int64_t extent = row_extent(t);
  if (t.dim() == 0 || t.storage_offset() != 0 || extent == 0 || t.stride(0) < extent) return t.clone();
  const auto buffer = torch::empty({t.size(0) * t.stride(0)}, t.options());
  torch::Tensor out = torch::empty({0}, t.options());
  out.set_(buffer.storage(), 0, t.sizes(), t.strides());
  out.copy_(t);
  return out;
}

}  // namespace

void DecoderState::keep_within_limit() {
  if (held_limit_ <= 0 || batch_size() == 0) return;
  const int64_t held = held_bytes();
  if (held <= held_limit_) return;
  // Rows that alone use more than the bound give room back once it is an eighth of what they hold:
  // otherwise they would copy the state whenever a row left.
  const int64_t used = bytes();
  if (used > held_limit_ && 8 * (held - used) < held) return;
  // Pools with holes or room (not those another state shares: a copy would free nothing).
  const auto counts = row_counts(*this);
  for (auto& l : layers) {
    for_each_pool(
        l, counts,
        [](const std::vector<torch::Tensor*>& pools, torch::Tensor& starts, const std::vector<int64_t>& n,
           int64_t dim) {
          const auto used = used_spans(starts, n);
          const torch::Tensor& pool = *pools.front();
          if (owns_storage(pool) && (pool.size(dim) > total_count(used) || pool_capacity(pool, dim) > pool.size(dim))) {
            copy_used_spans(pools, used, starts, dim);
          }
        });
  }
  // Rows' buffers with room for more rows (likewise not shared ones).
  const auto shed = [](torch::Tensor& t) {
    if (t.defined() && t.numel() > 0 && owns_storage(t) &&
        static_cast<int64_t>(t.storage().nbytes()) > tensor_bytes(t)) {
      t = without_spare_rows(t);
    }
  };
  for_each_tensor(*this, shed);
  shed(self_src);
}

void DecoderState::own_self_slots(const std::vector<int64_t>& which) {
  if (!self_src.defined() || which.empty() || self_src.size(1) == 0) return;
  const int64_t T = self_src.size(1);
  const int32_t* src = self_src.data_ptr<int32_t>();
  struct Run {
    int64_t row, from, first, count;  // slots [first, first + count) of `row` lie in row `from`
  };
  std::vector<Run> runs;
  int64_t slots = 0;
  for (const int64_t b : which) {
    const int32_t* s = src + b * T;
    for (int64_t t = 0; t < T;) {
      int64_t end = t + 1;
      while (end < T && s[end] == s[t]) ++end;
      if (s[t] != b) {
        runs.push_back({b, s[t], t, end - t});
        slots += end - t;
      }
      t = end;
    }
  }
  if (runs.empty()) return;
  for (auto& l : layers) {
    for (torch::Tensor* cache : {&l.self_k, &l.self_v}) {
      if (!cache->defined()) continue;
      const int64_t H = cache->size(1), d = cache->size(3);
      if (!cache->is_cpu() || cache->stride(3) != 1 || cache->stride(2) != d) {
        throw std::logic_error("DecoderState: self_src needs CPU caches with dense slots");
      }
      if (!owns_storage(*cache)) *cache = cache->clone();  // another state reads these slots too
      const auto elem = static_cast<int64_t>(cache->element_size());
      auto* base = static_cast<char*>(cache->data_ptr());
      const auto at = [&](int64_t row, int64_t h, int64_t t) {
        return base + (row * cache->stride(0) + h * cache->stride(1) + t * d) * elem;
      };
      // Every source is read before any row is written: rows being owned may read each other.
      thread_local std::vector<char> stage;
      stage.resize(static_cast<size_t>(slots * H * d * elem));
      char* next = stage.data();
      for (const auto& r : runs) {
        for (int64_t h = 0; h < H; ++h, next += r.count * d * elem) {
          std::memcpy(next, at(r.from, h, r.first), static_cast<size_t>(r.count * d * elem));
        }
      }
      next = stage.data();
      for (const auto& r : runs) {
        for (int64_t h = 0; h < H; ++h, next += r.count * d * elem) {
          std::memcpy(at(r.row, h, r.first), next, static_cast<size_t>(r.count * d * elem));
        }
      }
    }
  }
  self_src = self_src.clone();  // a copy of this state may hold the same table
  int32_t* table = self_src.data_ptr<int32_t>();
  for (const auto& r : runs) {
    std::fill(table + r.row * T + r.first, table + r.row * T + r.first + r.count, static_cast<int32_t>(r.row));
  }
}

std::vector<bool> DecoderState::share_beam_slots(const std::vector<int64_t>& rows,
                                                 const std::vector<bool>& same_request, bool caches_in_place) {
  const int64_t before = batch_size(), T = self_src.size(1);
  const auto n = static_cast<int64_t>(rows.size());
  std::vector<int64_t> sources(rows);
  std::sort(sources.begin(), sources.end());
  sources.erase(std::unique(sources.begin(), sources.end()), sources.end());
  if (!caches_in_place || same_request.empty()) {  // every cache row moves: each takes its own slots along
    own_self_slots(sources);
    self_src = own_slots(n, T);
    return {};
  }
  // A group's rows may keep their caches (and read each other's slots) unless some of its rows move
  // to rows of another request, are written by such a move, or leave (past the kept rows: their
  // storage goes to the next rows that join). Marking a group can force another (its rows written by
  // a move from the first), hence the loop.
  SlotGroups groups(self_src);
  std::vector<bool> moved(static_cast<size_t>(before), false);
  for (int64_t b = n; b < before; ++b) moved[static_cast<size_t>(groups.find(b))] = true;
  std::vector<bool> keep(static_cast<size_t>(n), false);
  for (bool changed = true; changed;) {
    changed = false;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t r = rows[static_cast<size_t>(j)];
      if (r == j) continue;
      keep[static_cast<size_t>(j)] =
          same_request[static_cast<size_t>(j)] && !moved[static_cast<size_t>(groups.find(r))];
      if (keep[static_cast<size_t>(j)]) continue;
      for (const int64_t g : {groups.find(j), groups.find(r)}) {
        if (!moved[static_cast<size_t>(g)]) {
          moved[static_cast<size_t>(g)] = true;
          changed = true;
        }
      }
    }
  }
  std::vector<int64_t> own;
  for (const int64_t r : sources) {
    if (moved[static_cast<size_t>(groups.find(r))]) own.push_back(r);
  }
  own_self_slots(own);
  auto next = torch::empty({n, T}, self_src.options());
  const int32_t* from = self_src.data_ptr<int32_t>();
  int32_t* to = next.data_ptr<int32_t>();
  for (int64_t j = 0; j < n; ++j) {
    const int64_t r = rows[static_cast<size_t>(j)];
    if (r == j || keep[static_cast<size_t>(j)]) {
      std::copy(from + r * T, from + (r + 1) * T, to + j * T);
    } else {  // the row's own slots move with it to row j
      std::fill(to + j * T, to + (j + 1) * T, static_cast<int32_t>(j));
    }
  }
  self_src = std::move(next);
  return keep;
}

namespace {

// Drops a self-attention cache's first `first` slots by moving each (row, head) group's later slots
// down within its buffer, which keeps its room for more slots: a dense copy (the fallback) costs a
// fresh allocation and is copied again into a buffer with room at the next step. Returns false where
// the cache is not such a buffer of this state's alone.
bool drop_leading_slots_in_place(torch::Tensor& cache, int64_t first) {
  if (!cache.is_cpu() || cache.dim() != 4 || cache.storage_offset() != 0 || !owns_storage(cache)) return false;
  const int64_t group = uniform_group_stride(cache);
  if (group == 0) return false;
  const int64_t B = cache.size(0), H = cache.size(1), T = cache.size(2), d = cache.size(3);
  const auto element = static_cast<int64_t>(cache.element_size());
  auto* base = static_cast<char*>(cache.data_ptr());
  for (int64_t g = 0; g < B * H; ++g) {
    char* slots = base + g * group * element;
    std::memmove(slots, slots + first * d * element, static_cast<size_t>((T - first) * d * element));
  }
  const std::vector<int64_t> strides = cache.strides().vec();
  cache.set_(cache.storage(), 0, {B, H, T - first, d}, strides);
  return true;
}

}  // namespace

void DecoderState::compact(int64_t min_unused) {
  if (batch_size() == 0 || !self_valid.defined() || self_valid.size(1) == 0) return;
  const auto used = self_valid.any(0);  // [T]
  const auto nz = used.nonzero();
  const int64_t first = nz.numel() == 0 ? self_valid.size(1) : nz[0].item<int64_t>();
  if (first == 0 || first < min_unused) return;
  const int64_t keep = self_valid.size(1) - first;
  self_valid = self_valid.narrow(1, first, keep).contiguous();
  self_pos = self_pos.narrow(1, first, keep).contiguous();
  if (self_src.defined()) self_src = self_src.narrow(1, first, keep).contiguous();
  for (auto& l : layers) {
    for (torch::Tensor* cache : {&l.self_k, &l.self_v}) {
      if (cache->defined() && !drop_leading_slots_in_place(*cache, first)) {
        *cache = cache->narrow(2, first, keep).contiguous();
      }
    }
  }
}

namespace {

// Bytes of the [B, ...] tensors (the pools' spans aside).
int64_t dense_bytes(const DecoderState& s) {
  int64_t total = 0;
  for_each_tensor(const_cast<DecoderState&>(s), [&](torch::Tensor& t) { total += tensor_bytes(t); });
  return total + tensor_bytes(s.self_src);
}

// Bytes of one position (key, or table entry) of a pool whose positions lie along `dim`.
int64_t per_position(const torch::Tensor& pool, int64_t dim) {
  if (pool.dim() <= dim || pool.size(dim) == 0) return int64_t{0};
  return pool.numel() / pool.size(dim) * static_cast<int64_t>(pool.element_size());
}

// Bytes of `keys` positions of a pooled layer's cross keys and values, and `entries` of its switch table.
int64_t pooled_bytes(const LayerState& l, int64_t keys, int64_t entries) {
  const int64_t table = l.switch_drive.defined() ? entries * per_position(l.switch_drive, kEntryDim) : 0;
  return keys * (per_position(l.cross_k, kKeyDim) + per_position(l.cross_v, kKeyDim)) + table;
}

}  // namespace

int64_t DecoderState::bytes() const {
  int64_t total = dense_bytes(*this);
  if (std::none_of(layers.begin(), layers.end(), pooled)) return total;
  const auto counts = row_counts(*this);
  for (const auto& l : layers) {
    if (!pooled(l)) continue;
    const int64_t entries = l.switch_drive.defined() ? total_count(used_spans(l.drive_start, counts.entries)) : 0;
    total += pooled_bytes(l, total_count(used_spans(l.cross_start, counts.keys)), entries);
  }
  return total;
}

int64_t DecoderState::held_bytes() const {
  std::unordered_set<const void*> buffers;
  int64_t total = 0;
  const auto add = [&](const torch::Tensor& t) {
    if (!t.defined() || !t.has_storage() || t.storage().nbytes() == 0) return;
    if (buffers.insert(t.storage().data_ptr().get()).second) total += static_cast<int64_t>(t.storage().nbytes());
  };
  for_each_tensor(const_cast<DecoderState&>(*this), add);  // leaves the pools out: they follow
  add(self_src);
  for (const auto& l : layers) {  // (dense cross keys/values were counted above: a buffer counts once)
    for (const auto* t : {&l.cross_k, &l.cross_v, &l.switch_drive}) add(*t);
  }
  return total;
}

LayerState DecoderState::rows_of_layer(size_t layer) const {
  const auto& l = layers.at(layer);
  LayerState out;
  if (pooled(l)) {  // each row's span, zero-padded to the longest: keys [B,H,k,d], tables [B,n,H,d,d]
    const auto counts = row_counts(*this);
    const auto unpool = [&](const torch::Tensor& pool, const torch::Tensor& starts, const std::vector<int64_t>& n,
                            bool keys) {
      if (!pool.defined()) return pool;
      const int64_t B = batch_size();
      const int64_t dim = keys ? kKeyDim : kEntryDim;
      const int64_t longest = keys ? cross_valid.size(1) : (n.empty() ? 0 : *std::max_element(n.begin(), n.end()));
      auto shape = pool.sizes().vec();
      shape[static_cast<size_t>(dim)] = longest;
      shape.insert(shape.begin(), B);
      auto out_rows = torch::zeros(shape, pool.options());  // [B, H, k, d] or [B, n, H, d, d]
      const auto st = starts.to(torch::kCPU, torch::kLong).contiguous();
      for (int64_t b = 0; b < B; ++b) {
        const int64_t count = n[static_cast<size_t>(b)];
        out_rows[b].narrow(dim, 0, count).copy_(pool.narrow(dim, st.data_ptr<int64_t>()[b], count));
      }
      return out_rows;
    };
    out.cross_k = unpool(l.cross_k, l.cross_start, counts.keys, true);
    out.cross_v = unpool(l.cross_v, l.cross_start, counts.keys, true);
    out.switch_drive = unpool(l.switch_drive, l.drive_start, counts.entries, false);
  } else {
    out.cross_k = l.cross_k;
    out.cross_v = l.cross_v;
    out.switch_drive = l.switch_drive;
  }
  const auto own = [&](const torch::Tensor& cache) {
    if (!self_src.defined() || !cache.defined()) return cache;
    const int64_t B = cache.size(0), T = cache.size(2);
    const auto slots = torch::arange(T, torch::kLong).view({1, T}).expand({B, T});
    // [B, T, H, d] indexed by (row, slot) pairs, back to [B, H, T, d]
    return cache.permute({0, 2, 1, 3}).index({self_src.to(torch::kLong), slots}).permute({0, 2, 1, 3});
  };
  out.self_k = own(l.self_k);
  out.self_v = own(l.self_v);
  return out;
}

int64_t DecoderState::request_bytes(int64_t first_row, int64_t rows) const {
  const auto n = batch_size();
  if (first_row < 0 || first_row >= n || rows < 1) {
    throw std::out_of_range("DecoderState::request_bytes: no row " + std::to_string(first_row));
  }
  int64_t total = dense_bytes(*this) / n * rows;
  if (std::none_of(layers.begin(), layers.end(), pooled)) return total;
  const auto counts = row_counts(*this);
  const auto b = static_cast<size_t>(first_row);
  for (const auto& l : layers) {
    if (!pooled(l)) continue;
    total += pooled_bytes(l, counts.keys.at(b), l.switch_drive.defined() ? counts.entries.at(b) : 0);
  }
  return total;
}

}  // namespace srformer
