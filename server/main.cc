// srformer-server: loads the models, serves srformer.v1.Summarizer until SIGTERM/SIGINT/SIGHUP, then drains.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <thread>

#include "common/standard_streams.h"
#include "common/stdout_check.h"
#include "model/dtype_name.h"
#include "model/error_message.h"
#include "model/openmp_env.h"
#include "server/config.h"
#include "server/engine/cuda_memory.h"
#include "server/grpc_log.h"
#include "server/logging.h"
#include "server/metrics/gpu_monitor.h"
#include "server/metrics/metrics.h"
#include "server/server.h"
#include "server/startup_signal_watch.h"

namespace {

using srformer::server::Server;
using srformer::server::ServerConfig;

// How long main() waits, after the drain, for the engines' decode threads to end before exiting without them.
constexpr std::chrono::milliseconds kEngineStopBound{2000};

// SIGTERM, SIGINT and SIGHUP, less those of the last two ignored when the server started: `nohup` ignores
// SIGHUP so that the server outlives its terminal, and a shell script starts its background jobs with
// SIGINT ignored, the script's Ctrl-C not being theirs (the re-exec's image inherits what is ignored).
sigset_t stop_signals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  // A hang-up (the terminal that started the server closed) drains as a stop does: by default it killed
  // the process, cutting in-flight requests without a word in the log.
  for (const int sig : {SIGINT, SIGHUP}) {
    struct sigaction action {};
    if (sigaction(sig, nullptr, &action) == 0 && action.sa_handler == SIG_IGN) continue;
    sigaddset(&signals, sig);
  }
  return signals;
}

// `startup_watch` takes the stop signals until the server is about to listen.
int run(const ServerConfig& config, std::optional<srformer::server::StartupSignalWatch>& startup_watch) {
  // Signals are taken synchronously (by the startup watch, then sigwait below); they were blocked before
  // the libraries initialized (before_the_libraries), so every thread inherits the mask.
  const sigset_t signals = stop_signals();

  std::unique_ptr<srformer::server::Metrics> metrics;
  metrics = std::make_unique<srformer::server::Metrics>(config.metrics_listen);
  if (!config.metrics_listen.empty()) {
    const auto ports = metrics->listening_ports();
    spdlog::info("metrics on {}/metrics", config.metrics_listen.substr(0, config.metrics_listen.rfind(':')) + ":" +
                                              (ports.empty() ? std::string("?") : std::to_string(ports.front())));
  }
  if (const auto device = srformer::server::parse_device(config.device); device.is_cuda()) {
    // Only the GPU the models run on: on a shared host the others are another process's.
    metrics->start_gpu_monitor(nullptr, {static_cast<unsigned>(device.index())});
    metrics->set_torch_cuda_memory_source([index = static_cast<int>(device.index())] {
      auto all = srformer::server::torch_cuda_memory();
      all.erase(std::remove_if(all.begin(), all.end(), [&](const auto& m) { return m.device != index; }), all.end());
      return all;
    });
  }

  srformer::server::check_can_listen(config);
  std::vector<srformer::server::LoadedModel> models;
  for (const auto& spec : config.models) {
    const auto t0 = std::chrono::steady_clock::now();
    models.push_back(srformer::server::load_model_dir(spec, config));
    const auto& m = *models.back().model;
    const auto& c = m.config();
    spdlog::info("model {}: {} {} from {} on {} in {} ({} parameters, {:.0f} MB of packed projections, {:.0f} ms)",
                 spec.name, c.type_name(), srformer::to_string(c.srformer.cross_attention), spec.dir, m.device().str(),
                 srformer::compute_name(m.device(), m.dtype()), m.parameter_count(),
                 static_cast<double>(m.packed_weight_bytes()) / 1e6,
                 std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  srformer::server::Server server(config, std::move(models), metrics.get());
  if (config.warm_up) server.warm_up();
  startup_watch.reset();  // a signal from here on stays pending for the sigwait below: the server drains
  server.start();
  spdlog::info("listening on {} (OpenMP wait policy: {})", server.address(), srformer::openmp_wait_policy());

  int sig = 0;
  sigwait(&signals, &sig);
  spdlog::info("received {}; draining (grace {} ms)", srformer::server::stop_signal_name(sig),
               config.shutdown_grace_ms);
  const auto grace = std::chrono::milliseconds(config.shutdown_grace_ms);
  std::thread drain([&] { server.shutdown(grace); });
  // A second signal skips the rest of the grace period.
  std::atomic<bool> drained{false};
  std::thread second([&] {
    const timespec tick{0, 200 * 1000 * 1000};
    while (!drained.load()) {
      if (sigtimedwait(&signals, nullptr, &tick) > 0) {
        spdlog::warn("second signal: cancelling in-flight requests now");
        server.cancel_now();
      }
    }
  });
  // A decode thread hung in a step (a CUDA call that never returns) never ends: its requests' calls stay
  // open, holding gRPC's shutdown, and the server's destructor waits for it. Such a server waited for the
  // supervisor's SIGKILL; it exits now, once an engine that moves would have stopped, without the stuck one.
  if (const int status =
          server.finish_shutdown(std::chrono::steady_clock::now() + Server::shutdown_bound(grace), kEngineStopBound);
      status != 0) {
    spdlog::default_logger()->flush();
    std::_Exit(status);  // no destructors: the server's would wait for the stuck thread
  }
  drain.join();
  drained.store(true);
  second.join();
  return 0;  // main() says "stopped" once the server, its engines and the metrics are gone
}

// What must come before any shared library initializes: the executable's .preinit_array runs once the
// dynamic loader has mapped and relocated the libraries, before their static initializers (LibTorch's
// operator registry, gRPC's, those of the 300-odd libraries they bring).
// - The stop signals are blocked: the initializers take a second and more on a loaded host, and blocked only
//   in main(), a SIGTERM then killed the server (exit 143). The re-exec's image inherits the mask and any
//   signal pending, which the startup watch then takes.
// - A closed fd 0, 1 or 2 is held (common/standard_streams.h): libgrpc's initializer opens eventfds and an
//   epoll descriptor, which took those numbers, and the log (`2>&-`) went into gRPC's wakeup eventfd. The
//   re-exec's image inherits the holding descriptors.
void before_the_libraries(int, char**, char**) {
  const sigset_t signals = stop_signals();
  sigprocmask(SIG_BLOCK, &signals, nullptr);
  srformer::hold_closed_standard_streams();
}

using PreinitFunction = void (*)(int, char**, char**);
__attribute__((section(".preinit_array"), used)) const PreinitFunction before_the_libraries_first =
    before_the_libraries;

}  // namespace

int main(int argc, char** argv) {
  srformer::reexec_with_openmp_policy(argv);
  // --help's text that never reached stdout (a full disk) fails, saying why: it exited 0 silently.
  srformer::StdoutCheck stdout_check("srformer-server");
  // From the start: reading --config can block (a FIFO nobody writes, a hung network mount), and with the
  // stop signals blocked a SIGTERM then stayed pending for good, the server unkillable but by SIGKILL.
  // --log-json on the command line makes the line of a signal that comes before the log is set up JSON too (the
  // config file's is not read yet).
  std::optional<srformer::server::StartupSignalWatch> startup_watch(
      std::in_place, stop_signals(), srformer::server::log_json_asked(argc, argv, ServerConfig{}));
  ServerConfig config;
  try {
    if (!srformer::server::parse_server_args(argc, argv, config)) return stdout_check.exit_status(0);
    srformer::server::validate(config);
  } catch (const std::exception& e) {
    if (srformer::server::log_json_asked(argc, argv, config)) {
      // A JSON line as the rest of the log, whatever its level: a shipper parsing JSON lines does not read
      // plain text.
      srformer::server::init_logging("critical", true);
      spdlog::critical("srformer-server: {}", e.what());
    } else {
      std::cerr << "srformer-server: " << e.what() << "\n";
    }
    return 2;
  }
  // The log is stderr: where that is a pipe whose reader has gone (`... 2>&1 | head`, a log shipper that
  // restarted), the next line killed the server by SIGPIPE (exit 141), requests in flight and all. Its lines
  // are lost now (counted in srformer_log_lines_dropped_total), and it serves on. gRPC sends with
  // MSG_NOSIGNAL but leaves the signal's action alone; --help above still ends as a filter's output does.
  std::signal(SIGPIPE, SIG_IGN);
  try {
    srformer::server::init_logging(config.log_level, config.log_json);
    srformer::server::route_grpc_logs_to_spdlog();
    srformer::server::route_protobuf_logs_to_spdlog();
  } catch (const std::exception& e) {
    std::cerr << "srformer-server: " << e.what() << "\n";
    return 2;
  }
  try {
    const int status = run(config, startup_watch);
    // The last line: the engines' closing figures, logged as the server is destroyed, came after it, so a
    // person or a supervisor taking it for the end of the log missed them.
    spdlog::info("stopped");
    return status;
  } catch (const std::exception& e) {
    // The reason a start failed reaches the operator even with --log-level off: with --log-json as a JSON line.
    if (config.log_json) spdlog::default_logger()->set_level(spdlog::level::critical);
    if (spdlog::should_log(spdlog::level::critical)) {
      spdlog::critical("srformer-server: {}", srformer::error_message(e));
    } else {
      std::cerr << "srformer-server: " << srformer::error_message(e) << "\n";
    }
    return 1;
  }
}
