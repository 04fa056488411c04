#include "server/service/health_service.h"

#include <spdlog/spdlog.h>

#include <optional>
#include <utility>

#include "common/status_code_name.h"
#include "server/service/failed_call.h"
#include "server/service/message_body.h"

namespace srformer::server {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

namespace {

constexpr const char* kHealthProto = "gRPC's grpc/health/v1/health.proto";

}  // namespace

// One Watch call: writes its service's status each time it changes (the latest only, where a write is still
// under way), and ends after the last one once the service asks it to.
class HealthService::WatchReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  WatchReactor(HealthService& service, std::string name) : service_(service), name_(std::move(name)) {}
  const std::string& name() const { return name_; }

  // `last`: end the call once `status` has been sent. Called with the service's lock held.
  void send(ServingStatus status, bool last) {
    std::lock_guard lock(mu_);
    if (finished_) return;
    last_ = last_ || last;
    if (writing_) {
      pending_ = status;
      return;
    }
    send_or_end_locked(status);
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard lock(mu_);
    writing_ = false;
    if (!ok) {  // the call is broken: its client went away, or gRPC cancelled it
      finish_locked(grpc::Status(grpc::StatusCode::CANCELLED, "the health watch could not be written"));
      return;
    }
    if (const auto status = std::exchange(pending_, std::nullopt)) {
      send_or_end_locked(*status);
    } else if (last_) {
      finish_locked(shutting_down());
    }
  }
  void OnCancel() override {
    std::lock_guard lock(mu_);
    finish_locked(grpc::Status::CANCELLED);
  }
  void OnDone() override {
    service_.remove(this);
    delete this;
  }

 private:
  static grpc::Status shutting_down() {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server is shutting down; retry on another replica");
  }
  // Writes `status` unless the client has it already; ends the call where that was the last.
  void send_or_end_locked(ServingStatus status) {
    if (status != sent_) {
      sent_ = status;
      HealthCheckResponse response;
      response.set_status(status);
      if (const grpc::Status serialized = serialize_body(response, response_); !serialized.ok()) {
        finish_locked(serialized);  // never for a message of one enum field
        return;
      }
      writing_ = true;
      StartWrite(&response_);
    } else if (last_) {
      finish_locked(shutting_down());
    }
  }
  void finish_locked(const grpc::Status& status) {
    if (finished_) return;
    finished_ = true;
    Finish(status);
  }

  HealthService& service_;
  const std::string name_;
  std::mutex mu_;
  grpc::ByteBuffer response_;
  std::optional<ServingStatus> sent_;
  std::optional<ServingStatus> pending_;
  bool writing_ = false;
  bool last_ = false;
  bool finished_ = false;
};

HealthService::HealthService(Metrics* metrics) : metrics_(metrics) { serving_.emplace("", false); }

HealthService::~HealthService() {
  std::unique_lock lock(mu_);
  watches_done_.wait(lock, [&] { return watches_.empty(); });
}

HealthService::ServingStatus HealthService::status_locked(const std::string& service) const {
  const auto it = serving_.find(service);
  if (it == serving_.end()) return HealthCheckResponse::SERVICE_UNKNOWN;
  return it->second ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING;
}

void HealthService::tell_watches_locked(const std::string& service) {
  for (WatchReactor* watch : watches_) {
    if (watch->name() == service) watch->send(status_locked(service), watches_ended_);
  }
}

void HealthService::set_serving(const std::string& service, bool serving) {
  std::lock_guard lock(mu_);
  serving_[service] = serving && !watches_ended_;
  tell_watches_locked(service);
}

void HealthService::set_serving(bool serving) {
  std::lock_guard lock(mu_);
  for (auto& [service, value] : serving_) {
    value = serving && !watches_ended_;
    tell_watches_locked(service);
  }
}

void HealthService::end_watches() {
  std::lock_guard lock(mu_);
  watches_ended_ = true;
  for (auto& entry : serving_) entry.second = false;
  for (WatchReactor* watch : watches_) watch->send(status_locked(watch->name()), true);
}

grpc::ServerUnaryReactor* HealthService::Check(grpc::CallbackServerContext* context, const grpc::ByteBuffer* body,
                                               grpc::ByteBuffer* response) {
  auto* reactor = context->DefaultReactor();
  HealthCheckRequest request;
  if (const grpc::Status parsed = parse_body(*body, request, kHealthProto); !parsed.ok()) {
    malformed("Check", context, parsed, body->Valid());
    reactor->Finish(parsed);
    return reactor;
  }
  ServingStatus status;
  {
    std::lock_guard lock(mu_);
    status = status_locked(request.service());
  }
  if (status == HealthCheckResponse::SERVICE_UNKNOWN) {  // as gRPC's own health service answers
    reactor->Finish(grpc::Status(grpc::StatusCode::NOT_FOUND, "service name unknown"));
    return reactor;
  }
  HealthCheckResponse answer;
  answer.set_status(status);
  reactor->Finish(serialize_body(answer, *response));
  return reactor;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* HealthService::Watch(grpc::CallbackServerContext* context,
                                                                 const grpc::ByteBuffer* body) {
  HealthCheckRequest request;
  if (const grpc::Status parsed = parse_body(*body, request, kHealthProto); !parsed.ok()) {
    malformed("Watch", context, parsed, body->Valid());
    return new FailedCall<grpc::ServerWriteReactor<grpc::ByteBuffer>>(parsed);  // its request did not parse
  }
  auto* watch = new WatchReactor(*this, request.service());
  std::lock_guard lock(mu_);
  watches_.insert(watch);
  // A service not known (yet) is SERVICE_UNKNOWN, and the Watch stays open for it, as the protocol says.
  watch->send(status_locked(request.service()), watches_ended_);
  return watch;
}

void HealthService::malformed(const char* method, grpc::CallbackServerContext* context, const grpc::Status& status,
                              bool carried_message) {
  // A call without a message (mostly one cancelled before it arrived) is neither, as ListModels' is not.
  if (!carried_message) return;
  if (metrics_) metrics_->on_unrouted(method, UnroutedReason::kMalformed);
  spdlog::info("health: {} from {} refused with {}: {}", method, context->peer(), status_code_name(status.error_code()),
               status.error_message());
}

void HealthService::remove(WatchReactor* watch) {
  std::lock_guard lock(mu_);
  watches_.erase(watch);
  if (watches_.empty()) watches_done_.notify_all();
}

}  // namespace srformer::server
