#include "server/engine/engine.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <numeric>
#include <optional>
#include <utility>

#include "common/byte_size.h"
#include "model/attention/cross_attention.h"
#include "model/error_message.h"
#include "model/kernels/parallel.h"
#include "model/kernels/serial_region.h"
#include "model/length_groups.h"
#include "server/engine/row_order.h"
#include "server/metrics/metrics.h"
#include "server/system_memory.h"

namespace srformer::server {

namespace {

// Sets a decode-thread member for a scope; what it held before comes back at the scope's end, however
// the scope ends (an admission inside another's encode must leave the outer's bookkeeping as it was).
template <typename T>
class ScopedValue {
 public:
  ScopedValue(T& value, T during) : value_(value), saved_(std::exchange(value, std::move(during))) {}
  ~ScopedValue() { value_ = std::move(saved_); }
  ScopedValue(const ScopedValue&) = delete;
  ScopedValue& operator=(const ScopedValue&) = delete;

 private:
  T& value_;
  T saved_;
};

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

LeaveReason leave_reason(RequestOutcome outcome, FinishReason reason) {
  if (outcome == RequestOutcome::kError) return LeaveReason::kError;
  if (outcome != RequestOutcome::kOk) return LeaveReason::kCancelled;
  return reason == FinishReason::kEos ? LeaveReason::kEos : LeaveReason::kLength;
}

// The delivery job that hands a request its result. With a tokenizer, the summary text is decoded
// from the result's tokens there, off the decode thread.
Delivery::Job result_job(std::shared_ptr<Request> request, RequestResult result,
                         std::shared_ptr<const Tokenizer> decode_with = nullptr) {
  return [request = std::move(request), result = std::move(result), tokenizer = std::move(decode_with)]() mutable {
    if (tokenizer) {
      try {
        result.summary = tokenizer->decode(result.token_ids, /*skip_special=*/true);
        for (auto& a : result.alternatives) a.summary = tokenizer->decode(a.hypothesis.tokens, /*skip_special=*/true);
      } catch (const std::exception& e) {
        result.outcome = RequestOutcome::kError;
        result.error = std::string("decoding the summary failed: ") + error_message(e);
      }
    }
    try {
      request->on_finish(std::move(result));
    } catch (const std::exception& e) {
      spdlog::error("request {}: on_finish failed: {}", request->id, error_message(e));
    }
  };
}

// The delivery job that streams a step's new tokens of one request: their text from the request's
// detokenizer, and at its end (`done`) whatever text the detokenizer still held back (on `last`, the
// request's last token again, where the step streamed none).
Delivery::Job tokens_job(std::shared_ptr<Request> request, std::shared_ptr<IncrementalDetokenizer> detok,
                         std::vector<TokenEvent> events, bool done, TokenEvent last) {
  return [request = std::move(request), detok = std::move(detok), events = std::move(events), done,
          last = std::move(last)]() mutable {
    try {
      for (auto& ev : events) ev.text = detok->push(ev.token_id);
      if (done) {
        std::string tail = detok->finish();
        if (!tail.empty()) {
          if (events.empty()) events.push_back(std::move(last));
          events.back().text += tail;
        }
      }
      if (!events.empty()) request->on_tokens(std::move(events));
    } catch (const std::exception& e) {
      spdlog::error("request {}: streaming tokens failed: {}", request->id, error_message(e));
    }
  };
}

}  // namespace

// A request in the running batch: its searcher, its rows' next tokens, and its streaming state.
struct Engine::Slot {
  Slot(Pending p, const Tokenizer& tokenizer)
      : request(std::move(p.request)),
        searcher(std::move(p.searcher)),
        detok(request->on_tokens ? std::make_shared<IncrementalDetokenizer>(tokenizer) : nullptr),
        rows(searcher->num_rows()),
        most_rows(rows) {}

  std::shared_ptr<Request> request;
  std::unique_ptr<Searcher> searcher;
  // Streaming requests only; used by their delivery jobs, which run in order on the delivery thread.
  std::shared_ptr<IncrementalDetokenizer> detok;
  int64_t rows;             // in the batch now (samples that ended have left)
  const int64_t most_rows;  // at admission, the most it holds
  int64_t row_steps = 0;    // rows summed over the decode steps it took
  // Rows summed over the steps at which its segment changed (its rows share one schedule): each such
  // row-step ran the RAF neuron once per decoder layer, however many segments the step skipped.
  int64_t row_switches = 0;
  // RAF counts (raf_counts) of rows that left before the request did: the firing rate covers every row.
  double raf_fired_left = 0.0;
  double raf_total_left = 0.0;
  int64_t budget = 0;
  torch::Tensor next_tokens;      // [rows] int64, CPU
  std::vector<int64_t> streamed;  // tokens emitted so far
  std::vector<float> streamed_logprobs;
  std::vector<int32_t> segments;  // segment of each decoder step (same for all rows of a request)
  Clock::time_point admitted_at;
  Clock::time_point decode_start;
  Clock::time_point last_token;
  double encode_ms = 0.0;
};

Engine::Engine(std::string name, std::unique_ptr<Seq2SeqModel> model, std::shared_ptr<const Tokenizer> tokenizer,
               EngineLimits limits, ModelMetrics* metrics, SearcherFactory searcher_factory)
    : name_(std::move(name)),
      model_(std::move(model)),
      tokenizer_(std::move(tokenizer)),
      config_(model_->config()),
      device_(model_->device()),
      dtype_(model_->dtype()),
      parameters_(model_->parameter_count()),
      footprint_(model_->state_footprint()),
      limits_(limits),
      metrics_(metrics),
      searcher_factory_(std::move(searcher_factory)),
      encoder_cache_(limits.encoder_cache_bytes) {
  if (limits_.max_batch_rows < 1) throw std::invalid_argument("max_batch_rows must be >= 1");
  if (limits_.max_queue < 1) throw std::invalid_argument("max_queue must be >= 1");
  // Admission counts what rows use; the bound keeps the buffers' room for growth and the pools'
  // holes within the same budget.
  state_.set_held_limit(limits_.max_state_bytes);
  thread_ = std::thread([this] {
    run();
    thread_ended_.set_value();
  });
}

Engine::~Engine() { stop(); }

void Engine::submit(std::shared_ptr<Request> request) {
  if (!request || !request->on_finish) throw std::invalid_argument("request needs an on_finish callback");
  // Validates the options; encoder_no_repeat_ngram_size and encoder_repetition_penalty read the input.
  Pending pending{request, searcher_factory_(reads_encoder_input(request->options)
                                                 ? with_encoder_input(request->options, request->input_ids)
                                                 : request->options)};
  if (pending.searcher->num_rows() > limits_.max_batch_rows) {
    throw std::invalid_argument("the request needs " + std::to_string(pending.searcher->num_rows()) +
                                " rows (beams or samples) but the model's batch holds at most " +
                                std::to_string(limits_.max_batch_rows) + "; ask for fewer beams or samples");
  }
  if (limits_.max_state_bytes > 0) {
    const auto& r = *pending.request;
    const int64_t rows = pending.searcher->num_rows();
    const int64_t need = state_bytes(shape_of(r, rows));
    if (need > limits_.max_state_bytes) {
      throw StateBudgetError(
          "the request needs about " + format_bytes(need) + " of decoder state (" + std::to_string(r.input_ids.size()) +
          " input tokens, " + std::to_string(rows) + (rows == 1 ? " row" : " rows (one per beam or sample)") +
          ", up to " + std::to_string(r.options.max_new_tokens) + " new tokens), over model '" + name_ +
          "''s budget of " + format_bytes(limits_.max_state_bytes) +
          " (--max-state-memory); send a shorter document, fewer beams or samples, fewer new tokens, "
          "or raise the budget");
    }
  }
  {
    std::lock_guard lock(mu_);
    if (!accepting_) throw ShuttingDownError("the server is shutting down; retry on another replica");
    if (static_cast<int64_t>(queue_.size()) >= limits_.max_queue) {
      throw QueueFullError("model '" + name_ + "' has " + std::to_string(queue_.size()) +
                           " requests waiting (the queue limit); retry later with backoff, or raise --max-queue");
    }
    pending.request->queued_at = Clock::now();
    queue_.push_back(std::move(pending));
    if (!has_work_.load()) {  // an engine idle for an hour is not stalled for an hour
      mark_progress();
      has_work_.store(true);
    }
    stats_.queued = static_cast<int64_t>(queue_.size());
    if (ModelMetrics* const m = metrics()) m->set_queue_depth(static_cast<double>(queue_.size()));
  }
  wake_.notify_one();
}

void Engine::stop_accepting() {
  std::lock_guard lock(mu_);
  accepting_ = false;
}

bool Engine::wait_idle(Clock::time_point deadline) {
  {
    std::unique_lock lock(mu_);
    const auto idle = [&] { return stats_.queued == 0 && stats_.encoding == 0 && stats_.live_requests == 0; };
    if (!idle_cv_.wait_until(lock, deadline, idle)) {
      return false;
    }
  }
  return delivery_.wait_idle(deadline);  // the last results handed over, not only decided
}

void Engine::cancel_all() {
  {
    std::lock_guard lock(mu_);
    cancel_all_ = true;
  }
  wake_.notify_one();
}

void Engine::begin_stop() {
  {
    std::lock_guard lock(mu_);
    accepting_ = false;
    stop_ = true;
    cancel_all_ = true;
  }
  wake_.notify_one();
}

bool Engine::stop(Clock::time_point deadline) {
  begin_stop();
  if (thread_.joinable() && thread_ended_future_.wait_until(deadline) != std::future_status::ready) return false;
  // stop() joins the delivery thread too, once it has run the callbacks the decode thread posted last: one
  // that hangs (it must not; a log line to a stderr nobody reads blocks) held it, and this, for good. Only
  // the decode thread posts, and it has ended.
  if (thread_.joinable() && !delivery_.wait_idle(deadline)) return false;
  stop();
  return true;
}

void Engine::stop() {
  begin_stop();
  if (!thread_.joinable()) return;
  thread_.join();
  delivery_.stop();  // after the decode thread: nothing posts any more; what is queued still runs
  const EngineStats s = stats();
  if (s.steps > 0 && s.step_seconds > 0) {
    spdlog::info(
        "model '{}': {} decode steps, {:.3f} s in steps, {:.3f} s in the model's step: engine overhead {:.2f}% "
        "of step time ({:.2f}% searching, {:.2f}% reordering state rows, {:.2f}% streaming)",
        name_, s.steps, s.step_seconds, s.model_seconds, 100.0 * (s.step_seconds - s.model_seconds) / s.step_seconds,
        100.0 * s.search_seconds / s.step_seconds, 100.0 * s.reorder_seconds / s.step_seconds,
        100.0 * s.stream_seconds / s.step_seconds);
    spdlog::info(
        "model '{}': {} encoder calls, {:.3f} s encoding and starting rows, {:.3f} s joining them to the batch, "
        "{} decode steps and {} requests admitted during encodes; {} requests went ahead of an older one "
        "waiting for room; {} requests' encoder output from the cache",
        name_, s.encodes, s.encode_seconds, s.join_seconds, s.steps_while_encoding, s.admitted_while_encoding,
        s.bypassed, s.encoder_cache_hits);
  }
}

EngineStats Engine::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

Clock::duration Engine::without_progress(Clock::time_point now) const {
  if (!has_work_.load()) return Clock::duration::zero();
  const Clock::time_point since{Clock::duration(progress_at_.load())};
  return std::max(Clock::duration::zero(), now - since);
}

Engine::BatchShape Engine::BatchShape::joined(const BatchShape& other) const {
  const StateShape& a = state;
  const StateShape& b = other.state;
  return {{a.requests + b.requests, a.rows + b.rows, std::max(a.encoder_positions, b.encoder_positions),
           std::max(a.switches, b.switches), std::max(a.decoder_positions, b.decoder_positions),
           a.request_positions + b.request_positions, a.request_switches + b.request_switches},
          row_inputs + other.row_inputs};
}

Engine::BatchShape Engine::shape_of(const Request& request, int64_t rows) const {
  const auto k = static_cast<int64_t>(request.input_ids.size());
  const int64_t switches = footprint_.switches(k, request.expected_length, request.options.max_new_tokens);
  return {{1, rows, k, switches, request.options.max_new_tokens, k, switches}, rows * k};
}

Engine::BatchShape Engine::running_shape() const {
  BatchShape shape;
  for (const auto& s : slots_) shape = shape.joined(shape_of(*s->request, s->rows));
  // Padding not yet cut back (DecoderState::trim_padding) is held too.
  if (state_.batch_size() > 0 && state_.cross_valid.defined()) {
    shape.state.encoder_positions = std::max(shape.state.encoder_positions, state_.cross_valid.size(1));
  }
  return shape;
}

int64_t Engine::state_bytes(const BatchShape& shape) const { return footprint_.bytes(shape.state); }

int64_t Engine::budget_of(const Pending& p) {
  return p.searcher->num_rows() *
         (static_cast<int64_t>(p.request->input_ids.size()) + p.request->options.max_new_tokens);
}

int64_t Engine::encode_tokens_of(const Pending& p) {
  return p.searcher->num_rows() * static_cast<int64_t>(p.request->input_ids.size());
}

void Engine::run() {
  if (limits_.threads > 0) at::set_num_threads(limits_.threads);  // per thread with OpenMP
  c10::InferenceMode inference_mode;
  while (true) {
    std::vector<Pending> admitted;
    std::vector<Pending> dropped;  // cancelled or expired while queued
    bool shutdown_now = false;
    {
      std::unique_lock lock(mu_);
      const auto has_work = [&] { return stop_ || cancel_all_ || !queue_.empty() || !slots_.empty(); };
      // The allocator keeps what a load freed for reuse (tcmalloc: the peak's pages, hundreds of MiB).
      // Idle for a while after one, give it back; never between steps or close bursts, which reuse it.
      if (!freed_since_busy_ && limits_.free_memory_after_idle.count() > 0 &&
          !wake_.wait_for(lock, limits_.free_memory_after_idle, has_work)) {
        lock.unlock();
        release_free_memory();
        freed_since_busy_ = true;
        lock.lock();
      }
      wake_.wait(lock, has_work);
      mark_progress();
      if (cancel_all_) {
        shutdown_now = true;
        cancel_all_ = false;
        for (auto& p : queue_) dropped.push_back(std::move(p));
        queue_.clear();
      } else {
        const auto now = Clock::now();
        for (auto it = queue_.begin(); it != queue_.end();) {
          if (it->request->cancelled() || it->request->expired(now)) {
            dropped.push_back(std::move(*it));
            it = queue_.erase(it);
          } else {
            ++it;
          }
        }
        admitted = take_admissions(now, {}, /*during_encode=*/false);
      }
      stats_.queued = static_cast<int64_t>(queue_.size());
      // The dropped too, until their results are posted (publish_stats zeroes it after): counted nowhere,
      // wait_idle could see the engine idle before their calls had their results.
      stats_.encoding = static_cast<int64_t>(admitted.size() + dropped.size());
      if (ModelMetrics* const m = metrics()) m->set_queue_depth(static_cast<double>(queue_.size()));
      if (stop_ && queue_.empty() && slots_.empty() && admitted.empty() && dropped.empty() && !shutdown_now) break;
    }

    const auto now = Clock::now();
    for (const auto& p : dropped) {
      // Their wait counts as much as an encoded request's: the longest waits are often those given up.
      if (ModelMetrics* const m = metrics()) m->observe_queue_wait(ms_between(p.request->queued_at, now) / 1000.0);
      post_dropped(p, now, now, shutdown_now);
    }
    if (shutdown_now) {
      for (auto& slot : slots_) slot->request->cancel();
      drop_dead_slots(/*shutdown=*/true);  // finishes them all as kShutdown
    }
    auto groups = admission_groups(std::move(admitted));
    waiting_groups_ = &groups;  // a group being admitted is moved out of it (an empty vector)
    for (size_t g = 0; g < groups.size(); ++g) {
      if (g > 0 && !slots_.empty()) {  // running rows (and groups admitted so far) wait one group at a time
        drop_dead_slots();
        if (!slots_.empty()) step();
      }
      admit(std::move(groups[g]));
    }
    waiting_groups_ = nullptr;
    drop_dead_slots();
    if (!slots_.empty()) step();
    publish_stats();
  }
  publish_stats();
}

std::vector<Engine::Pending> Engine::take_admissions(Clock::time_point now, const std::vector<const Pending*>& reserved,
                                                     bool during_encode) {
  std::vector<Pending> taken;
  int64_t rows = state_.batch_size();
  int64_t tokens = tokens_in_flight_;
  int64_t encode_tokens = 0;
  // What the batch would be with the next request: the tokens budget counts every row at the
  // longest input, the state budget what the model holds (its masks and full attention's keys padded
  // to the longest input, pooled keys at each request's own length).
  BatchShape shape = queue_.empty() ? BatchShape{} : running_shape();
  for (const Pending* p : reserved) {
    const int64_t r = p->searcher->num_rows();
    rows += r;
    tokens += budget_of(*p);
    shape = shape.joined(shape_of(*p->request, r));
  }
  // A request that does not fit lets later ones that do go first while it is younger than
  // limits_.queue_bypass (a long document waiting for room does not hold up the short requests
  // behind it); an older one stops admission until the rows leaving make room for it.
  bool passed_over = false;
  for (auto it = queue_.begin(); it != queue_.end();) {
    const Pending& next = *it;
    if (during_encode && (next.request->cancelled() || next.request->expired(now))) {
      ++it;
      continue;
    }
    const int64_t r = next.searcher->num_rows();
    const int64_t b = budget_of(next);
    const BatchShape joined = shape.joined(shape_of(*next.request, r));
    // The tokens budget counts each row's own input (budget_of); the rest is padding.
    const int64_t padding = (rows + r) * joined.state.encoder_positions - joined.row_inputs;
    const bool empty_batch = slots_.empty() && taken.empty() && reserved.empty();
    const bool fits =
        empty_batch || (rows + r <= limits_.max_batch_rows &&
                        (limits_.max_tokens_in_flight <= 0 || tokens + b + padding <= limits_.max_tokens_in_flight) &&
                        (limits_.max_state_bytes <= 0 || state_bytes(joined) <= limits_.max_state_bytes));
    if (!fits) {
      if (now - next.request->accepted_at >= limits_.queue_bypass) break;
      passed_over = true;
      ++it;
      continue;
    }
    const int64_t e = encode_tokens_of(next);
    if (limits_.max_encode_tokens > 0 && encode_tokens + e > limits_.max_encode_tokens) {
      if (during_encode) {  // a longer one waits for run(); shorter ones behind it may still fit
        ++it;
        continue;
      }
      if (!taken.empty()) break;
    }
    rows += r;
    tokens += b;
    encode_tokens += e;
    shape = joined;
    if (passed_over) {
      ++stats_.bypassed;
      if (ModelMetrics* const m = metrics()) m->on_bypass();
    }
    taken.push_back(std::move(*it));
    it = queue_.erase(it);
  }
  return taken;
}

void Engine::post_dropped(const Pending& p, Clock::time_point dequeued, Clock::time_point now, bool shutdown) {
  RequestResult result;
  result.outcome = shutdown                         ? RequestOutcome::kShutdown
                   : p.request->deadline_ended(now) ? RequestOutcome::kDeadlineExceeded
                                                    : RequestOutcome::kCancelled;
  result.finish_reason = FinishReason::kCancelled;
  result.usage = p.request->usage;
  result.usage.queue_ms = ms_between(p.request->queued_at, dequeued);
  result.usage.encode_ms = ms_between(dequeued, now);
  if (ModelMetrics* const m = metrics(); m && shutdown) m->on_rejected(RejectReason::kShuttingDown);
  delivery_.post(result_job(p.request, std::move(result)));
}

std::vector<std::vector<Engine::Pending>> Engine::admission_groups(std::vector<Pending> admitted) const {
  std::vector<std::vector<Pending>> groups;
  if (admitted.empty()) return groups;
  if (!device_.is_cpu() || admitted.size() == 1) {
    groups.push_back(std::move(admitted));
    return groups;
  }
  std::vector<int64_t> lengths;
  for (const auto& p : admitted) lengths.push_back(static_cast<int64_t>(p.request->input_ids.size()));
  const auto by_length = length_groups(lengths);
  for (auto rows = by_length.rbegin(); rows != by_length.rend(); ++rows) {  // shortest first: the first tokens soonest
    auto& group = groups.emplace_back();
    for (const int64_t i : *rows) group.push_back(std::move(admitted[static_cast<size_t>(i)]));
  }
  return groups;
}

bool Engine::abandon_encode(const std::vector<Pending>& batch) const {
  {
    std::lock_guard lock(mu_);
    if (cancel_all_) return true;
  }
  const auto now = Clock::now();
  return std::all_of(batch.begin(), batch.end(),
                     [now](const Pending& p) { return p.request->cancelled() || p.request->expired(now); });
}

bool Engine::at_admission_pause(const std::vector<Pending>& batch) {
  mark_progress();  // a long document's encode moves from piece to piece
  if (abandon_encode(batch)) return true;
  if (limits_.encode_stall.count() <= 0) return false;
  const auto now = Clock::now();
  int64_t joined = 0;
  // Only a request the cap let in alone (a long document) lets others in: encodes within the cap
  // already bound the streams' stall, and one inside another would double it. Only once it has run
  // encode_stall (one just over the cap ends about as soon as the next admission would start), and
  // for no more than half its time (the long document's own encode goes on at least at half speed).
  const auto over_the_cap = [this, &batch] {
    int64_t tokens = 0;
    for (const auto& p : batch) tokens += encode_tokens_of(p);
    return tokens > limits_.max_encode_tokens;
  };
  const auto running = now - admission_started_;
  const bool its_turn = running >= limits_.encode_stall && stepped_while_encoding_ <= running - stepped_while_encoding_;
  if (!admitting_during_encode_ && limits_.max_encode_tokens > 0 && its_turn && over_the_cap()) {
    joined = admit_during_encode(batch);
    if (abandon_encode(batch)) return true;
  }
  if (slots_.empty() || (joined == 0 && Clock::now() - last_step_end_ < limits_.encode_stall)) {
    stepped_while_encoding_ += Clock::now() - now;
    return false;
  }
  drop_dead_slots();
  if (!slots_.empty()) {
    step();
    if (ModelMetrics* const m = metrics()) m->on_step_while_encoding();
    std::lock_guard lock(mu_);
    ++stats_.steps_while_encoding;
  }
  stepped_while_encoding_ += Clock::now() - now;
  return false;
}

int64_t Engine::admit_during_encode(const std::vector<Pending>& batch) {
  std::vector<const Pending*> reserved;
  for (const auto& p : batch) reserved.push_back(&p);
  if (waiting_groups_ != nullptr) {
    for (const auto& group : *waiting_groups_) {
      for (const auto& p : group) reserved.push_back(&p);
    }
  }
  std::vector<Pending> taken;
  {
    std::lock_guard lock(mu_);
    if (queue_.empty()) return 0;
    taken = take_admissions(Clock::now(), reserved, /*during_encode=*/true);
    if (taken.empty()) return 0;
    stats_.queued = static_cast<int64_t>(queue_.size());
    stats_.admitted_while_encoding += static_cast<int64_t>(taken.size());
    if (ModelMetrics* const m = metrics()) m->set_queue_depth(static_cast<double>(queue_.size()));
  }
  const auto n = static_cast<int64_t>(taken.size());
  if (ModelMetrics* const m = metrics()) m->on_admitted_while_encoding(static_cast<uint64_t>(n));
  spdlog::debug("model '{}': {} queued requests admitted during an encode of {}", name_, n, batch.size());
  const ScopedValue one_level(admitting_during_encode_, true);  // their own pauses step the rows, admit none
  for (auto& group : admission_groups(std::move(taken))) admit(std::move(group));
  return n;
}

EncoderOutput Engine::encode_batch(const std::vector<Pending>& batch, bool& encoder_ran) {
  encoder_ran = false;
  const auto n = static_cast<int64_t>(batch.size());
  const bool caching = encoder_cache_.max_bytes() > 0;
  std::vector<torch::Tensor> cached(batch.size());
  std::vector<int64_t> fresh;                         // rows to encode
  std::vector<int64_t> encoded_as(batch.size(), -1);  // the row of the encode a row takes (-1: cached)
  int64_t kmax = 1, kfresh = 1;
  for (int64_t i = 0; i < n; ++i) {
    const auto& in = batch[i].request->input_ids;
    kmax = std::max<int64_t>(kmax, static_cast<int64_t>(in.size()));
    cached[i] = encoder_cache_.find(in);
    if (cached[i].defined()) continue;
    // With the cache on, a document twice in one admission is encoded once too.
    const auto twin =
        caching ? std::find_if(fresh.begin(), fresh.end(), [&](int64_t f) { return batch[f].request->input_ids == in; })
                : fresh.end();
    if (twin != fresh.end()) {
      encoded_as[i] = twin - fresh.begin();
      continue;
    }
    encoded_as[i] = static_cast<int64_t>(fresh.size());
    fresh.push_back(i);
    kfresh = std::max<int64_t>(kfresh, static_cast<int64_t>(in.size()));
  }
  EncoderOutput enc;
  if (!fresh.empty()) {
    const auto nf = static_cast<int64_t>(fresh.size());
    auto ids = torch::full({nf, kfresh}, config_.pad_token_id, torch::kInt64);
    auto mask = torch::zeros({nf, kfresh}, torch::kInt64);
    auto ida = ids.accessor<int64_t, 2>();
    auto ma = mask.accessor<int64_t, 2>();
    for (int64_t j = 0; j < nf; ++j) {
      const auto& in = batch[fresh[j]].request->input_ids;
      for (size_t p = 0; p < in.size(); ++p) {
        ida[j][static_cast<int64_t>(p)] = in[p];
        ma[j][static_cast<int64_t>(p)] = 1;
      }
    }
    enc = model_->encode(ids.to(device_), mask.to(device_), [this, &batch] { return at_admission_pause(batch); });
    encoder_ran = true;
    std::lock_guard lock(mu_);
    ++stats_.encodes;
    stats_.max_encoded_tokens = std::max(stats_.max_encoded_tokens, mask.sum().item<int64_t>());
  }
  if (caching) {
    for (size_t j = 0; j < fresh.size(); ++j) {
      const auto k = static_cast<int64_t>(batch[fresh[j]].request->input_ids.size());
      // The encode succeeded: a copy that cannot be made (out of memory) only leaves the rest uncached.
      try {
        encoder_cache_.insert(batch[fresh[j]].request->input_ids, enc.hidden[static_cast<int64_t>(j)].narrow(0, 0, k));
      } catch (const std::exception& e) {
        spdlog::warn("model '{}': encoder output not cached ({}); the requests go on without it", name_,
                     error_message(e));
        break;
      }
    }
    for (int64_t i = 0; i < n; ++i)
      batch[i].request->usage.encoder_cached = encoded_as[i] < 0 || fresh[encoded_as[i]] != i;
    const auto hits = static_cast<int64_t>(batch.size() - fresh.size());
    {
      std::lock_guard lock(mu_);
      stats_.encoder_cache_hits += hits;
      stats_.encoder_cache_bytes = encoder_cache_.bytes();
    }
    if (ModelMetrics* const m = metrics()) {
      m->on_encoder_cache(static_cast<uint64_t>(hits), fresh.size(), static_cast<double>(encoder_cache_.bytes()));
    }
  }
  if (static_cast<int64_t>(fresh.size()) == n) return enc;
  // Some rows from the cache: every row at its place in a batch padded to the longest (the padding is
  // masked, as an encode's is).
  const torch::Tensor like = fresh.empty() ? cached[0] : enc.hidden;
  EncoderOutput all;
  all.hidden = torch::zeros({n, kmax, like.size(-1)}, like.options());
  all.mask = torch::zeros({n, kmax}, like.options().dtype(torch::kBool));
  for (int64_t i = 0; i < n; ++i) {
    const auto k = static_cast<int64_t>(batch[i].request->input_ids.size());
    const torch::Tensor row = cached[i].defined() ? cached[i] : enc.hidden[encoded_as[i]].narrow(0, 0, k);
    all.hidden[i].narrow(0, 0, k).copy_(row);
    all.mask[i].narrow(0, 0, k).fill_(true);
  }
  return all;
}

void Engine::admit(std::vector<Pending> batch) {
  const auto start = Clock::now();
  if (!admitting_during_encode_) admission_started_ = start;
  // An admission during another's encode keeps its own count; the outer's resumes after it.
  const ScopedValue own_count(stepped_while_encoding_, Clock::duration{});
  const int64_t n = static_cast<int64_t>(batch.size());
  auto expected = torch::empty({n}, torch::kInt64);
  auto max_steps = torch::empty({n}, torch::kInt64);  // a row ends at its max_new_tokens (shape_of counts as much)
  auto ea = expected.accessor<int64_t, 1>();
  auto sa = max_steps.accessor<int64_t, 1>();
  std::vector<int64_t> expand;
  ModelMetrics* const metrics_now = metrics();
  for (int64_t i = 0; i < n; ++i) {
    // Here, whatever the encode does: an abandoned or failed one ended the wait as much.
    if (metrics_now) metrics_now->observe_queue_wait(ms_between(batch[i].request->queued_at, start) / 1000.0);
    ea[i] = batch[i].request->expected_length;
    sa[i] = batch[i].request->options.max_new_tokens;
    for (int64_t r = 0; r < batch[i].searcher->num_rows(); ++r) expand.push_back(i);
  }
  DecoderState joined;
  bool encoder_ran = false;
  try {
    const EncoderOutput enc = encode_batch(batch, encoder_ran);
    joined = model_->start(enc, expected.to(device_), max_steps.to(device_),
                           [this, &batch] { return at_admission_pause(batch); });
    if (static_cast<int64_t>(expand.size()) != n) {
      joined.select(torch::tensor(expand, torch::kInt64).to(device_));
    }
  } catch (const EncodeInterrupted&) {
    bool shutdown = false;
    {
      std::lock_guard lock(mu_);
      shutdown = cancel_all_;  // left set: the next iteration cancels the queue and the running rows
      ++stats_.encodes_abandoned;
    }
    const auto now = Clock::now();
    spdlog::debug("model '{}': encode of {} requests abandoned after {:.1f} ms: {}", name_, n, ms_between(start, now),
                  shutdown ? "shutting down" : "none is wanted any more");
    for (const auto& p : batch) post_dropped(p, start, now, shutdown);
    return;
  } catch (const std::exception& e) {
    spdlog::error("model '{}': encoding a batch of {} failed: {}", name_, n, error_message(e));
    for (auto& p : batch) {
      RequestResult result;
      result.outcome = RequestOutcome::kError;
      result.error = std::string("encoder failed: ") + error_message(e);
      result.usage = p.request->usage;
      delivery_.post(result_job(p.request, std::move(result)));
    }
    return;
  }
  const auto encoded = Clock::now();
  const double encode_ms = ms_between(start, encoded);  // the requests' wait, steps between layers included
  const double encoder_ms = encode_ms - std::chrono::duration<double, std::milli>(stepped_while_encoding_).count();
  // One observation per encoder call: an admission all from the encoder cache made none.
  if (ModelMetrics* const m = metrics(); m && encoder_ran) m->observe_encode(encoder_ms / 1000.0);
  try {
    state_.append(std::move(joined));
    std::lock_guard lock(mu_);
    stats_.encode_seconds += encoder_ms / 1000.0;
    stats_.join_seconds += ms_between(encoded, Clock::now()) / 1000.0;
  } catch (const std::exception& e) {
    // The running batch may be inconsistent now: fail everything rather than decode garbage. fail_all counts
    // the new rows leaving: they count joining too, or the rows in the batch (joined less left) fall below
    // the truth for good.
    int64_t rows = 0;
    for (auto& p : batch) {
      slots_.push_back(std::make_unique<Slot>(std::move(p), *tokenizer_));
      rows += slots_.back()->rows;
    }
    if (ModelMetrics* const m = metrics()) m->on_rows_joined(static_cast<uint64_t>(rows));
    fail_all(std::string("joining the batch failed: ") + error_message(e));
    return;
  }
  int64_t rows = 0;
  for (auto& p : batch) {
    const int64_t budget = budget_of(p);
    auto slot = std::make_unique<Slot>(std::move(p), *tokenizer_);
    slot->budget = budget;
    slot->next_tokens = torch::full({slot->rows}, slot->request->options.decoder_start_token_id, torch::kInt64);
    slot->admitted_at = start;
    slot->decode_start = encoded;
    slot->last_token = encoded;
    slot->encode_ms = encode_ms;
    tokens_in_flight_ += slot->budget;
    rows += slot->rows;
    spdlog::debug("request {}: admitted to '{}' ({} input tokens, {} rows)", slot->request->id, name_,
                  slot->request->input_ids.size(), slot->rows);
    slots_.push_back(std::move(slot));
  }
  if (ModelMetrics* const m = metrics()) m->on_rows_joined(static_cast<uint64_t>(rows));
}

void Engine::drop_dead_slots(bool shutdown) {
  or_fail_all("dropping cancelled and expired requests", [this, shutdown] { drop_dead_rows(shutdown); });
}

void Engine::drop_dead_rows(bool shutdown) {
  const auto now = Clock::now();
  std::vector<int64_t> keep;
  std::vector<size_t> kept_at;  // as in step_rows: slots leave slots_ only once all are decided
  std::vector<Delivery::Job> jobs;
  int64_t offset = 0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& slot = *slots_[i];
    const auto& req = *slot.request;
    if (req.cancelled() || req.expired(now)) {
      // Only cancel_all's cancels are the shutdown's: a client that cancels while the server drains
      // cancelled its own call (it was counted UNAVAILABLE).
      const RequestOutcome outcome = req.deadline_ended(now) ? RequestOutcome::kDeadlineExceeded
                                     : shutdown              ? RequestOutcome::kShutdown
                                                             : RequestOutcome::kCancelled;
      jobs.push_back(finish_slot(slot, offset, outcome, FinishReason::kCancelled));
    } else {
      for (int64_t r = 0; r < slot.rows; ++r) keep.push_back(offset + r);
      kept_at.push_back(i);
    }
    offset += slot.rows;
  }
  if (jobs.empty()) return;
  keep_slots(kept_at);
  delivery_.post(std::move(jobs));
  if (keep.empty()) {
    state_.clear();
  } else {
    state_.retain(keep);
  }
}

void Engine::keep_slots(const std::vector<size_t>& kept_at) {
  std::vector<std::unique_ptr<Slot>> kept;
  kept.reserve(kept_at.size());
  for (const size_t at : kept_at) kept.push_back(std::move(slots_[at]));
  slots_ = std::move(kept);
}

void Engine::step() {
  or_fail_all("decoder step", [this] { step_rows(); });
  mark_progress();
}

void Engine::or_fail_all(const char* what, const std::function<void()>& work) {
  try {
    work();
  } catch (const std::exception& e) {
    // Past the model's own calls (which fail their own way): reordering or compacting the state, e.g.
    // out of memory. The batch may be half-reordered: fail its requests rather than decode garbage, and
    // serve on (the engine thread must not die).
    spdlog::error("model '{}': {} over {} rows failed: {}", name_, what, state_.batch_size(), error_message(e));
    fail_all(std::string(what) + " failed: " + error_message(e));
  }
}

void Engine::step_rows() {
  const auto start = Clock::now();
  std::vector<torch::Tensor> inputs;
  inputs.reserve(slots_.size());
  for (const auto& slot : slots_) inputs.push_back(slot->next_tokens);
  torch::Tensor logits;
  torch::Tensor segment;
  double model_seconds = 0;
  try {
    // Host tokens in (the model moves them); logits to the host once: every request's searcher reads its
    // rows there (a copy per request on a GPU otherwise).
    logits = model_->step(state_, torch::cat(inputs)).to(torch::kCPU);
    segment =
        state_.segment.defined() ? state_.segment.to(torch::kCPU).contiguous() : torch::Tensor();  // syncs the device
    model_seconds = ms_between(start, Clock::now()) / 1000.0;
  } catch (const std::exception& e) {
    spdlog::error("model '{}': decoder step over {} rows failed: {}", name_, state_.batch_size(), error_message(e));
    fail_all(std::string("decoder step failed: ") + error_message(e));
    return;
  }

  // Rows kept for the next step, as indices into this step's rows (plain integers: per-slot tensor
  // ops would cost more than the bookkeeping they do).
  std::vector<int64_t> index;
  index.reserve(static_cast<size_t>(state_.batch_size()));
  // Slots stay in slots_ until the step has decided everything: whatever throws before then leaves
  // every request there for step() to fail (none is dropped without a result).
  std::vector<size_t> kept_at;  // each kept slot's position in this step's slot list
  std::vector<size_t> owner;    // the slot position each of this step's rows belongs to
  for (size_t i = 0; i < slots_.size(); ++i) owner.insert(owner.end(), static_cast<size_t>(slots_[i]->rows), i);
  std::vector<size_t> kept_first;  // and where its rows start in `index`
  bool same_rows = true;           // every slot has as many rows as the first (greedy: one each)
  for (const auto& slot : slots_) same_rows = same_rows && slot->rows == slots_.front()->rows;
  int64_t offset = 0;
  int64_t new_tokens = 0;
  const int64_t rows_before = state_.batch_size();
  double reorder_seconds = 0;
  double stream_seconds = 0;
  const auto search_start = Clock::now();
  const auto searched = search_all(logits);
  const double search_seconds = ms_between(search_start, Clock::now()) / 1000.0;
  std::vector<Delivery::Job> jobs;  // the step's callbacks, handed to the delivery thread at once
  jobs.reserve(slots_.size());
  bool rows_fell = false;  // a request kept fewer rows than it had (samples that ended)
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = *slots_[i];
    s.row_steps += s.rows;
    const int32_t seg = segment.defined() ? static_cast<int32_t>(segment.data_ptr<int64_t>()[offset]) : -1;
    if (config_.srformer.segmented() && seg >= 0 && (s.segments.empty() || s.segments.back() != seg)) {
      s.row_switches += s.rows;
    }
    const SearchStep& result = searched[i].step;
    if (searched[i].error) {
      if (searched[i].request_at_fault) {
        spdlog::info("request {}: its options left no token: {}", s.request->id, *searched[i].error);
      } else {
        spdlog::error("request {}: search failed: {}", s.request->id, *searched[i].error);
      }
      RequestResult failed;
      failed.outcome = RequestOutcome::kError;
      failed.request_at_fault = searched[i].request_at_fault;
      failed.error = searched[i].request_at_fault ? *searched[i].error : "search failed: " + *searched[i].error;
      failed.usage = s.request->usage;
      jobs.push_back(result_job(s.request, std::move(failed)));
      tokens_in_flight_ -= s.budget;
      if (ModelMetrics* const m = metrics()) m->on_rows_left(LeaveReason::kError, static_cast<uint64_t>(s.rows));
      offset += s.rows;
      continue;
    }
    s.segments.push_back(seg);
    const auto now = Clock::now();  // also where this request's streaming work starts
    std::vector<TokenEvent> events;
    for (size_t e = 0; e < result.emitted.size(); ++e) {
      const int64_t token = result.emitted[e];
      TokenEvent ev;
      ev.token_id = token;
      ev.logprob = e < result.emitted_logprobs.size() ? result.emitted_logprobs[e] : 0.0f;
      ev.step = static_cast<int32_t>(s.streamed.size());
      ev.segment = ev.step < static_cast<int32_t>(s.segments.size()) ? s.segments[ev.step] : seg;
      // One sample per delivery: tokens decided together (beam search's, all at its end) reach the
      // client at once, and their zero gaps would pull every inter-token quantile down.
      if (ModelMetrics* const m = metrics(); m && e == 0) {
        if (s.streamed.empty()) {
          m->observe_time_to_first_token(ms_between(s.request->accepted_at, now) / 1000.0);
        } else {
          m->observe_inter_token(ms_between(s.last_token, now) / 1000.0);
        }
      }
      s.streamed.push_back(token);
      s.streamed_logprobs.push_back(ev.logprob);
      s.last_token = now;
      events.push_back(std::move(ev));
    }
    new_tokens += static_cast<int64_t>(result.emitted.size());
    // The streamed sequence ends with its EOS, which for several samples (sample 0 streams) may come
    // steps before the request is done: flush the detokenizer onto that EOS event then. Flushing only
    // at `done` would find no event to carry the held-back text and repeat the last token for it.
    const bool stream_ends =
        result.done || (!result.emitted.empty() && is_eos(s.request->options, result.emitted.back()));
    if (s.detok && (!events.empty() || stream_ends)) {
      TokenEvent last;
      last.token_id = s.streamed.empty() ? config_.eos_token_id : s.streamed.back();
      last.logprob = s.streamed_logprobs.empty() ? 0.0f : s.streamed_logprobs.back();
      last.step = static_cast<int32_t>(s.streamed.size()) - 1;
      last.segment = seg;
      jobs.push_back(tokens_job(s.request, s.detok, std::move(events), stream_ends, std::move(last)));
    }
    if (result.done) {
      const auto hyps = s.searcher->results();
      const FinishReason reason = hyps.empty() ? FinishReason::kLength : hyps.front().finish_reason;
      jobs.push_back(finish_slot(s, offset, RequestOutcome::kOk, reason));
    }
    stream_seconds += ms_between(now, Clock::now()) / 1000.0;
    const int64_t rows_before = s.rows;
    if (!result.done) {
      const auto parents = result.parent_rows.to(torch::kCPU, torch::kInt64).contiguous();
      const int64_t* parent = parents.data_ptr<int64_t>();
      kept_first.push_back(index.size());
      for (int64_t r = 0; r < parents.numel(); ++r) index.push_back(parent[r] + offset);
      s.next_tokens = result.next_tokens.to(torch::kCPU, torch::kInt64);
      kept_at.push_back(i);
      if (parents.numel() < rows_before) {
        // Rows no parent names leave now: their RAF counts stay with the request, and they are counted
        // as rows that ended (by EOS: an end by length ends every sample at once).
        std::vector<bool> named(static_cast<size_t>(rows_before), false);
        for (int64_t r = 0; r < parents.numel(); ++r) named.at(static_cast<size_t>(parent[r])) = true;
        for (int64_t r = 0; r < rows_before; ++r) {
          if (named[static_cast<size_t>(r)]) continue;
          const auto [fired, total] = raf_counts(offset + r, 1);
          s.raf_fired_left += fired;
          s.raf_total_left += total;
        }
        if (ModelMetrics* const m = metrics())
          m->on_rows_left(LeaveReason::kEos, static_cast<uint64_t>(rows_before - parents.numel()));
        // Their share of the tokens budget (budget_of: the same per row) makes room for admissions.
        const int64_t released = s.budget / rows_before * (rows_before - parents.numel());
        s.budget -= released;
        tokens_in_flight_ -= released;
        s.rows = parents.numel();
        rows_fell = true;
      }
    }
    offset += rows_before;
  }
  // Moving the last requests into the holes of those that left keeps the others' rows in place only where
  // every request holds as many rows (a request whose samples ended this step holds fewer).
  if (same_rows && !rows_fell && !kept_at.empty() && kept_at.size() < slots_.size()) {
    // Requests that stay keep their rows; the last ones move into the holes of those that left.
    std::vector<int64_t> moved_index;
    std::vector<size_t> moved_at;
    moved_index.reserve(index.size());
    kept_first.push_back(index.size());
    for (const size_t e : fill_holes_from_tail(kept_at)) {
      moved_at.push_back(kept_at[e]);
      moved_index.insert(moved_index.end(), index.begin() + static_cast<std::ptrdiff_t>(kept_first[e]),
                         index.begin() + static_cast<std::ptrdiff_t>(kept_first[e + 1]));
    }
    index = std::move(moved_index);
    kept_at = std::move(moved_at);
  }
  // Rows that stay with the request they held (beams taking another beam's place) move only what
  // differs between beams (DecoderState::retain).
  std::vector<bool> same_request;
  same_request.reserve(index.size());
  for (const size_t at : kept_at) {
    for (int64_t r = 0; r < slots_[at]->rows; ++r) {
      const size_t row = same_request.size();
      same_request.push_back(row < owner.size() && owner[row] == at);
    }
  }
  keep_slots(kept_at);  // those that finished go (their results are in `jobs`)
  const auto post_start = Clock::now();
  delivery_.post(std::move(jobs));
  stream_seconds += ms_between(post_start, Clock::now()) / 1000.0;
  if (slots_.empty()) {
    state_.clear();
  } else {
    const auto reorder_start = Clock::now();
    state_.retain(index, same_request);
    reorder_seconds = ms_between(reorder_start, Clock::now()) / 1000.0;
  }
  last_step_end_ = Clock::now();
  const double step_seconds = ms_between(start, last_step_end_) / 1000.0;
  if (ModelMetrics* const m = metrics())
    m->on_step(static_cast<uint64_t>(rows_before), step_seconds, static_cast<uint64_t>(new_tokens));
  std::lock_guard lock(mu_);
  ++stats_.steps;
  stats_.step_seconds += step_seconds;
  stats_.model_seconds += model_seconds;
  stats_.reorder_seconds += reorder_seconds;
  stats_.search_seconds += search_seconds;
  stats_.stream_seconds += stream_seconds;
}

std::vector<Engine::Searched> Engine::search_all(const torch::Tensor& logits) {
  std::vector<Searched> out(slots_.size());
  std::vector<int64_t> offsets(slots_.size());
  for (size_t i = 1; i < slots_.size(); ++i) offsets[i] = offsets[i - 1] + slots_[i - 1]->rows;
  const auto search = [&](int64_t begin, int64_t end) {
    const c10::InferenceMode inference;  // thread-local: OpenMP's other threads start without it
    for (auto i = static_cast<size_t>(begin); i < static_cast<size_t>(end); ++i) {
      try {
        out[i].step = slots_[i]->searcher->advance(logits.narrow(0, offsets[i], slots_[i]->rows));
      } catch (const NoTokenLeftError& e) {
        out[i].error = e.what();
        out[i].request_at_fault = true;
      } catch (const std::exception& e) {
        out[i].error = error_message(e);
      }
    }
  };
  const auto n = static_cast<int64_t>(slots_.size());
  if (n >= 2 && at::get_num_threads() > 1) {
    // Requests' searchers are independent: a share of them per intra-op thread. Inside the parallel
    // region LibTorch runs each searcher's small ops on the calling thread. (at::parallel_for would run
    // serially here: this file is not built with -fopenmp.)
    kernels::parallel_chunks(n, at::get_num_threads(), search);
  } else {
    const kernels::SerialRegion serial;  // many small ops: waking a second thread for each costs more
    search(0, n);
  }
  return out;
}

std::pair<double, double> Engine::raf_counts(int64_t first_row, int64_t rows) const {
  if (!state_.raf_fired.defined() || !state_.raf_total.defined() || rows <= 0) return {0.0, 0.0};
  // raf_fired is [B, layers] (or [B]); raf_total [B] counts elements per layer.
  const auto fired_rows = state_.raf_fired.narrow(0, first_row, rows);
  const double layers = fired_rows.dim() == 2 ? static_cast<double>(fired_rows.size(1)) : 1.0;
  return {fired_rows.sum().item<double>(), state_.raf_total.narrow(0, first_row, rows).sum().item<double>() * layers};
}

Delivery::Job Engine::finish_slot(Slot& slot, int64_t row_offset, RequestOutcome outcome, FinishReason reason) {
  Request& req = *slot.request;
  RequestResult result;
  result.outcome = outcome;
  result.finish_reason = reason;
  result.usage = req.usage;
  const auto now = Clock::now();
  // Several samples (a row each): how many of the rows leaving now ended by EOS, the others by length.
  // Other requests' rows all leave as the request ended (beams as the best did).
  std::optional<int64_t> eos_rows;
  try {
    if (outcome == RequestOutcome::kOk) {
      const auto hyps = slot.searcher->results();
      if (!hyps.empty()) {
        result.token_ids = hyps.front().tokens;
        result.token_logprobs = hyps.front().token_logprobs;
        result.score = hyps.front().score;
      }
      for (size_t h = 1; h < hyps.size(); ++h) {
        result.alternatives.push_back({hyps[h], ""});
      }
      if (draws_independent_samples(req.options) && static_cast<int64_t>(hyps.size()) == slot.most_rows) {
        // The samples that ended before the last step have left, by EOS (step_rows).
        const auto by_eos = std::count_if(hyps.begin(), hyps.end(),
                                          [](const Hypothesis& h) { return h.finish_reason == FinishReason::kEos; });
        eos_rows = std::clamp<int64_t>(by_eos - (slot.most_rows - slot.rows), 0, slot.rows);
      }
    } else {
      result.token_ids = slot.streamed;
      result.token_logprobs = slot.streamed_logprobs;
    }
    auto& u = result.usage;
    u.output_tokens = static_cast<int64_t>(result.token_ids.size());
    u.queue_ms = ms_between(req.queued_at, slot.admitted_at);
    u.encode_ms = slot.encode_ms;
    u.decode_ms = ms_between(slot.decode_start, now);
    if (state_.num_segments.defined()) u.segments = state_.num_segments[row_offset].item<int64_t>();
    if (state_.raf_fired.defined() && state_.raf_total.defined()) {
      auto [fired, total] = raf_counts(row_offset, slot.rows);
      fired += slot.raf_fired_left;
      total += slot.raf_total_left;
      u.raf_firing_rate = total > 0 ? fired / total : 0.0;
    }
    // Its rows' shares of the batched tensors and its own spans of the pools (request_bytes; it was the
    // batch's bytes over its rows, so a short document beside a long one reported the long one's keys).
    // Rows that left earlier held less (a shorter cache): the most rows at today's share bound the peak.
    u.state_bytes = state_.request_bytes(row_offset, slot.most_rows);
  } catch (const std::exception& e) {
    result.outcome = RequestOutcome::kError;
    result.error = std::string("collecting the result failed: ") + error_message(e);
  }
  tokens_in_flight_ -= slot.budget;
  if (ModelMetrics* const m = metrics()) {
    if (state_.enc_len.defined()) {
      // Every row's step reads its variant's keys (s, 2s with the previous segment, s plus the pooled
      // ones, all k with full attention) where full attention reads k: the paper's saving, 0 for full.
      const int64_t k = state_.enc_len[row_offset].item<int64_t>();
      const auto read =
          static_cast<uint64_t>(keys_read_per_step(config_.srformer.cross_attention, config_.srformer.segment_size, k));
      const auto steps = static_cast<uint64_t>(slot.row_steps);
      m->on_cross_attention_kv(steps * read, steps * static_cast<uint64_t>(k));
    }
    if (config_.srformer.segmented()) {
      // Per row, as the K/V counts above: every beam or sample switches and runs its own RAF state.
      const auto switches = static_cast<uint64_t>(slot.row_switches);
      m->on_segment_switches(switches);
      // Each switch runs the RAF neuron once in every decoder layer.
      if (config_.srformer.uses_raf()) {
        m->on_raf_updates(switches * static_cast<uint64_t>(std::max<int64_t>(0, config_.decoder_layers)));
      }
    }
    if (eos_rows && result.outcome == RequestOutcome::kOk) {
      if (*eos_rows > 0) m->on_rows_left(LeaveReason::kEos, static_cast<uint64_t>(*eos_rows));
      if (slot.rows > *eos_rows) m->on_rows_left(LeaveReason::kLength, static_cast<uint64_t>(slot.rows - *eos_rows));
    } else {
      m->on_rows_left(leave_reason(result.outcome, reason), static_cast<uint64_t>(slot.rows));
    }
    m->observe_request_tokens(static_cast<uint64_t>(result.usage.input_tokens),
                              static_cast<uint64_t>(result.usage.output_tokens));
  }
  spdlog::debug("request {}: finished ({}, {} tokens, {:.1f} ms decode)", req.id, to_string(reason),
                result.usage.output_tokens, result.usage.decode_ms);
  const bool decode = result.outcome != RequestOutcome::kError;
  return result_job(slot.request, std::move(result), decode ? tokenizer_ : nullptr);
}

void Engine::fail_all(const std::string& error) {
  for (auto& slot : slots_) {
    RequestResult result;
    result.outcome = RequestOutcome::kError;
    result.error = error;
    result.usage = slot->request->usage;
    result.token_ids = slot->streamed;
    result.token_logprobs = slot->streamed_logprobs;
    tokens_in_flight_ -= slot->budget;
    if (ModelMetrics* const m = metrics()) m->on_rows_left(LeaveReason::kError, static_cast<uint64_t>(slot->rows));
    delivery_.post(result_job(slot->request, std::move(result)));
  }
  slots_.clear();
  state_.clear();
  tokens_in_flight_ = 0;
}

void Engine::publish_stats() {
  int64_t rows = 0;
  for (const auto& slot : slots_) rows += slot->rows;
  constexpr auto kStatsInterval = std::chrono::milliseconds(100);
  const auto now = Clock::now();
  // An empty batch and the first rows after one are published at once (tests and operators wait
  // for them); in between, gauges a scrape reads every few seconds need not follow every step.
  const bool walk = state_.batch_size() == 0 || state_bytes_ == 0 || now - state_walked_ >= kStatsInterval;
  if (walk) {
    // Figures only: a failure here (a CUDA error surfacing at a sync, out of memory) is logged, not thrown
    // out of the engine thread, which would end the process; the next step fails its batch instead.
    try {
      publish_state_figures(now);
    } catch (const std::exception& e) {
      spdlog::warn("model '{}': reading the decoder state's figures failed: {}", name_, error_message(e));
    }
  }
  bool idle = false;
  {
    std::lock_guard lock(mu_);
    stats_.live_requests = static_cast<int64_t>(slots_.size());
    stats_.live_rows = rows;
    stats_.tokens_in_flight = tokens_in_flight_;
    stats_.max_live_rows = std::max(stats_.max_live_rows, rows);
    stats_.state_bytes = state_bytes_;
    stats_.state_held_bytes = state_held_bytes_;
    stats_.encoding = 0;  // admit() has made them slots or finished them
    idle = stats_.queued == 0 && slots_.empty();
    has_work_.store(!idle);
  }
  if (!slots_.empty()) freed_since_busy_ = false;
  if (idle) idle_cv_.notify_all();
}

void Engine::publish_state_figures(Clock::time_point now) {
  state_walked_ = now;
  state_bytes_ = state_.batch_size() > 0 ? state_.bytes() : 0;
  state_held_bytes_ = state_.batch_size() > 0 ? state_.held_bytes() : 0;
  ModelMetrics* const m = metrics();
  if (!m) return;
  m->set_state_bytes(static_cast<double>(state_bytes_), static_cast<double>(state_held_bytes_));
  // Per-layer RAF firing ratio over the live rows (raf_fired [B, layers], raf_total [B] per layer); with no
  // live row that took a RAF step it is undefined and its series go, as the state gauges go to 0.
  if (state_.batch_size() > 0 && state_.raf_fired.defined() && state_.raf_fired.dim() == 2 &&
      state_.raf_total.defined()) {
    const double total = state_.raf_total.sum().item<double>();
    if (total > 0) {
      const auto per_layer = (state_.raf_fired.sum(0) / total).to(torch::kCPU, torch::kFloat64);
      for (int64_t l = 0; l < per_layer.size(0); ++l) {
        m->set_raf_fired_ratio(static_cast<int>(l), per_layer[l].item<double>());
      }
      return;
    }
  }
  m->clear_raf_fired_ratio();
}

}  // namespace srformer::server
