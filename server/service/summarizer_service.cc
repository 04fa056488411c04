#include "server/service/summarizer_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <utility>

#include "common/status_code_name.h"
#include "model/dtype_name.h"
#include "model/error_message.h"
#include "model/generation/generate.h"
#include "model/tokenizer/utf8.h"
#include "server/metrics/metrics.h"
#include "server/service/call_deadline.h"
#include "server/service/failed_call.h"
#include "server/service/message_body.h"

namespace srformer::server {

namespace {

v1::FinishReason to_proto(FinishReason reason) {
  switch (reason) {
    case FinishReason::kEos:
      return v1::FINISH_REASON_EOS;
    case FinishReason::kLength:
      return v1::FINISH_REASON_LENGTH;
    case FinishReason::kCancelled:
      return v1::FINISH_REASON_CANCELLED;
    default:
      return v1::FINISH_REASON_UNSPECIFIED;
  }
}

// A client-given name as quoted back in an error: at most 64 bytes (a long one would not fit in the
// status's metadata), control characters (NUL would end the message) as '?'.
std::string shown_name(std::string_view name) {
  // Cut on a character's boundary (a cut through one made the line invalid UTF-8, and so invalid JSON),
  // with ill-formed bytes and control characters shown as '?'.
  constexpr size_t kMax = 64;
  std::string out;
  size_t pos = 0;
  while (pos < name.size()) {
    const size_t len = utf8::sequence_length(name, pos);
    if (len == 0) {
      if (out.size() + 1 > kMax) break;
      out += '?';
      ++pos;
      continue;
    }
    if (out.size() + len > kMax) break;
    const unsigned char c = static_cast<unsigned char>(name[pos]);
    if (len == 1 && (c < 0x20 || c == 0x7F)) {
      out += '?';
    } else {
      out.append(name.substr(pos, len));
    }
    pos += len;
  }
  return pos < name.size() ? out + "... (" + std::to_string(name.size()) + " bytes)" : out;
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// What the server failed at while `doing` something with a request: RESOURCE_EXHAUSTED for memory (a retry
// later may fit), INTERNAL otherwise.
ServerError server_error(const std::string& doing, const std::exception& e) {
  if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr) {
    return ServerError(grpc::StatusCode::RESOURCE_EXHAUSTED,
                       "the server ran out of memory " + doing + "; retry later, or send a shorter document");
  }
  return ServerError(grpc::StatusCode::INTERNAL, doing + " failed: " + error_message(e));
}

RejectReason reject_reason(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return RejectReason::kQueueFull;
    case grpc::StatusCode::UNAVAILABLE:
      return RejectReason::kShuttingDown;
    default:
      return RejectReason::kInvalid;
  }
}

// Per-call bookkeeping for metrics and the one log line per request. A call counts under every model it
// asks for (a SummarizeBatch may ask several): once in srformer_requests_in_flight / _total per model.
class CallRecord {
 public:
  CallRecord(const SummarizerService& service, grpc::CallbackServerContext* context, std::string method)
      : metrics_(service.metrics()),
        method_(std::move(method)),
        context_(context),
        retry_pushback_ms_(service.limits().retry_pushback_ms) {}
  void started(const std::string& model) {
    if (std::find(models_.begin(), models_.end(), model) != models_.end()) return;
    models_.push_back(model);
    if (metrics_) metrics_->model(model).on_request_start();
  }
  // A request refused before it reached the engine (bad input, shutting down, queue full): its log line,
  // srformer_requests_rejected_total{reason} and, once ended(), srformer_requests_total{code}. `engine`:
  // the model it asked for, or null where this server holds none of that name (the name is then the
  // client's text: logged, never made a label; srformer_requests_unrouted_total counts it).
  // `server_fault`: the server failed to take the request (ServerError): an error line, and no refusal
  // counted (the call's code still counts in srformer_requests_total) but for memory (out_of_memory), whose
  // RESOURCE_EXHAUSTED no error-rate alert counts.
  void refused(const std::string& id, const std::string& requested, const Engine* engine, const grpc::Status& status,
               bool server_fault = false, std::optional<RejectReason> reason = std::nullopt) {
    if (server_fault) {
      if (engine != nullptr) {
        started(engine->name());
        if (metrics_ && status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED)
          metrics_->model(engine->name()).on_rejected(RejectReason::kOutOfMemory);
      }
      spdlog::error("request {}: {} model={} failed before it was queued, with {}: {}", id, method_,
                    engine ? engine->name() : shown_name(requested), status_code_name(status.error_code()),
                    status.error_message());
      return;
    }
    if (engine != nullptr) {
      started(engine->name());
      if (metrics_) metrics_->model(engine->name()).on_rejected(reason.value_or(reject_reason(status.error_code())));
    } else if (metrics_ && status.error_code() == grpc::StatusCode::NOT_FOUND) {
      metrics_->on_unrouted(method_, UnroutedReason::kUnknownModel);
    }
    spdlog::info("request {}: {} model={} refused with {}: {}", id, method_,
                 engine ? engine->name() : shown_name(requested), status_code_name(status.error_code()),
                 status.error_message());
  }
  // A call whose body did not parse, or a batch holding no request: nothing names a model. A call that
  // carried no message at all is mostly not the client's fault: gRPC hands the service a call cancelled, or
  // past its deadline, before its message arrived, without one. Only in OnDone (done()) does IsCancelled()
  // tell it from a client that half-closed without a message, so it is logged and counted there.
  void malformed(const std::string& id, const grpc::Status& status, bool carried_message = true) {
    if (!carried_message) {
      no_message_.emplace(id, status);
      return;
    }
    if (metrics_) metrics_->on_unrouted(method_, UnroutedReason::kMalformed);
    spdlog::info("request {}: {} refused with {}: {}", id, method_, status_code_name(status.error_code()),
                 status.error_message());
  }
  // From the reactor's OnDone, where the call's context still lives and IsCancelled() is final.
  void done() {
    if (!no_message_) return;
    const auto& [id, status] = *no_message_;
    if (context_->IsCancelled()) {
      spdlog::info("request {}: {} ended before its request message arrived (cancelled, or its deadline passed)", id,
                   method_);
    } else {
      malformed(id, status);
    }
  }
  // A body over --max-message-bytes (check_body_size), not read. gRPC's own limit refused these before the
  // service saw them, with no log line and no metric: a warning (the client's document or the limit is to
  // change), srformer_requests_unrouted_total{reason="too_large"}, and a negative pushback, which tells
  // gRPC clients not to retry (gRFC A6): the same body would be refused again.
  void too_large(const std::string& id, const grpc::Status& status) {
    if (metrics_) metrics_->on_unrouted(method_, UnroutedReason::kTooLarge);
    retry_pointless_ = true;
    spdlog::warn("request {}: {} from {} refused with {}: {}", id, method_, context_->peer(),
                 status_code_name(status.error_code()), status.error_message());
  }
  // The call's request (a batch's first item) is queued: its duration counts in request_duration. Set before
  // submit() (its result may end the call before submit() returns), unset when submit() refuses it.
  void set_accepted(bool accepted) { accepted_ = accepted; }
  // Before Finish(status): the metrics, and the pushback a full queue gives.
  void ended(const grpc::Status& status) {
    if (retry_pointless_) {
      context_->AddTrailingMetadata("grpc-retry-pushback-ms", "-1");
    } else if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED && retry_pushback_ms_ > 0) {
      thread_local std::mt19937 rng{std::random_device{}()};
      const auto half = retry_pushback_ms_ / 2;
      const auto ms = std::uniform_int_distribution<int64_t>(retry_pushback_ms_ - half, retry_pushback_ms_ + half)(rng);
      context_->AddTrailingMetadata("grpc-retry-pushback-ms", std::to_string(ms));
    }
    if (!metrics_) return;
    for (const auto& model : models_) {
      metrics_->model(model).on_request_end(method_, status_code_name(status.error_code()),
                                            accepted_ ? std::optional<double>(seconds_since(start_)) : std::nullopt);
    }
  }
  const std::string& method() const { return method_; }
  Clock::time_point arrived() const { return start_; }
  Clock::duration elapsed() const { return Clock::now() - start_; }
  // The call's deadline has passed, or gRPC's timer cancelled it just before (cancel_near_deadline): its
  // client has DEADLINE_EXCEEDED then, whatever the server ends it with.
  // `ended`: the call is known to have ended on the client's side (a write to it failed), which gRPC may
  // not have marked cancelled yet.
  bool deadline_passed(bool ended = false) const {
    const auto left = time_left(context_->raw_deadline());
    if (!left) return false;
    return *left <= std::chrono::nanoseconds::zero() ||
           ((ended || context_->IsCancelled()) &&
            cancel_near_deadline(elapsed(), std::chrono::duration_cast<Clock::duration>(*left)));
  }
  // A summary completed once its client has a status of its own (the deadline passed, or it cancelled,
  // while the last step ran) reaches nobody: that status's outcome, to count and log.
  RequestOutcome as_the_client_has(RequestOutcome outcome) const {
    if (outcome != RequestOutcome::kOk) return outcome;
    if (deadline_passed()) return RequestOutcome::kDeadlineExceeded;
    return context_->IsCancelled() ? RequestOutcome::kCancelled : outcome;
  }
  // A stream whose summary was complete but whose last messages (`unsent`, the final one among them)
  // never reached its client: it stopped reading, then cancelled or went away, or its deadline passed.
  // The status its client has, to count and log, not the OK of an answer nobody received.
  grpc::Status as_the_client_has(const grpc::Status& status, size_t unsent) const {
    if (!status.ok() || unsent == 0) return status;
    const std::string undelivered = "the stream's last " + std::to_string(unsent) + " message" +
                                    (unsent == 1 ? "" : "s") + " had not reached the client (it had stopped reading)";
    if (deadline_passed(/*ended=*/true)) {
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "the deadline expired: " + undelivered);
    }
    return grpc::Status(grpc::StatusCode::CANCELLED, "the client cancelled or went away: " + undelivered);
  }

 private:
  Metrics* metrics_;
  std::string method_;
  grpc::CallbackServerContext* context_;
  int64_t retry_pushback_ms_;
  std::vector<std::string> models_;
  bool retry_pointless_ = false;
  bool accepted_ = false;
  std::optional<std::pair<std::string, grpc::Status>> no_message_;  // the id and status, until done()
  Clock::time_point start_ = Clock::now();
};

void log_result(const std::string& method, const Request& req, const std::string& model, const RequestResult& r,
                const grpc::Status& status) {
  if (status.ok()) {
    spdlog::info("request {}: {} model={} in={} out={} finish={} queue_ms={:.1f} encode_ms={:.1f} decode_ms={:.1f}",
                 req.id, method, model, r.usage.input_tokens, r.usage.output_tokens, to_string(r.finish_reason),
                 r.usage.queue_ms, r.usage.encode_ms, r.usage.decode_ms);
  } else {
    spdlog::info("request {}: {} model={} ended with {}: {}", req.id, method, model,
                 status_code_name(status.error_code()), status.error_message());
  }
}

// gRPC keeps a call's request message until the call ends (OnDone): a copy of its document for as long as
// the request queues, decodes and waits for a client that does not read its answer. Parsed, it is of no
// further use, and is released. The callback API hands it over as const, but it is the call's own object,
// which gRPC only destroys once the call is done and never reads after the method handler.
void release_body(const grpc::ByteBuffer& body) { const_cast<grpc::ByteBuffer&>(body).Clear(); }

// The start shared by Summarize and SummarizeStream, in two parts. read_call parses the body into `in`;
// prepare_call (on SummarizerService::start_call's thread) finds the model and builds the request. A
// refusal is recorded and returned: the status to end the call with.
grpc::Status read_call(SummarizerService& service, const grpc::ByteBuffer& body, v1::SummarizeRequest& in,
                       CallRecord& record) {
  if (const grpc::Status size = check_body_size(body, service.limits().max_message_bytes); !size.ok()) {
    record.too_large(service.next_request_id(), size);
    return size;
  }
  if (grpc::Status parsed = parse_body(body, in); !parsed.ok()) {
    record.malformed(service.next_request_id(), parsed, body.Valid());
    return parsed;
  }
  release_body(body);
  return grpc::Status::OK;
}

grpc::Status prepare_call(SummarizerService& service, grpc::CallbackServerContext* context,
                          const v1::SummarizeRequest& in, bool admitted, CallRecord& record,
                          SummarizerService::Prepared& prepared) {
  try {
    prepared = service.prepare(in, context, admitted, record.arrived());
  } catch (const RequestError& e) {
    record.refused(service.request_id(in), in.model(), service.find_model(in.model()), e.status(), e.server_fault());
    return e.status();
  }
  record.started(prepared.engine->name());
  return grpc::Status::OK;
}

// Runs a call's `start` where SummarizerService::start_call puts it. A start failing otherwise than by a
// refusal (out of memory setting it up) is logged as the failure of a call that could not start and ends
// the call through `end`: before its request is queued, nothing else would.
template <typename Start, typename End>
void start_call_or_end(SummarizerService& service, int64_t document_bytes, const CallRecord& record,
                       grpc::CallbackServerContext* context, Start start, End end) {
  service.start_call(document_bytes, [&record, context, start = std::move(start), end = std::move(end)](bool admitted) {
    try {
      start(admitted);
    } catch (const std::exception& e) {
      const grpc::Status status = server_error("starting the call", e).status();
      spdlog::error("{} from {} failed with {}: {}", record.method(), context->peer(),
                    status_code_name(status.error_code()), status.error_message());
      end(status);
    }
  });
}

// Summarize: one request, one response.
class SummarizeCall final : public grpc::ServerUnaryReactor {
 public:
  SummarizeCall(SummarizerService& service, grpc::CallbackServerContext* context, const grpc::ByteBuffer& body,
                grpc::ByteBuffer* out)
      : service_(service), record_(service, context, "Summarize"), out_(out) {
    if (const grpc::Status read = read_call(service, body, in_, record_); !read.ok()) {
      finish(read);
      return;
    }
    start_call_or_end(
        service, static_cast<int64_t>(in_.document().size()), record_, context,
        [this, &service, context](bool admitted) { start(service, context, admitted); },
        [this](const grpc::Status& s) { finish(s); });
  }
  void OnCancel() override {
    std::lock_guard lock(mu_);
    cancelled_ = true;
    if (request_) request_->cancel();
  }
  void OnDone() override {  // gRPC's reactor lifetime: the reactor owns itself
    record_.done();
    if (held_ != 0) service_.add_unread_response_bytes(-held_);  // the client has it, or the call ended
    delete this;
  }

 private:
  void start(SummarizerService& service, grpc::CallbackServerContext* context, bool admitted) {
    SummarizerService::Prepared prepared;
    if (const grpc::Status opened = prepare_call(service, context, in_, admitted, record_, prepared); !opened.ok()) {
      finish(opened);
      return;
    }
    // The parsed request is dropped once prepared (its document, up to --max-message-bytes, was held until the
    // call ended: for as long as a client that does not read left its response waiting). Swapped out, as
    // Clear() keeps the strings' capacity.
    v1::SummarizeRequest().Swap(&in_);
    const std::string model = prepared.engine->name();
    prepared.request->on_finish = [this, model](RequestResult result) {
      // A summary its last step completed after the deadline, or the client's cancel, reaches no client
      // (gRPC has ended the call on its side): count and log that, not an OK nobody receives.
      result.outcome = record_.as_the_client_has(result.outcome);
      grpc::Status status = result_status(result);
      if (status.ok()) {
        status = build_response([&] {
          v1::SummarizeResponse response;
          fill_response(result, *request_, model, &response);
          return serialize_body(response, *out_);
        });
      }
      log_result(record_.method(), *request_, model, result, status);
      finish(status);  // last use of this
    };
    {
      std::lock_guard lock(mu_);  // OnCancel may run meanwhile (the start is on a thread of its own)
      request_ = prepared.request;
      if (cancelled_) request_->cancel();
    }
    record_.set_accepted(true);
    try {
      service.submit(prepared);
    } catch (const RequestError& e) {
      record_.set_accepted(false);
      record_.refused(request_->id, model, prepared.engine, e.status(), e.server_fault());
      finish(e.status());
    }
  }
  void finish(const grpc::Status& status) {
    record_.ended(status);
    // The response waits in memory until its client takes it (a client that does not read: as long as the
    // call lives), as a stream's messages do.
    if (status.ok()) held_ = held_bytes(*out_);
    service_.add_unread_response_bytes(held_);
    Finish(status);
  }
  SummarizerService& service_;
  CallRecord record_;
  v1::SummarizeRequest in_;  // parsed; dropped once prepared
  grpc::ByteBuffer* out_;
  std::mutex mu_;  // request_ and cancelled_, between the start and OnCancel
  std::shared_ptr<Request> request_;
  bool cancelled_ = false;
  int64_t held_ = 0;  // the response's bytes, counted in srformer_response_unread_bytes until OnDone
};

// SummarizeStream: token messages as they are decided, then the final response.
class StreamCall final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  StreamCall(SummarizerService& service, grpc::CallbackServerContext* context, const grpc::ByteBuffer& body)
      : service_(service), record_(service, context, "SummarizeStream") {
    if (const grpc::Status read = read_call(service, body, in_, record_); !read.ok()) {
      end(read);
      return;
    }
    start_call_or_end(
        service, static_cast<int64_t>(in_.document().size()), record_, context,
        [this, &service, context](bool admitted) { start(service, context, admitted); },
        [this](const grpc::Status& s) { end(s); });
  }

  void OnWriteDone(bool ok) override {
    const grpc::ByteBuffer* next = nullptr;
    std::optional<grpc::Status> finish;
    {
      std::lock_guard lock(mu_);
      int64_t taken = held_bytes(pending_.front());
      pending_.pop_front();
      if (!ok) {  // the client is gone: stop generating, drop what is queued
        if (request_) request_->cancel();
        unsent_ += pending_.size() + 1;
        for (const auto& body : pending_) taken += held_bytes(body);
        pending_.clear();
      }
      held_ -= taken;
      service_.add_unread_stream_bytes(-taken);
      if (!pending_.empty()) {
        next = &pending_.front();
        if (stall_) stall_->writing();  // the client took one: its clock starts again
      } else {
        if (stall_) stall_->idle();
        writing_ = false;
        if (status_ && !finished_) {
          finished_ = true;
          finish = status_;
        }
      }
    }
    if (next) StartWrite(next);
    if (finish) end(*finish);
  }
  void OnCancel() override {
    std::lock_guard lock(mu_);
    cancelled_ = true;
    if (request_) request_->cancel();
  }
  void OnDone() override {
    if (stall_) stall_->done();
    record_.done();
    if (held_ != 0) service_.add_unread_stream_bytes(-held_);  // none, as the stream ends with its writes
    delete this;
  }

 private:
  void start(SummarizerService& service, grpc::CallbackServerContext* context, bool admitted) {
    SummarizerService::Prepared prepared;
    if (const grpc::Status opened = prepare_call(service, context, in_, admitted, record_, prepared); !opened.ok()) {
      end(opened);
      return;
    }
    v1::SummarizeRequest().Swap(&in_);  // dropped once prepared, as Summarize's
    const std::string model = prepared.engine->name();
    // Messages held for clients that do not take them are bounded by refusing new streams, not by the
    // queue: a stream whose summary is complete has left the engine, however long its messages wait.
    if (const int64_t limit = service.limits().max_unread_stream_bytes, unread = service.unread_stream_bytes();
        limit > 0 && unread > limit) {
      const grpc::Status status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          "the server holds " + std::to_string(unread) +
              " bytes of stream messages their clients have not read, over its limit (--max-unread-stream-memory " +
              std::to_string(limit) + "); retry later");
      record_.refused(prepared.request->id, model, prepared.engine, status, false, RejectReason::kUnreadStreams);
      end(status);
      return;
    }
    {
      std::lock_guard lock(mu_);  // OnCancel may run meanwhile (the start is on a thread of its own)
      request_ = prepared.request;
      if (cancelled_) request_->cancel();
    }
    model_ = model;
    stall_ = service.stall_watch().watch(context);
    request_->on_tokens = [this](std::vector<TokenEvent> events) {
      std::vector<v1::SummarizeStreamResponse> msgs(events.size());
      for (size_t i = 0; i < events.size(); ++i) {
        auto* t = msgs[i].mutable_token();
        t->set_token_id(events[i].token_id);
        // protobuf string fields must be UTF-8: a malformed sequence becomes U+FFFD.
        t->set_text(utf8::is_valid(events[i].text) ? std::move(events[i].text) : utf8::to_valid(events[i].text));
        t->set_step(events[i].step);
        t->set_segment(events[i].segment);
        t->set_logprob(events[i].logprob);
      }
      enqueue(msgs, std::nullopt);
    };
    request_->on_finish = [this, model](RequestResult result) {
      result.outcome = record_.as_the_client_has(result.outcome);  // as Summarize's
      grpc::Status status = result_status(result);
      std::vector<v1::SummarizeStreamResponse> msgs;
      if (status.ok()) {
        status = build_response([&] {
          msgs.emplace_back();
          fill_response(result, *request_, model, msgs.back().mutable_final());
          return grpc::Status::OK;
        });
        if (!status.ok()) msgs.clear();
      }
      if (status.ok()) {
        // Logged once the messages are written (end()): a client that stopped reading may never get them.
        std::lock_guard lock(mu_);
        finished_ok_.emplace(Finished{model, std::move(result)});
      } else {
        log_result(record_.method(), *request_, model, result, stalled() ? stall_status() : status);
      }
      enqueue(msgs, status);  // last use of this from the engine
    };
    record_.set_accepted(true);
    try {
      service.submit(prepared);
    } catch (const RequestError& e) {
      record_.set_accepted(false);
      record_.refused(request_->id, model, prepared.engine, e.status(), e.server_fault());
      end(e.status());
    }
  }
  // Appends messages (and the final status once known); starts a write when none is in flight.
  void enqueue(const std::vector<v1::SummarizeStreamResponse>& msgs, std::optional<grpc::Status> status) {
    std::vector<grpc::ByteBuffer> bodies;
    bodies.reserve(msgs.size());
    int64_t added = 0;
    for (const auto& m : msgs) {
      grpc::ByteBuffer body;
      if (const grpc::Status serialized = serialize_body(m, body); !serialized.ok()) {
        // Never for our messages; were it to happen, end the stream rather than leave it waiting.
        spdlog::error("request {}: {}", request_->id, serialized.error_message());
        request_->cancel();
        if (status) status = serialized;
        continue;
      }
      added += held_bytes(body);
      bodies.push_back(std::move(body));
    }
    const grpc::ByteBuffer* first = nullptr;
    std::optional<grpc::Status> finish;
    {
      std::lock_guard lock(mu_);
      for (auto& b : bodies) pending_.push_back(std::move(b));
      held_ += added;
      service_.add_unread_stream_bytes(added);
      if (status) status_ = status;
      if (!writing_ && !pending_.empty()) {
        writing_ = true;
        first = &pending_.front();
        if (stall_) stall_->writing();
      } else if (!writing_ && status_ && !finished_) {
        finished_ = true;
        finish = status_;
      }
    }
    if (first) StartWrite(first);
    if (finish) end(*finish);
  }
  void end(const grpc::Status& status) {
    std::optional<Finished> finished;
    size_t unsent = 0;
    {
      std::lock_guard lock(mu_);
      finished.swap(finished_ok_);
      unsent = unsent_;
    }
    // A stall's status is the one the watch gave the client when it cancelled the call.
    const bool stall = stalled();
    const grpc::Status client_has = stall ? stall_status() : record_.as_the_client_has(status, unsent);
    if (finished) log_result(record_.method(), *request_, finished->model, finished->result, client_has);
    if (stall && service_.metrics()) service_.metrics()->model(model_).on_stream_stalled();
    record_.ended(client_has);
    Finish(status);
  }
  bool stalled() const { return stall_ && stall_->stalled(); }
  grpc::Status stall_status() const { return service_.stall_watch().status(); }

  struct Finished {
    std::string model;
    RequestResult result;
  };

  SummarizerService& service_;
  CallRecord record_;
  v1::SummarizeRequest in_;
  std::shared_ptr<Request> request_;
  std::string model_;
  std::shared_ptr<StallWatch::Call> stall_;  // null without --stream-stall-timeout-ms
  std::mutex mu_;
  bool cancelled_ = false;                // OnCancel came, perhaps before the start set request_
  std::deque<grpc::ByteBuffer> pending_;  // front = being written (deque keeps references)
  int64_t held_ = 0;                      // their bytes, counted in the service's unread_stream_bytes
  bool writing_ = false;
  bool finished_ = false;
  std::optional<grpc::Status> status_;
  std::optional<Finished> finished_ok_;  // the engine's OK result, logged by end()
  size_t unsent_ = 0;                    // messages a failed write left undelivered
};

// SummarizeBatch: all requests queued together, one response in request order. By default the first
// item refused or failing ends the call; with partial_results each item ends on its own.
class BatchCall final : public grpc::ServerUnaryReactor {
 public:
  BatchCall(SummarizerService& service, grpc::CallbackServerContext* context, const grpc::ByteBuffer& body,
            grpc::ByteBuffer* out)
      : service_(service),
        record_(service, context, "SummarizeBatch"),
        context_(context),
        metrics_(service.metrics()),
        out_(out) {
    if (const grpc::Status size = check_body_size(body, service.limits().max_message_bytes); !size.ok()) {
      record_.too_large(service.next_request_id(), size);
      end(size);
      return;
    }
    if (const grpc::Status parsed = parse_body(body, in_); !parsed.ok()) {
      record_.malformed(service.next_request_id(), parsed, body.Valid());
      end(parsed);
      return;
    }
    release_body(body);
    const int n = in_.requests_size();
    if (n == 0) {
      const grpc::Status empty(grpc::StatusCode::INVALID_ARGUMENT, "requests is empty; send at least one request");
      record_.malformed(service.next_request_id(), empty);
      end(empty);
      return;
    }
    // A batch no queues could take whole is refused before any item is prepared, logged or answered: a
    // 4 MiB body holds two million empty items, and each was refused, logged and listed on its own (a
    // minute of the server's time, gigabytes, a 200 MB response), or without partial_results logged as
    // not run.
    if (const int64_t most = service.batch_capacity(); n > most) {
      const grpc::Status status(grpc::StatusCode::INVALID_ARGUMENT,
                                "the batch holds " + std::to_string(n) +
                                    " requests, more than this server's queues take together (" + std::to_string(most) +
                                    ", --max-queue per model); split it into batches of at most " +
                                    std::to_string(most));
      record_.malformed(service.next_request_id(), status);
      end(status);
      return;
    }
    int64_t document_bytes = 0;
    for (const auto& request : in_.requests()) document_bytes += static_cast<int64_t>(request.document().size());
    start_call_or_end(
        service, document_bytes, record_, context,
        [this, &service, context](bool admitted) { start(service, context, admitted); },
        [this](const grpc::Status& s) { end(s); });
  }
  void OnCancel() override {
    std::lock_guard lock(mu_);
    cancelled_ = true;
    for (size_t i = 0; i < items_.size(); ++i) cancel(i);
  }
  void OnDone() override {
    record_.done();
    if (held_ != 0) service_.add_unread_response_bytes(-held_);  // as Summarize's
    delete this;
  }

 private:
  struct Item {
    std::string id;
    std::string model;
    bool known_model = false;          // `model` names one of this server's (else it is the client's text)
    std::shared_ptr<Request> request;  // null: refused before it was queued
    RequestResult result;
    grpc::Status error;  // the item's own failure, without the "requests[i]: " prefix
  };

  void start(SummarizerService& service, grpc::CallbackServerContext* context, bool admitted) {
    const int n = in_.requests_size();
    // The call counts once under every model it asks for, whichever item ends it.
    for (const auto& request : in_.requests()) {
      if (const Engine* const engine = service.find_model(request.model())) record_.started(engine->name());
    }
    partial_ = in_.partial_results();
    {
      std::lock_guard lock(mu_);  // OnCancel may run meanwhile (the start is on a thread of its own)
      items_.resize(static_cast<size_t>(n));
    }
    std::vector<SummarizerService::Prepared> prepared(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      const auto& request = in_.requests(i);
      try {
        prepared[i] = service.prepare(request, context, admitted, record_.arrived());
      } catch (const RequestError& e) {
        Engine* const engine = service.find_model(request.model());
        items_[i].id = service.request_id(request);
        items_[i].model = engine ? engine->name() : request.model();
        items_[i].known_model = engine != nullptr;
        items_[i].error = grpc::Status(e.code(), e.what());
        record_.refused(items_[i].id, request.model(), engine, item_status(i), e.server_fault());
        // A server shutting down or a deadline already past refuse every item alike: the call says so
        // (UNAVAILABLE invites the retry on another replica), partial_results or not.
        const bool whole_call =
            e.code() == grpc::StatusCode::UNAVAILABLE || e.code() == grpc::StatusCode::DEADLINE_EXCEEDED;
        if (!partial_ || whole_call) {
          log_not_run(service, prepared, i);
          end(item_status(i));
          return;
        }
      }
    }
    // A batch holding more requests for one model than its queue takes could never be admitted whole:
    // say so now rather than RESOURCE_EXHAUSTED, which invites a retry that fails again.
    std::map<const Engine*, int64_t> per_engine;
    for (const auto& p : prepared) {
      if (!p.engine) continue;
      const int64_t count = ++per_engine[p.engine];
      if (count > p.engine->limits().max_queue) {
        const grpc::Status status(grpc::StatusCode::INVALID_ARGUMENT,
                                  "the batch holds more than " + std::to_string(p.engine->limits().max_queue) +
                                      " requests for model '" + p.engine->name() +
                                      "', more than its queue takes (--max-queue); split it into smaller batches");
        record_.refused(p.request->id, p.engine->name(), p.engine, status);
        end(status);
        return;
      }
    }
    v1::SummarizeBatchRequest().Swap(&in_);  // dropped once its items are prepared, as Summarize's
    std::unique_lock lock(mu_);              // items finishing while later ones are submitted
    remaining_ = 1;  // this constructor's share: no item's done() completes the call before it ends
    for (int i = 0; i < n; ++i) {
      if (!prepared[i].engine) continue;
      record_.started(prepared[i].engine->name());
      items_[i].id = prepared[i].request->id;
      items_[i].model = prepared[i].engine->name();
      items_[i].known_model = true;
      items_[i].request = prepared[i].request;
      prepared[i].request->on_finish = [this, i](RequestResult result) { done(i, std::move(result)); };
      ++remaining_;
    }
    if (cancelled_) {  // before the items were made: they stop as soon as they are queued
      for (size_t i = 0; i < items_.size(); ++i) cancel(i);
    }
    for (int i = 0; i < n; ++i) {
      if (!prepared[i].engine) continue;
      lock.unlock();
      try {
        // Throws RequestError only: nothing else may leave this constructor once items are queued (their
        // on_finish would call back into a BatchCall gRPC has freed).
        service.submit(prepared[i]);
        lock.lock();
        record_.set_accepted(true);  // the constructor's share keeps the call from ending before it returns
      } catch (const RequestError& e) {
        lock.lock();
        --remaining_;
        items_[i].request.reset();  // never queued: its on_finish will not run
        items_[i].error = grpc::Status(e.code(), e.what());
        record_.refused(items_[i].id, items_[i].model, prepared[i].engine, item_status(i), e.server_fault());
        if (!partial_ || ends_whole_call(e.code())) {
          // Refuse the whole batch: cancel what was queued, report why once all of it has come back.
          if (!failed_) failed_ = i;
          for (int j = 0; j < i; ++j) cancel(j);
          remaining_ -= count_queued_after(i, prepared);
          for (int j = i + 1; j < n; ++j) {
            if (!items_[j].request) continue;
            spdlog::info("request {}: {} model={} not run: requests[{}] of its batch was refused", items_[j].id,
                         record_.method(), items_[j].model, i);
            items_[j].request.reset();
          }
          break;
        }
      }
    }
    const bool last = --remaining_ == 0;
    lock.unlock();
    if (last) complete();
  }
  // The items a refusal of the whole call before queueing kept from running (the valid ones before it, all
  // after it): each gets its line, with the client's id where it gave one, as queued items do.
  void log_not_run(SummarizerService& service, const std::vector<SummarizerService::Prepared>& prepared,
                   int refused) const {
    for (int j = 0; j < in_.requests_size(); ++j) {
      const auto& p = prepared[static_cast<size_t>(j)];
      if (j == refused || (j < refused && !p.request)) continue;  // the refused ones have their line
      const auto& request = in_.requests(j);
      const Engine* const engine = p.engine ? p.engine : service.find_model(request.model());
      spdlog::info("request {}: {} model={} not run: requests[{}] of its batch was refused",
                   p.request ? p.request->id : service.request_id(request), record_.method(),
                   engine ? engine->name() : shown_name(request.model()), refused);
    }
  }
  // A server shutting down ends a partial_results batch as a whole too, as when it refuses it up front
  // (docs/API.md): UNAVAILABLE sends the client's retry to another replica, where an OK call with every
  // item UNAVAILABLE is not retried.
  static bool ends_whole_call(grpc::StatusCode code) { return code == grpc::StatusCode::UNAVAILABLE; }
  static int count_queued_after(int i, const std::vector<SummarizerService::Prepared>& prepared) {
    return static_cast<int>(std::count_if(prepared.begin() + i + 1, prepared.end(),
                                          [](const SummarizerService::Prepared& p) { return p.engine != nullptr; }));
  }
  void cancel(size_t i) {
    if (items_[i].request) items_[i].request->cancel();
  }
  grpc::Status item_status(int i) const {
    const grpc::Status& e = items_[static_cast<size_t>(i)].error;
    return grpc::Status(e.error_code(), "requests[" + std::to_string(i) + "]: " + e.error_message());
  }
  void done(int i, RequestResult result) {
    std::unique_lock lock(mu_);
    if (const grpc::Status s = result_status(result); !s.ok()) {
      items_[i].error = s;
      // Without partial_results (or for a shutdown) the first item to fail decides the call's status: the
      // others' answers could not be returned, so stop their work now rather than decode them to the end.
      if ((!partial_ || ends_whole_call(s.error_code())) && !failed_) {
        failed_ = i;
        for (size_t j = 0; j < items_.size(); ++j) cancel(j);
      }
    }
    items_[i].result = std::move(result);
    const bool last = --remaining_ == 0;
    lock.unlock();
    if (last) complete();
  }
  void complete() {
    // Every item that was queued gets its line (its result, or why it stopped), whatever ends the call:
    // the client's request ids are echoed in the logs. (Items refused before they were queued were
    // logged then.)
    for (const Item& item : items_) {
      if (item.request) log_result(record_.method(), *item.request, item.model, item.result, item.error);
    }
    // The client has its status already (its deadline, or its cancel): count and log that one, not the OK
    // of a partial_results response nobody receives (nor its items). The engine may end the items at the
    // deadline before gRPC's own timer marks the call cancelled: a deadline passed counts as much.
    const bool cancelled = context_->IsCancelled();
    const bool expired = record_.deadline_passed();
    if (expired || cancelled) {
      const grpc::Status status = expired
                                      ? grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                                                     "the deadline expired before every request of the batch finished")
                                      : grpc::Status(grpc::StatusCode::CANCELLED, "the client cancelled the batch");
      spdlog::info("batch of {} requests ended with {}", items_.size(), status_code_name(status.error_code()));
      end(status);
      return;
    }
    if (failed_) {
      const grpc::Status status = item_status(*failed_);
      spdlog::info("batch of {} requests ended with {}", items_.size(), status_code_name(status.error_code()));
      end(status);
      return;
    }
    int failures = 0;
    const grpc::Status status = build_response([&] {
      v1::SummarizeBatchResponse response;
      for (size_t i = 0; i < items_.size(); ++i) {
        const Item& item = items_[i];
        auto* const out = response.add_responses();
        if (partial_ && metrics_ && item.known_model) {
          metrics_->model(item.model).on_batch_item(status_code_name(item.error.error_code()));
        }
        if (item.error.ok()) {
          fill_response(item.result, *item.request, item.model, out);
          continue;
        }
        ++failures;
        out->set_request_id(item.id);
        out->set_model(item.model);
        auto* const error = response.add_errors();
        error->set_index(static_cast<int32_t>(i));
        error->set_code(static_cast<int32_t>(item.error.error_code()));
        error->set_message(item.error.error_message());
      }
      return serialize_body(response, *out_);
    });
    spdlog::info("batch of {} requests ended with {}{}", items_.size(), status_code_name(status.error_code()),
                 failures > 0 ? " (" + std::to_string(failures) + " of them failed)" : std::string());
    end(status);
  }
  void end(const grpc::Status& status) {
    record_.ended(status);
    if (status.ok()) held_ = held_bytes(*out_);  // waits for its client, as Summarize's
    service_.add_unread_response_bytes(held_);
    Finish(status);
  }

  SummarizerService& service_;
  CallRecord record_;
  grpc::CallbackServerContext* context_;
  Metrics* metrics_;
  v1::SummarizeBatchRequest in_;  // parsed; dropped once its items are prepared
  grpc::ByteBuffer* out_;
  bool partial_ = false;
  std::mutex mu_;
  std::vector<Item> items_;
  bool cancelled_ = false;  // OnCancel came, perhaps before the start made the items
  int remaining_ = 0;
  std::optional<int> failed_;  // without partial_results: the item whose failure ends the call
  int64_t held_ = 0;           // the response's bytes, counted in srformer_response_unread_bytes until OnDone
};

// A call whose reactor could not be made (an exception out of its constructor that the handling there
// misses) ends as a FailedCall with INTERNAL (RESOURCE_EXHAUSTED for memory) and an error line, not with gRPC's
// UNKNOWN ("Unexpected error in RPC handling") and nothing logged.
template <typename Reactor, typename Make>
Reactor* reactor_or_failed(const char* method, grpc::CallbackServerContext* context, Make&& make) {
  try {
    return make();
  } catch (const std::exception& e) {
    const grpc::Status status = server_error("starting the call", e).status();
    spdlog::error("{} from {} failed with {}: {}", method, context->peer(), status_code_name(status.error_code()),
                  status.error_message());
    return new FailedCall<Reactor>(status);
  }
}

}  // namespace

SummarizerService::SummarizerService(ModelRegistry& models, ServiceLimits limits, Metrics* metrics)
    : models_(models),
      limits_(limits),
      metrics_(metrics),
      stall_watch_(std::chrono::milliseconds(limits.stream_stall_timeout_ms)) {
  // Tokenizing is CPU bound, and build_request's budget bounds its memory: half the machine's threads, 2 to 8.
  const unsigned threads = std::clamp(std::thread::hardware_concurrency() / 2, 2U, 8U);
  for (unsigned t = 0; t < threads; ++t) {
    start_threads_.emplace_back([this] {
      std::unique_lock lock(starts_mu_);
      while (true) {
        starts_cv_.wait(lock, [this] { return stopping_ || !starts_.empty(); });
        if (starts_.empty()) return;  // stopping, nothing left to start
        const std::function<void()> start = std::move(starts_.front());
        starts_.pop_front();
        lock.unlock();
        start();
        lock.lock();
      }
    });
  }
}

SummarizerService::~SummarizerService() {
  {
    std::lock_guard lock(starts_mu_);
    stopping_ = true;
  }
  starts_cv_.notify_all();
  for (auto& thread : start_threads_) thread.join();
}

void SummarizerService::begin_shutdown() {
  std::lock_guard lock(admitted_mu_);  // no call is admitted once this returns
  shutting_down_.store(true);
}

bool SummarizerService::admit() {
  std::lock_guard lock(admitted_mu_);
  if (shutting_down_.load()) return false;
  ++admitted_;
  return true;
}

void SummarizerService::release_admission() {
  {
    std::lock_guard lock(admitted_mu_);
    --admitted_;
  }
  admitted_cv_.notify_all();
}

bool SummarizerService::wait_started(Clock::time_point deadline) {
  std::unique_lock lock(admitted_mu_);
  return admitted_cv_.wait_until(lock, deadline, [this] { return admitted_ == 0 || stop_waiting_; });
}

void SummarizerService::stop_waiting_for_starts() {
  {
    std::lock_guard lock(admitted_mu_);
    stop_waiting_ = true;
  }
  admitted_cv_.notify_all();
}

void SummarizerService::start_call(int64_t document_bytes, std::function<void(bool admitted)> start) {
  // Admitted as the call arrives, not once its document is tokenized (or its turn to be comes): a call
  // the shutdown finds being started was refused UNAVAILABLE, with no grace, when its tokens were ready.
  const bool admitted = admit();
  std::function<void()> run = [this, admitted, start = std::move(start)] {
    struct Release {
      SummarizerService* service;
      ~Release() {
        if (service) service->release_admission();
      }
    } release{admitted ? this : nullptr};  // however the start ends: queued, refused, or an exception
    start(admitted);
  };
  if (document_bytes < kLongDocumentBytes) {
    run();
    return;
  }
  try {
    std::lock_guard lock(starts_mu_);
    starts_.push_back(std::move(run));
  } catch (...) {  // never queued: it will not run, nor release its admission
    if (admitted) release_admission();
    throw;
  }
  starts_cv_.notify_one();
}

std::string SummarizerService::next_request_id() { return "req-" + std::to_string(next_id_.fetch_add(1)); }

std::string SummarizerService::request_id(const v1::SummarizeRequest& request) {
  // One build_request refuses (too long, not printable UTF-8) is not logged: the refusal names it.
  return request.request_id().empty() || !request_id_problem(request.request_id()).empty() ? next_request_id()
                                                                                           : request.request_id();
}

Engine* SummarizerService::find_model(const std::string& name) const { return models_.find(name); }

int64_t SummarizerService::batch_capacity() const {
  int64_t total = 0;
  for (const auto& engine : models_.engines()) total += engine->limits().max_queue;
  return total;
}

void SummarizerService::add_unread_stream_bytes(int64_t delta) {
  unread_stream_bytes_.fetch_add(delta);
  if (!metrics_) return;
  // Increments and decrements, not Set(): two streams setting their readings could leave the older last.
  if (delta >= 0) {
    metrics_->stream_unread_bytes().Increment(static_cast<double>(delta));
  } else {
    metrics_->stream_unread_bytes().Decrement(static_cast<double>(-delta));
  }
}

void SummarizerService::add_unread_response_bytes(int64_t delta) {
  if (!metrics_) return;
  if (delta >= 0) {
    metrics_->response_unread_bytes().Increment(static_cast<double>(delta));
  } else {
    metrics_->response_unread_bytes().Decrement(static_cast<double>(-delta));
  }
}

SummarizerService::Prepared SummarizerService::prepare(const v1::SummarizeRequest& in,
                                                       grpc::CallbackServerContext* context, bool admitted,
                                                       Clock::time_point arrived) {
  if (!admitted) {
    throw RequestError(grpc::StatusCode::UNAVAILABLE, "the server is shutting down; retry on another replica");
  }
  Prepared p;
  p.engine = models_.find(in.model());
  if (!p.engine) {
    throw RequestError(grpc::StatusCode::NOT_FOUND,
                       "unknown model '" + shown_name(in.model()) + "'; this server holds: " + models_.names());
  }
  std::optional<Clock::time_point> deadline;
  if (const auto left = time_left(context->raw_deadline())) {
    if (*left <= std::chrono::nanoseconds::zero()) {
      throw RequestError(grpc::StatusCode::DEADLINE_EXCEEDED,
                         "the deadline expired before the request was queued; allow more time");
    }
    deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(*left);
  }
  try {
    p.request = build_request(in, *p.engine, limits_, deadline);
  } catch (const RequestError&) {
    throw;
  } catch (const std::bad_alloc& e) {
    throw server_error("preparing the request", e);
  } catch (const std::exception& e) {
    throw RequestError(grpc::StatusCode::INVALID_ARGUMENT,
                       std::string("cannot prepare the request: ") + error_message(e));
  }
  if (p.request->id.empty()) p.request->id = next_request_id();
  // Not when build_request made it: a long document waits for one of start_call's threads first.
  p.request->accepted_at = arrived;
  return p;
}

void SummarizerService::submit(const Prepared& prepared) {
  try {
    prepared.engine->submit(prepared.request);
  } catch (const QueueFullError& e) {
    throw RequestError(grpc::StatusCode::RESOURCE_EXHAUSTED, e.what());
  } catch (const ShuttingDownError& e) {
    throw RequestError(grpc::StatusCode::UNAVAILABLE, e.what());
  } catch (const std::invalid_argument& e) {
    throw RequestError(grpc::StatusCode::INVALID_ARGUMENT, e.what());
  } catch (const std::exception& e) {  // not the engine's refusals: std::bad_alloc, a LibTorch error, ...
    throw server_error("queueing the request", e);
  } catch (...) {
    throw ServerError(grpc::StatusCode::INTERNAL, "queueing the request failed: an unknown exception");
  }
}

grpc::ServerUnaryReactor* SummarizerService::Summarize(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request, grpc::ByteBuffer* response) {
  return reactor_or_failed<grpc::ServerUnaryReactor>(
      "Summarize", context, [&] { return new SummarizeCall(*this, context, *request, response); });
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* SummarizerService::SummarizeStream(grpc::CallbackServerContext* context,
                                                                               const grpc::ByteBuffer* request) {
  return reactor_or_failed<grpc::ServerWriteReactor<grpc::ByteBuffer>>(
      "SummarizeStream", context, [&] { return new StreamCall(*this, context, *request); });
}

grpc::ServerUnaryReactor* SummarizerService::SummarizeBatch(grpc::CallbackServerContext* context,
                                                            const grpc::ByteBuffer* request,
                                                            grpc::ByteBuffer* response) {
  return reactor_or_failed<grpc::ServerUnaryReactor>("SummarizeBatch", context,
                                                     [&] { return new BatchCall(*this, context, *request, response); });
}

grpc::ServerUnaryReactor* SummarizerService::ListModels(grpc::CallbackServerContext* context,
                                                        const grpc::ByteBuffer* request, grpc::ByteBuffer* response) {
  auto* reactor = context->DefaultReactor();
  if (const grpc::Status size = check_body_size(*request, limits_.max_message_bytes); !size.ok()) {
    CallRecord record(*this, context, "ListModels");
    record.too_large(next_request_id(), size);
    record.ended(size);
    reactor->Finish(size);
    return reactor;
  }
  v1::ListModelsRequest in;
  if (const grpc::Status parsed = parse_body(*request, in); !parsed.ok()) {
    // Logged and counted as the other methods' (it was neither). A call without a message (mostly one
    // cancelled before it arrived) is neither: the default reactor has no OnDone to tell them apart.
    if (request->Valid()) CallRecord(*this, context, "ListModels").malformed(next_request_id(), parsed);
    reactor->Finish(parsed);
    return reactor;
  }
  // An exception here ends the call with RESOURCE_EXHAUSTED (out of memory) or INTERNAL and an error line:
  // gRPC made it UNKNOWN.
  const grpc::Status listed = build_response([&] {
    v1::ListModelsResponse out;
    for (const auto& e : models_.engines()) {
      const ModelConfig& c = e->config();
      auto* m = out.add_models();
      m->set_name(e->name());
      m->set_architecture(c.type_name());
      m->set_cross_attention(to_string(c.srformer.cross_attention));
      m->set_segment_size(static_cast<int32_t>(c.srformer.segment_size));
      m->set_max_input_tokens(static_cast<int32_t>(effective_max_input_tokens(c, limits_)));
      m->set_max_new_tokens(static_cast<int32_t>(max_new_tokens_limit(c, limits_)));
      m->set_device(e->device().str());
      m->set_dtype(dtype_name(e->dtype()));
      m->set_parameters(e->parameter_count());
      try {
        const auto defaults = resolve_options({}, c, limits_);
        *m->mutable_defaults() = to_proto(defaults);
        m->set_default_expected_length(static_cast<int32_t>(defaults.expected_length));
      } catch (const RequestError&) {  // defaults no request can use as they are: the L alone
        m->set_default_expected_length(
            static_cast<int32_t>(default_expected_length(c, default_max_new_tokens(c, limits_))));
      }
    }
    return serialize_body(out, *response);
  });
  if (!listed.ok()) spdlog::error("ListModels from {} failed: {}", context->peer(), listed.error_message());
  reactor->Finish(listed);
  return reactor;
}

namespace {

// A summary's fields, shared by SummarizeResponse (the best) and Alternative (the next best).
template <typename Message>
void fill_sequence(const std::string& summary, const std::vector<int64_t>& ids, const std::vector<float>& logprobs,
                   double score, FinishReason reason, Message* out) {
  out->set_summary(utf8::is_valid(summary) ? summary : utf8::to_valid(summary));
  for (const int64_t id : ids) out->add_token_ids(id);
  for (const float p : logprobs) out->add_token_logprobs(p);
  out->set_score(static_cast<float>(score));
  out->set_finish_reason(to_proto(reason));
}

}  // namespace

void fill_response(const RequestResult& r, const Request& req, const std::string& model, v1::SummarizeResponse* out) {
  fill_sequence(r.summary, r.token_ids, r.token_logprobs, r.score, r.finish_reason, out);
  out->set_model(model);
  out->set_request_id(req.id);
  for (const auto& a : r.alternatives) {
    const Hypothesis& h = a.hypothesis;
    fill_sequence(a.summary, h.tokens, h.token_logprobs, h.score, h.finish_reason, out->add_alternatives());
  }
  auto* u = out->mutable_usage();
  u->set_input_tokens(static_cast<int32_t>(r.usage.input_tokens));
  u->set_output_tokens(static_cast<int32_t>(r.usage.output_tokens));
  u->set_segments(static_cast<int32_t>(r.usage.segments));
  u->set_raf_firing_rate(r.usage.raf_firing_rate);
  u->set_state_bytes(r.usage.state_bytes);
  u->set_queue_ms(r.usage.queue_ms);
  u->set_encode_ms(r.usage.encode_ms);
  u->set_decode_ms(r.usage.decode_ms);
  u->set_truncated(r.usage.truncated);
  u->set_original_input_tokens(static_cast<int32_t>(r.usage.original_input_tokens));
  u->set_encoder_cached(r.usage.encoder_cached);
}

grpc::Status result_status(const RequestResult& r) {
  switch (r.outcome) {
    case RequestOutcome::kOk:
      return grpc::Status::OK;
    case RequestOutcome::kCancelled:
      return grpc::Status(grpc::StatusCode::CANCELLED, "the request was cancelled");
    case RequestOutcome::kDeadlineExceeded:
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                          "the deadline expired before the summary was complete; allow more time or ask for fewer "
                          "tokens (max_new_tokens)");
    case RequestOutcome::kShutdown:
      return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          "the server shut down before the summary was complete; retry on another replica");
    case RequestOutcome::kError:
      if (r.request_at_fault) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, r.error);
      return grpc::Status(grpc::StatusCode::INTERNAL, "generation failed: " + r.error);
  }
  return grpc::Status(grpc::StatusCode::UNKNOWN, "unknown outcome");
}

}  // namespace srformer::server
