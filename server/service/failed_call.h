#pragma once
// A call ended with a status before it started: its reactor could not be made, or its request did not parse.
#include <grpcpp/support/server_callback.h>
#include <grpcpp/support/status.h>

namespace srformer::server {

// Finishes at once with `status`; gRPC's callback API owns the reactor until OnDone, which deletes it.
template <typename Reactor>
class FailedCall final : public Reactor {
 public:
  explicit FailedCall(const grpc::Status& status) { this->Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace srformer::server
