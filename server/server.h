#pragma once
// An srformer gRPC server: one engine per model, the Summarizer service, health and reflection.
// main.cc wires it to flags and signals; tests run it in-process on a loopback port.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/config.h"
#include "server/engine/model_registry.h"
#include "server/service/health_service.h"
#include "server/service/summarizer_service.h"
#if defined(SRFORMER_OWN_REFLECTION_V1)
#include "server/reflection_v1.h"
#endif

namespace srformer::server {

class Metrics;

// What srformer-server exits with when its shutdown did not end (an engine's thread hung): not 1, a start that
// failed, nor 2, flags or a configuration refused, so that a supervisor or an operator tells a stuck engine
// (a hung CUDA call, a lost GPU) from a server that could not start.
inline constexpr int kStuckShutdownExitStatus = 3;

struct LoadedModel {
  std::string name;
  std::unique_ptr<Seq2SeqModel> model;
  std::shared_ptr<const Tokenizer> tokenizer;
};

// How the flags load a model: device, dtype, switch drives, packed projections, encode pieces.
LoadOptions load_options(const ServerConfig& config);
// Loads a model directory (weights + tokenizer) with load_options(config).
LoadedModel load_model_dir(const ModelSpec& spec, const ServerConfig& config);

// Binds config.listen with its TLS files and lets go again, so that a taken port, a wrong address or a
// key that is not the certificate's stops the start before the models load. Throws std::runtime_error
// saying what to check.
void check_can_listen(const ServerConfig& config);

class Server {
 public:
  // metrics may be null. Engines start at once; call start() to listen.
  Server(const ServerConfig& config, std::vector<LoadedModel> models, Metrics* metrics = nullptr,
         SearcherFactory searcher_factory = make_searcher);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Runs one short request on every model (server/service/warm_up.h) and logs what each took; call it
  // before start(). Throws std::runtime_error naming a model whose request failed.
  void warm_up();
  // Binds config.listen and starts serving (health SERVING; NOT_SERVING while an engine is stalled, see
  // --engine-stall-timeout-ms). Throws std::runtime_error when it cannot bind.
  void start();
  // The bound port (resolves port 0).
  int port() const { return port_; }
  // "HOST:PORT" actually listened on.
  std::string address() const;

  // Graceful shutdown: new calls get UNAVAILABLE and health NOT_SERVING; in-flight requests (calls whose
  // documents are still being tokenized included) get `grace` to finish, then are cancelled; then gRPC stops.
  // Idempotent; safe from any thread but a reactor's.
  void shutdown(std::chrono::milliseconds grace);
  // What a second stop signal does during shutdown(): requests in flight are cancelled now, not at the end
  // of the grace, and calls still being started (their documents tokenized) are refused when they come to
  // be queued rather than waited for.
  void cancel_now();
  // Blocks until shutdown() has completed.
  void wait();
  // wait() until `deadline`; returns whether shutdown() has completed.
  bool wait_until(Clock::time_point deadline);
  // The longest shutdown(grace) takes while the engines move: the grace, the wait for the requests cancelled
  // at its end, and gRPC's for the calls still open. A stuck engine's calls stay open, and it takes for good.
  static std::chrono::milliseconds shutdown_bound(std::chrono::milliseconds grace);
  // Ends the engines' decode threads (their requests cancelled), waiting for them, and for the callbacks
  // they posted last, at most `bound`. Returns the models whose thread is still running (hung in a step, or
  // in a request's callback), each named in an error line: the destructor would wait for those for good,
  // so main() exits without it.
  std::vector<std::string> stop_engines(std::chrono::milliseconds bound);
  // main()'s end of a shutdown(grace) running on another thread: waits for it until `drain_deadline`
  // (shutdown_bound(grace) after the signal), then stop_engines(engine_stop_bound). Returns 0 where both
  // ended; else kStuckShutdownExitStatus, said in an error line: the caller then exits without destroying
  // the server, whose destructor would wait for the stuck thread for good.
  int finish_shutdown(Clock::time_point drain_deadline, std::chrono::milliseconds engine_stop_bound);

  ModelRegistry& models() { return models_; }
  SummarizerService& service() { return *service_; }

 private:
  // From start() until shutdown(): health NOT_SERVING while an engine has had work for
  // config_.engine_stall_timeout_ms without moving (Engine::without_progress), SERVING once they all move.
  void watch_engines();
  // Health NOT_SERVING for good (the drain), and the watch ends.
  void stop_watching_engines();

  // shutdown()'s waits after the grace: for the requests it cancels, then for gRPC to close the calls left.
  static constexpr std::chrono::seconds kCancelledWait{10};
  static constexpr std::chrono::seconds kOpenCallsWait{2};

  const ServerConfig config_;
  ModelRegistry models_;
  ServiceLimits service_limits_;
  std::unique_ptr<SummarizerService> service_;
  HealthService health_;  // before server_, which its Watch calls must not outlive
#if defined(SRFORMER_OWN_REFLECTION_V1)
  std::unique_ptr<ReflectionV1> reflection_v1_;  // grpc.reflection.v1 beside the plugin's v1alpha
#endif
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::mutex mu_;
  std::condition_variable done_cv_;
  bool shutting_down_ = false;
  bool done_ = false;
  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  bool watch_stop_ = false;
  std::thread watch_thread_;
};

}  // namespace srformer::server
