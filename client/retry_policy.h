#pragma once
// The gRPC service config that retries srformer.v1.Summarizer calls refused with UNAVAILABLE (a server
// shutting down, a connection lost before the call started) or RESOURCE_EXHAUSTED (a full queue). gRPC
// waits the server's grpc-retry-pushback-ms where it sends one (srformer-server does with a full queue),
// otherwise backs off exponentially from 0.2 s; each attempt is a new load-balancing pick, so with
// round_robin over several replicas a refused call goes to another. A stream is retried only until its
// first message has arrived, so no token is ever repeated. Summarizing twice is harmless: the calls are
// idempotent.
#include <limits>
#include <string>

namespace srformer::client {

// gRPC caps maxAttempts at 5: at most 4 retries.
inline constexpr int kMaxRetries = 4;

// What a call may have sent and still be retried (GRPC_ARG_PER_RPC_RETRY_BUFFER_SIZE): gRPC keeps what it sent
// to send it again, 256 KiB of it by default, and a request past that (a document of a few hundred KB, a
// batch) was never retried, --retries or not. Here as much as one message can hold: the request is in memory
// already.
inline constexpr int kRetryBufferBytes = std::numeric_limits<int>::max();

inline std::string retry_service_config(int retries) {
  return R"({"methodConfig": [{"name": [{"service": "srformer.v1.Summarizer"}], "retryPolicy": {)"
         R"("maxAttempts": )" +
         std::to_string(retries + 1) +
         R"(, "initialBackoff": "0.2s", "maxBackoff": "5s", "backoffMultiplier": 2, )"
         R"("retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"]}}]})";
}

}  // namespace srformer::client
