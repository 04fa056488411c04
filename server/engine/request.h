#pragma once
// One summarization request as the engine sees it: token ids and options in, token events and one
// result out. Built and validated by the service; owned jointly by the service call and the engine.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "model/generation/options.h"
#include "model/generation/searcher.h"

namespace srformer::server {

using Clock = std::chrono::steady_clock;

// A newly final token, for streaming.
struct TokenEvent {
  int64_t token_id = 0;
  std::string text;  // newly final text (may be empty while a character is incomplete)
  int32_t step = 0;
  int32_t segment = -1;
  float logprob = 0.0f;  // Hypothesis::token_logprobs
};

struct RequestUsage {
  int64_t input_tokens = 0;
  int64_t original_input_tokens = 0;
  bool truncated = false;
  int64_t output_tokens = 0;
  int64_t segments = 0;
  double raf_firing_rate = 0.0;
  int64_t state_bytes = 0;  // peak bytes of this request's decoder state
  double queue_ms = 0.0;
  double encode_ms = 0.0;
  double decode_ms = 0.0;
  bool encoder_cached = false;  // the encoder output came from the engine's cache (EncoderCache)
};

enum class RequestOutcome { kOk, kCancelled, kDeadlineExceeded, kShutdown, kError };

// A further hypothesis of a beam search asked for several (num_return_sequences > 1), and its text.
struct Alternative {
  Hypothesis hypothesis;
  std::string summary;
};

struct RequestResult {
  RequestOutcome outcome = RequestOutcome::kOk;
  std::string error;              // kError: what failed
  bool request_at_fault = false;  // kError: the request's options failed it (INVALID_ARGUMENT), not the server
  std::string summary;
  std::vector<int64_t> token_ids;
  std::vector<float> token_logprobs;  // one per token id
  FinishReason finish_reason = FinishReason::kNone;
  double score = 0.0;
  std::vector<Alternative> alternatives;  // the next best, best first
  RequestUsage usage;
};

// gRPC ends a call at its client's deadline by cancelling it, and that cancel can reach us before our copy
// of the deadline passes: ours starts when the call arrives, from the time left that the client sent,
// and a loaded machine delays the arrival (the deadline then counted as a cancel). A cancel with at most
// a quarter of the call's time left, and at most 250 ms, counts as its deadline's.
inline bool cancel_near_deadline(Clock::duration elapsed, Clock::duration left) {
  const Clock::duration slack = std::min<Clock::duration>(std::chrono::milliseconds(250), (elapsed + left) / 4);
  return left <= slack;
}

struct Request {
  std::string id;
  std::vector<int64_t> input_ids;  // already truncated to the limit
  GenerationOptions options;
  int64_t expected_length = 128;  // SRformer L
  std::optional<Clock::time_point> deadline;
  RequestUsage usage;                            // input side filled by the service
  Clock::time_point accepted_at = Clock::now();  // its call's arrival (SummarizerService::prepare)
  // When the engine queued it (Engine::submit): its queue wait counts from here. The tokenizing before it
  // (seconds for a document of megabytes, and its turn at the tokenizing gate) is the RPC side's.
  Clock::time_point queued_at = accepted_at;

  // Both run on the engine's delivery thread, in the order the engine decided them, and must not
  // block. on_finish runs exactly once, last.
  std::function<void(std::vector<TokenEvent>)> on_tokens;  // optional (streaming)
  std::function<void(RequestResult)> on_finish;

  // Thread-safe; the row leaves the batch within one decode step.
  void cancel() { cancelled_.store(true, std::memory_order_relaxed); }
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }
  bool expired(Clock::time_point now) const { return deadline && now >= *deadline; }
  // Whether a request that stopped (cancelled, or at its deadline) stopped for its deadline: it has passed,
  // or the cancel came near it (cancel_near_deadline).
  bool deadline_ended(Clock::time_point now) const {
    return expired(now) || (deadline && cancel_near_deadline(now - accepted_at, *deadline - now));
  }

 private:
  std::atomic<bool> cancelled_{false};
};

}  // namespace srformer::server
