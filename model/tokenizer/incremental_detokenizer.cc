// IncrementalDetokenizer: re-decodes a short window of recent ids per token and emits what is new.
// The window starts at a token that decodes to text by itself, so SentencePiece's dropping of a
// leading space happens identically every time the window is decoded, and deltas measured against
// the window's own earlier decode agree with the full decode. Where the tokenizer cleans up spaces, the
// deltas of the raw decode go through a SpaceCleanupStream, which gives what decode() does whole.
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/utf8.h"

namespace srformer {

namespace {

constexpr size_t kKeep = 4;        // ids of context kept after pruning
constexpr size_t kMaxWindow = 12;  // prune once the window is longer than this

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special) {}

std::string IncrementalDetokenizer::push(int64_t id) {
  ids_.push_back(id);
  std::string text;
  try {
    text = tokenizer_.decode_raw(ids_, skip_special_);
  } catch (...) {
    ids_.pop_back();  // an invalid id must not poison later pushes
    throw;
  }
  // A trailing U+FFFD may be an incomplete character whose remaining bytes are still to come.
  const size_t held = utf8::trailing_replacement_bytes(text);
  const size_t stable = text.size() - held;
  std::string delta;
  if (stable > emitted_bytes_) {
    delta = text.substr(emitted_bytes_, stable - emitted_bytes_);
    emitted_bytes_ = stable;
  }
  if (tokenizer_.cleans_up_spaces()) delta = cleanup_.push(delta);
  if (held == 0 && ids_.size() > kMaxWindow) {
    for (size_t cut = ids_.size() - kKeep; cut > 0; --cut) {
      if (!tokenizer_.decode_raw({ids_[cut]}, skip_special_).empty()) {
        ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(cut));
        emitted_bytes_ = tokenizer_.decode_raw(ids_, skip_special_).size();
        break;
      }
    }
  }
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
