#pragma once
// `srformer train`'s engine: teacher-forced fine-tuning of any loaded model (BART/T5, any
// cross-attention variant; gradients flow through the RAF recurrence over segments) with AdamW,
// linear warm-up/decay, gradient clipping and accumulation, optional label smoothing. Seeded and
// reproducible: a run resumed from a checkpoint repeats the uninterrupted run's losses exactly.
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "model/data/examples.h"
#include "model/seq2seq.h"
#include "model/tokenizer/tokenizer.h"
#include "model/train/adamw.h"

namespace srformer::train {

struct TrainOptions {
  std::filesystem::path model_dir;        // Hugging Face directory with its tokenizer (the starting point)
  std::filesystem::path train_file;       // JSONL {"id", "document", "summary"}
  std::filesystem::path validation_file;  // optional: validation loss and ROUGE
  std::filesystem::path out_dir;          // checkpoints, train_log.jsonl, the final model
  std::string device = "cpu";             // "cpu" or "cuda[:N]"
  // Mixed precision: "off" (fp32), "bf16" (CPU or CUDA) or "fp16" (CUDA, with dynamic loss scaling).
  // Matrix products run in that type; parameters, gradients, AdamW, the loss, K^T V, ||K|| and the RAF
  // membrane stay fp32, and validation runs in fp32 (the model is saved and served in fp32).
  std::string autocast = "off";
  // Dropout in training: every rate (hidden, attention, activation) set to this value; nullopt: the
  // model config's rates (Hugging Face's fields and defaults, e.g. 0.1 for BART and T5). Each
  // micro-batch's dropout draws from a generator seeded by (seed, micro-batch index), so a resumed
  // run still repeats the uninterrupted one exactly.
  std::optional<double> dropout;

  int64_t steps = 1000;  // optimizer updates
  int64_t batch_size = 16;
  int64_t grad_accum = 1;  // micro-batches per update; the loss is averaged over all their tokens
  double lr = 5e-4;
  int64_t warmup_steps = -1;  // -1: 5% of steps
  AdamWOptions adam;
  double clip_norm = 1.0;  // 0 = no clipping
  double label_smoothing = 0.0;
  int64_t max_input_tokens = 512;
  // Summaries are cut to this many tokens; it is also SRformer's expected length L in training, and
  // the saved model's generation default (max_length) so that serving uses the same L.
  int64_t max_target_tokens = 64;
  std::optional<int64_t> train_limit;  // use only the first N training examples

  int64_t log_every = 10;  // updates between log lines (and progress refreshes)
  int64_t eval_every = 0;  // updates between validations; 0 = at the end only
  int64_t save_every = 0;  // updates between checkpoints; 0 = at the end only
  int64_t keep_checkpoints = 2;
  int64_t eval_examples = 100;  // validation examples for loss and ROUGE (0 = all)
  int64_t eval_batch = 16;

  // Ends this run after update N (0 = run to `steps`) with a checkpoint, keeping the learning-rate
  // schedule of `steps`: for time-boxed or preemptible jobs that continue with `resume`.
  int64_t stop_after = 0;
  // Set (by a signal handler) to end the run after the current update as --stop-after would; set before
  // the first update (while the data and the model are read), it ends the run with nothing written.
  const std::atomic<bool>* stop_requested = nullptr;

  uint64_t seed = 0;
  bool resume = false;        // continue from the newest out_dir/checkpoint-N
  bool progress_bar = false;  // redraw one line (a terminal) instead of printing a line per log interval
};

struct TrainResult {
  int64_t steps = 0;
  int64_t updates = 0;     // of them, run in this run (a resumed run's checkpoint had the others)
  double last_loss = 0.0;  // mean NLL per token over the last log interval
  std::optional<double> validation_loss;
  std::optional<double> rouge1, rouge2, rougeL, rougeLsum;  // F1 x100 on the validation examples
  double seconds = 0.0;
  int64_t tokens = 0;              // target tokens trained on in this run
  int64_t skipped_updates = 0;     // fp16: updates whose gradients overflowed (the loss scale then halves)
  bool stopped_by_signal = false;  // stop_requested ended it (with a checkpoint; none before the first update)
};

// Throws std::invalid_argument for bad options or data, std::runtime_error for I/O failures.
// Progress (a bar on a terminal, lines otherwise) goes to `console`.
TrainResult train(const TrainOptions& options, std::ostream& console);

// Mean NLL per target token of `examples` under teacher forcing, as training computes it (documents cut to
// options.max_input_tokens, summaries to options.max_target_tokens, L = max_target_tokens).
double validation_loss(Seq2SeqModel& model, const Tokenizer& tokenizer, const std::vector<data::Example>& examples,
                       const TrainOptions& options);

// The newest out_dir/checkpoint-N holding trainer_state.json; empty path when none.
std::filesystem::path latest_checkpoint(const std::filesystem::path& out_dir);

}  // namespace srformer::train
