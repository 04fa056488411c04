#include "server/service/warm_up.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <memory>
#include <stdexcept>
#include <string_view>

namespace srformer::server {

namespace {

constexpr int64_t kNewTokens = 4;
constexpr int kMaxSentences = 64;
constexpr std::string_view kSentence =
    "The server summarizes this short text once before it listens, so that its first request runs at full speed. ";

// A document of more tokens than one segment holds (two segments at least for an SRformer), within
// the model's limit (the request truncates).
v1::SummarizeRequest warm_up_request(const Engine& engine, const ServiceLimits& limits) {
  const int64_t segment = engine.config().srformer.segment_size;
  std::string document(kSentence);
  for (int n = 1; n < kMaxSentences && static_cast<int64_t>(engine.tokenizer().encode(document).size()) <= segment;
       ++n) {
    document += kSentence;
  }
  v1::SummarizeRequest request;
  request.set_request_id("warm-up");
  request.set_document(document);
  request.set_truncation(v1::TRUNCATION_POLICY_TRUNCATE);
  auto& options = *request.mutable_options();
  const int64_t new_tokens = std::min(kNewTokens, max_new_tokens_limit(engine.config(), limits));
  options.set_max_new_tokens(static_cast<int32_t>(new_tokens));
  options.set_min_new_tokens(static_cast<int32_t>(new_tokens));
  options.set_expected_length(static_cast<int32_t>(new_tokens));  // the steps cross into the last segment
  options.set_num_beams(1);
  options.set_do_sample(false);
  // The generation defaults a greedy request still reads: a checkpoint's that no request can use as it is
  // (repetition_penalty or encoder_repetition_penalty 0) gets a warning, and requests that set it are
  // served; the warm-up's, which left it unset, was refused, and the server did not start.
  options.set_repetition_penalty(1.0f);
  options.set_encoder_repetition_penalty(1.0f);
  return request;
}

// Detaches every engine's metrics for the warm-up (no client's work) and attaches them again after,
// whatever happens. The engines' decode threads read the pointer at each use.
class MetricsDetached {
 public:
  explicit MetricsDetached(const ModelRegistry& models) {
    for (const auto& engine : models.engines()) {
      saved_.emplace_back(engine.get(), engine->metrics());
      engine->set_metrics(nullptr);
    }
  }
  ~MetricsDetached() {
    for (const auto& [engine, metrics] : saved_) engine->set_metrics(metrics);
  }
  MetricsDetached(const MetricsDetached&) = delete;
  MetricsDetached& operator=(const MetricsDetached&) = delete;

 private:
  std::vector<std::pair<Engine*, ModelMetrics*>> saved_;
};

}  // namespace

std::vector<WarmUpReport> warm_up(const ModelRegistry& models, const ServiceLimits& limits) {
  const MetricsDetached detached(models);
  // The result and when it came: the engines run at once, and are waited for one after the other.
  struct Finished {
    RequestResult result;
    Clock::time_point at;
  };
  struct Running {
    Engine* engine;
    Clock::time_point start;
    std::future<Finished> finished;
  };
  std::vector<Running> running;
  for (const auto& engine : models.engines()) {
    // Shared with the callback: a request already queued when a later model's throws still finishes.
    auto done = std::make_shared<std::promise<Finished>>();
    try {
      const auto request = build_request(warm_up_request(*engine, limits), *engine, limits, std::nullopt);
      request->on_finish = [done](RequestResult result) { done->set_value({std::move(result), Clock::now()}); };
      running.push_back({engine.get(), Clock::now(), done->get_future()});
      engine->submit(request);
    } catch (const std::exception& e) {
      throw std::runtime_error("model '" + engine->name() + "': its warm-up request was refused (" + e.what() +
                               "); --warm-up false starts without it");
    }
  }
  std::vector<WarmUpReport> reports;
  for (auto& r : running) {
    const auto [result, at] = r.finished.get();
    if (result.outcome != RequestOutcome::kOk) {
      throw std::runtime_error("model '" + r.engine->name() + "' failed its warm-up request: " +
                               (result.error.empty() ? std::string("it did not finish") : result.error));
    }
    WarmUpReport report;
    report.model = r.engine->name();
    report.milliseconds = std::chrono::duration<double, std::milli>(at - r.start).count();
    report.input_tokens = result.usage.input_tokens;
    report.output_tokens = result.usage.output_tokens;
    report.segments = result.usage.segments;
    reports.push_back(report);
  }
  // The result is handed over before the engine's iteration ends (its step and state are counted
  // after): the metrics go back only once each engine has finished it.
  for (const auto& r : running) r.engine->wait_idle(Clock::now() + std::chrono::seconds(10));
  return reports;
}

}  // namespace srformer::server
