// Metrics/ModelMetrics: each call moves exactly the series it documents, with bounded labels.
#include "server/metrics/metrics.h"

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <future>
#include <thread>
#include <vector>

#include "common/status_code_name.h"
#include "server/logging.h"
#include "tests/metrics/scrape.h"

namespace srformer::server {
namespace {

using testing::LabelSet;
using testing::sample;

TEST(Metrics, ModelHandleIsStablePerName) {
  Metrics metrics("");
  ModelMetrics& a = metrics.model("bart");
  EXPECT_EQ(&a, &metrics.model("bart"));
  EXPECT_NE(&a, &metrics.model("t5"));
  EXPECT_EQ(a.name(), "bart");
}

TEST(Metrics, RequestLifecycleMovesCountersGaugesAndHistograms) {
  Metrics metrics("");
  ModelMetrics& m = metrics.model("bart");
  m.on_request_start();
  m.on_request_start();
  EXPECT_EQ(sample(metrics.scrape_text(), "srformer_requests_in_flight", {{"model", "bart"}}), 2.0);

  m.on_request_end("Summarize", status_code_name(0), 0.3);
  m.on_request_end("SummarizeStream", status_code_name(8), 2.0);
  const std::string text = metrics.scrape_text();
  EXPECT_EQ(sample(text, "srformer_requests_in_flight", {{"model", "bart"}}), 0.0);
  EXPECT_EQ(sample(text, "srformer_requests_total", {{"model", "bart"}, {"method", "Summarize"}, {"code", "OK"}}), 1.0);
  EXPECT_EQ(sample(text, "srformer_requests_total",
                   {{"model", "bart"}, {"method", "SummarizeStream"}, {"code", "RESOURCE_EXHAUSTED"}}),
            1.0);
  EXPECT_EQ(sample(text, "srformer_request_duration_seconds_count", {{"method", "SummarizeStream"}}), 1.0);
  EXPECT_DOUBLE_EQ(*sample(text, "srformer_request_duration_seconds_sum", {{"method", "SummarizeStream"}}), 2.0);
  // 0.3 s falls in the 0.5 bucket but not in the 0.25 one.
  EXPECT_EQ(sample(text, "srformer_request_duration_seconds_bucket", {{"method", "Summarize"}, {"le", "0.25"}}), 0.0);
  EXPECT_EQ(sample(text, "srformer_request_duration_seconds_bucket", {{"method", "Summarize"}, {"le", "0.5"}}), 1.0);
}

TEST(Metrics, RejectionAndLeaveReasonsExistAtZeroAndCount) {
  Metrics metrics("");
  ModelMetrics& m = metrics.model("t5");
  std::string text = metrics.scrape_text();
  for (const char* r : {"queue_full", "shutting_down", "invalid", "unread_streams", "out_of_memory"}) {
    EXPECT_EQ(sample(text, "srformer_requests_rejected_total", {{"model", "t5"}, {"reason", r}}), 0.0) << r;
  }
  for (const char* r : {"eos", "length", "cancelled", "error"}) {
    EXPECT_EQ(sample(text, "srformer_rows_left_total", {{"model", "t5"}, {"reason", r}}), 0.0) << r;
  }
  m.on_rejected(RejectReason::kQueueFull);
  m.on_rejected(RejectReason::kQueueFull);
  m.on_rejected(RejectReason::kShuttingDown);
  m.on_rows_left(LeaveReason::kEos, 3);
  m.on_rows_left(LeaveReason::kCancelled);
  text = metrics.scrape_text();
  EXPECT_EQ(sample(text, "srformer_requests_rejected_total", {{"reason", "queue_full"}}), 2.0);
  EXPECT_EQ(sample(text, "srformer_requests_rejected_total", {{"reason", "shutting_down"}}), 1.0);
  EXPECT_EQ(sample(text, "srformer_requests_rejected_total", {{"reason", "invalid"}}), 0.0);
  EXPECT_EQ(sample(text, "srformer_rows_left_total", {{"reason", "eos"}}), 3.0);
  EXPECT_EQ(sample(text, "srformer_rows_left_total", {{"reason", "cancelled"}}), 1.0);
}

TEST(Metrics, UnroutedCallsExistAtZeroWithoutAModelAndCount) {
  Metrics metrics("");
  std::string text = metrics.scrape_text();
  for (const char* method : {"Summarize", "SummarizeStream", "SummarizeBatch"}) {
    for (const char* r : {"unknown_model", "malformed"}) {
      EXPECT_EQ(sample(text, "srformer_requests_unrouted_total", {{"method", method}, {"reason", r}}), 0.0)
          << method << " " << r;
    }
  }
  metrics.on_unrouted("Summarize", UnroutedReason::kUnknownModel);
  metrics.on_unrouted("Summarize", UnroutedReason::kUnknownModel);
  metrics.on_unrouted("SummarizeBatch", UnroutedReason::kMalformed);
  text = metrics.scrape_text();
  EXPECT_EQ(sample(text, "srformer_requests_unrouted_total", {{"method", "Summarize"}, {"reason", "unknown_model"}}),
            2.0);
  EXPECT_EQ(sample(text, "srformer_requests_unrouted_total", {{"method", "SummarizeBatch"}, {"reason", "malformed"}}),
            1.0);
  EXPECT_EQ(sample(text, "srformer_requests_unrouted_total", {{"method", "Summarize"}, {"reason", "malformed"}}), 0.0);
  EXPECT_EQ(text.find("model=\""), std::string::npos) << "no model series were asked for";
}

TEST(Metrics, EngineStepsAndTokens) {
  Metrics metrics("");
  ModelMetrics& m = metrics.model("bart");
  m.on_rows_joined(4);
  m.on_step(4, 0.02, 4);
  m.on_step(3, 0.01, 3);
  m.observe_request_tokens(700, 56);
  m.set_state_bytes(123456, 200000);
  m.set_queue_depth(7);
  m.set_weight_bytes(242124848, 241958912);
  const std::string text = metrics.scrape_text();
  EXPECT_EQ(sample(text, "srformer_rows_joined_total"), 4.0);
  EXPECT_EQ(sample(text, "srformer_decode_steps_total"), 2.0);
  EXPECT_EQ(sample(text, "srformer_generated_tokens_total"), 7.0);
  EXPECT_EQ(sample(text, "srformer_batch_size_count"), 2.0);
  EXPECT_EQ(sample(text, "srformer_batch_size_sum"), 7.0);
  EXPECT_EQ(sample(text, "srformer_batch_size_bucket", {{"le", "2"}}), 0.0);
  EXPECT_EQ(sample(text, "srformer_batch_size_bucket", {{"le", "4"}}), 2.0);
  EXPECT_DOUBLE_EQ(*sample(text, "srformer_decode_step_seconds_sum"), 0.03);
  EXPECT_EQ(sample(text, "srformer_input_tokens_sum"), 700.0);
  EXPECT_EQ(sample(text, "srformer_generated_tokens_sum"), 56.0);
  EXPECT_EQ(sample(text, "srformer_generated_tokens_bucket", {{"le", "32"}}), 0.0);
  EXPECT_EQ(sample(text, "srformer_generated_tokens_bucket", {{"le", "64"}}), 1.0);
  EXPECT_EQ(sample(text, "srformer_state_bytes"), 123456.0);
  EXPECT_EQ(sample(text, "srformer_state_held_bytes"), 200000.0);
  EXPECT_EQ(sample(text, "srformer_queue_depth"), 7.0);
  EXPECT_EQ(sample(text, "srformer_weight_bytes", {{"model", "bart"}, {"form", "parameters"}}), 242124848.0);
  EXPECT_EQ(sample(text, "srformer_weight_bytes", {{"model", "bart"}, {"form", "packed"}}), 241958912.0);
}

TEST(Metrics, LatencyHistogramsObserveTheirOwnSeries) {
  Metrics metrics("");
  ModelMetrics& m = metrics.model("bart");
  m.observe_queue_wait(0.5);
  m.observe_encode(0.25);
  m.observe_encode(0.75);
  m.observe_time_to_first_token(1.5);
  m.observe_inter_token(0.004);
  const std::string text = metrics.scrape_text();
  EXPECT_EQ(sample(text, "srformer_queue_wait_seconds_sum"), 0.5);
  EXPECT_EQ(sample(text, "srformer_encode_seconds_count"), 2.0);
  EXPECT_EQ(sample(text, "srformer_encode_seconds_sum"), 1.0);
  EXPECT_EQ(sample(text, "srformer_time_to_first_token_seconds_sum"), 1.5);
  EXPECT_EQ(sample(text, "srformer_inter_token_seconds_bucket", {{"le", "0.0025"}}), 0.0);
  EXPECT_EQ(sample(text, "srformer_inter_token_seconds_bucket", {{"le", "0.005"}}), 1.0);
}

// A histogram's buckets reach the largest value its model's limits allow: one past the last finite bound
// lands only in +Inf, and histogram_quantile answers that bound (256 rows, 60 s) whatever the value was.
TEST(Metrics, HistogramBucketsReachTheConfiguredLimits) {
  using testing::largest_finite_bucket;
  Metrics metrics("");
  HistogramLimits limits;
  limits.max_batch_rows = 3000;
  limits.max_input_tokens = 100000;
  limits.max_new_tokens = 4096;
  ModelMetrics& big = metrics.model("big", limits);
  EXPECT_EQ(&big, &metrics.model("big")) << "a later call's limits change nothing";
  big.on_step(3000, 0.1, 3000);
  big.observe_request_tokens(100000, 4096);
  const LabelSet of_big{{"model", "big"}};
  std::string text = metrics.scrape_text();
  EXPECT_GE(largest_finite_bucket(text, "srformer_batch_size", of_big), 3000.0);
  EXPECT_EQ(sample(text, "srformer_batch_size_bucket", {{"model", "big"}, {"le", "4096"}}), 1.0);
  EXPECT_GE(largest_finite_bucket(text, "srformer_input_tokens", of_big), 100000.0);
  EXPECT_EQ(sample(text, "srformer_input_tokens_bucket", {{"model", "big"}, {"le", "131072"}}), 1.0);
  EXPECT_GE(largest_finite_bucket(text, "srformer_generated_tokens", of_big), 4096.0);

  // Limits within the fixed ladders: the same bounds for every model and server (they are summed by le).
  ModelMetrics& small = metrics.model("small");
  text = metrics.scrape_text();
  const LabelSet of_small{{"model", "small"}};
  EXPECT_EQ(largest_finite_bucket(text, "srformer_batch_size", of_small), 1024.0);
  EXPECT_EQ(largest_finite_bucket(text, "srformer_input_tokens", of_small), 16384.0);
  EXPECT_EQ(largest_finite_bucket(text, "srformer_generated_tokens", of_small), 16384.0);
  EXPECT_EQ(sample(text, "srformer_batch_size_bucket", {{"model", "big"}, {"le", "1024"}}), 0.0)
      << "the ladder past the fixed one only grows";

  // No flag bounds times: a request of an hour on a CPU, a step or a token's wait of half a minute, land in
  // finite buckets.
  small.on_request_end("Summarize", "OK", 3000.0);
  small.observe_queue_wait(1000.0);
  small.observe_time_to_first_token(1000.0);
  small.observe_encode(100.0);
  small.observe_inter_token(20.0);
  small.on_step(1, 20.0, 1);
  text = metrics.scrape_text();
  EXPECT_EQ(sample(text, "srformer_request_duration_seconds_bucket", {{"model", "small"}, {"le", "3600"}}), 1.0);
  EXPECT_EQ(sample(text, "srformer_queue_wait_seconds_bucket", {{"model", "small"}, {"le", "1800"}}), 1.0);
  EXPECT_EQ(sample(text, "srformer_time_to_first_token_seconds_bucket", {{"model", "small"}, {"le", "1800"}}), 1.0);
  EXPECT_EQ(sample(text, "srformer_encode_seconds_bucket", {{"model", "small"}, {"le", "120"}}), 1.0);
  EXPECT_EQ(sample(text, "srformer_inter_token_seconds_bucket", {{"model", "small"}, {"le", "30"}}), 1.0);
  EXPECT_EQ(sample(text, "srformer_decode_step_seconds_bucket", {{"model", "small"}, {"le", "30"}}), 1.0);
}

TEST(Metrics, SrformerAttentionSeries) {
  Metrics metrics("");
  ModelMetrics& m = metrics.model("bart");
  m.set_raf_fired_ratio(0, 0.25);
  m.set_raf_fired_ratio(5, 0.75);
  m.on_raf_updates(12);
  m.on_segment_switches(2);
  m.on_cross_attention_kv(100, 400);
  m.on_cross_attention_kv(50, 400);
  const std::string text = metrics.scrape_text();
  EXPECT_EQ(sample(text, "srformer_raf_fired_ratio", {{"layer", "0"}}), 0.25);
  EXPECT_EQ(sample(text, "srformer_raf_fired_ratio", {{"layer", "5"}}), 0.75);
  EXPECT_FALSE(sample(text, "srformer_raf_fired_ratio", {{"layer", "1"}}).has_value());
  EXPECT_EQ(sample(text, "srformer_raf_updates_total"), 12.0);
  EXPECT_EQ(sample(text, "srformer_segment_switches_total"), 2.0);
  EXPECT_EQ(sample(text, "srformer_cross_attention_kv_read_total"), 150.0);
  EXPECT_EQ(sample(text, "srformer_cross_attention_kv_full_equivalent_total"), 800.0);
}

// With no live row the RAF firing ratio is undefined: its series go (as the state gauges drop to 0) rather
// than keep the last batch's value, and come back with the next batch.
TEST(Metrics, RafFiredRatioSeriesGoWhenCleared) {
  Metrics metrics("");
  ModelMetrics& m = metrics.model("bart");
  ModelMetrics& other = metrics.model("t5");
  m.set_raf_fired_ratio(0, 0.25);
  m.set_raf_fired_ratio(2, 0.5);
  other.set_raf_fired_ratio(0, 0.125);
  m.clear_raf_fired_ratio();
  std::string text = metrics.scrape_text();
  EXPECT_FALSE(sample(text, "srformer_raf_fired_ratio", {{"model", "bart"}, {"layer", "0"}}).has_value()) << text;
  EXPECT_FALSE(sample(text, "srformer_raf_fired_ratio", {{"model", "bart"}, {"layer", "2"}}).has_value()) << text;
  EXPECT_EQ(sample(text, "srformer_raf_fired_ratio", {{"model", "t5"}, {"layer", "0"}}), 0.125);
  m.clear_raf_fired_ratio();  // twice: nothing to remove
  m.set_raf_fired_ratio(2, 0.75);
  text = metrics.scrape_text();
  EXPECT_EQ(sample(text, "srformer_raf_fired_ratio", {{"model", "bart"}, {"layer", "2"}}), 0.75);
  EXPECT_FALSE(sample(text, "srformer_raf_fired_ratio", {{"model", "bart"}, {"layer", "0"}}).has_value());
}

TEST(Metrics, ConcurrentUpdatesAreNotLost) {
  Metrics metrics("");
  constexpr int kThreads = 8;
  constexpr int kPerThread = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&metrics, t] {
      // Half the threads race on model() creation and dynamic-label lookups of a shared model.
      ModelMetrics& m = metrics.model(t % 2 ? "shared" : "m" + std::to_string(t));
      for (int i = 0; i < kPerThread; ++i) {
        m.on_request_start();
        m.on_request_end("Summarize", "OK", 0.001);
        m.on_rows_left(LeaveReason::kLength);
      }
    });
  }
  for (auto& th : threads) th.join();
  const std::string text = metrics.scrape_text();
  EXPECT_EQ(sample(text, "srformer_requests_total", {{"model", "shared"}}), kThreads / 2 * kPerThread);
  EXPECT_EQ(sample(text, "srformer_rows_left_total", {{"model", "shared"}, {"reason", "length"}}),
            kThreads / 2 * kPerThread);
  EXPECT_EQ(sample(text, "srformer_requests_total", {{"model", "m0"}}), kPerThread);
  EXPECT_EQ(sample(text, "srformer_requests_in_flight", {{"model", "shared"}}), 0.0);
}

// A scrape samples NVML and LibTorch's allocator first, which can be slow (NVML calls of a GPU in trouble take
// seconds). Requests starting and ending meanwhile must not wait for that: finding their model's handles took
// the mutex the sampling held, so every call's start and end waited for the scrape.
TEST(Metrics, RequestsDoNotWaitForAScrapesSampling) {
  Metrics metrics("", std::chrono::milliseconds(0));
  ModelMetrics& existing = metrics.model("bart");
  std::atomic<bool> block{false};
  std::promise<void> entered, release;
  std::future<void> entered_future = entered.get_future();
  std::shared_future<void> released = release.get_future().share();
  metrics.set_torch_cuda_memory_source([&] {
    if (block.exchange(false)) {
      entered.set_value();
      released.wait();
    }
    return std::vector<TorchCudaMemory>{{0, 1, 2}};
  });
  block = true;
  std::thread scrape([&] { metrics.sample_now(); });
  entered_future.wait();  // the scrape is inside its sampling
  auto requests = std::async(std::launch::async, [&] {
    for (const char* name : {"bart", "t5"}) {  // a model's handles found, and a model's created
      ModelMetrics& m = metrics.model(name);
      m.on_request_start();
      m.on_request_end("Summarize", "OK", 0.1);
    }
  });
  const bool done = requests.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
  release.set_value();
  scrape.join();
  requests.wait();
  EXPECT_TRUE(done) << "the requests' metrics waited for the scrape's sampling";
  EXPECT_EQ(&existing, &metrics.model("bart"));
  EXPECT_EQ(sample(metrics.scrape_text(), "srformer_requests_total", {{"model", "t5"}}), 1.0);
}

TEST(Metrics, GrpcCodeNames) {
  EXPECT_STREQ(status_code_name(0), "OK");
  EXPECT_STREQ(status_code_name(3), "INVALID_ARGUMENT");
  EXPECT_STREQ(status_code_name(8), "RESOURCE_EXHAUSTED");
  EXPECT_STREQ(status_code_name(14), "UNAVAILABLE");
  EXPECT_STREQ(status_code_name(16), "UNAUTHENTICATED");
  EXPECT_STREQ(status_code_name(17), "UNKNOWN");
  EXPECT_STREQ(status_code_name(-1), "UNKNOWN");
}

TEST(Metrics, TorchCudaMemoryFromEngineCallback) {
  Metrics metrics("");
  std::atomic<double> allocated{1000};  // the sampler thread may read it
  metrics.set_torch_cuda_memory_source([&allocated] {
    return std::vector<TorchCudaMemory>{{0, allocated.load(), 4096}, {1, 7, 8}};
  });
  std::string text = metrics.scrape_text();
  EXPECT_EQ(sample(text, "srformer_torch_cuda_allocated_bytes", {{"device", "0"}}), 1000.0);
  EXPECT_EQ(sample(text, "srformer_torch_cuda_reserved_bytes", {{"device", "1"}}), 8.0);
  allocated = 2000;
  metrics.sample_now();
  text = metrics.scrape_text();
  EXPECT_EQ(sample(text, "srformer_torch_cuda_allocated_bytes", {{"device", "0"}}), 2000.0);
}

TEST(Metrics, NoTorchSeriesWithoutSource) {
  Metrics metrics("");
  EXPECT_EQ(metrics.scrape_text().find("srformer_torch_cuda"), std::string::npos);
}

// Log lines the server's log could not write (its stderr a pipe whose reader has gone; the server ignores
// SIGPIPE and serves on) are counted, since they cannot say so themselves: spdlog's console sink dropped
// them without a trace.
TEST(Metrics, LogLinesLostToALogPipeWithoutReaderAreCounted) {
  const auto test_logger = spdlog::default_logger();
  init_logging("info", false);
  const auto pipe_action = std::signal(SIGPIPE, SIG_IGN);
  const int saved_stderr = dup(STDERR_FILENO);
  ASSERT_GE(saved_stderr, 0);
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  close(fds[0]);  // no reader: every write fails with EPIPE
  dup2(fds[1], STDERR_FILENO);
  close(fds[1]);
  const std::uint64_t before = log_lines_dropped();
  for (int i = 0; i < 3; ++i) spdlog::info("line {} meets a pipe without reader", i);
  spdlog::debug("under the level: never written, so never lost");
  const std::uint64_t lost = log_lines_dropped() - before;
  dup2(saved_stderr, STDERR_FILENO);
  close(saved_stderr);
  spdlog::info("a line stderr takes again (this one is not lost)");
  const std::uint64_t lost_after = log_lines_dropped() - before;
  std::signal(SIGPIPE, pipe_action);
  spdlog::set_default_logger(test_logger);
  spdlog::drop("srformer");
  EXPECT_EQ(lost, 3u);
  EXPECT_EQ(lost_after, 3u);

  // A registry made after the loss counts it all (the process's, from its start), once.
  Metrics metrics("");
  EXPECT_EQ(sample(metrics.scrape_text(), "srformer_log_lines_dropped_total", {}), 0.0);  // until sampled
  metrics.sample_now();
  metrics.sample_now();
  EXPECT_EQ(sample(metrics.scrape_text(), "srformer_log_lines_dropped_total", {}),
            static_cast<double>(log_lines_dropped()));
  EXPECT_GE(log_lines_dropped(), 3u);
}

}  // namespace
}  // namespace srformer::server
