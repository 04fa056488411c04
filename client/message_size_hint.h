#pragma once
// What to do about a call refused for a message's size. gRPC's words ("Received message larger than max
// (X vs. Y)", "Sent message larger than max (X vs. Y)") name neither whose limit refused nor what to change.
#include <grpcpp/support/status.h>

#include <cstdint>
#include <cstdio>
#include <string>

namespace srformer::client {

// The limit srformer-client sets on the responses it receives (its channel's max receive message size).
inline constexpr int64_t kMaxResponseBytes = int64_t{64} << 20;

// Whether `status` refuses a message for its size (gRPC's own limits, or srformer-server's
// --max-message-bytes), not for a full queue: sending it again will not help.
inline bool is_message_size_refusal(const grpc::Status& status) {
  const std::string& m = status.error_message();
  return status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED &&
         (m.find("--max-message-bytes") != std::string::npos || m.find("message larger than max") != std::string::npos);
}

// " (...)" to append to the status's message, or "" where the message says enough already (srformer-server
// names its --max-message-bytes itself) or is about something else. `sent_bytes`: the size of the request
// message the call sent, which tells the server refusing it from this client refusing the response.
inline std::string message_size_hint(const grpc::Status& status, uint64_t sent_bytes) {
  if (status.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED) return "";
  const std::string& m = status.error_message();
  if (m.find("--max-message-bytes") != std::string::npos) return "";
  unsigned long long size = 0;
  long long limit = 0;
  if (std::sscanf(m.c_str(), "Sent message larger than max (%llu vs. %lld)", &size, &limit) == 2) {
    return " (srformer-client's own send limit of " + std::to_string(limit) +
           " bytes refused the request before it left; the server never saw it)";
  }
  if (std::sscanf(m.c_str(), "Received message larger than max (%llu vs. %lld)", &size, &limit) != 2) return "";
  if (size != sent_bytes && limit == kMaxResponseBytes) {
    return " (the server's response, " + std::to_string(size) + " bytes, is over srformer-client's own limit of " +
           std::to_string(limit) + " bytes on what it receives)";
  }
  return " (the server accepts messages up to " + std::to_string(limit) +
         " bytes (its --max-message-bytes); shorten the document or raise the limit)";
}

}  // namespace srformer::client
