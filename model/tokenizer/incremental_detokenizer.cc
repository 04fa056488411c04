// IncrementalDetokenizer: re-decodes a short window of recent ids per token and emits what is new.
// The window starts at a token that decodes to text by itself (where it is cut at one that does not, such
// a token from before the cut goes first), so the dropping of the first token's leading "▁" (Hugging
// Face's Metaspace rule) happens identically every time the window is decoded, and deltas measured against the window's
// own earlier decode agree with the full decode. Special tokens that the decode skips never enter the window. Where the
// tokenizer cleans up spaces, the deltas of the raw decode go through a SpaceCleanupStream, which gives what decode()
// does whole. Only the last three U+FFFD of the text are held back, and the window is pruned while it ends in them: the
// bytes of a character still to complete are at most three, each at most one U+FFFD (SentencePiece replaces every byte,
// byte-level BPE every maximal subpart), and any other U+FFFD is final. Holding a whole run (a model repeating a lone
// continuation byte) streamed none of it until the end and re-decoded the growing window at every token: quadratic,
// seconds per thousand tokens on the delivery thread.
#include <algorithm>
#include <optional>

#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/utf8.h"

namespace srformer {

namespace {

constexpr size_t kKeep = 4;        // ids of context kept after pruning
constexpr size_t kMaxWindow = 12;  // prune once the window is longer than this
constexpr size_t kMaxPending = 3;  // bytes of an incomplete character, and so U+FFFD that may still change

// Drops ids from the start of the window `ids` that no later text depends on. `text` is the window's
// decode, of which its last `held` bytes are not emitted yet; `emitted_bytes` is kept to the new window.
void prune(const Tokenizer& tokenizer, bool skip_special, TokenIds& ids, size_t& emitted_bytes, const std::string& text,
           size_t held) {
  const auto alone = [&](size_t at) { return tokenizer.decode_raw({ids[at]}, skip_special); };
  if (text.empty()) {
    // No id has given text yet (ids that decode to nothing, e.g. a text's first lone "▁"): as many more of
    // them give none either, and the text that comes after starts as it would without them.
    ids.erase(ids.begin(), ids.end() - static_cast<std::ptrdiff_t>(kKeep));
    emitted_bytes = 0;
    return;
  }
  size_t last_cut = ids.size() - kKeep;
  if (held > 0) {
    // The incomplete character's bytes come from the last kMaxPending ids that have bytes (those that
    // decode to something alone): the cut keeps them all, so that they decode in the window as in the
    // whole text.
    size_t with_bytes = 0;
    size_t at = ids.size();
    while (at > 0 && with_bytes < kMaxPending) {
      if (!alone(--at).empty()) ++with_bytes;
    }
    if (with_bytes < kMaxPending) return;
    last_cut = std::min(last_cut, at);
  }
  for (size_t cut = last_cut; cut > 0; --cut) {
    TokenIds rest;
    if (alone(cut).empty()) {
      // An id that gives no text alone (a lone "▁") would give none at the window's start, where after text
      // it gives a space: an id before it that gives whole characters of its own goes first, to put the
      // window's start behind text, as it is in the whole text. Cutting only at ids that give text let a
      // run of lone "▁" grow the window, decoded whole at every token.
      std::optional<size_t> anchor;
      for (size_t at = cut; at-- > 0 && !anchor;) {
        const std::string anchor_text = alone(at);
        if (!anchor_text.empty() && anchor_text.find(utf8::kReplacement) == std::string::npos) anchor = at;
      }
      // With none (lone "▁" since the text's start) the cut stands: the window's first token gives no text,
      // as the text's first does, and every later one its own (Hugging Face's Metaspace rule).
      rest.reserve(ids.size() - cut + 1);
      if (anchor) rest.push_back(ids[*anchor]);
    }
    rest.insert(rest.end(), ids.begin() + static_cast<std::ptrdiff_t>(cut), ids.end());
    const std::string rest_text = tokenizer.decode_raw(rest, skip_special);
    // What is held back must be the same text at the window's end (it is, with its bytes in the window).
    if (rest_text.size() < held || rest_text.compare(rest_text.size() - held, held, text, text.size() - held) != 0) {
      continue;
    }
    ids = std::move(rest);
    emitted_bytes = rest_text.size() - held;
    return;
  }
}

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special) {}

std::string IncrementalDetokenizer::push(int64_t id) {
  // A special token that the decode skips changes no text before or after it. In the window, a run of
  // them (a model emitting <pad> after <pad>) could not be cut, and the window, decoded whole at every
  // token, grew with the run.
  if (skip_special_ && tokenizer_.is_special(id)) return {};
  ids_.push_back(id);
  std::string text;
  try {
    text = tokenizer_.decode_raw(ids_, skip_special_);
  } catch (...) {
    ids_.pop_back();  // an invalid id must not poison later pushes
    throw;
  }
  // A trailing U+FFFD may be an incomplete character whose remaining bytes are still to come.
  const size_t held = std::min(utf8::trailing_replacement_bytes(text), kMaxPending * utf8::kReplacement.size());
  const size_t stable = text.size() - held;
  std::string delta;
  if (stable > emitted_bytes_) {
    delta = text.substr(emitted_bytes_, stable - emitted_bytes_);
    emitted_bytes_ = stable;
  }
  if (tokenizer_.cleans_up_spaces()) delta = cleanup_.push(delta);
  if (ids_.size() > kMaxWindow) prune(tokenizer_, skip_special_, ids_, emitted_bytes_, text, held);
  return delta;
}

std::string IncrementalDetokenizer::finish() {
  const std::string text = tokenizer_.decode_raw(ids_, skip_special_);
  std::string rest = text.size() > emitted_bytes_ ? text.substr(emitted_bytes_) : std::string();
  ids_.clear();
  emitted_bytes_ = 0;
  if (tokenizer_.cleans_up_spaces()) {
    rest = cleanup_.push(rest);  // before finish(): the operands of + are evaluated in no set order
    rest += cleanup_.finish();
  }
  return rest;
}

}  // namespace srformer
