#pragma once
// grpc.health.v1.Health: Check, and Watch streams that the server ends when it shuts down. gRPC's default
// health service ends a Watch only when Server::Shutdown's deadline passes and gRPC cancels the calls still
// open, so a single Watch held open (a gRPC client's own health checking holds one per connection) added
// that whole wait, 2 s, to every shutdown. Its requests are parsed here (raw methods), as the Summarizer's
// are: the callback API answered one that does not parse with UNIMPLEMENTED and no message.
#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "grpc/health/v1/health.grpc.pb.h"
#include "server/metrics/metrics.h"

namespace srformer::server {

using RawHealthService = grpc::health::v1::Health::WithRawCallbackMethod_Check<
    grpc::health::v1::Health::WithRawCallbackMethod_Watch<grpc::health::v1::Health::Service>>;

class HealthService final : public RawHealthService {
 public:
  using ServingStatus = grpc::health::v1::HealthCheckResponse::ServingStatus;

  // Knows the whole server ("") only, NOT_SERVING. `metrics` (may be null) counts the malformed bodies.
  explicit HealthService(Metrics* metrics = nullptr);
  // Waits for the Watch calls to be done (gRPC's Server, stopped first, ends them all).
  ~HealthService() override;
  HealthService(const HealthService&) = delete;
  HealthService& operator=(const HealthService&) = delete;

  // `service` ("" for the whole server) becomes known with that status; its Watches are told.
  void set_serving(const std::string& service, bool serving);
  // Every known service.
  void set_serving(bool serving);
  // Every service NOT_SERVING, and every Watch ends (UNAVAILABLE) once it has sent that; one that starts
  // later sends its status and ends at once. Call as the server stops listening: a Watch still open then
  // would hold grpc::Server::Shutdown to its deadline.
  void end_watches();

  // A body that is not a HealthCheckRequest: INVALID_ARGUMENT, saying so, logged and counted in
  // srformer_requests_unrouted_total{reason="malformed"}, as the Summarizer's are.
  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Watch(grpc::CallbackServerContext* context,
                                                    const grpc::ByteBuffer* request) override;

  class WatchReactor;

 private:
  ServingStatus status_locked(const std::string& service) const;
  void tell_watches_locked(const std::string& service);
  void remove(WatchReactor* watch);
  // A body that did not parse (`carried_message`: not a call that ended before its message arrived).
  void malformed(const char* method, grpc::CallbackServerContext* context, const grpc::Status& status,
                 bool carried_message);

  Metrics* const metrics_;

  mutable std::mutex mu_;
  std::condition_variable watches_done_;
  std::map<std::string, bool> serving_;
  std::set<WatchReactor*> watches_;
  bool watches_ended_ = false;
};

}  // namespace srformer::server
