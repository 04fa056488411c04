#include "server/metrics/metrics.h"

#include <prometheus/text_serializer.h>
#include <spdlog/spdlog.h>

#include <sstream>
#include <stdexcept>

#include "server/logging.h"
#include "server/metrics/gpu_monitor.h"
#include "server/metrics/http_exporter.h"
#include "server/metrics/process_monitor.h"
#include "server/metrics/torch_memory_sampler.h"

namespace srformer::server {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::Histogram;

// Latencies from 1 ms (a cached short request) to two hours: no flag bounds a request's time, and on a CPU
// 4,096 new tokens at a loaded step's second each take over an hour, before any wait in a deep queue.
const Histogram::BucketBoundaries& latency_buckets() {
  static const Histogram::BucketBoundaries b{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,  1,   2.5,
                                             5,     10,     30,    60,   120,   300,  600, 1800, 3600, 7200};
  return b;
}
// Per-step / per-token times: sub-millisecond on GPU up to a minute (a large batch on a loaded CPU; a
// request's next token waiting for a long document's whole encode with --encode-stall-ms 0).
const Histogram::BucketBoundaries& step_buckets() {
  static const Histogram::BucketBoundaries b{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                             0.25,   0.5,   1,      2.5,   5,    10,    30,   60};
  return b;
}
// `ladder`, doubled past its last bound until a bound reaches `limit`.
Histogram::BucketBoundaries reaching(Histogram::BucketBoundaries ladder, std::int64_t limit) {
  while (ladder.back() < static_cast<double>(limit)) ladder.push_back(ladder.back() * 2);
  return ladder;
}
Histogram::BucketBoundaries token_buckets(std::int64_t limit) {
  return reaching({1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}, limit);
}
Histogram::BucketBoundaries batch_buckets(std::int64_t limit) {
  return reaching({1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}, limit);
}

}  // namespace

const char* to_string(RejectReason reason) {
  switch (reason) {
    case RejectReason::kQueueFull:
      return "queue_full";
    case RejectReason::kShuttingDown:
      return "shutting_down";
    case RejectReason::kInvalid:
      return "invalid";
    case RejectReason::kUnreadStreams:
      return "unread_streams";
    case RejectReason::kOutOfMemory:
      return "out_of_memory";
  }
  return "invalid";
}

const char* to_string(LeaveReason reason) {
  switch (reason) {
    case LeaveReason::kEos:
      return "eos";
    case LeaveReason::kLength:
      return "length";
    case LeaveReason::kCancelled:
      return "cancelled";
    case LeaveReason::kError:
      return "error";
  }
  return "error";
}

const char* to_string(UnroutedReason reason) {
  switch (reason) {
    case UnroutedReason::kUnknownModel:
      return "unknown_model";
    case UnroutedReason::kMalformed:
      return "malformed";
    case UnroutedReason::kTooLarge:
      return "too_large";
  }
  return "malformed";
}

// Every per-model family, registered once per Metrics.
struct Metrics::Families {
  explicit Families(prometheus::Registry& r)
      : requests(BuildCounter()
                     .Name("srformer_requests_total")
                     .Help("Finished requests by RPC method and gRPC status code.")
                     .Register(r)),
        in_flight(BuildGauge()
                      .Name("srformer_requests_in_flight")
                      .Help("Requests accepted and not yet finished.")
                      .Register(r)),
        queue_depth(BuildGauge().Name("srformer_queue_depth").Help("Requests waiting in the queue.").Register(r)),
        rejected(BuildCounter()
                     .Name("srformer_requests_rejected_total")
                     .Help("Requests refused before queueing (queue_full|shutting_down|invalid|unread_streams|"
                           "out_of_memory), and queued or encoding ones the end of a shutdown's grace dropped unserved "
                           "(shutting_down).")
                     .Register(r)),
        unrouted(
            BuildCounter()
                .Name("srformer_requests_unrouted_total")
                .Help("Calls and SummarizeBatch items that reached no model, by RPC method and reason "
                      "(unknown_model|malformed|too_large: over --max-message-bytes); not in srformer_requests_total.")
                .Register(r)),
        batch_items(BuildCounter()
                        .Name("srformer_batch_items_total")
                        .Help("Items of SummarizeBatch calls with partial_results, by their own gRPC status code.")
                        .Register(r)),
        queue_wait(BuildHistogram()
                       .Name("srformer_queue_wait_seconds")
                       .Help("Time a request waited in the queue, until its encoding began or it left "
                             "unserved (cancelled, past its deadline, shutdown).")
                       .Register(r)),
        encode(BuildHistogram()
                   .Name("srformer_encode_seconds")
                   .Help("Time of one encoder call (the requests admitted together): the encoder forward and the "
                         "rows' start, decode steps run inside it not counted.")
                   .Register(r)),
        ttft(BuildHistogram()
                 .Name("srformer_time_to_first_token_seconds")
                 .Help("Time from acceptance to the first generated token.")
                 .Register(r)),
        inter_token(
            BuildHistogram()
                .Name("srformer_inter_token_seconds")
                .Help("Time between consecutive token deliveries of a request (tokens decided in one step count once).")
                .Register(r)),
        request_duration(BuildHistogram()
                             .Name("srformer_request_duration_seconds")
                             .Help("Time from acceptance to completion, by RPC method (calls refused before "
                                   "queueing are not observed).")
                             .Register(r)),
        generated_tokens(BuildHistogram()
                             .Name("srformer_generated_tokens")
                             .Help("Tokens of each finished request's summary (the best beam or the first "
                                   "sample; further sequences returned are not counted).")
                             .Register(r)),
        input_tokens(BuildHistogram()
                         .Name("srformer_input_tokens")
                         .Help("Input (document) tokens per finished request.")
                         .Register(r)),
        batch_size(BuildHistogram()
                       .Name("srformer_batch_size")
                       .Help("Rows in the running batch, per decode step.")
                       .Register(r)),
        decode_steps(BuildCounter().Name("srformer_decode_steps_total").Help("Batched decode steps.").Register(r)),
        generated_tokens_total(BuildCounter()
                                   .Name("srformer_generated_tokens_total")
                                   .Help("Tokens of the summaries decided, as they are decided (the best beam "
                                         "or the first sample of each request; further sequences not counted).")
                                   .Register(r)),
        rows_joined(BuildCounter()
                        .Name("srformer_rows_joined_total")
                        .Help("Rows that joined the running batch: one per beam or sample of each admitted request.")
                        .Register(r)),
        rows_left(BuildCounter()
                      .Name("srformer_rows_left_total")
                      .Help("Rows that left the running batch, one per beam or sample (eos|length|cancelled|error).")
                      .Register(r)),
        state_bytes(BuildGauge()
                        .Name("srformer_state_bytes")
                        .Help("Bytes of per-request decoder state the live rows use (what --max-state-memory counts).")
                        .Register(r)),
        state_held_bytes(BuildGauge()
                             .Name("srformer_state_held_bytes")
                             .Help("Bytes of memory the decoder state keeps allocated: srformer_state_bytes plus room "
                                   "for growth and the holes rows left.")
                             .Register(r)),
        weight_bytes(BuildGauge()
                         .Name("srformer_weight_bytes")
                         .Help("Bytes of the model's weights (form: parameters|packed).")
                         .Register(r)),
        state_budget_bytes(BuildGauge()
                               .Name("srformer_state_budget_bytes")
                               .Help("Decoder-state bytes a model's batch may hold (--max-state-memory; 0 = no limit).")
                               .Register(r)),
        decode_step(BuildHistogram()
                        .Name("srformer_decode_step_seconds")
                        .Help("Wall time of one batched decode step.")
                        .Register(r)),
        raf_fired(BuildGauge()
                      .Name("srformer_raf_fired_ratio")
                      .Help("Running fraction of RAF membrane elements that fired, per decoder layer.")
                      .Register(r)),
        raf_updates(BuildCounter()
                        .Name("srformer_raf_updates_total")
                        .Help("RAF neuron updates: one per row (each beam or sample), decoder layer and segment switch "
                              "(srformer_segment_switches_total x decoder layers).")
                        .Register(r)),
        segment_switches(
            BuildCounter()
                .Name("srformer_segment_switches_total")
                .Help("Decode steps at which a row (each beam or sample) attended another encoder segment than at its "
                      "previous step, its first step included; a step that skips segments counts once.")
                .Register(r)),
        bypasses(BuildCounter()
                     .Name("srformer_queue_bypasses_total")
                     .Help("Requests admitted ahead of an older queued request that did not fit the batch's "
                           "budgets (--queue-bypass-ms).")
                     .Register(r)),
        steps_while_encoding(BuildCounter()
                                 .Name("srformer_decode_steps_during_encodes_total")
                                 .Help("Decode steps the running rows took between two sublayers of an encode, "
                                       "once it had stalled them for --encode-stall-ms or when requests joined "
                                       "inside it; also in srformer_decode_steps_total.")
                                 .Register(r)),
        admitted_while_encoding(BuildCounter()
                                    .Name("srformer_requests_admitted_during_encodes_total")
                                    .Help("Queued requests encoded and joined between two sublayers of another "
                                          "encode that had run --encode-stall-ms (short ones do not wait for a "
                                          "long document's whole encode).")
                                    .Register(r)),
        encoder_cache_lookups(BuildCounter()
                                  .Name("srformer_encoder_cache_lookups_total")
                                  .Help("Admitted requests whose encoder output the cache held, or that took the "
                                        "encode of the same document admitted with them (result=hit), or that were "
                                        "encoded (miss) (--encoder-cache-memory).")
                                  .Register(r)),
        encoder_cache_bytes(BuildGauge()
                                .Name("srformer_encoder_cache_bytes")
                                .Help("Bytes of encoder outputs the cache holds (--encoder-cache-memory).")
                                .Register(r)),
        stream_unread_bytes(BuildGauge()
                                .Name("srformer_stream_unread_bytes")
                                .Help("Memory held by SummarizeStream messages for clients that have not taken them "
                                      "yet (their bytes and gRPC's buffer around each), all streams together "
                                      "(--max-unread-stream-memory).")
                                .Register(r)),
        response_unread_bytes(BuildGauge()
                                  .Name("srformer_response_unread_bytes")
                                  .Help("Memory held by Summarize and SummarizeBatch responses written by the server "
                                        "that their clients have not taken yet (their bytes and gRPC's buffer "
                                        "around them), all calls together.")
                                  .Register(r)),
        streams_stalled(BuildCounter()
                            .Name("srformer_streams_stalled_total")
                            .Help("SummarizeStream calls the server ended because their clients had taken none of "
                                  "their messages for --stream-stall-timeout-ms.")
                            .Register(r)),
        log_lines_dropped(BuildCounter()
                              .Name("srformer_log_lines_dropped_total")
                              .Help("Log lines the server could not write to its stderr (a pipe whose reader has "
                                    "gone, a full disk), since it started.")
                              .Register(r)),
        kv_read(BuildCounter()
                    .Name("srformer_cross_attention_kv_read_total")
                    .Help("Cross-attention key/value elements read, summed over rows (each beam or sample) and "
                          "steps: k per step with full attention, s with segmented ones (2s for xl_memory, s + m "
                          "for global_tokens).")
                    .Register(r)),
        kv_full(BuildCounter()
                    .Name("srformer_cross_attention_kv_full_equivalent_total")
                    .Help("Key/value elements full cross-attention would have read for the same steps.")
                    .Register(r)) {}

  prometheus::Family<prometheus::Counter>& requests;
  prometheus::Family<prometheus::Gauge>& in_flight;
  prometheus::Family<prometheus::Gauge>& queue_depth;
  prometheus::Family<prometheus::Counter>& rejected;
  prometheus::Family<prometheus::Counter>& unrouted;
  prometheus::Family<prometheus::Counter>& batch_items;
  prometheus::Family<prometheus::Histogram>& queue_wait;
  prometheus::Family<prometheus::Histogram>& encode;
  prometheus::Family<prometheus::Histogram>& ttft;
  prometheus::Family<prometheus::Histogram>& inter_token;
  prometheus::Family<prometheus::Histogram>& request_duration;
  prometheus::Family<prometheus::Histogram>& generated_tokens;
  prometheus::Family<prometheus::Histogram>& input_tokens;
  prometheus::Family<prometheus::Histogram>& batch_size;
  prometheus::Family<prometheus::Counter>& decode_steps;
  prometheus::Family<prometheus::Counter>& generated_tokens_total;
  prometheus::Family<prometheus::Counter>& rows_joined;
  prometheus::Family<prometheus::Counter>& rows_left;
  prometheus::Family<prometheus::Gauge>& state_bytes;
  prometheus::Family<prometheus::Gauge>& state_held_bytes;
  prometheus::Family<prometheus::Gauge>& weight_bytes;
  prometheus::Family<prometheus::Gauge>& state_budget_bytes;
  prometheus::Family<prometheus::Histogram>& decode_step;
  prometheus::Family<prometheus::Gauge>& raf_fired;
  prometheus::Family<prometheus::Counter>& raf_updates;
  prometheus::Family<prometheus::Counter>& segment_switches;
  prometheus::Family<prometheus::Counter>& bypasses;
  prometheus::Family<prometheus::Counter>& steps_while_encoding;
  prometheus::Family<prometheus::Counter>& admitted_while_encoding;
  prometheus::Family<prometheus::Counter>& encoder_cache_lookups;
  prometheus::Family<prometheus::Gauge>& encoder_cache_bytes;
  prometheus::Family<prometheus::Gauge>& stream_unread_bytes;
  prometheus::Family<prometheus::Gauge>& response_unread_bytes;
  prometheus::Family<prometheus::Counter>& streams_stalled;
  prometheus::Family<prometheus::Counter>& log_lines_dropped;
  prometheus::Family<prometheus::Counter>& kv_read;
  prometheus::Family<prometheus::Counter>& kv_full;
};

ModelMetrics::ModelMetrics(Metrics& metrics, const std::string& model, const HistogramLimits& limits)
    : metrics_(metrics),
      model_(model),
      in_flight_(metrics.families_->in_flight.Add({{"model", model}})),
      queue_depth_(metrics.families_->queue_depth.Add({{"model", model}})),
      queue_wait_(metrics.families_->queue_wait.Add({{"model", model}}, latency_buckets())),
      encode_(metrics.families_->encode.Add({{"model", model}}, latency_buckets())),
      ttft_(metrics.families_->ttft.Add({{"model", model}}, latency_buckets())),
      inter_token_(metrics.families_->inter_token.Add({{"model", model}}, step_buckets())),
      generated_tokens_(
          metrics.families_->generated_tokens.Add({{"model", model}}, token_buckets(limits.max_new_tokens))),
      input_tokens_(metrics.families_->input_tokens.Add({{"model", model}}, token_buckets(limits.max_input_tokens))),
      batch_size_(metrics.families_->batch_size.Add({{"model", model}}, batch_buckets(limits.max_batch_rows))),
      decode_steps_total_(metrics.families_->decode_steps.Add({{"model", model}})),
      generated_tokens_total_(metrics.families_->generated_tokens_total.Add({{"model", model}})),
      rows_joined_total_(metrics.families_->rows_joined.Add({{"model", model}})),
      state_bytes_(metrics.families_->state_bytes.Add({{"model", model}})),
      state_held_bytes_(metrics.families_->state_held_bytes.Add({{"model", model}})),
      decode_step_(metrics.families_->decode_step.Add({{"model", model}}, step_buckets())),
      raf_updates_total_(metrics.families_->raf_updates.Add({{"model", model}})),
      segment_switches_total_(metrics.families_->segment_switches.Add({{"model", model}})),
      bypasses_total_(metrics.families_->bypasses.Add({{"model", model}})),
      steps_while_encoding_total_(metrics.families_->steps_while_encoding.Add({{"model", model}})),
      admitted_while_encoding_total_(metrics.families_->admitted_while_encoding.Add({{"model", model}})),
      encoder_cache_hits_(metrics.families_->encoder_cache_lookups.Add({{"model", model}, {"result", "hit"}})),
      encoder_cache_misses_(metrics.families_->encoder_cache_lookups.Add({{"model", model}, {"result", "miss"}})),
      encoder_cache_bytes_(metrics.families_->encoder_cache_bytes.Add({{"model", model}})),
      kv_read_total_(metrics.families_->kv_read.Add({{"model", model}})),
      kv_full_total_(metrics.families_->kv_full.Add({{"model", model}})),
      streams_stalled_total_(metrics.families_->streams_stalled.Add({{"model", model}})) {
  // Pre-create the bounded reason series so rate() queries see zeros instead of absent series.
  for (const auto reason : {RejectReason::kQueueFull, RejectReason::kShuttingDown, RejectReason::kInvalid,
                            RejectReason::kUnreadStreams, RejectReason::kOutOfMemory}) {
    metrics.families_->rejected.Add({{"model", model}, {"reason", to_string(reason)}});
  }
  for (const auto reason : {LeaveReason::kEos, LeaveReason::kLength, LeaveReason::kCancelled, LeaveReason::kError}) {
    metrics.families_->rows_left.Add({{"model", model}, {"reason", to_string(reason)}});
  }
}

void ModelMetrics::on_request_start() { in_flight_.Increment(); }

void ModelMetrics::on_request_end(const std::string& method, const std::string& code, std::optional<double> seconds) {
  auto& f = *metrics_.families_;
  f.requests.Add({{"model", model_}, {"method", method}, {"code", code}}).Increment();
  if (seconds) f.request_duration.Add({{"model", model_}, {"method", method}}, latency_buckets()).Observe(*seconds);
  in_flight_.Decrement();
}

void ModelMetrics::on_rejected(RejectReason reason) {
  metrics_.families_->rejected.Add({{"model", model_}, {"reason", to_string(reason)}}).Increment();
}

void ModelMetrics::on_stream_stalled() { streams_stalled_total_.Increment(); }

void ModelMetrics::on_batch_item(const std::string& code) {
  metrics_.families_->batch_items.Add({{"model", model_}, {"code", code}}).Increment();
}

void ModelMetrics::set_queue_depth(double depth) { queue_depth_.Set(depth); }
void ModelMetrics::observe_queue_wait(double seconds) { queue_wait_.Observe(seconds); }
void ModelMetrics::observe_encode(double seconds) { encode_.Observe(seconds); }
void ModelMetrics::observe_time_to_first_token(double seconds) { ttft_.Observe(seconds); }
void ModelMetrics::observe_inter_token(double seconds) { inter_token_.Observe(seconds); }

void ModelMetrics::observe_request_tokens(std::uint64_t input_tokens, std::uint64_t generated_tokens) {
  input_tokens_.Observe(static_cast<double>(input_tokens));
  generated_tokens_.Observe(static_cast<double>(generated_tokens));
}

void ModelMetrics::on_step(std::uint64_t batch_size, double seconds, std::uint64_t tokens) {
  batch_size_.Observe(static_cast<double>(batch_size));
  decode_step_.Observe(seconds);
  decode_steps_total_.Increment();
  generated_tokens_total_.Increment(static_cast<double>(tokens));
}

void ModelMetrics::on_rows_joined(std::uint64_t n) { rows_joined_total_.Increment(static_cast<double>(n)); }

void ModelMetrics::on_rows_left(LeaveReason reason, std::uint64_t n) {
  metrics_.families_->rows_left.Add({{"model", model_}, {"reason", to_string(reason)}})
      .Increment(static_cast<double>(n));
}

void ModelMetrics::set_state_bytes(double used, double held) {
  state_bytes_.Set(used);
  state_held_bytes_.Set(held);
}

void ModelMetrics::set_state_budget_bytes(double bytes) {
  metrics_.families_->state_budget_bytes.Add({{"model", model_}}).Set(bytes);
}

void ModelMetrics::set_weight_bytes(double parameters, double packed) {
  metrics_.families_->weight_bytes.Add({{"model", model_}, {"form", "parameters"}}).Set(parameters);
  metrics_.families_->weight_bytes.Add({{"model", model_}, {"form", "packed"}}).Set(packed);
}

void ModelMetrics::set_raf_fired_ratio(int layer, double ratio) {
  if (layer < 0) return;
  const std::lock_guard<std::mutex> lock(raf_fired_mutex_);
  if (raf_fired_.size() <= static_cast<size_t>(layer)) raf_fired_.resize(static_cast<size_t>(layer) + 1, nullptr);
  prometheus::Gauge*& gauge = raf_fired_[static_cast<size_t>(layer)];
  if (!gauge) gauge = &metrics_.families_->raf_fired.Add({{"model", model_}, {"layer", std::to_string(layer)}});
  gauge->Set(ratio);
}

void ModelMetrics::clear_raf_fired_ratio() {
  const std::lock_guard<std::mutex> lock(raf_fired_mutex_);
  for (prometheus::Gauge*& gauge : raf_fired_) {
    if (gauge) metrics_.families_->raf_fired.Remove(gauge);
    gauge = nullptr;
  }
}

void ModelMetrics::on_raf_updates(std::uint64_t n) { raf_updates_total_.Increment(static_cast<double>(n)); }
void ModelMetrics::on_segment_switches(std::uint64_t n) { segment_switches_total_.Increment(static_cast<double>(n)); }

void ModelMetrics::on_bypass() { bypasses_total_.Increment(); }
void ModelMetrics::on_step_while_encoding() { steps_while_encoding_total_.Increment(); }
void ModelMetrics::on_admitted_while_encoding(std::uint64_t requests) {
  admitted_while_encoding_total_.Increment(static_cast<double>(requests));
}

void ModelMetrics::on_encoder_cache(std::uint64_t hits, std::uint64_t misses, double bytes) {
  encoder_cache_hits_.Increment(static_cast<double>(hits));
  encoder_cache_misses_.Increment(static_cast<double>(misses));
  encoder_cache_bytes_.Set(bytes);
}

void ModelMetrics::on_cross_attention_kv(std::uint64_t read, std::uint64_t full_equivalent) {
  kv_read_total_.Increment(static_cast<double>(read));
  kv_full_total_.Increment(static_cast<double>(full_equivalent));
}

Metrics::Metrics(const std::string& listen_address, std::chrono::milliseconds sample_interval)
    : sample_interval_(sample_interval),
      registry_(std::make_shared<prometheus::Registry>()),
      families_(std::make_unique<Families>(*registry_)),
      process_monitor_(std::make_unique<ProcessMonitor>(*registry_, sample_interval)),
      stream_unread_bytes_(families_->stream_unread_bytes.Add({})),
      response_unread_bytes_(families_->response_unread_bytes.Add({})),
      log_lines_dropped_(families_->log_lines_dropped.Add({})) {
  // Zeros from the start, as for the per-model reasons: rate() sees a series before the first stray call.
  for (const char* method : {"Summarize", "SummarizeStream", "SummarizeBatch"}) {
    for (const auto reason : {UnroutedReason::kUnknownModel, UnroutedReason::kMalformed, UnroutedReason::kTooLarge}) {
      families_->unrouted.Add({{"method", method}, {"reason", to_string(reason)}});
    }
  }
  if (listen_address.empty()) return;
  try {
    // Sample at scrape time, as Prometheus' own clients do: a gauge read between two periodic samples could
    // otherwise be up to one interval old (resident memory after a burst of requests read as before it).
    exposer_ = std::make_unique<HttpExporter>(listen_address, [this] {
      sample_now();
      return scrape_text();
    });
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot serve metrics on '" + listen_address + "' (" + e.what() +
                             "); pass a free HOST:PORT with --metrics-listen");
  }
}

Metrics::~Metrics() {
  exposer_.reset();  // stop scrapes before the samplers and families go away
}

ModelMetrics& Metrics::model(const std::string& name, const HistogramLimits& limits) {
  const std::lock_guard<std::mutex> lock(models_mutex_);
  auto it = models_.find(name);
  if (it == models_.end()) it = models_.emplace(name, std::make_unique<ModelMetrics>(*this, name, limits)).first;
  return *it->second;
}

void Metrics::on_unrouted(const std::string& method, UnroutedReason reason) {
  families_->unrouted.Add({{"method", method}, {"reason", to_string(reason)}}).Increment();
}

bool Metrics::start_gpu_monitor(std::unique_ptr<NvmlApi> nvml, const std::vector<unsigned>& cuda_devices) {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (gpu_monitor_) return gpu_monitor_->active();
  if (!nvml) nvml = load_nvml();
  gpu_monitor_ = std::make_unique<GpuMonitor>(*registry_, std::move(nvml), sample_interval_, cuda_devices);
  return gpu_monitor_->active();
}

void Metrics::set_torch_cuda_memory_source(TorchCudaMemorySource source) {
  const std::lock_guard<std::mutex> lock(mutex_);
  torch_sampler_.reset();  // one source at a time; families stay registered
  torch_sampler_ = std::make_unique<TorchMemorySampler>(*registry_, std::move(source), sample_interval_);
}

void Metrics::sample_now() {
  const std::lock_guard<std::mutex> lock(mutex_);
  process_monitor_->sample();
  // The log counts its lost lines from the process's start, before this registry existed.
  const std::uint64_t dropped = log_lines_dropped();
  if (dropped > log_lines_counted_) {
    log_lines_dropped_.Increment(static_cast<double>(dropped - log_lines_counted_));
    log_lines_counted_ = dropped;
  }
  if (gpu_monitor_) gpu_monitor_->sample();
  if (torch_sampler_) torch_sampler_->sample();
}

std::string Metrics::scrape_text() const {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry_->Collect());
  return out.str();
}

std::vector<int> Metrics::listening_ports() const {
  return exposer_ ? std::vector<int>{exposer_->port()} : std::vector<int>{};
}

}  // namespace srformer::server
