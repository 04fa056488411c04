#pragma once
// "INVALID_ARGUMENT" for a gRPC status code: what grpcurl and the gRPC docs print, where the bare number
// (3) sends users to a table. gRPC's codes are google.rpc.Code, as are absl::StatusCode's.
#include <absl/status/status.h>
#include <grpcpp/support/status.h>

#include <string>

namespace srformer::client {

inline std::string status_code_name(grpc::StatusCode code) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

}  // namespace srformer::client
