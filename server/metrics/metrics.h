#pragma once
// Prometheus metrics of srformer-server: one registry, an optional HTTP exposer (/metrics), per-model handles,
// and background samplers for the process and (when NVML loads) the GPUs. No CUDA/LibTorch dependency.
//
// Label values are bounded: model names, RPC method names, gRPC status code names, fixed reason strings and
// layer indices. Never put request ids or free text in a label.
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace srformer::server {

class GpuMonitor;
class HttpExporter;
class NvmlApi;
class ProcessMonitor;
class TorchMemorySampler;

// Why a request was refused before it reached the engine (label `reason` of srformer_requests_rejected_total).
// kUnreadStreams: a SummarizeStream refused while over --max-unread-stream-memory. kOutOfMemory: the server
// ran out of memory preparing or queueing it (RESOURCE_EXHAUSTED, as a full queue's).
enum class RejectReason { kQueueFull, kShuttingDown, kInvalid, kUnreadStreams, kOutOfMemory };
// Why a row left the running batch (label `reason` of srformer_rows_left_total).
enum class LeaveReason { kEos, kLength, kCancelled, kError };
// Why a call (or a SummarizeBatch item) reached no model (label `reason` of srformer_requests_unrouted_total):
// it named a model this server does not hold, its body did not parse, or its body was over --max-message-bytes.
enum class UnroutedReason { kUnknownModel, kMalformed, kTooLarge };

const char* to_string(RejectReason reason);
const char* to_string(LeaveReason reason);
const char* to_string(UnroutedReason reason);

// One LibTorch CUDA caching-allocator reading, provided by the engine (keeps this library free of CUDA).
struct TorchCudaMemory {
  int device = 0;
  double allocated_bytes = 0;
  double reserved_bytes = 0;
};
using TorchCudaMemorySource = std::function<std::vector<TorchCudaMemory>()>;

class Metrics;

// The largest values a model's configured limits let into its histograms. Their buckets reach them: a value
// past the last finite bucket lands only in +Inf, and histogram_quantile then answers that last bound whatever
// the value. Ladders are fixed (series of models and servers summed by `le` must share their bounds) and grow
// by doubling only for a limit past them. 0: the fixed ladder.
struct HistogramLimits {
  std::int64_t max_batch_rows = 0;    // srformer_batch_size (--max-batch-rows)
  std::int64_t max_input_tokens = 0;  // srformer_input_tokens (the model's served input limit)
  std::int64_t max_new_tokens = 0;    // srformer_generated_tokens (--max-new-tokens-cap)
};

// Handles of one model's series. Obtained from Metrics::model(); lives as long as the Metrics. All methods are
// thread-safe and cheap (atomic ops; dynamic label lookups take the prometheus family's own mutex).
class ModelMetrics {
 public:
  ModelMetrics(Metrics& metrics, const std::string& model, const HistogramLimits& limits = {});
  ModelMetrics(const ModelMetrics&) = delete;
  ModelMetrics& operator=(const ModelMetrics&) = delete;

  const std::string& name() const { return model_; }

  // --- request lifecycle (service) ---
  // A request was accepted by the service: srformer_requests_in_flight += 1.
  void on_request_start();
  // A request finished (any outcome): requests_total{method,code} += 1, request_duration{method} observes
  // `seconds` (from its acceptance; none for a call refused before queueing), in_flight -= 1. `method`: RPC
  // name (Summarize|SummarizeStream|SummarizeBatch); `code`: status_code_name() (common/status_code_name.h).
  void on_request_end(const std::string& method, const std::string& code, std::optional<double> seconds);
  // A request was refused before queueing (also count it with on_request_end if it had started).
  void on_rejected(RejectReason reason);
  // A SummarizeStream ended by the server because its client had taken none of its messages for
  // --stream-stall-timeout-ms: srformer_streams_stalled_total += 1.
  void on_stream_stalled();
  // An item of a SummarizeBatch with partial_results ended with `code` (status_code_name()): the call
  // itself is OK even where its items failed, so srformer_requests_total does not see them.
  void on_batch_item(const std::string& code);
  // Current number of requests waiting in this model's queue.
  void set_queue_depth(double depth);
  // Time a request spent queued before its encoder ran.
  void observe_queue_wait(double seconds);
  // One encoder call's time (the requests admitted together, and their rows' start; less the steps inside).
  void observe_encode(double seconds);
  // Time from request acceptance to its first generated token.
  void observe_time_to_first_token(double seconds);
  // Time between two consecutive tokens of one request.
  void observe_inter_token(double seconds);
  // Per finished request: prompt length and generated length in tokens.
  void observe_request_tokens(std::uint64_t input_tokens, std::uint64_t generated_tokens);

  // --- engine (continuous batcher) ---
  // One decode step over `batch_size` rows took `seconds` and produced `tokens` new tokens.
  void on_step(std::uint64_t batch_size, double seconds, std::uint64_t tokens);
  // `n` rows joined the running batch (a request joins with one row per beam or sample).
  void on_rows_joined(std::uint64_t n = 1);
  // `n` rows left the running batch for `reason`.
  void on_rows_left(LeaveReason reason, std::uint64_t n = 1);
  // Bytes of per-request decoder state (self-attention caches, cross keys/values, RAF state) the rows
  // use now, and the memory kept allocated for them (`held`: plus room for growth and pool holes).
  void set_state_bytes(double used, double held);
  // Bytes of the model's weights, set once at load: `parameters` as held, `packed` the projections'
  // packed copies beside them (--packed-weights, --dtype bf16 on the CPU; 0 when none).
  void set_weight_bytes(double parameters, double packed);
  // The decoder-state budget admissions keep to (--max-state-memory; 0 = none), set once at start.
  void set_state_budget_bytes(double bytes);

  // --- SRformer cross-attention ---
  // Running fraction (0..1) of RAF membrane elements that fired in decoder layer `layer`, over the live rows.
  void set_raf_fired_ratio(int layer, double ratio);
  // No live row has taken a RAF step: the ratio is undefined, so its series go (a scrape shows none, a graph a
  // gap) rather than keep the last batch's value or show 0, which would read as "nothing fires".
  void clear_raf_fired_ratio();
  // `n` RAF neuron updates (one per row, decoder layer and segment switch).
  void on_raf_updates(std::uint64_t n);
  // `n` segment switches: row-steps whose segment differs from the row's previous step (one however many
  // segments the step skipped; the first step counts).
  void on_segment_switches(std::uint64_t n);
  // A request admitted ahead of an older one that did not fit the batch (--queue-bypass-ms).
  void on_bypass();
  // The running rows took a decode step between two sublayers of an encode (--encode-stall-ms); the step
  // itself is counted by on_step too.
  void on_step_while_encoding();
  // Queued requests admitted between two sublayers of another encode (--encode-stall-ms).
  void on_admitted_while_encoding(std::uint64_t requests);
  // Admitted requests whose encoder output the cache held (`hits`) or not (`misses`), and the bytes it
  // holds now (--encoder-cache-memory).
  void on_encoder_cache(std::uint64_t hits, std::uint64_t misses, double bytes);
  // Key/value elements read by cross-attention vs what full attention would have read for the same steps.
  void on_cross_attention_kv(std::uint64_t read, std::uint64_t full_equivalent);

  // Typed handles for anything the methods above do not cover.
  prometheus::Gauge& in_flight() { return in_flight_; }
  prometheus::Gauge& queue_depth() { return queue_depth_; }
  prometheus::Gauge& state_bytes() { return state_bytes_; }
  prometheus::Counter& generated_tokens_total() { return generated_tokens_total_; }

 private:
  Metrics& metrics_;
  const std::string model_;
  prometheus::Gauge& in_flight_;
  prometheus::Gauge& queue_depth_;
  prometheus::Histogram& queue_wait_;
  prometheus::Histogram& encode_;
  prometheus::Histogram& ttft_;
  prometheus::Histogram& inter_token_;
  prometheus::Histogram& generated_tokens_;
  prometheus::Histogram& input_tokens_;
  prometheus::Histogram& batch_size_;
  prometheus::Counter& decode_steps_total_;
  prometheus::Counter& generated_tokens_total_;
  prometheus::Counter& rows_joined_total_;
  prometheus::Gauge& state_bytes_;
  prometheus::Gauge& state_held_bytes_;
  prometheus::Histogram& decode_step_;
  prometheus::Counter& raf_updates_total_;
  prometheus::Counter& segment_switches_total_;
  prometheus::Counter& bypasses_total_;
  prometheus::Counter& steps_while_encoding_total_;
  prometheus::Counter& admitted_while_encoding_total_;
  prometheus::Counter& encoder_cache_hits_;
  prometheus::Counter& encoder_cache_misses_;
  prometheus::Gauge& encoder_cache_bytes_;
  prometheus::Counter& kv_read_total_;
  prometheus::Counter& kv_full_total_;
  prometheus::Counter& streams_stalled_total_;
  std::mutex raf_fired_mutex_;
  std::vector<prometheus::Gauge*> raf_fired_;  // [layer] -> its series, nullptr when absent
};

// The process-wide metrics: registry, exposer, per-model handles, samplers.
class Metrics {
 public:
  // listen_address "HOST:PORT" (e.g. "0.0.0.0:9464"; port 0 = ephemeral) starts an HTTP exposer serving
  // /metrics; "" = no exposer (tests, embedding). Process, GPU and torch gauges are sampled at every scrape of
  // /metrics and, between scrapes, every `sample_interval`.
  // Throws std::runtime_error if the address cannot be bound.
  explicit Metrics(const std::string& listen_address,
                   std::chrono::milliseconds sample_interval = std::chrono::milliseconds(5000));
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // The handles of model `name`, created on first use (stable reference) with `limits`' buckets; a later
  // call's limits change nothing (the server creates each model's handles first, with its limits).
  ModelMetrics& model(const std::string& name, const HistogramLimits& limits = {});
  // A call or batch item that reached no model: srformer_requests_unrouted_total{method,reason} += 1. These
  // have no model label (an unknown name is the client's text), so srformer_requests_total cannot count
  // them; without this a fleet of clients asking for a renamed model would show nowhere.
  void on_unrouted(const std::string& method, UnroutedReason reason);
  // srformer_stream_unread_bytes: stream messages held for clients that have not taken them yet.
  prometheus::Gauge& stream_unread_bytes() { return stream_unread_bytes_; }
  // srformer_response_unread_bytes: Summarize and SummarizeBatch responses written and not yet taken by
  // their clients.
  prometheus::Gauge& response_unread_bytes() { return response_unread_bytes_; }

  // Starts sampling GPU gauges via NVML (nullptr = load libnvidia-ml.so.1 at run time) for the CUDA devices
  // `cuda_devices` (the server's --device; empty = every visible GPU). If NVML is unavailable, logs once why
  // and registers no GPU series. Returns whether GPU sampling runs.
  bool start_gpu_monitor(std::unique_ptr<NvmlApi> nvml = nullptr, const std::vector<unsigned>& cuda_devices = {});
  // Registers srformer_torch_cuda_{allocated,reserved}_bytes{device}, sampled from `source` at the sample interval.
  void set_torch_cuda_memory_source(TorchCudaMemorySource source);
  // Samples process, GPU and torch sources and the log's lost lines (srformer_log_lines_dropped_total) right now
  // (the exposer does before each scrape; scrape_text() does not).
  void sample_now();

  // Text exposition format of everything registered (same bytes a scrape gets).
  std::string scrape_text() const;
  // Ports the exposer listens on (empty without exposer); resolves port 0.
  std::vector<int> listening_ports() const;
  prometheus::Registry& registry() { return *registry_; }
  std::chrono::milliseconds sample_interval() const { return sample_interval_; }

 private:
  friend class ModelMetrics;
  struct Families;

  const std::chrono::milliseconds sample_interval_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<Families> families_;
  // Apart: model() runs at every request's start and end, and must not wait for a scrape's sampling
  // (NVML calls of a GPU in trouble take seconds; LibTorch's allocator statistics take its lock).
  std::mutex models_mutex_;  // guards models_
  std::mutex mutex_;         // guards gpu_monitor_, torch_sampler_, log_lines_counted_ and their sampling
  std::map<std::string, std::unique_ptr<ModelMetrics>> models_;
  std::unique_ptr<ProcessMonitor> process_monitor_;
  prometheus::Gauge& stream_unread_bytes_;
  prometheus::Gauge& response_unread_bytes_;
  prometheus::Counter& log_lines_dropped_;
  std::uint64_t log_lines_counted_ = 0;  // of log_lines_dropped(), in log_lines_dropped_ (guarded by mutex_)
  std::unique_ptr<GpuMonitor> gpu_monitor_;
  std::unique_ptr<TorchMemorySampler> torch_sampler_;
  std::unique_ptr<HttpExporter> exposer_;  // last: destroyed first, stops serving before metrics go
};

}  // namespace srformer::server
