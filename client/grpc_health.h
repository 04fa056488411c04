#pragma once
// grpc.health.v1.Health/Check without generated code (the health proto is not installed with gRPC):
// the request is {service: name} and the response {status: enum}, encoded by hand (two tiny messages).
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>

namespace srformer::client {

enum class HealthStatus { kUnknown = 0, kServing = 1, kNotServing = 2, kServiceUnknown = 3, kError = -1 };

// Returns the serving status of `service` ("" = the whole server); kError with `error` set on failure (the
// call's status, whose code and message tell a TLS mismatch from a server that is down).
inline HealthStatus check_health(const std::shared_ptr<grpc::Channel>& channel, const std::string& service,
                                 std::chrono::milliseconds timeout, grpc::Status* error = nullptr) {
  std::string request;
  if (!service.empty()) {  // field 1, length-delimited
    request.push_back(0x0A);
    request.push_back(static_cast<char>(service.size()));  // names < 128 bytes
    request += service;
  }
  grpc::Slice slice(request);
  grpc::ByteBuffer send(&slice, 1);
  grpc::ByteBuffer recv;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  grpc::GenericStub stub(channel);
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status status;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &send, &recv, [&](grpc::Status s) {
    std::lock_guard lock(mu);
    status = std::move(s);
    done = true;
    cv.notify_one();
  });
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return done; });
  if (!status.ok()) {
    if (error) *error = status;
    return HealthStatus::kError;
  }
  std::vector<grpc::Slice> slices;
  recv.Dump(&slices);
  std::string bytes;
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  if (bytes.empty()) return HealthStatus::kUnknown;  // status field absent = UNKNOWN (0)
  // SERVICE_UNKNOWN (3) is the last status grpc.health.v1 defines.
  if (bytes.size() >= 2 && bytes[0] == 0x08 && bytes[1] >= 0 && bytes[1] <= 3)
    return static_cast<HealthStatus>(bytes[1]);
  if (error) *error = grpc::Status(grpc::StatusCode::INTERNAL, "unexpected health response");
  return HealthStatus::kError;
}

}  // namespace srformer::client
