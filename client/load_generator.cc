#include "client/load_generator.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "client/message_size_hint.h"
#include "client/percentiles.h"
#include "client/silence_notice.h"
#include "client/status_hint.h"
#include "common/status_code_name.h"
#include "srformer/v1/summarizer.grpc.pb.h"

namespace srformer::client {

namespace {

using Clock = std::chrono::steady_clock;

double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

struct Timings {
  std::vector<double> ttft_ms, itl_ms, latency_ms;
  int64_t ok = 0, tokens = 0;
  void add(double ttft, const std::vector<double>& gaps, double latency, int64_t n_tokens) {
    ++ok;
    tokens += n_tokens;
    if (ttft >= 0) ttft_ms.push_back(ttft);
    itl_ms.insert(itl_ms.end(), gaps.begin(), gaps.end());
    latency_ms.push_back(latency);
  }
};

struct Totals {
  std::mutex mu;
  Timings all;
  std::vector<Timings> by_document;  // per distinct document, in order of first appearance
  std::map<std::string, int64_t> errors;
  std::vector<bool> refused_for_good;  // per distinct document: refused with an error a retry does not change
  size_t documents_refused_for_good = 0;
  // Since the last success, the failures of each kind that neither back off nor are refused for good.
  std::map<grpc::StatusCode, int64_t> failures_since_ok;
  std::string stopped_because;  // why the run stopped early: "" while it goes on
};

// A refusal that the same request meets again however often it is sent: what the request says (its options,
// its model, its document, its size) or what the client is (its method, its credentials) does not change
// between the run's requests. Each document's requests differ only in their id.
bool refused_for_good(const grpc::Status& status) {
  switch (status.error_code()) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::NOT_FOUND:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::OUT_OF_RANGE:
    case grpc::StatusCode::UNIMPLEMENTED:
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::PERMISSION_DENIED:
      return true;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return is_message_size_refusal(status);
    default:
      return false;
  }
}

// Whether the worker waits before its next request after `status`: "not now" (no server, a full queue).
bool backs_off(const grpc::Status& status) {
  const auto code = status.error_code();
  // A request over a size limit is refused again however long one waits: no backoff, as for any error.
  return code == grpc::StatusCode::UNAVAILABLE ||
         (code == grpc::StatusCode::RESOURCE_EXHAUSTED && !is_message_size_refusal(status));
}

// The distinct files of a mix (one file named several times weighs it; two files of the same text are
// two documents): where each first appears, and each input's index among them.
struct DistinctDocuments {
  std::vector<size_t> first_at;
  std::vector<size_t> of;
};

DistinctDocuments distinct_documents(const std::vector<std::string>& files) {
  DistinctDocuments d;
  for (const auto& file : files) {
    size_t i = 0;
    while (i < d.first_at.size() && files[d.first_at[i]] != file) ++i;
    if (i == d.first_at.size()) d.first_at.push_back(d.of.size());
    d.of.push_back(i);
  }
  return d;
}

// SIGINT (Ctrl-C) or SIGTERM (timeout(1), a CI job cancelled, a container stopped) ends a run early with the
// report of what finished: the calls in flight are cancelled and not counted. SIGTERM ended the client with no
// report, so a long run under `timeout` lost all it had measured. A second signal of the kind ends the client
// at once (SA_RESETHAND). One ignored on entry stays so.
std::atomic<bool> g_interrupted{false};
std::atomic<int> g_signal{0};  // the signal that interrupted the run

extern "C" void on_interrupt(int signal) {
  g_signal.store(signal);
  g_interrupted.store(true);
}

// The calls in flight, to cancel when interrupted.
class InFlight {
 public:
  void add(grpc::ClientContext* ctx) {
    std::lock_guard lock(mu_);
    calls_.push_back(ctx);
    if (cancelled_) ctx->TryCancel();
  }
  void remove(grpc::ClientContext* ctx) {
    std::lock_guard lock(mu_);
    calls_.erase(std::find(calls_.begin(), calls_.end(), ctx));
  }
  size_t size() {
    std::lock_guard lock(mu_);
    return calls_.size();
  }
  void cancel_all() {
    std::lock_guard lock(mu_);
    cancelled_ = true;
    for (auto* ctx : calls_) ctx->TryCancel();
  }

 private:
  std::mutex mu_;
  std::vector<grpc::ClientContext*> calls_;
  bool cancelled_ = false;
};

}  // namespace

nlohmann::json run_load(const std::shared_ptr<grpc::Channel>& channel, const ClientOptions& o,
                        const std::vector<std::string>& documents) {
  auto stub = v1::Summarizer::NewStub(channel);
  Totals totals;
  InFlight in_flight;
  if (documents.size() != o.inputs.size()) throw std::invalid_argument("run_load: a document per input FILE");
  const DistinctDocuments distinct = distinct_documents(o.inputs);
  const auto& first_at = distinct.first_at;
  totals.by_document.resize(first_at.size());
  totals.refused_for_good.resize(first_at.size());
  std::atomic<int64_t> issued{0};
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.duration_s));
  // Set when a worker thread could not be started: the others stop, and the run fails.
  std::atomic<bool> abandoned{false};
  // Set when no request has succeeded and every document has been refused for good: the rest of the run
  // could only be refused too. It went on at full speed (thousands of refusals a second for an unknown
  // --model, each one a line in the server's log) to the end of --requests or --duration. Set too when
  // `stop_after` requests have failed alike (DEADLINE_EXCEEDED, INTERNAL, ...) with none succeeding since:
  // a run whose every request met its --deadline-ms went on to the end of --requests, however long that
  // took, to report only the failures. The requests in flight finish and count; no more are sent.
  std::atomic<bool> hopeless{false};
  const int64_t stop_after = std::max<int64_t>(10, int64_t{2} * o.concurrency);  // two rounds of every stream
  const auto ending = [&] { return g_interrupted.load() || abandoned.load(); };
  // Set --grace seconds after the end of --duration, when the calls still in flight are cancelled: the run
  // waited for them however long they took (a server that stopped answering held it for ever). They count
  // in requests_cut, neither ok nor failed.
  std::atomic<bool> cutting{false};
  std::atomic<int64_t> cut{0};
  const auto cut_at = end + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.grace_s));
  // Without --deadline-ms a run waits for its requests however long they take: one against a server that
  // stopped answering said nothing until its --grace (a --requests run: for ever). It says so now, once.
  std::optional<SilenceNotice> silence;
  silence.emplace(o.deadline_ms == 0, [&]() -> std::string {
    const size_t waiting = in_flight.size();
    if (waiting == 0 || channel->GetState(false) != GRPC_CHANNEL_READY) return "";
    return "no request has finished and no token has come from " + o.target + " in " +
           std::to_string(kSilenceNoticeAfter.count()) + " s (" + std::to_string(waiting) +
           " in flight); still waiting, as the requests have no deadline (--deadline-ms N bounds each; Ctrl-C "
           "ends the run with its report)";
  });
  const auto worker = [&] {
    // After a refusal that says "not now" (no server, a full queue), each worker waits, doubling from 50 ms
    // to 1 s: without it a dead target took ~190,000 attempts a second.
    std::chrono::milliseconds backoff{0};
    while (!ending() && !hopeless.load()) {
      const int64_t n = issued.fetch_add(1);
      if (o.requests > 0 && n >= o.requests) break;
      if (o.duration_s > 0 && Clock::now() >= end) break;
      v1::SummarizeRequest req;
      req.set_model(o.model);
      const size_t doc = static_cast<size_t>(n) % documents.size();
      req.set_document(documents[doc]);
      *req.mutable_options() = o.generation;
      req.set_truncation(o.truncation);
      // One id per request, so that the server's log lines of each can be told apart: ID-0, ID-1, ...
      if (!o.request_id.empty()) req.set_request_id(o.request_id + "-" + std::to_string(n));
      grpc::ClientContext ctx;
      if (o.deadline_ms > 0)
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(o.deadline_ms));
      const auto t0 = Clock::now();
      in_flight.add(&ctx);
      auto reader = stub->SummarizeStream(&ctx, req);
      v1::SummarizeStreamResponse msg;
      std::vector<double> gaps;
      double ttft = -1;
      int64_t tokens = 0;
      auto last = t0;
      int64_t returned = -1;  // the final message's tokens: the summary's and its alternatives'
      while (reader->Read(&msg)) {
        silence->heard();
        if (msg.has_final()) {
          returned = msg.final().token_ids_size();
          for (const auto& alternative : msg.final().alternatives()) returned += alternative.token_ids_size();
        }
        if (!msg.has_token()) continue;
        const auto now = Clock::now();
        if (ttft < 0) {
          ttft = ms(now - t0);
        } else {
          gaps.push_back(ms(now - last));
        }
        last = now;
        ++tokens;
      }
      // Which FILE a refusal of its document is about: a mix's report said "document is empty" (each such
      // FILE's refusals under one key) without naming any.
      const auto status = naming_the_document(reader->Finish(), o.inputs[doc]);
      silence->heard();
      const double latency = ms(Clock::now() - t0);  // before the stats lock: waiting for it is not latency
      in_flight.remove(&ctx);
      if (ending() && !status.ok()) break;  // cancelled by the interrupt (or a failed start): not counted
      if (cutting.load() && status.error_code() == grpc::StatusCode::CANCELLED) {
        ++cut;
        break;
      }
      {
        std::lock_guard lock(totals.mu);
        if (status.ok()) {
          totals.failures_since_ok.clear();
          // Only the summary streams; samples and hypotheses 2 ... N (num_return_sequences) come in the final
          // message, and count as output too.
          const int64_t output = std::max(tokens, returned);
          totals.all.add(ttft, gaps, latency, output);
          totals.by_document[distinct.of[doc]].add(ttft, gaps, latency, output);
        } else {
          ++totals.errors[std::string(status_code_name(status.error_code())) + " " + status.error_message() +
                          status_hint(status, o, req.ByteSizeLong())];
          const size_t d = distinct.of[doc];
          if (refused_for_good(status) && !totals.refused_for_good[d]) {
            totals.refused_for_good[d] = true;
            ++totals.documents_refused_for_good;
          }
          if (totals.stopped_because.empty() && totals.all.ok == 0 &&
              totals.documents_refused_for_good == first_at.size()) {
            totals.stopped_because = "every FILE was refused with an error that sending it again does not change";
            hopeless.store(true);
          }
          // A FILE refused for good among others that succeed is sent on; a server going away is waited for.
          if (!refused_for_good(status) && !backs_off(status) &&
              ++totals.failures_since_ok[status.error_code()] >= stop_after && totals.stopped_because.empty()) {
            totals.stopped_because = std::to_string(stop_after) + " requests failed with " +
                                     status_code_name(status.error_code()) + " and none succeeded in between";
            hopeless.store(true);
            // On stderr too: with --json the report alone did not say what to change.
            std::cerr << "srformer-client: stopped the load: " << totals.stopped_because
                      << (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED && o.deadline_ms > 0
                              ? " (each took its --deadline-ms " + std::to_string(o.deadline_ms) +
                                    ": raise it, or lower --concurrency)"
                              : " (see the report's errors)")
                      << "\n";
          }
        }
      }
      if (!backs_off(status)) {
        backoff = std::chrono::milliseconds(0);
        continue;
      }
      // No request is left to send: a wait would only stretch wall_s, by up to a second, and lower the
      // report's rates.
      if (o.requests > 0 && issued.load() >= o.requests) break;
      backoff = std::clamp(backoff * 2, std::chrono::milliseconds(50), std::chrono::milliseconds(1000));
      auto wake = Clock::now() + backoff;
      if (o.duration_s > 0) wake = std::min(wake, end);
      while (Clock::now() < wake && !ending()) {
        std::this_thread::sleep_for(std::min<Clock::duration>(wake - Clock::now(), std::chrono::milliseconds(50)));
      }
    }
  };
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  action.sa_flags = SA_RESETHAND | SA_RESTART;
  sigemptyset(&action.sa_mask);
  struct sigaction before {
  }, before_term{};
  sigaction(SIGINT, &action, &before);
  sigaction(SIGTERM, &action, &before_term);
  if (before_term.sa_handler == SIG_IGN) sigaction(SIGTERM, &before_term, nullptr);
  // A SIGINT ignored on entry stays ignored (a shell script's background job, nohup-like wrappers): the run
  // took the script's Ctrl-C as its own, and ended early.
  if (before.sa_handler == SIG_IGN) sigaction(SIGINT, &before, nullptr);
  std::atomic<bool> workers_done{false};
  std::thread watch([&] {  // TryCancel is no call for a signal handler: this thread makes it
    while (!workers_done.load()) {
      if (g_interrupted.load()) {
        in_flight.cancel_all();
        break;
      }
      if (o.duration_s > 0 && !cutting.load() && Clock::now() >= cut_at) {
        cutting.store(true);
        in_flight.cancel_all();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(o.concurrency));
  std::string start_failure;
  try {
    for (int i = 0; i < o.concurrency; ++i) threads.emplace_back(worker);
  } catch (const std::system_error& e) {
    // Out of threads or memory for their stacks (a pids or memory limit): the started workers were left
    // joinable, and the client ended in std::terminate (abort, exit 134). A run with fewer streams than
    // asked would report figures for a concurrency it did not have: the run fails instead.
    start_failure = "cannot start --concurrency " + std::to_string(o.concurrency) +
                    " streams: the system refused thread " + std::to_string(threads.size() + 1) + " (" + e.what() +
                    "); lower --concurrency or raise the limit";
    abandoned.store(true);
    in_flight.cancel_all();
  }
  for (auto& t : threads) t.join();
  // The run ends with its last request: the watch thread below polls every 50 ms from the start, and wall_s
  // (the rates' denominator) went on to its next poll (a one-request run of 1 ms took 50).
  const double wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  silence.reset();
  workers_done.store(true);
  watch.join();
  sigaction(SIGINT, &before, nullptr);
  sigaction(SIGTERM, &before_term, nullptr);
  if (!start_failure.empty()) throw std::runtime_error(start_failure);
  int64_t failed = 0;
  for (const auto& [k, v] : totals.errors) failed += v;
  const Timings& all = totals.all;
  nlohmann::json report = {
      {"concurrency", o.concurrency},
      {"interrupted", g_interrupted.load()},
      {"stopped_early", hopeless.load()},
      {"stopped_because",
       totals.stopped_because.empty() ? nlohmann::json(nullptr) : nlohmann::json(totals.stopped_because)},
      {"requests_ok", all.ok},
      {"requests_failed", failed},
      {"requests_cut", cut.load()},
      {"errors", totals.errors},
      {"wall_s", wall_s},
      {"output_tokens", all.tokens},
      {"tokens_per_s", wall_s > 0 ? static_cast<double>(all.tokens) / wall_s : 0.0},
      {"requests_per_s", wall_s > 0 ? static_cast<double>(all.ok) / wall_s : 0.0},
      {"ttft_ms", percentiles(all.ttft_ms)},
      {"inter_token_ms", percentiles(all.itl_ms)},
      {"latency_ms", percentiles(all.latency_ms)},
  };
  if (first_at.size() > 1) {  // a mix: how each document fared (a long one's wait is not a short one's)
    auto& by = report["by_document"] = nlohmann::json::array();
    for (size_t d = 0; d < first_at.size(); ++d) {
      const Timings& t = totals.by_document[d];
      by.push_back({{"document", first_at[d]},
                    {"file", o.inputs[first_at[d]]},
                    {"bytes", documents[first_at[d]].size()},
                    {"requests_ok", t.ok},
                    {"output_tokens", t.tokens},
                    {"ttft_ms", percentiles(t.ttft_ms)},
                    {"inter_token_ms", percentiles(t.itl_ms)},
                    {"latency_ms", percentiles(t.latency_ms)}});
    }
  }
  if (o.json) {
    // A FILE's name (or a --ca path in an error's hint) need not be UTF-8, which JSON text must be: its bad
    // bytes are written as U+FFFD. dump()'s default threw, and the run's report was lost.
    std::cout << report.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    const auto pct = [](const nlohmann::json& p) {
      if (p["p50"].is_null()) return std::string("n/a");
      char buf[128];
      std::snprintf(buf, sizeof buf, "p50 %.1f  p90 %.1f  p99 %.1f ms", p["p50"].get<double>(), p["p90"].get<double>(),
                    p["p99"].get<double>());
      return std::string(buf);
    };
    std::printf("requests: %lld ok, %lld failed in %.2f s (concurrency %d)%s\n", static_cast<long long>(all.ok),
                static_cast<long long>(failed), wall_s, o.concurrency,
                g_interrupted.load() ? "; interrupted: calls in flight cancelled and not counted"
                : hopeless.load()    ? ("; stopped early: " + totals.stopped_because).c_str()
                                     : "");
    if (cut.load() > 0) {
      std::printf("cut: %lld still in flight %g s after the end of --duration, cancelled (--grace)\n",
                  static_cast<long long>(cut.load()), o.grace_s);
    }
    std::printf("throughput: %.1f tokens/s, %.2f requests/s\n", report["tokens_per_s"].get<double>(),
                report["requests_per_s"].get<double>());
    std::printf("time to first token: %s\n", pct(report["ttft_ms"]).c_str());
    std::printf("inter-token latency: %s\n", pct(report["inter_token_ms"]).c_str());
    std::printf("request latency:     %s\n", pct(report["latency_ms"]).c_str());
    if (report.contains("by_document")) {
      for (const auto& d : report["by_document"]) {
        std::printf("document %zu, %s (%zu bytes, %lld ok): first token %s; latency %s\n", d["document"].get<size_t>(),
                    d["file"].get<std::string>().c_str(), d["bytes"].get<size_t>(),
                    static_cast<long long>(d["requests_ok"].get<int64_t>()), pct(d["ttft_ms"]).c_str(),
                    pct(d["latency_ms"]).c_str());
      }
    }
    for (const auto& [k, v] : totals.errors) std::printf("error x%lld: %s\n", static_cast<long long>(v), k.c_str());
  }
  return report;
}

int load_interrupted_by() { return g_signal.load(); }

}  // namespace srformer::client
