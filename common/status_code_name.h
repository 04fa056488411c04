#pragma once
// "INVALID_ARGUMENT" for a gRPC status code number: what grpcurl and the gRPC docs print, where the bare
// number (3) sends users to a table. One table for the server (metric labels, logs) and the client
// (error lines, load-generator tallies). Header-only and free of gRPC, so that either side and the
// gRPC-free metrics library can use it.
#include <iterator>

namespace srformer {

// grpc::StatusCode / google.rpc.Code number -> its canonical name; "UNKNOWN" out of range (as gRPC
// itself maps codes it does not know).
inline const char* status_code_name(int code) {
  // Order of google.rpc.Code, stable since gRPC 1.0.
  static const char* const names[] = {
      "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
      "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
      "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
      "DATA_LOSS", "UNAUTHENTICATED"};
  if (code < 0 || code >= static_cast<int>(std::size(names))) return "UNKNOWN";
  return names[code];
}

}  // namespace srformer
