// `srformer train MODEL_DIR TRAIN.jsonl --out DIR [options]`: fine-tunes a model (model/train/trainer.h).
#include <torch/torch.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <iomanip>
#include <iostream>
#include <string>
#include <vector>

#include "model/train/trainer.h"
#include "model/usable_cpus.h"
#include "tools/arg_reader.h"
#include "tools/device_flag.h"

namespace srformer::tools {

namespace {

// SIGINT/SIGTERM/SIGHUP (Ctrl-C, a preempted job, the terminal or SSH session closed) end the run after the
// current update, with a checkpoint to resume from (before the first update, with nothing written); a second
// one kills it at once (SA_RESETHAND restores the default action). A hang-up killed the run at once, losing
// every update since its last checkpoint (with the default --save-every 0, all of them).
std::atomic<bool> g_stop_requested{false};
volatile std::sig_atomic_t g_stop_signal = 0;
bool g_console_is_terminal = false;  // its progress bar then holds the line a stop's note starts on

extern "C" void request_stop(int sig) {
  g_stop_signal = sig;
  const bool first = !g_stop_requested.exchange(true);
  // Ctrl-C reaches a `| tee` reading the run's console as well, and it ends at once: the lines the stop
  // still prints then killed the run by SIGPIPE, before its checkpoint was written or after (exit 141).
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGPIPE, &ignore, nullptr);
  // Said at once (write() is async-signal-safe): an update can take minutes, and a user who saw nothing sent a
  // second signal, which ends the run without its checkpoint.
  if (first) {
    static const char kNote[] =
        "stop requested: the run ends after the update in progress, with a checkpoint (none before the first "
        "update); a second signal ends it at once, without one\n";
    if (g_console_is_terminal) (void)!::write(STDERR_FILENO, "\n", 1);
    (void)!::write(STDERR_FILENO, kNote, sizeof kNote - 1);
  }
}

void stop_on_signals() {
  struct sigaction action {};
  action.sa_handler = request_stop;
  action.sa_flags = SA_RESETHAND | SA_RESTART;
  sigemptyset(&action.sa_mask);
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction before {};
    sigaction(sig, &action, &before);
    // One ignored on entry stays ignored (a shell script's background job gets SIGINT so, for the script's
    // Ctrl-C is not its own; `nohup`-like wrappers): such a run took the script's Ctrl-C and stopped.
    if (before.sa_handler == SIG_IGN) sigaction(sig, &before, nullptr);
  }
}

const char* kUsage =
    "usage: srformer train MODEL_DIR TRAIN.jsonl --out DIR [options]\n"
    "  Fine-tunes MODEL_DIR (any BART/T5 directory with its tokenizer; from scratch: `srformer init-model` first)\n"
    "  on {\"id\", \"document\", \"summary\"} lines, teacher-forced with the model's own cross-attention variant.\n"
    "  DIR gets checkpoint-N/ (model + optimizer.safetensors + trainer_state.json), train_log.jsonl (every\n"
    "  figure) and, at the end, the trained model itself (serve it with --model name=DIR).\n"
    "  --validation FILE       validation loss and ROUGE (greedy) on its first --eval-examples (default 100; 0: all),\n"
    "                          documents cut to --max-input-tokens as in training (`srformer eval` reads up to\n"
    "                          the model's limit: give it the same --max-input-tokens to compare)\n"
    "  --steps N (1000)        optimizer updates        --batch N (16)     --grad-accum N (1)\n"
    "  --lr X (5e-4)           peak learning rate; linear warm-up over --warmup N (default 5% of steps; at\n"
    "                          most --steps), then\n"
    "                          linear decay to 0      --weight-decay X (0.01)  --clip X (1.0; 0 = off)\n"
    "  --beta1 X (0.9) --beta2 X (0.999) --adam-eps X (1e-8)   --label-smoothing X (0)\n"
    "  --max-input-tokens N (512)   --max-target-tokens N (64; at most 4096, and a BART's decoder\n"
    "                          positions): also SRformer's expected length L in training and the saved\n"
    "                          model's default for generation\n"
    "  --limit N               train on the first N examples only\n"
    "  --log-every N (10) --eval-every N (0 = at the end; needs --validation) --save-every N (0 = at the\n"
    "                          end) --keep N (2)\n"
    "  --dropout X             every dropout rate (0 = off); default: the model config's (HF: BART dropout 0.1,\n"
    "                          attention/activation 0; T5 dropout_rate 0.1)\n"
    "  --device cpu|cuda[:N] (cpu)\n"
    "  --autocast off|bf16|fp16 (off)  mixed precision: matrix products in bf16 (CPU or CUDA) or fp16 (CUDA,\n"
    "                          with dynamic loss scaling); weights, optimizer, loss, K^T V, ||K|| and the RAF\n"
    "                          membrane stay fp32, the saved model is fp32\n"
    "  --eval-batch N (16) --seed N (0) --resume (continue from DIR's newest checkpoint)\n"
    "  --threads N             default: OMP_NUM_THREADS, else the CPUs this process may use, after taskset/cpuset\n"
    "                          and a CPU quota (docker --cpus, Kubernetes limits.cpu)\n"
    "  --stop-after N          end this run after update N (at most --steps) with a checkpoint (the schedule\n"
    "                          stays that of --steps); continue later with --resume\n"
    "  Refused as --out: MODEL_DIR, a DIR another run is using (it holds DIR/.train.lock while it runs), a DIR\n"
    "  with checkpoints unless --resume continues them, and a DIR\n"
    "  holding a model (config.json and weights) but no checkpoints (it would be replaced).\n";

}  // namespace

int run_train(const std::vector<std::string>& args) {
  train::TrainOptions o;
  std::vector<std::string> positional;
  std::string validation_flag_given;  // --eval-examples or --eval-batch, which shape a validation
  int threads = 0;
  for (ArgReader r(args); r.next();) {
    const auto& f = r.arg();
    if (f == "--help" || f == "-h") {
      std::cout << kUsage;
      return 0;
    } else if (f == "--validation") {
      o.validation_file = r.value();
    } else if (f == "--out") {
      o.out_dir = r.value();
    } else if (f == "--steps") {
      o.steps = r.int_value(1);
    } else if (f == "--batch") {
      o.batch_size = r.int_value(1);
    } else if (f == "--grad-accum") {
      o.grad_accum = r.int_value(1);
    } else if (f == "--lr") {
      o.lr = r.number_value();
    } else if (f == "--warmup") {
      o.warmup_steps = r.int_value(0);
    } else if (f == "--weight-decay") {
      o.adam.weight_decay = r.number_value();
    } else if (f == "--clip") {
      o.clip_norm = r.number_value();
    } else if (f == "--beta1") {
      o.adam.beta1 = r.number_value();
    } else if (f == "--beta2") {
      o.adam.beta2 = r.number_value();
    } else if (f == "--adam-eps") {
      o.adam.eps = r.number_value();
    } else if (f == "--label-smoothing") {
      o.label_smoothing = r.number_value();
    } else if (f == "--max-input-tokens") {
      o.max_input_tokens = r.int_value(2);
    } else if (f == "--max-target-tokens") {
      o.max_target_tokens = r.int_value(1);
    } else if (f == "--limit") {
      o.train_limit = r.int_value(1);
    } else if (f == "--log-every") {
      o.log_every = r.int_value(1);
    } else if (f == "--eval-every") {
      o.eval_every = r.int_value(0);
    } else if (f == "--save-every") {
      o.save_every = r.int_value(0);
    } else if (f == "--keep") {
      o.keep_checkpoints = r.int_value(1);
    } else if (f == "--eval-examples") {
      o.eval_examples = r.int_value(0);
      validation_flag_given = f;
    } else if (f == "--eval-batch") {
      o.eval_batch = r.int_value(1);
      validation_flag_given = f;
    } else if (f == "--seed") {
      o.seed = r.unsigned_value();  // the whole uint64 range, as summarize, convert and eval take
    } else if (f == "--threads") {
      threads = r.threads_value();
    } else if (f == "--device") {
      o.device = device_from_flag(r.value()).str();
    } else if (f == "--dropout") {
      o.dropout = r.number_value();
    } else if (f == "--autocast") {
      o.autocast = r.value();
    } else if (f == "--stop-after") {
      o.stop_after = r.int_value(1);
    } else if (f == "--resume") {
      o.resume = true;
    } else if (!f.empty() && f[0] == '-') {
      throw unknown_option(f);
    } else {
      positional.push_back(f);
    }
  }
  if (positional.size() != 2) throw std::invalid_argument("expected MODEL_DIR and TRAIN.jsonl (see --help)");
  if (o.out_dir.empty()) throw std::invalid_argument("--out DIR is required");
  // (The trainer refuses --eval-every without it; --eval-examples and --eval-batch have defaults it cannot tell
  // apart.) Without one they did nothing, without a word.
  if (!validation_flag_given.empty() && o.validation_file.empty()) {
    throw std::invalid_argument(validation_flag_given + " needs --validation FILE to take its examples from");
  }
  // LibTorch's own default (OMP_NUM_THREADS, else the cores) ignored a CPU quota (docker --cpus).
  at::set_num_threads(threads > 0 ? threads : offline_intra_op_threads());
  o.model_dir = positional[0];
  o.train_file = positional[1];
  o.progress_bar = isatty(STDERR_FILENO) != 0;
  g_console_is_terminal = o.progress_bar;
  o.stop_requested = &g_stop_requested;
  stop_on_signals();
  // Under a file-size limit (ulimit -f, a batch system's) SIGXFSZ killed the run at its first large write, exit
  // 153 and not a word. Ignored, the write fails (EFBIG) as on a full disk, and the run names the file and the
  // checkpoint to resume from.
  std::signal(SIGXFSZ, SIG_IGN);
  const auto r = train::train(o, std::cerr);
  if (r.stopped_by_signal) return 128 + static_cast<int>(g_stop_signal);  // as a shell reports a signal's end
  if (r.steps < o.steps) return 0;  // --stop-after: the trainer said where it stopped
  if (r.updates == 0) {
    std::cout << "nothing to train: the run was complete at step " << r.steps << " (--steps); wrote its model to "
              << o.out_dir.string() << " again" << std::endl;
    return 0;
  }
  // "trained 1 steps", "steps 5-5 of 5" and "1 updates skipped" read wrong; one step is named alone.
  const auto count = [](int64_t n, const std::string& noun) {
    return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
  };
  const int64_t first = r.steps - r.updates + 1;
  std::cout << std::fixed << std::setprecision(4) << "trained "
            << (r.updates == r.steps ? count(r.steps, "step")
                : r.updates == 1     ? "step " + std::to_string(r.steps) + " of " + std::to_string(r.steps)
                                     : "steps " + std::to_string(first) + "-" + std::to_string(r.steps) + " of " +
                                       std::to_string(r.steps))
            << " in " << std::setprecision(1) << r.seconds << " s (" << r.tokens << " target tokens); last loss "
            << std::setprecision(4) << r.last_loss;
  if (r.skipped_updates > 0) std::cout << "; " << count(r.skipped_updates, "update") << " skipped (fp16 overflow)";
  if (r.validation_loss) {
    std::cout << "; validation loss " << *r.validation_loss << ", ROUGE-1/2/L/Lsum " << std::setprecision(2)
              << *r.rouge1 << "/" << *r.rouge2 << "/" << *r.rougeL << "/" << *r.rougeLsum;
  }
  std::cout << std::endl;
  return 0;
}

}  // namespace srformer::tools
