#pragma once
// The serving engine of one model: a bounded queue and ONE decode thread that owns the model and the
// batched DecoderState. Each loop iteration admits waiting requests (one batched encode), runs one
// decoder step over every live row, lets each request's Searcher pick its tokens, queues the new
// tokens and finished results for the delivery thread (which detokenizes and runs the requests'
// callbacks), and reorders/drops rows with a single DecoderState::retain. RPC threads never touch
// tensors.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "model/decoder_state.h"
#include "model/generation/searcher.h"
#include "model/seq2seq.h"
#include "model/tokenizer/tokenizer.h"
#include "server/engine/delivery.h"
#include "server/engine/encoder_cache.h"
#include "server/engine/request.h"

namespace srformer::server {

class ModelMetrics;

struct EngineLimits {
  int64_t max_batch_rows = 64;       // rows (beams count) decoded together
  int64_t max_tokens_in_flight = 0;  // sum over live requests of rows * (input + max_new_tokens); 0 = no limit
  int64_t max_queue = 256;           // requests waiting to be admitted
  // Input tokens (rows * input length) encoded per iteration while other rows decode; an encoder
  // call stalls every running stream, so a burst of arrivals is admitted over several steps.
  // 0 = no limit. A request longer than this still gets in, alone.
  int64_t max_encode_tokens = 0;
  // Bytes of decoder state the batch may hold, by the model's StateFootprint of its rows once a request
  // joins (masks, caches and dense keys padded to the batch's longest input and max_new_tokens; pooled
  // keys/values and switch tables at each request's own length, once for its beams).
  // A request that alone needs more is refused at submit(). The state's buffers (their room for
  // growth, the pools' holes) are held to it too (DecoderState::set_held_limit). 0 = no limit.
  int64_t max_state_bytes = 0;
  // A request that does not fit the batch's rows, tokens or state budget lets later requests that do
  // fit go ahead of it until it has waited this long since it was accepted; then admission waits for
  // it (no request starves behind a stream of smaller ones). 0 = first come, first served.
  std::chrono::milliseconds queue_bypass{0};
  // Once the batch has been idle (no rows, nothing queued) this long after running rows, the allocator's
  // free memory is handed back to the kernel (release_free_memory), so that resident memory follows a
  // finished load down; bursts closer together than this keep reusing the same warm pages. 0 = never.
  std::chrono::milliseconds free_memory_after_idle{0};
  // Bytes of encoder outputs kept for inputs that come again (EncoderCache); 0 = none.
  int64_t encoder_cache_bytes = 0;
  // Between two sublayers of an admission's encode (and two layers of its start), the running rows take
  // a decode step once they have waited this long since their last one: an encode stalls the streams
  // for about this long plus one sublayer instead of the whole encoder (its own requests start that
  // many steps later). Between the sublayers of an encode over max_encode_tokens (a long document, let
  // in alone) that has run this long, queued requests within that cap are encoded and join too, then
  // step, as long as that and the steps have taken at most half the encode's time so far: the short ones
  // behind a long document do not wait for its whole encode, which still runs at half speed or more.
  // 0 = the encode runs whole, then the rows step.
  std::chrono::milliseconds encode_stall{0};
  int threads = 0;  // torch intra-op threads of the decode thread; 0 = leave as is
};

struct EngineStats {
  int64_t queued = 0;
  int64_t encoding = 0;  // taken from the queue: their batch encoding, or their drop posted (neither queued nor live)
  int64_t live_requests = 0;
  int64_t live_rows = 0;
  int64_t tokens_in_flight = 0;  // what the live requests count against --max-tokens-in-flight
  int64_t state_bytes = 0;       // DecoderState bytes the rows use after the last iteration
  int64_t state_held_bytes = 0;  // memory the state keeps allocated for them (DecoderState::held_bytes)
  int64_t steps = 0;             // decoder steps run so far
  int64_t max_live_rows = 0;
  // Wall time of decode iterations, and the part of it spent in the model's step (the rest is
  // the engine's own per-step work: search, streaming, state reordering).
  double step_seconds = 0;
  double model_seconds = 0;
  double reorder_seconds = 0;           // of the engine's part: selecting/compacting state rows after a step
  double search_seconds = 0;            // of the engine's part: the requests' searchers (logits processors, pick)
  double stream_seconds = 0;            // of the engine's part: queueing tokens and results for the delivery thread
  double join_seconds = 0;              // admissions: adding the encoded rows to the running batch's state
  double encode_seconds = 0;            // admissions: encoding and starting the rows' state
  int64_t encodes = 0;                  // encoder calls (one per admitted batch)
  int64_t bypassed = 0;                 // admissions ahead of an older request that did not fit (queue_bypass)
  int64_t encodes_abandoned = 0;        // encoder calls stopped part-way: all their requests gone (cancelled,
                                        // past the deadline, shutdown)
  int64_t max_encoded_tokens = 0;       // the largest encoder call, in input tokens (rows * length)
  int64_t encoder_cache_hits = 0;       // admitted requests not encoded: held, or a twin in their admission
  int64_t encoder_cache_bytes = 0;      // what the cache holds
  int64_t steps_while_encoding = 0;     // decoder steps run between encoder layers (encode_stall)
  int64_t admitted_while_encoding = 0;  // requests encoded and joined between another encode's layers
};

// Thrown by submit(); the service maps them to RESOURCE_EXHAUSTED / UNAVAILABLE.
class QueueFullError : public std::runtime_error {
  using std::runtime_error::runtime_error;
};
class ShuttingDownError : public std::runtime_error {
  using std::runtime_error::runtime_error;
};
// A request whose decoder state alone would exceed EngineLimits::max_state_bytes: like an input over
// the model's limit, it cannot run on this server as configured (INVALID_ARGUMENT).
class StateBudgetError : public std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

using SearcherFactory = std::function<std::unique_ptr<Searcher>(const GenerationOptions&)>;

class Engine {
 public:
  // The engine takes the model; the tokenizer is shared with the service (tokenizing on RPC threads).
  Engine(std::string name, std::unique_ptr<Seq2SeqModel> model, std::shared_ptr<const Tokenizer> tokenizer,
         EngineLimits limits, ModelMetrics* metrics = nullptr, SearcherFactory searcher_factory = make_searcher);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request. Creates its Searcher here, so invalid options throw std::invalid_argument on the
  // caller's thread (as does a request over the state budget: StateBudgetError). Throws QueueFullError /
  // ShuttingDownError when refused (callbacks then never run).
  void submit(std::shared_ptr<Request> request);

  // Refuses new requests from now on; queued and running ones continue.
  void stop_accepting();
  // Blocks until nothing is queued or running, or until `deadline`; returns whether it drained.
  bool wait_idle(Clock::time_point deadline);
  // Cancels every queued and running request (they finish with outcome kShutdown).
  void cancel_all();
  // Cancels everything and joins the decode thread. Idempotent.
  void stop();
  // Asks the decode thread to end (everything cancelled, as stop() does) without waiting for it.
  void begin_stop();
  // stop() that waits for the decode thread, and the delivery thread's last callbacks, only until `deadline`:
  // false if one is still running (a hung step, a hung callback), which stop() and the destructor then still
  // wait for. A server exiting anyway (main) ends there.
  bool stop(Clock::time_point deadline);
  // Where the engine reports from now on (null: nowhere). For work that is no client's, such as the
  // server's warm-up: detach, run it, wait for its result, attach again.
  void set_metrics(ModelMetrics* metrics) { metrics_.store(metrics, std::memory_order_release); }
  ModelMetrics* metrics() const { return metrics_.load(std::memory_order_acquire); }

  EngineStats stats() const;
  // How long the engine has had work (requests queued, being encoded or running) without moving: no turn of
  // its loop, no decode step, no pause between the pieces of an encode or a start. Zero while it has none;
  // counted from the request that gave an idle engine work. Lock-free, so that a decode thread hung while
  // holding the engine's lock cannot hang the caller (the server's stall watch, which turns health
  // NOT_SERVING).
  Clock::duration without_progress(Clock::time_point now) const;
  const std::string& name() const { return name_; }
  const ModelConfig& config() const { return config_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const EngineLimits& limits() const { return limits_; }
  torch::Device device() const { return device_; }
  torch::ScalarType dtype() const { return dtype_; }
  int64_t parameter_count() const { return parameters_; }

 private:
  struct Slot;
  struct Pending {
    std::shared_ptr<Request> request;
    std::unique_ptr<Searcher> searcher;
  };

  void run();
  // The decode thread moved (without_progress).
  void mark_progress() { progress_at_.store(Clock::now().time_since_epoch().count()); }
  // The requests admitted together, as the batches to encode and start: on the CPU in groups of similar
  // input length (model/length_groups.h; the decoder's start pads too), shortest first, with a decode
  // step between two groups (run()); elsewhere one batch.
  std::vector<std::vector<Pending>> admission_groups(std::vector<Pending> admitted) const;
  void admit(std::vector<Pending> batch);
  // The batch's encoder output: rows the cache holds from there, the others encoded together (and then
  // held; with the cache on, a document twice in the batch once). Marks the usage of requests whose
  // output was not encoded for them; `encoder_ran`: whether the encoder was called (false: all from the
  // cache). Throws EncodeInterrupted as encode() does.
  EncoderOutput encode_batch(const std::vector<Pending>& batch, bool& encoder_ran);
  // Finishes the requests cancelled or past their deadline and drops their rows (drop_dead_rows), under
  // or_fail_all. `shutdown`: cancel_all cancelled them all (kShutdown, not the clients' kCancelled).
  void drop_dead_slots(bool shutdown = false);
  void drop_dead_rows(bool shutdown);
  // Finishes a request that leaves before decoding: cancelled, expired or shut down while queued
  // (dequeued = now) or while its batch encoded (from dequeued to now).
  void post_dropped(const Pending& p, Clock::time_point dequeued, Clock::time_point now, bool shutdown);
  // Whether an admitted batch's encode can stop: shutdown cancels everything, or no request in it is
  // still wanted.
  bool abandon_encode(const std::vector<Pending>& batch) const;
  // Runs `work` (a pass over the running rows); whatever it throws fails the running requests
  // ("WHAT failed: ..."), not the engine. Every slot stays in slots_ until such a pass has decided all.
  void or_fail_all(const char* what, const std::function<void()>& work);
  // Ends such a pass: the slots at `kept_at` (positions in slots_) stay, in that order; the others go.
  void keep_slots(const std::vector<size_t>& kept_at);
  // Under mu_: takes from queue_, in order, the requests that join the batch next within its limits
  // (rows, tokens, state; `reserved`: taken, not yet joined, counted as joined). `during_encode`: an
  // admission between another encode's layers (max_encode_tokens set): only requests within it (together),
  // none of them as the exception a longer one gets; cancelled and expired ones stay for run() to drop.
  std::vector<Pending> take_admissions(Clock::time_point now, const std::vector<const Pending*>& reserved,
                                       bool during_encode);
  // Asked between the layers of an admission's encode and start: abandons them (true) as abandon_encode
  // says; otherwise, inside an encode over max_encode_tokens that has run EngineLimits::encode_stall and
  // had at least half its time, admits the queued requests that fit (admit_during_encode), and steps the
  // running rows once they have waited EngineLimits::encode_stall (or when some joined).
  bool at_admission_pause(const std::vector<Pending>& batch);
  // Encodes and joins queued requests from inside `batch`'s pause; returns how many joined.
  int64_t admit_during_encode(const std::vector<Pending>& batch);
  // One decode step over every live row (step_rows), under or_fail_all.
  void step();
  void step_rows();
  // Every slot's searcher over its rows of the step's logits [rows, vocab], in slot order.
  struct Searched {
    SearchStep step;
    std::optional<std::string> error;  // what the searcher threw
    bool request_at_fault = false;     // ... a NoTokenLeftError: the request's options
  };
  std::vector<Searched> search_all(const torch::Tensor& logits);
  // Collects a leaving slot's result and usage (its rows are still in state_); returns the delivery
  // job that decodes the summary and hands the result over.
  Delivery::Job finish_slot(Slot& slot, int64_t row_offset, RequestOutcome outcome, FinishReason reason);
  // RAF neurons that fired, and neuron updates, over `rows` batch rows from `first_row` (0, 0 without RAF).
  std::pair<double, double> raf_counts(int64_t first_row, int64_t rows) const;
  void fail_all(const std::string& error);
  void publish_stats();
  // The state's bytes and RAF firing figures (every kStatsInterval while rows are live): may throw.
  void publish_state_figures(Clock::time_point now);
  // What a request counts against the tokens budget (rows × (input + max_new_tokens)), and against
  // EngineLimits::max_encode_tokens (rows × input).
  static int64_t budget_of(const Pending& p);
  static int64_t encode_tokens_of(const Pending& p);
  // What the memory bounds count of a batch: its extent for the state budget (what every row is
  // padded to, what each request holds of its own) and Σ rows × own input length for the tokens budget.
  struct BatchShape {
    StateShape state;
    int64_t row_inputs = 0;
    BatchShape joined(const BatchShape& other) const;
  };
  BatchShape shape_of(const Request& request, int64_t rows) const;
  BatchShape running_shape() const;  // the live rows'
  int64_t state_bytes(const BatchShape& shape) const;

  const std::string name_;
  std::unique_ptr<Seq2SeqModel> model_;
  const std::shared_ptr<const Tokenizer> tokenizer_;
  const ModelConfig config_;
  const torch::Device device_;
  const torch::ScalarType dtype_;
  const int64_t parameters_;
  const StateFootprint footprint_;
  const EngineLimits limits_;
  std::atomic<ModelMetrics*> metrics_;  // read at each use: set_metrics may change it between requests
  const SearcherFactory searcher_factory_;

  // Shared with submitting threads.
  mutable std::mutex mu_;
  std::condition_variable wake_;     // decode thread: work or stop
  std::condition_variable idle_cv_;  // wait_idle
  std::deque<Pending> queue_;
  bool accepting_ = true;
  bool stop_ = false;
  bool cancel_all_ = false;
  EngineStats stats_;
  // For without_progress: whether there is work (written under mu_ where work comes and where the engine
  // finds itself idle), and when the engine last moved or the work came to an idle engine.
  std::atomic<bool> has_work_{false};
  std::atomic<Clock::rep> progress_at_{0};

  Delivery delivery_;  // callbacks, in order, off the decode thread

  // Decode-thread only.
  std::vector<std::unique_ptr<Slot>> slots_;  // in row order
  DecoderState state_;
  EncoderCache encoder_cache_;
  int64_t tokens_in_flight_ = 0;
  Clock::time_point last_step_end_{};
  Clock::duration stepped_while_encoding_{};  // by the admission being encoded: not its encode time
  // run()'s admitted groups not yet encoded (their rows count against the limits of an admission
  // during an encode); null outside run()'s admissions.
  const std::vector<std::vector<Pending>>* waiting_groups_ = nullptr;
  bool admitting_during_encode_ = false;   // such an admission runs: its own pauses only step
  Clock::time_point admission_started_{};  // of the admission run() is encoding (not of one inside it)
  // publish_stats walks the state for its bytes and RAF figures at most every kStatsInterval while
  // rows are live (~75 us a walk: ~0.4% of a 32-row T5-small step if done at every step).
  Clock::time_point state_walked_{};
  int64_t state_bytes_ = 0;
  int64_t state_held_bytes_ = 0;
  bool freed_since_busy_ = true;  // the allocator's free memory was given back since rows last ran

  std::promise<void> thread_ended_;  // set as the decode thread returns (stop(deadline))
  std::future<void> thread_ended_future_ = thread_ended_.get_future();
  std::thread thread_;
};

}  // namespace srformer::server
