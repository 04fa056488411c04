#pragma once
// The srformer.v1.Summarizer gRPC service on the callback API (reactors, no thread per call). It only
// translates between protobuf messages and engine requests; the engines do the work.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/engine/model_registry.h"
#include "server/service/request_builder.h"
#include "server/service/stall_watch.h"
#include "srformer/v1/summarizer.grpc.pb.h"

namespace srformer::server {

class Metrics;

// Every method raw (bodies as bytes): the service parses requests itself so that a body which is not the
// method's message gets INVALID_ARGUMENT and a reason (server/service/message_body.h).
using RawSummarizerService = v1::Summarizer::WithRawCallbackMethod_Summarize<
    v1::Summarizer::WithRawCallbackMethod_SummarizeStream<v1::Summarizer::WithRawCallbackMethod_SummarizeBatch<
        v1::Summarizer::WithRawCallbackMethod_ListModels<v1::Summarizer::Service>>>>;

class SummarizerService final : public RawSummarizerService {
 public:
  // metrics may be null.
  SummarizerService(ModelRegistry& models, ServiceLimits limits, Metrics* metrics);
  ~SummarizerService() override;

  // From now on every new call is refused with UNAVAILABLE; calls in flight continue, those still being
  // started included (a long document being tokenized, or waiting for its turn): see wait_started.
  void begin_shutdown();
  bool shutting_down() const { return shutting_down_.load(); }
  // Waits until every call that arrived before begin_shutdown() has been queued or refused, or until
  // `deadline`; true when none is left. The drain stops the engines accepting only then, so that such a
  // call gets the shutdown's grace as a request already queued does, not UNAVAILABLE.
  bool wait_started(Clock::time_point deadline);
  // wait_started returns at once from now on (a second stop signal: the engines refuse those calls).
  void stop_waiting_for_starts();

  grpc::ServerUnaryReactor* Summarize(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* SummarizeStream(grpc::CallbackServerContext* context,
                                                              const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* SummarizeBatch(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                           grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;

  // Shared by the call reactors (see summarizer_service.cc).
  struct Prepared {
    Engine* engine = nullptr;
    std::shared_ptr<Request> request;
  };
  // Finds the model, checks the deadline, builds the request, accepted when its call `arrived` (its time to
  // first token counts from there, as its call's duration does). Throws RequestError; UNAVAILABLE when the
  // call was not `admitted` (it arrived once the shutdown had begun: start_call).
  Prepared prepare(const v1::SummarizeRequest& request, grpc::CallbackServerContext* context, bool admitted,
                   Clock::time_point arrived);
  // Queues it; throws RequestError (RESOURCE_EXHAUSTED, UNAVAILABLE, INVALID_ARGUMENT).
  void submit(const Prepared& prepared);
  Metrics* metrics() const { return metrics_; }
  const ServiceLimits& limits() const { return limits_; }
  std::string next_request_id();
  // The client's request_id, else a new one.
  std::string request_id(const v1::SummarizeRequest& request);
  // The engine serving that model name (the empty name: the first model), or null.
  Engine* find_model(const std::string& name) const;
  // The most requests a SummarizeBatch may hold: what the models' queues take together (--max-queue each).
  int64_t batch_capacity() const;
  // Bytes of SummarizeStream messages held for clients that have not taken them yet, all streams
  // together (ServiceLimits::max_unread_stream_bytes; srformer_stream_unread_bytes).
  void add_unread_stream_bytes(int64_t delta);
  int64_t unread_stream_bytes() const { return unread_stream_bytes_.load(); }
  // Bytes of Summarize and SummarizeBatch responses held for clients that have not taken them yet
  // (srformer_response_unread_bytes; no limit refuses calls for them).
  void add_unread_response_bytes(int64_t delta);
  // Ends streams whose clients take none of their messages (ServiceLimits::stream_stall_timeout_ms).
  StallWatch& stall_watch() { return stall_watch_; }
  // Runs `start` (a call's preparation) now, or on the service's own threads where its documents hold
  // `document_bytes` >= kLongDocumentBytes: tokenizing them takes seconds, and gRPC's callback threads,
  // a few shared by every call, would not answer a health check, a ListModels or a stream's next write
  // meanwhile (24 calls of 3.6 MB each held a health check past 20 s). `start` is told whether the call
  // arrived before the shutdown began (admitted: prepared and queued in the drain's grace) or after
  // (prepare() refuses it); wait_started() waits for the admitted ones' starts to have run.
  void start_call(int64_t document_bytes, std::function<void(bool admitted)> start);

 private:
  ModelRegistry& models_;
  const ServiceLimits limits_;
  Metrics* const metrics_;
  // The call is taken (admitted) unless shutting down; each admitted call's start ends with its release.
  bool admit();
  void release_admission();

  std::atomic<bool> shutting_down_{false};
  // Calls admitted whose starts have not run yet (start_call), and the drain waiting for none.
  std::mutex admitted_mu_;
  std::condition_variable admitted_cv_;
  int64_t admitted_ = 0;
  bool stop_waiting_ = false;
  std::atomic<uint64_t> next_id_{1};
  std::atomic<int64_t> unread_stream_bytes_{0};
  StallWatch stall_watch_;
  // start_call's threads and the starts they have to run.
  std::mutex starts_mu_;
  std::condition_variable starts_cv_;
  std::deque<std::function<void()>> starts_;
  bool stopping_ = false;
  std::vector<std::thread> start_threads_;
};

// Result -> response message, and the call's status for a result.
void fill_response(const RequestResult& result, const Request& request, const std::string& model,
                   v1::SummarizeResponse* out);
grpc::Status result_status(const RequestResult& result);

}  // namespace srformer::server
