#pragma once
// Turns an API request into an engine Request: validates the document and every option, applies the
// model config's generation defaults, tokenizes (with the T5 task prefix) and applies the
// truncation policy. Every error says what to fix.
#include <grpcpp/support/status.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "model/config.h"
#include "model/limits.h"
#include "model/tokenizer/tokenizer.h"
#include "server/engine/engine.h"
#include "srformer/v1/summarizer.pb.h"

namespace srformer::server {

struct ServiceLimits {
  int64_t max_input_tokens = 0;       // 0 = each model's own limit
  int64_t max_new_tokens_cap = 1024;  // largest max_new_tokens a request may ask for
  int64_t max_beams = 8;
  int64_t max_expected_length = 0;  // 0 = 4 * max_new_tokens_cap
  // With RESOURCE_EXHAUSTED (a full queue): trailing metadata grpc-retry-pushback-ms of about this many
  // milliseconds (±50%, so that the clients refused together do not come back together), which a gRPC
  // client with a retry policy waits before its next attempt; 0 = none.
  int64_t retry_pushback_ms = 0;
  // Request bodies over this many bytes are refused with RESOURCE_EXHAUSTED, logged and counted
  // (--max-message-bytes; 0 = no limit here). gRPC's own limit would refuse them before the service.
  int64_t max_message_bytes = 0;
  // SummarizeStream messages held for clients that have not taken them yet (reading slower than the
  // engine writes, or not at all), all streams together: while over this many bytes, new SummarizeStream
  // calls are refused with RESOURCE_EXHAUSTED (--max-unread-stream-memory; 0 = no limit). Streams already
  // accepted finish, so the memory held stays within this plus what the accepted ones write.
  int64_t max_unread_stream_bytes = 0;
  // A SummarizeStream whose client has taken none of its messages for this long (a write waiting on the
  // client all that time) is ended, its messages and its batch row freed (--stream-stall-timeout-ms;
  // 0 = never).
  int64_t stream_stall_timeout_ms = 0;
};

// A document of this many bytes or more is long: tokenized under a shared memory budget (a tokenizer holds
// some 70 bytes per input byte), on the service's own threads rather than gRPC's callback threads, which
// are a few shared by every call (health checks included) and must not wait on a tokenizer.
inline constexpr int64_t kLongDocumentBytes = int64_t{64} << 10;

// An error to return to the client with this status code.
class RequestError : public std::runtime_error {
 public:
  RequestError(grpc::StatusCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  grpc::StatusCode code() const { return code_; }
  grpc::Status status() const { return grpc::Status(code_, what()); }
  // The server's own failure (ServerError), not a refusal of the request.
  bool server_fault() const { return server_fault_; }

 protected:
  bool server_fault_ = false;

 private:
  grpc::StatusCode code_;
};

// The server failed to take a request it did not refuse (out of memory, a LibTorch error): logged as an
// error and not counted as a refusal.
class ServerError : public RequestError {
 public:
  ServerError(grpc::StatusCode code, const std::string& message) : RequestError(code, message) { server_fault_ = true; }
};

struct ResolvedOptions {
  GenerationOptions options;
  int64_t expected_length = 0;
};

// Throws RequestError(INVALID_ARGUMENT) for an empty, whitespace-only or non-UTF-8 document, or one holding
// a NUL byte (find_document_fault, model/tokenizer/document_check.h).
void validate_document(std::string_view document);

// The most max_new_tokens a request may ask for: --max-new-tokens-cap, or fewer where the model's decoder
// has fewer positions (BART's max_position_embeddings).
int64_t max_new_tokens_limit(const ModelConfig& config, const ServiceLimits& limits);
// max_new_tokens of a request that sets none: the model's default within max_new_tokens_limit.
int64_t default_max_new_tokens(const ModelConfig& config, const ServiceLimits& limits);

// Applies the model config's defaults to unset fields and checks every option against the caps.
ResolvedOptions resolve_options(const v1::GenerationOptions& proto, const ModelConfig& config,
                                const ServiceLimits& limits);

// The request options that resolve to `resolved`, every field set (ListModels' defaults). Floating-point
// options travel as float, as in any request.
v1::GenerationOptions to_proto(const ResolvedOptions& resolved);

// Adds the request's bad_words to options.bad_words_ids, tokenized by the model's tokenizer (add_bad_words,
// model/generation/bad_words.h); RequestError(INVALID_ARGUMENT) for a word it refuses.
void add_request_bad_words(const v1::GenerationOptions& proto, const Tokenizer& tokenizer, const ModelConfig& config,
                           GenerationOptions& options);

// Input tokens a request may hold: the smaller of the model's limit and --max-input-tokens; for a model
// whose limit is advisory (input_limit_can_be_raised, model/limits.h: T5's n_positions), --max-input-tokens where set,
// above or below it; for a model whose config.json sets none (ModelConfig::max_input_tokens_is_fallback),
// --max-input-tokens, else kUnboundedModelInputTokens (model/limits.h).
int64_t effective_max_input_tokens(const ModelConfig& config, const ServiceLimits& limits);

// The longest client-chosen request_id: it is echoed in every log line and response of its request.
inline constexpr size_t kMaxRequestIdBytes = 128;

// Why a client-chosen request_id cannot be taken (empty: it can): over kMaxRequestIdBytes, or not UTF-8.
// (The logger escapes control characters; it cannot make ill-formed UTF-8 valid JSON.)
std::string request_id_problem(std::string_view id);

// Full request: document checks, options, tokenization, truncation policy. Callbacks are left unset.
std::shared_ptr<Request> build_request(const v1::SummarizeRequest& request, const Engine& engine,
                                       const ServiceLimits& limits, std::optional<Clock::time_point> deadline);

}  // namespace srformer::server
