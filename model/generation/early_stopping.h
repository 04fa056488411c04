#pragma once
// When beam search stops: Hugging Face's early_stopping, whose values are true, false and "never".

namespace srformer {

enum class EarlyStopping {
  // false: stop once num_beams hypotheses are finished and the best running beam, scored at its current
  // length, cannot beat the worst of them (a heuristic where length_penalty > 0: a longer beam scores higher).
  kHeuristic,
  // true: stop as soon as num_beams hypotheses are finished.
  kWhenFull,
  // "never": as kHeuristic, but with length_penalty > 0 the best running beam is scored as if it ran to
  // max_new_tokens tokens, where it could score best, so the search ends only where no beam can still win.
  kNever,
};

constexpr EarlyStopping early_stopping_from_bool(bool stop_when_full) {
  return stop_when_full ? EarlyStopping::kWhenFull : EarlyStopping::kHeuristic;
}

}  // namespace srformer
