#include "server/server.h"

#include <grpc/grpc.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>

#include "common/byte_size.h"
#include "common/pem_file.h"
#include "model/cuda_device.h"
#include "model/generation/generate.h"
#include "model/tokenizer/utf8.h"
#include "model/usable_cpus.h"
#include "server/engine/cuda_memory.h"
#include "server/grpc_log.h"
#include "server/metrics/metrics.h"
#include "server/service/warm_up.h"
#include "server/system_memory.h"
#include "server/tls_certificate.h"

namespace srformer::server {

LoadOptions load_options(const ServerConfig& config) {
  LoadOptions options;
  options.device = parse_device(config.device);
  options.dtype = parse_dtype(config.dtype, options.device);
  options.precompute_switches = config.precompute_switches;
  options.pack_projections = config.packed_weights;
  options.encode_piece_scores = config.encode_piece_scores;
  options.encode_piece_positions = config.encode_piece_positions;
  return options;
}

LoadedModel load_model_dir(const ModelSpec& spec, const ServerConfig& config) {
  auto options = load_options(config);
  if (config.dtype.empty()) options.dtype = default_dtype_for(spec.dir, options.device);  // fp16, or bf16 for a T5
  LoadedModel loaded;
  loaded.name = spec.name;
  loaded.model = load_model(spec.dir, options);
  loaded.tokenizer = load_tokenizer(spec.dir);
  return loaded;
}

namespace {

// EngineLimits::max_state_bytes from --max-state-memory (auto: half the memory available after loading).
int64_t state_budget(const ServerConfig& config, const std::vector<LoadedModel>& models) {
  if (config.max_state_bytes != ServerConfig::kAutoStateMemory) {
    if (config.max_state_bytes > 0) {
      spdlog::info("decoder state budget: {} per model (--max-state-memory)", format_bytes(config.max_state_bytes));
    } else {  // said as the other settings are, so that an operator reading the log sees it was asked for
      spdlog::info("decoder state budget: none (--max-state-memory 0)");
    }
    return config.max_state_bytes;
  }
  const auto device = parse_device(config.device);
  const auto available =
      device.is_cpu() ? memory_available_bytes() : cuda_free_bytes(device.has_index() ? device.index() : 0);
  if (!available) {
    spdlog::warn("decoder state budget: none (cannot read the memory available on {}; set --max-state-memory)",
                 config.device);
    return 0;
  }
  // Every model on the device shares it (--device applies to all).
  const int64_t budget = *available / 2 / std::max<int64_t>(1, static_cast<int64_t>(models.size()));
  spdlog::info(
      "decoder state budget: {} per model (half of the {} available on {}, shared by {} model(s); "
      "--max-state-memory)",
      format_bytes(budget), format_bytes(*available), config.device, models.size());
  return budget;
}

}  // namespace

Server::Server(const ServerConfig& config, std::vector<LoadedModel> models, Metrics* metrics,
               SearcherFactory searcher_factory)
    : config_(config), health_(metrics) {
  EngineLimits limits;
  limits.max_batch_rows = config.max_batch_rows;
  limits.max_queue = config.max_queue;
  limits.max_tokens_in_flight = config.max_tokens_in_flight;
  limits.max_encode_tokens = config.max_encode_tokens;
  limits.encode_stall = std::chrono::milliseconds(config.encode_stall_ms);
  limits.max_state_bytes = state_budget(config, models);
  limits.queue_bypass = std::chrono::milliseconds(config.queue_bypass_ms);
  limits.free_memory_after_idle = std::chrono::milliseconds(config.free_memory_after_idle_ms);
  limits.encoder_cache_bytes = config.encoder_cache_bytes;
  const int cores = usable_cpus();  // the affinity mask and cgroup quota, not the machine's count
  limits.threads = config.threads > 0 ? config.threads : default_intra_op_threads(static_cast<int>(models.size()));
  spdlog::info("{} intra-op thread{} per model ({})", limits.threads, limits.threads == 1 ? "" : "s",
               config.threads > 0 ? std::string("--threads")
                                  : std::to_string(cores) + " usable CPUs / " + std::to_string(models.size()) +
                                        " model" + (models.size() == 1 ? "" : "s"));
  ServiceLimits& service_limits = service_limits_;
  service_limits.max_input_tokens = config.max_input_tokens;
  service_limits.max_new_tokens_cap = config.max_new_tokens_cap;
  service_limits.max_beams = config.max_beams;
  service_limits.retry_pushback_ms = config.retry_pushback_ms;
  service_limits.max_message_bytes = config.max_message_bytes;
  service_limits.max_unread_stream_bytes = config.max_unread_stream_bytes;
  service_limits.stream_stall_timeout_ms = config.stream_stall_timeout_ms;
  for (auto& m : models) {
    // Buckets that reach what this model is configured to take (an input limit past the fixed ladder).
    HistogramLimits ranges;
    ranges.max_batch_rows = limits.max_batch_rows;
    ranges.max_input_tokens = effective_max_input_tokens(m.model->config(), service_limits);
    ranges.max_new_tokens = service_limits.max_new_tokens_cap;
    ModelMetrics* mm = metrics ? &metrics->model(m.name, ranges) : nullptr;
    if (mm != nullptr) {
      mm->set_weight_bytes(static_cast<double>(m.model->parameter_bytes()),
                           static_cast<double>(m.model->packed_weight_bytes()));
      mm->set_state_budget_bytes(static_cast<double>(limits.max_state_bytes));
    }
    models_.add(
        std::make_unique<Engine>(m.name, std::move(m.model), std::move(m.tokenizer), limits, mm, searcher_factory));
  }
  service_ = std::make_unique<SummarizerService>(models_, service_limits, metrics);
  for (const auto& e : models_.engines()) {
    bool defaults_unusable = false;  // said once: unusable_generation_defaults below mostly finds the same
    try {
      (void)resolve_options({}, e->config(), service_limits);
    } catch (const RequestError& err) {
      defaults_unusable = true;
      spdlog::warn(
          "model '{}': its generation defaults (generation_config.json, else config.json) are not usable: every "
          "request that leaves these options unset will be refused ({}); fix the checkpoint's file or set them "
          "in each request",
          e->name(), err.what());
    }
    if (e->tokenizer().vocab_size() > e->config().vocab_size) {
      // Named, so that one special token past the rows (facebook/bart-large-cnn's <mask>: 50265 tokens, 50264
      // rows) reads as what it is rather than as another checkpoint's tokenizer.
      constexpr int64_t kNamed = 5;
      const int64_t rows = e->config().vocab_size, tokens = e->tokenizer().vocab_size();
      std::string past;
      for (int64_t id = rows; id < tokens && id < rows + kNamed; ++id) {
        past += (past.empty() ? "'" : ", '") + utf8::to_valid(e->tokenizer().id_to_token(id)) + "' (" +
                std::to_string(id) + ")";
      }
      if (tokens - rows > kNamed) past += " and " + std::to_string(tokens - rows - kNamed) + " more";
      spdlog::warn(
          "model '{}': its tokenizer has {} tokens but its embedding {} rows (config.json's vocab_size), so {} "
          "ha{} none: a document holding one is refused (FAILED_PRECONDITION); more than a few such tokens mean "
          "tokenizer files that do not belong to this checkpoint",
          e->name(), tokens, rows, past, tokens - rows == 1 ? "s" : "ve");
    }
    if (const auto warning = unsupported_generation_warning(e->config()); !warning.empty()) {
      spdlog::warn("model '{}': {}", e->name(), warning);
    }
    if (const auto warning = unusable_generation_defaults(e->config()); !warning.empty() && !defaults_unusable) {
      spdlog::warn("model '{}': {}: requests that leave it unset are refused until the file is corrected", e->name(),
                   warning);
    }
    if (e->config().max_input_tokens_is_fallback) {
      spdlog::info(
          "model '{}': config.json sets no input limit (n_positions); serving inputs of up to {} tokens "
          "(--max-input-tokens N to change: the encoder's time grows with the square of it)",
          e->name(), effective_max_input_tokens(e->config(), service_limits));
    } else if (const int64_t served = effective_max_input_tokens(e->config(), service_limits);
               served > e->config().max_input_tokens) {
      spdlog::info(
          "model '{}': serving inputs of up to {} tokens (--max-input-tokens), over the {} its config.json names "
          "(n_positions: relative positions read any length; past the length it was trained at, quality is the "
          "checkpoint's)",
          e->name(), served, e->config().max_input_tokens);
    }
  }
}

Server::~Server() {
  shutdown(std::chrono::milliseconds(0));
  models_.stop();
}

namespace {

// Plaintext, or TLS (optionally mutual) from the configured PEM files; throws with the flag to fix.
std::shared_ptr<grpc::ServerCredentials> credentials(const ServerConfig& config) {
  if (config.tls_cert.empty()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions ssl;
  auto key = read_pem(config.tls_key, "--tls-key", PemKind::kPrivateKey);
  auto cert = read_pem(config.tls_cert, "--tls-cert", PemKind::kCertificate);
  if (const auto warning = check_certificate_pair(cert, key, config.tls_cert, config.tls_key); !warning.empty()) {
    spdlog::warn("{}", warning);
  }
  ssl.pem_key_cert_pairs.push_back({std::move(key), std::move(cert)});
  if (!config.tls_client_ca.empty()) {
    ssl.pem_root_certs = read_pem(config.tls_client_ca, "--tls-client-ca", PemKind::kCertificate);
    ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(ssl);
}

// Adds config.listen to `builder`; `port` receives the bound port when the server starts.
void add_listening_port(grpc::ServerBuilder& builder, const ServerConfig& config, int* port) {
  builder.AddListeningPort(config.listen, credentials(config), port);
  // gRPC sets SO_REUSEPORT by default: a second server on a taken port then starts without a word and
  // takes half the connections (an old version left running, a typo in a second instance's flags).
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
}

// `reason`: the operating system's, where gRPC's log gave one ("Address already in use").
std::string listen_failure(const ServerConfig& config, const std::string& reason) {
  const std::string what = reason.empty() ? "; is the port in use or the address wrong? (--listen HOST:PORT)"
                                          : ": " + reason + " (--listen HOST:PORT)";
  return "cannot listen on " + config.listen + what +
         (config.tls_cert.empty() ? ""
                                  : " Or do --tls-key and --tls-cert not belong together (the key must be the "
                                    "certificate's private key, both PEM)?");
}

// The file a "unix:PATH" or "unix:///PATH" address names; nullopt for other addresses (TCP, and
// unix-abstract:, which the kernel refuses to bind twice by itself).
std::optional<std::string> unix_socket_path(const std::string& address) {
  if (address.rfind("unix:", 0) != 0) return std::nullopt;
  std::string path = address.substr(5);
  if (path.rfind("//", 0) == 0) path = path.substr(2);
  return path;
}

bool unix_socket_accepts(const std::string& path) {
  sockaddr_un addr{};
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) return false;
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool accepted = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return accepted;
}

// gRPC unlinks a Unix socket's file before binding its own: a second server on the path of a running
// one would cut that one off (its file gone, itself still running), even by the trial bind of a start
// that then fails. A socket that accepts a connection is in use; one that refuses is stale.
void refuse_unix_socket_in_use(const ServerConfig& config) {
  if (const auto path = unix_socket_path(config.listen); path && unix_socket_accepts(*path)) {
    throw std::runtime_error("cannot listen on " + config.listen + ": a running process accepts connections on " +
                             *path + " (another srformer-server?); stop it, or give --listen another path");
  }
}

// Builds and starts `builder`'s server (null where it cannot listen), with what gRPC logged meanwhile.
std::pair<std::unique_ptr<grpc::Server>, std::string> build_and_start(grpc::ServerBuilder& builder) {
  const GrpcLogCapture capture;
  auto server = builder.BuildAndStart();
  return {std::move(server), capture.text()};
}

}  // namespace

void check_can_listen(const ServerConfig& config) {
  refuse_unix_socket_in_use(config);
  grpc::ServerBuilder builder;
  int port = 0;
  add_listening_port(builder, config, &port);
  const auto [trial, grpc_said] = build_and_start(builder);
  if (!trial || port == 0) {
    if (!grpc_said.empty()) spdlog::debug("grpc: {}", grpc_said);
    throw std::runtime_error(listen_failure(config, grpc_os_error(grpc_said)));
  }
  trial->Shutdown(std::chrono::system_clock::now());
  trial->Wait();
}

void Server::warm_up() {
  for (const auto& report : server::warm_up(models_, service_limits_)) {
    spdlog::info("model '{}': warmed up in {:.0f} ms ({} input tokens, {} segments, {} new tokens; --warm-up)",
                 report.model, report.milliseconds, report.input_tokens, report.segments, report.output_tokens);
  }
}

void Server::start() {
  // grpc.health.v1 is ours (health_): gRPC's default one would be registered beside it, and it holds a Watch
  // open until Server::Shutdown's deadline.
  grpc::EnableDefaultHealthCheckService(false);
  const std::string health_service = grpc::health::v1::Health::service_full_name();
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  refuse_unix_socket_in_use(config_);  // again: loading took long enough for another to start
  grpc::ServerBuilder builder;
  add_listening_port(builder, config_, &port_);
  // --max-message-bytes is the service's to enforce (ServiceLimits): refused by gRPC, an oversized request
  // never reached it, so it went unlogged and uncounted. gRPC 1.51 holds the whole message before its
  // own check either way, so lifting it costs no memory; other services (health, reflection) then take
  // any size, as they parse what gRPC has already received.
  builder.SetMaxReceiveMessageSize(-1);
  if (config_.max_connection_age_ms > 0) {
    const auto clamp = [](int64_t ms) {
      return static_cast<int>(std::min<int64_t>(ms, std::numeric_limits<int>::max()));
    };
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS, clamp(config_.max_connection_age_ms));
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS, clamp(config_.max_connection_age_grace_ms));
  }
  // gRPC 1.51 sets no limit of its own: one connection could open thousands of calls, fill the batch and
  // the queue for every other client. A gRPC client keeps the calls past the limit on its side until one
  // of its open calls ends (they wait, subject to their deadlines; they do not fail).
  if (config_.max_streams_per_connection > 0) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, static_cast<int>(config_.max_streams_per_connection));
  }
  builder.RegisterService(service_.get());
  builder.RegisterService(&health_);
#if defined(SRFORMER_OWN_REFLECTION_V1)
  reflection_v1_ = std::make_unique<ReflectionV1>(
      std::vector<std::string>{v1::Summarizer::service_full_name(), health_service,
                               "grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"});
  builder.RegisterService(reflection_v1_.get());
#endif
  std::string grpc_said;
  std::tie(server_, grpc_said) = build_and_start(builder);
  if (!server_ || port_ == 0) throw std::runtime_error(listen_failure(config_, grpc_os_error(grpc_said)));
  if (!grpc_said.empty()) spdlog::warn("grpc: {}", grpc_said);
  // Overall ("") and per service, as grpc.health.v1 clients ask either (a Kubernetes gRPC probe's
  // `service` field, grpc-health-probe -service).
  health_.set_serving("", true);
  health_.set_serving(v1::Summarizer::service_full_name(), true);
  if (config_.engine_stall_timeout_ms > 0) watch_thread_ = std::thread([this] { watch_engines(); });
}

void Server::watch_engines() {
  const std::chrono::milliseconds limit(config_.engine_stall_timeout_ms);
  // A stall is seen between the limit and a quarter of it later (at most a second later).
  const auto tick =
      std::clamp<std::chrono::milliseconds>(limit / 4, std::chrono::milliseconds(10), std::chrono::seconds(1));
  const auto& engines = models_.engines();
  std::vector<std::optional<Clock::time_point>> stalled_since(engines.size());
  auto last = Clock::now();
  std::unique_lock lock(watch_mu_);
  while (!watch_cv_.wait_for(lock, tick, [&] { return watch_stop_; })) {
    const auto now = Clock::now();
    // The whole process was stopped (SIGSTOP, a debugger, a paused VM): no engine could move meanwhile, and
    // none is judged before it has had a tick to.
    const bool paused = now - last > tick + limit / 2;
    last = now;
    if (paused) continue;
    bool changed = false;
    for (size_t i = 0; i < engines.size(); ++i) {
      const auto still = engines[i]->without_progress(now);
      const auto ms = [](Clock::duration d) {
        return static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
      };
      if (still >= limit && !stalled_since[i]) {
        stalled_since[i] = now - still;
        changed = true;
        spdlog::error(
            "model '{}': has had requests for {} ms without moving (no decode step, no piece of an encode): its "
            "engine is stuck (a hung CUDA call, a lost GPU, a deadlock); health answers NOT_SERVING until it "
            "moves again (--engine-stall-timeout-ms), and a liveness probe on it restarts the server: take the "
            "threads' stacks first (gdb -p PID -batch -ex 'thread apply all bt')",
            engines[i]->name(), ms(still));
      } else if (still < limit && stalled_since[i]) {
        spdlog::warn("model '{}': moves again after {} ms without moving", engines[i]->name(),
                     ms(now - still - *stalled_since[i]));
        stalled_since[i].reset();
        changed = true;
      }
    }
    if (!changed) continue;
    const bool serving =
        std::none_of(stalled_since.begin(), stalled_since.end(), [](const auto& s) { return s.has_value(); });
    health_.set_serving(serving);
    if (serving) spdlog::warn("health: SERVING again (no engine is stalled)");
  }
}

void Server::stop_watching_engines() {
  {
    // Under the watch's lock: an engine moving again must not turn health SERVING during the drain.
    std::lock_guard lock(watch_mu_);
    watch_stop_ = true;
    health_.set_serving(false);
  }
  watch_cv_.notify_all();
  if (watch_thread_.joinable()) watch_thread_.join();
}

std::string Server::address() const {
  // A Unix socket's address is its path (gRPC reports port 1 for it).
  if (is_unix_socket_address(config_.listen)) return config_.listen;
  const auto colon = config_.listen.rfind(':');
  return config_.listen.substr(0, colon) + ":" + std::to_string(port_);
}

void Server::shutdown(std::chrono::milliseconds grace) {
  {
    std::lock_guard lock(mu_);
    if (shutting_down_) return;
    shutting_down_ = true;
  }
  service_->begin_shutdown();
  stop_watching_engines();
  const auto deadline = Clock::now() + grace;
  // Calls that arrived before the shutdown and are still being started (a long document being tokenized,
  // or waiting for its turn) are queued as the requests before them were, within the same grace: the
  // engines refuse only once they are (or the grace is over).
  service_->wait_started(deadline);
  models_.stop_accepting();
  if (!models_.wait_idle(deadline)) {
    spdlog::warn("shutdown: requests still running after the {} ms grace period; cancelling them", grace.count());
    models_.cancel_all();
    models_.wait_idle(Clock::now() + kCancelledWait);
  }
  if (server_) {
    // Health watches have seen NOT_SERVING since the drain began; they end now, as the server stops
    // listening, rather than holding the wait below to its end.
    health_.end_watches();
    // Calls still open (e.g. a stream whose client stopped reading) are cancelled after a short wait.
    server_->Shutdown(std::chrono::system_clock::now() + kOpenCallsWait);
    server_->Wait();
  }
  {
    std::lock_guard lock(mu_);
    done_ = true;
  }
  done_cv_.notify_all();
}

void Server::cancel_now() {
  models_.stop_accepting();
  service_->stop_waiting_for_starts();
  models_.cancel_all();
}

void Server::wait() {
  std::unique_lock lock(mu_);
  done_cv_.wait(lock, [&] { return done_; });
}

bool Server::wait_until(Clock::time_point deadline) {
  std::unique_lock lock(mu_);
  return done_cv_.wait_until(lock, deadline, [&] { return done_; });
}

std::chrono::milliseconds Server::shutdown_bound(std::chrono::milliseconds grace) {
  return grace + kCancelledWait + kOpenCallsWait + std::chrono::seconds(1);  // and a second for the rest
}

std::vector<std::string> Server::stop_engines(std::chrono::milliseconds bound) {
  const auto stuck = models_.stop(Clock::now() + bound);
  for (const auto& name : stuck) {
    const auto still =
        std::chrono::duration_cast<std::chrono::milliseconds>(models_.find(name)->without_progress(Clock::now()));
    // An engine that has no work left (zero without moving) has ended its decode thread: a request's
    // callback holds its delivery thread.
    spdlog::error(
        "model '{}': its engine did not stop within {} ms of the shutdown ({} ms without moving); {}", name,
        bound.count(), still.count(),
        still.count() > 0 ? "its decode thread is stuck" : "a request's callback is stuck on its delivery thread");
  }
  return stuck;
}

int Server::finish_shutdown(Clock::time_point drain_deadline, std::chrono::milliseconds engine_stop_bound) {
  const auto signalled_bound = std::chrono::duration_cast<std::chrono::milliseconds>(drain_deadline - Clock::now());
  const bool shut_down = wait_until(drain_deadline);
  const auto stuck = stop_engines(engine_stop_bound);  // names each stuck model (error)
  if (shut_down && stuck.empty()) return 0;
  if (stuck.empty()) {
    spdlog::error("shutdown: not complete {} ms after the signal; exiting with status {} without waiting for it",
                  signalled_bound.count(), kStuckShutdownExitStatus);
  } else {
    spdlog::error("shutdown: exiting with status {} without waiting for the stuck engine's thread",
                  kStuckShutdownExitStatus);
  }
  return kStuckShutdownExitStatus;
}

}  // namespace srformer::server
