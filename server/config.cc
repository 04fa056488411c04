#include "server/config.h"

#include <sys/un.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <thread>

#include "common/whole_number.h"
#include "model/dtype_name.h"
#include "model/generation/options.h"
#include "model/openmp_env.h"
#include "model/tokenizer/utf8.h"
#include "server/logging.h"

namespace srformer::server {

namespace {

int64_t to_int(const std::string& flag, const std::string& value, int64_t min) {
  const auto parsed = whole_int64(value);
  const bool digits = value.find_first_not_of("0123456789", value.rfind('-', 0) == 0 ? 1 : 0) == std::string::npos;
  if (!parsed && digits && value.find_first_of("0123456789") != std::string::npos) {
    // A whole number past int64: say so, not that it is none.
    throw ConfigError(flag + " " + value + " is out of range (" + std::to_string(min) + " to " +
                      std::to_string(std::numeric_limits<int64_t>::max()) + ")");
  }
  if (!parsed) throw ConfigError(flag + " needs an integer, got '" + value + "'");
  const int64_t v = *parsed;
  if (v < min) throw ConfigError(flag + " must be >= " + std::to_string(min) + ", got " + value);
  return v;
}

// The words a true|false flag takes; nullopt for anything else.
std::optional<bool> bool_word(const std::string& value) {
  if (value == "true" || value == "1" || value == "yes") return true;
  if (value == "false" || value == "0" || value == "no") return false;
  return std::nullopt;
}

bool to_bool(const std::string& flag, const std::string& value) {
  if (const auto b = bool_word(value)) return *b;
  throw ConfigError(flag + " needs true or false, got '" + value + "'");
}

// A model's name goes into every response (a protobuf string: one that is not UTF-8 made each response
// unreadable to the client, which reported UNIMPLEMENTED), and clients have to type it.
ModelSpec model_spec(const std::string& name, const std::string& dir) {
  const auto control = [](unsigned char ch) { return ch < 0x20 || ch == 0x7f; };
  if (name.empty() || dir.empty()) {
    throw ConfigError("--model needs NAME=DIR (e.g. --model bart=/models/bart-srformer), got '" + name + "=" + dir +
                      "'");
  }
  const auto refuse = [&](const std::string& why) {
    std::string shown = utf8::to_valid(name);  // the message itself is to be readable (and JSON with --log-json)
    std::replace_if(shown.begin(), shown.end(), control, '?');
    return ConfigError("model name '" + shown + "' " + why + "; use letters, digits and '-', '_', '.' (e.g. bart)");
  };
  if (!utf8::is_valid(name)) throw refuse("is not UTF-8");
  if (std::any_of(name.begin(), name.end(), control)) throw refuse("holds a control character");
  if (name.front() == ' ' || name.back() == ' ') throw refuse("starts or ends with a space");
  // Only the config file's object form can spell it; --model NAME=DIR splits at the first '='.
  if (name.find('=') != std::string::npos) throw refuse("holds '='");
  return {name, dir};
}

ModelSpec parse_model(const std::string& value) {
  const auto eq = value.find('=');
  if (eq == std::string::npos) {
    throw ConfigError("--model needs NAME=DIR (e.g. --model bart=/models/bart-srformer), got '" + value + "'");
  }
  return model_spec(value.substr(0, eq), value.substr(eq + 1));
}

// The checks of one option's value that validate() makes (defined with them, below).
void check_option(const ServerConfig& c, const std::string& name);

// Sets one option by its flag name (without dashes). Returns false for an unknown name.
bool set_option(ServerConfig& c, const std::string& name, const std::string& value) {
  const std::string flag = "--" + name;
  if (name == "model") {
    c.models.push_back(parse_model(value));
  } else if (name == "listen") {
    c.listen = value;
  } else if (name == "metrics-listen") {
    c.metrics_listen = value;
  } else if (name == "tls-cert") {
    c.tls_cert = value;
  } else if (name == "tls-key") {
    c.tls_key = value;
  } else if (name == "tls-client-ca") {
    c.tls_client_ca = value;
  } else if (name == "device") {
    c.device = value;
  } else if (name == "dtype") {
    c.dtype = value;
  } else if (name == "threads") {
    const int64_t threads = to_int(flag, value, 0);
    if (threads > max_useful_threads()) {
      throw ConfigError(flag + " " + value + " is more than 4x the CPUs this process may use; use at most " +
                        std::to_string(max_useful_threads()) + " (0: the cores shared among the models)");
    }
    c.threads = static_cast<int>(threads);
  } else if (name == "max-batch-rows") {
    c.max_batch_rows = to_int(flag, value, 1);
  } else if (name == "max-queue") {
    c.max_queue = to_int(flag, value, 1);
  } else if (name == "max-input-tokens") {
    c.max_input_tokens = to_int(flag, value, 0);
  } else if (name == "max-new-tokens-cap") {
    c.max_new_tokens_cap = to_int(flag, value, 1);
  } else if (name == "max-beams") {
    c.max_beams = to_int(flag, value, 1);
  } else if (name == "max-tokens-in-flight") {
    c.max_tokens_in_flight = to_int(flag, value, 0);
  } else if (name == "max-encode-tokens") {
    c.max_encode_tokens = to_int(flag, value, 0);
  } else if (name == "encode-stall-ms") {
    c.encode_stall_ms = to_int(flag, value, 0);
  } else if (name == "encode-piece-scores") {
    c.encode_piece_scores = to_int(flag, value, 1);
  } else if (name == "encode-piece-positions") {
    c.encode_piece_positions = to_int(flag, value, 1);
  } else if (name == "queue-bypass-ms") {
    c.queue_bypass_ms = to_int(flag, value, 0);
  } else if (name == "free-memory-after-idle-ms") {
    c.free_memory_after_idle_ms = to_int(flag, value, 0);
  } else if (name == "max-state-memory") {
    c.max_state_bytes = parse_memory_size(flag, value);
  } else if (name == "encoder-cache-memory") {
    c.encoder_cache_bytes = parse_memory_size(flag, value, /*takes_auto=*/false);
  } else if (name == "max-message-bytes") {
    c.max_message_bytes = to_int(flag, value, 1024);
  } else if (name == "max-connection-age-ms") {
    c.max_connection_age_ms = to_int(flag, value, 0);
  } else if (name == "max-connection-age-grace-ms") {
    c.max_connection_age_grace_ms = to_int(flag, value, 0);
  } else if (name == "max-streams-per-connection") {
    c.max_streams_per_connection = to_int(flag, value, 0);
  } else if (name == "max-unread-stream-memory") {
    c.max_unread_stream_bytes = parse_memory_size(flag, value, /*takes_auto=*/false);
  } else if (name == "stream-stall-timeout-ms") {
    c.stream_stall_timeout_ms = to_int(flag, value, 0);
  } else if (name == "retry-pushback-ms") {
    c.retry_pushback_ms = to_int(flag, value, 0);
  } else if (name == "engine-stall-timeout-ms") {
    c.engine_stall_timeout_ms = to_int(flag, value, 0);
  } else if (name == "shutdown-grace-ms") {
    c.shutdown_grace_ms = to_int(flag, value, 0);
  } else if (name == "log-level") {
    c.log_level = value;
  } else if (name == "log-json") {
    c.log_json = to_bool(flag, value);
  } else if (name == "precompute-switches") {
    c.precompute_switches = to_bool(flag, value);
  } else if (name == "packed-weights") {
    c.packed_weights = to_bool(flag, value);
  } else if (name == "warm-up") {
    c.warm_up = to_bool(flag, value);
  } else {
    return false;
  }
  return true;
}

std::string normalise(std::string name) {
  std::replace(name.begin(), name.end(), '_', '-');
  return name;
}

}  // namespace

int64_t parse_memory_size(const std::string& flag, const std::string& value, bool takes_auto) {
  if (value == "auto") {
    if (!takes_auto) throw ConfigError(flag + " needs a size (e.g. 256M; 0 turns it off), not auto");
    return ServerConfig::kAutoStateMemory;
  }
  const auto bad = [&] {
    return ConfigError(flag + " needs " + (takes_auto ? "auto or " : "") +
                       "a size in bytes with an optional K, M, G or T suffix (binary: 8G = 8 GiB), got '" + value +
                       "'");
  };
  size_t used = 0;
  double number = 0;
  try {
    number = std::stod(value, &used);
  } catch (const std::exception&) {
    throw bad();
  }
  if (used == 0 || !(number >= 0) || value.find_first_not_of("0123456789.") < used) throw bad();
  std::string unit = value.substr(used);
  std::transform(unit.begin(), unit.end(), unit.begin(), [](unsigned char ch) { return std::toupper(ch); });
  if (unit.size() > 1 && unit[0] != 'B' && (unit.substr(1) == "IB" || unit.substr(1) == "B")) unit.resize(1);
  double scale = 1;
  if (unit == "K") {
    scale = 1024.0;
  } else if (unit == "M") {
    scale = 1024.0 * 1024;
  } else if (unit == "G") {
    scale = 1024.0 * 1024 * 1024;
  } else if (unit == "T") {
    scale = 1024.0 * 1024 * 1024 * 1024;
  } else if (!unit.empty() && unit != "B") {
    throw bad();
  }
  const double bytes = number * scale;
  if (bytes > 9.0e18) throw bad();
  // It would be read as 0, which turns the bound off.
  if (number > 0 && bytes < 1) {
    throw ConfigError(flag + " " + value + " is less than a byte; sizes without a suffix are bytes (0.5G = 512 MiB), " +
                      "and 0 means none");
  }
  return static_cast<int64_t>(bytes);
}

std::string server_usage() {
  return R"(usage: srformer-server --model NAME=DIR [--model NAME=DIR ...] [options]

Serves SRformer summarization models over gRPC (srformer.v1.Summarizer, grpc.health.v1, reflection).

  --model NAME=DIR            a Hugging Face model directory (config.json, weights, tokenizer); repeatable
  --config FILE               JSON file with the same options as keys (flags override it); relative
                              paths in it are read from its directory
  --listen HOST:PORT          gRPC address (default 0.0.0.0:50051; port 0 picks a free port)
  --metrics-listen HOST:PORT  Prometheus /metrics address (default 0.0.0.0:9464; "" disables)
  --tls-cert FILE --tls-key FILE
                              serve gRPC over TLS with this PEM certificate chain and key (default plaintext)
  --tls-client-ca FILE        with TLS: require client certificates signed by this PEM CA (mutual TLS)
  --device cpu|cuda[:N]       where the models run (default cpu)
  --dtype fp32|fp16|bf16      weights dtype (default fp32 on CPU; on CUDA fp16, but bf16 for T5 on GPUs
                              that have it, compute capability 8.0+, as T5 overflows fp16; fp16 needs
                              CUDA, bf16 on the CPU needs AMX or AVX512-BF16)
  --threads N                 torch intra-op threads per model engine (default: the CPUs this process
                              may use, after taskset/cpuset and a cgroup CPU quota, / models)
  --max-batch-rows N          rows (beams and samples count) decoded together per model (default 64)
  --max-queue N               requests waiting per model before RESOURCE_EXHAUSTED (default 256)
  --retry-pushback-ms N       with RESOURCE_EXHAUSTED, ask the client to retry after about N ms (+-50%;
                              trailing metadata grpc-retry-pushback-ms, which gRPC clients with a
                              retry policy honour) (default 1000; 0 = none)
  --max-input-tokens N        input token limit (default: each model's own; N may lower it, and raise a
                              T5's n_positions, which relative positions make advisory; a T5 whose
                              config.json sets none: 4096)
  --max-new-tokens-cap N      largest max_new_tokens a request may ask for (default 512, at most 4096;
                              a BART model allows at most its max_position_embeddings)
  --max-beams N               largest num_beams, or number of samples, a request may ask for (default 8,
                              at most 64 and --max-batch-rows)
  --max-tokens-in-flight N    admission budget: sum of rows*(longest input+max_new_tokens) (default unlimited)
  --max-encode-tokens N       input tokens encoded per iteration while others decode; bounds the stall
                              a burst of arrivals puts on running streams (default 512; 0 = unlimited)
  --encode-stall-ms N         between two sublayers of an admission's encode (and of its start), the
                              running streams take a decode step once they have waited N ms: an encode
                              stalls them for about N ms and one sublayer (a piece of one for a long T5
                              input), not the whole encoder, and its own requests start a step later
                              for each; once an encode over --max-encode-tokens has run N ms, queued
                              requests within that cap are encoded and join there too (default 200;
                              0 = an encode runs whole)
  --encode-piece-scores N --encode-piece-positions N
                              a long input's sublayers between those pauses: self-attention by blocks
                              of at most N query-key pairs over the batch (default 4194304), the
                              feed-forward and the cross keys and values by blocks of at most N
                              positions (default 2048); smaller pieces pause more often, for a
                              shorter stall of running streams, at some cost to the encode (the
                              defaults cut long T5 inputs; BART's end at 1,024 positions)
  --max-state-memory SIZE     decoder state a model's batch may hold (512M, 8G, ...; counted as the model
                              holds it, each request's own input): requests wait
                              until it fits, one that alone exceeds it is refused (default auto: half
                              the memory available after loading, the GPU's on CUDA, shared by the
                              models; 0 = unlimited)
  --encoder-cache-memory SIZE encoder outputs of recent inputs kept per model (256M, 1G, ...): a document
                              sent again (a retry, other options) skips the encoder, with the same result
                              (default 0 = off)
  --queue-bypass-ms N         a request that does not fit the batch's budgets lets later ones that fit
                              go first for up to N ms after it was accepted, then admission waits for
                              it (default 1000; 0 = first come, first served)
  --free-memory-after-idle-ms N
                              once a model has had nothing to decode for N ms after a load, hand the
                              memory the allocator keeps freed back to the kernel, so that resident
                              memory follows the load down (default 10000; 0 = never: it stays at
                              the peak)
  --precompute-switches true|false
                              SRformer: compute each request's segment-switch inputs (P_i W^T) when it
                              starts decoding, so a step costs the same at any input length, for
                              min(m, L+1) x heads x d^2 floats more state per layer (default true)
  --packed-weights true|false fp32 on a CPU with AVX2 or AVX-512: also hold every projection in
                              panels of output features, which encodes and decode steps multiply
                              faster, for a second copy of those weights in memory (T5-small +242 MB,
                              BART-base +551 MB) (default true)
  --warm-up true|false        summarize a short text with each model before listening, so that the
                              first request does not pay for the process's first run (default true)
  --max-message-bytes N       largest request message accepted (default 4194304)
  --max-connection-age-ms N   close each client connection (GOAWAY) after about N ms, so that clients
                              balancing over DNS (round_robin) reconnect and reach replicas added since
                              (default 0 = never; else at least 1000); calls open on it get
                              --max-connection-age-grace-ms (default 60000) to finish
  --max-streams-per-connection N
                              calls a client connection may have open at once (HTTP/2 concurrent
                              streams): a gRPC client's further calls on it wait on the client's side
                              until one ends (default 100; 0 = unlimited)
  --max-unread-stream-memory SIZE
                              SummarizeStream messages the server may hold, all streams together, for
                              clients reading them slower than they come or not at all (64M, 1G, ...):
                              while over it, new SummarizeStream calls are refused with
                              RESOURCE_EXHAUSTED (default 64M; 0 = unlimited)
  --stream-stall-timeout-ms N a SummarizeStream whose client has taken none of its messages for N ms
                              (the server's write waiting on it all that time) is ended with
                              RESOURCE_EXHAUSTED, its messages and its batch row freed; a client that
                              reads, however slowly, never meets it (default 60000; 0 = never)
  --engine-stall-timeout-ms N a model's engine that has had requests queued or running for N ms
                              without moving (no decode step, no piece of an encode: a hung CUDA
                              call, a deadlock) turns the gRPC health service NOT_SERVING, so that
                              readiness and liveness probes take the server out of service, until it
                              moves again (default 60000; 0 = never)
  --shutdown-grace-ms N       on SIGTERM/SIGINT, time given to in-flight requests (default 10000)
  --log-level LEVEL           trace|debug|info|warn|error|critical|off (default info)
  --log-json [true|false]     one JSON object per log line (alone: true)
  --help                      this text
)";
}

void apply_config_file(const std::string& path, ServerConfig& config, const std::set<std::string>& overridden) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw ConfigError("config file '" + path + "' is a directory; --config takes a JSON file");
  }
  std::ifstream in(path);
  if (!in) {
    throw ConfigError("cannot open config file '" + path + "' (" + std::strerror(errno) + "); check the --config path");
  }
  // nlohmann keeps the last of a repeated key without a word: which one a person meant is not ours to guess.
  std::vector<std::set<std::string>> keys;  // one set per object being read
  std::string repeated;
  // ordered_json keeps the file's order: the first model listed is the default one, as with --model flags.
  const nlohmann::ordered_json::parser_callback_t note_keys = [&](int, nlohmann::ordered_json::parse_event_t event,
                                                                  nlohmann::ordered_json& parsed) {
    if (event == nlohmann::ordered_json::parse_event_t::object_start) keys.emplace_back();
    if (event == nlohmann::ordered_json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
    if (event == nlohmann::ordered_json::parse_event_t::key && !keys.empty() && repeated.empty() &&
        !keys.back().insert(parsed.get<std::string>()).second) {
      repeated = parsed.get<std::string>();
    }
    return true;
  };
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(in, note_keys);  // the whole file: anything after the object is an error
  } catch (const std::exception& e) {
    throw ConfigError("config file '" + path + "' is not valid JSON: " + e.what());
  }
  if (!repeated.empty()) throw ConfigError("config file '" + path + "' gives key '" + repeated + "' twice; keep one");
  if (!j.is_object()) throw ConfigError("config file '" + path + "' must hold a JSON object");
  // A relative path in the file is read from the file's directory (as Prometheus and kubeconfig read theirs):
  // it was read from the server's current directory, so the file meant something else wherever the server
  // started (systemd's /, a container's WORKDIR). Paths on the command line stay the current directory's.
  const std::filesystem::path base = std::filesystem::path(path).parent_path();
  const auto from_file_dir = [&](const std::string& file) {
    return file.empty() || std::filesystem::path(file).is_absolute() ? file : (base / file).string();
  };
  const auto add_model = [&](const ModelSpec& spec) { config.models.push_back({spec.name, from_file_dir(spec.dir)}); };
  // The file's log_json first: an error in a key written before it is then told as the file asks (a JSON
  // line); it was plain text or JSON by the order of the keys.
  for (const auto& [key, value] : j.items()) {
    if (normalise(key) != "log-json") continue;
    std::optional<bool> b;  // what set_option will read it as, where it reads it
    if (value.is_boolean()) {
      b = value.get<bool>();
    } else if (value.is_string()) {
      b = bool_word(value.get<std::string>());
    } else if (value.is_number_unsigned()) {
      b = bool_word(std::to_string(value.get<uint64_t>()));
    }
    if (b) config.log_json = *b;
  }
  std::map<std::string, std::string> spelled;  // normalised name -> the key as written
  for (const auto& [key, value] : j.items()) {
    // "models" is the list's other spelling: given with "model", the two lists were served as one.
    const std::string name = normalise(key) == "models" ? "model" : normalise(key);
    if (const auto [at, fresh] = spelled.emplace(name, key); !fresh) {
      throw ConfigError("config file '" + path + "' gives '" + name + "' twice (as '" + at->second + "' and '" + key +
                        "'); keep one");
    }
    // The command line sets it: what the file says is not used, so a value it would refuse does not stop
    // the start (an operator overriding a bad shared file with a flag was refused all the same).
    if (overridden.count(name) != 0) continue;
    if (name == "model") {
      const ConfigError shape("config key '" + key + "' in '" + path +
                              "' must be {\"name\": \"dir\", ...}, [\"name=dir\", ...] or \"name=dir\"");
      if (value.is_object()) {
        for (const auto& [n, dir] : value.items()) {
          if (!dir.is_string()) throw shape;
          add_model(model_spec(n, dir.get<std::string>()));
        }
      } else if (value.is_array()) {
        for (const auto& v : value) {
          if (!v.is_string()) throw shape;
          add_model(parse_model(v.get<std::string>()));
        }
      } else if (value.is_string()) {
        add_model(parse_model(value.get<std::string>()));
      } else {
        throw shape;
      }
      continue;
    }
    std::string text;
    if (value.is_string()) {
      text = value.get<std::string>();
      if (name == "tls-cert" || name == "tls-key" || name == "tls-client-ca") text = from_file_dir(text);
    } else if (value.is_boolean()) {
      text = value.get<bool>() ? "true" : "false";
    } else if (value.is_number_unsigned()) {  // as written: past int64 it must not wrap to a negative
      text = std::to_string(value.get<uint64_t>());
    } else if (value.is_number_integer()) {
      text = std::to_string(value.get<int64_t>());
    } else {
      throw ConfigError("config key '" + key + "' in '" + path + "' must be a string, whole number or boolean, got " +
                        value.dump());
    }
    bool known = false;
    try {
      known = set_option(config, name, text);
      // Here, not only once merged with the flags: its error is then named with the file and key too.
      if (known) check_option(config, name);
    } catch (const ConfigError& e) {  // the flag it names is nowhere on the command line
      throw ConfigError("config file '" + path + "', key '" + key + "': " + e.what());
    }
    if (!known) throw ConfigError("unknown config key '" + key + "' in '" + path + "' (see srformer-server --help)");
  }
}

bool parse_server_args(int argc, const char* const* argv, ServerConfig& config) {
  // Two passes: the config file first, then every flag on top of it.
  std::vector<std::pair<std::string, std::string>> flags;
  bool file_models = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << server_usage();
      return false;
    }
    if (arg.rfind("--", 0) != 0) throw ConfigError("unexpected argument '" + arg + "' (see --help)");
    std::string name = arg.substr(2);
    std::string value;
    const auto eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else if (name == "log-json") {
      // A value as the other true|false flags take one (--warm-up false), or none: true.
      value = i + 1 < argc && bool_word(argv[i + 1]) ? argv[++i] : "true";
    } else {
      if (i + 1 >= argc) throw ConfigError("--" + name + " needs a value (see --help)");
      value = argv[++i];
    }
    flags.emplace_back(name, value);
  }
  std::set<std::string> overridden;  // what the command line sets, which the file's value does not
  for (const auto& flag : flags) overridden.insert(flag.first);
  bool have_file = false;
  for (const auto& [name, value] : flags) {
    if (name == "config") {
      if (have_file) throw ConfigError("--config is given twice; put the settings in one file (flags override it)");
      have_file = true;
      apply_config_file(value, config, overridden);
      file_models = !config.models.empty();
    }
  }
  bool cli_models = false;
  for (const auto& [name, value] : flags) {
    if (name == "config") continue;
    if (name == "model" && !cli_models && file_models) {
      config.models.clear();  // --model on the command line replaces the file's list
    }
    if (name == "model") cli_models = true;
    if (!set_option(config, name, value)) throw ConfigError("unknown flag --" + name + " (see --help)");
    // Each value as it is given, as set_option's own checks take it: checked once merged, a bad value a later
    // flag replaced passed where its check was validate()'s (--log-level INFO, --max-beams 100) and was
    // refused where it was set_option's (--max-queue 0).
    check_option(config, name);
  }
  return true;
}

bool log_json_asked(int argc, const char* const* argv, const ServerConfig& parsed) {
  std::optional<bool> asked;  // the command line's last --log-json
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--log-json") {
      const auto value = i + 1 < argc ? bool_word(argv[i + 1]) : std::nullopt;
      asked = value.value_or(true);
    } else if (arg.rfind("--log-json=", 0) == 0) {
      asked = bool_word(arg.substr(11)).value_or(true);  // a bad value asked for JSON too, wrongly spelled
    }
  }
  return asked.value_or(parsed.log_json);
}

torch::Device parse_device(const std::string& device) {
  if (device == "cpu") return torch::kCPU;
  if (device == "cuda") return {torch::kCUDA, 0};
  if (device.rfind("cuda:", 0) == 0) {
    const auto index = to_int("--device", device.substr(5), 0);
    // c10::DeviceIndex is narrow (8 bits): a larger index would name another device.
    constexpr int64_t kMaxIndex = std::numeric_limits<c10::DeviceIndex>::max();
    if (index > kMaxIndex) {
      throw ConfigError("--device cuda:N takes N from 0 to " + std::to_string(kMaxIndex) + ", got '" + device + "'");
    }
    return {torch::kCUDA, static_cast<c10::DeviceIndex>(index)};
  }
  throw ConfigError("--device must be cpu, cuda or cuda:N, got '" + device + "'");
}

torch::ScalarType parse_dtype(const std::string& dtype, const torch::Device& device) {
  if (dtype.empty()) return device.is_cuda() ? torch::kFloat16 : torch::kFloat32;
  const auto t = float_dtype_from_name(dtype);
  if (!t) throw ConfigError("--dtype must be fp32, fp16 or bf16, got '" + dtype + "'");
  if (*t == torch::kFloat16 && !device.is_cuda()) {
    throw ConfigError(
        "--dtype fp16 needs --device cuda; on the CPU use fp32, or bf16 where the CPU has AMX or AVX512-BF16");
  }
  return *t;
}

bool is_unix_socket_address(const std::string& address) {
  return address.rfind("unix:", 0) == 0 || address.rfind("unix-abstract:", 0) == 0;
}

namespace {

// HOST:PORT with a port gRPC and the kernel take (gRPC wraps 99999 to 34463, and reads "HOST:" as 443).
// gRPC's Unix-socket forms have no port.
void check_address(const char* flag, const std::string& address, bool unix_allowed) {
  if (unix_allowed && is_unix_socket_address(address)) {
    // gRPC binds an empty name where no client can reach it, and refuses a long one only when it binds,
    // saying nothing of the length.
    const bool abstract = address.rfind("unix-abstract:", 0) == 0;
    std::string name = address.substr(address.find(':') + 1);
    if (!abstract && name.rfind("//", 0) == 0) name = name.substr(2);  // unix:///abs/path
    // sun_path less a path's terminating NUL, or an abstract name's leading one.
    constexpr size_t kMaxName = sizeof(sockaddr_un::sun_path) - 1;
    if (name.empty()) {
      throw ConfigError(std::string(flag) + " '" + address +
                        "' names no socket: give unix:PATH (e.g. unix:/run/srformer.sock) or unix-abstract:NAME");
    }
    if (name.size() > kMaxName) {
      throw ConfigError(std::string(flag) + " '" + address + "': a Unix socket's " + (abstract ? "name" : "path") +
                        " is at most " + std::to_string(kMaxName) + " bytes, this one " + std::to_string(name.size()) +
                        "; use a shorter one");
    }
    return;
  }
  const auto colon = address.rfind(':');
  const std::string port = colon == std::string::npos ? "" : address.substr(colon + 1);
  const bool digits = !port.empty() && port.size() <= 5 && port.find_first_not_of("0123456789") == std::string::npos;
  if (!digits || std::stoi(port) > 65535) {
    throw ConfigError(std::string(flag) + " needs HOST:PORT with a port from 0 to 65535 (0 picks a free one), got '" +
                      address + "'" + (unix_allowed ? " (or unix:PATH)" : ""));
  }
  // gRPC cannot parse ":PORT" and then reports only that nothing could be bound.
  if (unix_allowed && colon == 0) {
    throw ConfigError(std::string(flag) + " '" + address + "' has no host: use 0.0.0.0" + address +
                      " for every interface, or 127.0.0.1" + address + " for this machine only");
  }
  // Nor an IPv6 address without its brackets (the metrics server reads one).
  const std::string host = address.substr(0, colon);
  if (unix_allowed && host.find(':') != std::string::npos &&
      host.find_first_not_of("0123456789abcdefABCDEF:.") == std::string::npos) {
    throw ConfigError(std::string(flag) + " '" + address + "': an IPv6 address goes in brackets: [" + host + "]" +
                      address.substr(colon));
  }
}

bool is_wildcard_host(const std::string& host) {
  return host.empty() || host == "0.0.0.0" || host == "[::]" || host == "::" || host == "*";
}

// Both listeners on one port would fail at bind time with "is the port in use?", the process colliding
// with itself; say so before anything is bound.
void check_distinct_ports(const ServerConfig& c) {
  if (c.metrics_listen.empty() || is_unix_socket_address(c.listen)) return;
  const auto split = [](const std::string& address) {
    const auto colon = address.rfind(':');
    return std::pair(address.substr(0, colon), address.substr(colon + 1));
  };
  const auto [grpc_host, grpc_port] = split(c.listen);
  const auto [metrics_host, metrics_port] = split(c.metrics_listen);
  if (grpc_port != metrics_port || std::stoi(grpc_port) == 0) return;
  if (grpc_host == metrics_host || is_wildcard_host(grpc_host) || is_wildcard_host(metrics_host)) {
    throw ConfigError("--listen " + c.listen + " and --metrics-listen " + c.metrics_listen +
                      " name the same port; give each its own");
  }
}

// gRPC reads some durations as int milliseconds; an hour is past any sensible value.
constexpr int64_t kHourMs = 3600 * 1000;
// Durations added to clock readings in nanoseconds: past about 292 years they overflow and flip meaning
// (a huge --shutdown-grace-ms cancelled every request at once). A day is past any sensible value.
constexpr int64_t kDayMs = 24 * kHourMs;

void check_duration(const char* flag, int64_t ms, int64_t most) {
  if (ms > most) {
    throw ConfigError(std::string(flag) + " is " + std::to_string(ms) + "; at most " + std::to_string(most) +
                      (most == kHourMs ? " (an hour)" : " (a day)"));
  }
}

// The checks of one option's value alone (validate() adds those of combinations), by its flag's name
// without dashes, in the order validate() reports them. One table serves both: check_option() as each
// value is set, validate() on the merged configuration.
using OptionCheck = std::pair<const char*, void (*)(const ServerConfig&)>;
const OptionCheck kOptionChecks[] = {
    {"log-level",
     [](const ServerConfig& c) {
       // init_logging refuses it too, but only once the rest has passed, and without the flag's name.
       if (!is_log_level(c.log_level)) {
         throw ConfigError("--log-level must be trace, debug, info, warn, error, critical or off, got '" + c.log_level +
                           "'");
       }
     }},
    {"listen", [](const ServerConfig& c) { check_address("--listen", c.listen, true); }},
    {"metrics-listen",
     [](const ServerConfig& c) {
       if (!c.metrics_listen.empty()) check_address("--metrics-listen", c.metrics_listen, false);
     }},
    {"device", [](const ServerConfig& c) { parse_device(c.device); }},
    {"dtype",
     [](const ServerConfig& c) {
       // The name alone: fp16 on the CPU is a combination with --device, which validate() checks.
       if (!c.dtype.empty() && !float_dtype_from_name(c.dtype)) {
         throw ConfigError("--dtype must be fp32, fp16 or bf16, got '" + c.dtype + "'");
       }
     }},
    {"retry-pushback-ms",
     [](const ServerConfig& c) { check_duration("--retry-pushback-ms", c.retry_pushback_ms, kHourMs); }},
    {"max-connection-age-grace-ms",
     [](const ServerConfig& c) {
       check_duration("--max-connection-age-grace-ms", c.max_connection_age_grace_ms, kHourMs);
     }},
    {"shutdown-grace-ms",
     [](const ServerConfig& c) { check_duration("--shutdown-grace-ms", c.shutdown_grace_ms, kDayMs); }},
    {"queue-bypass-ms", [](const ServerConfig& c) { check_duration("--queue-bypass-ms", c.queue_bypass_ms, kDayMs); }},
    {"free-memory-after-idle-ms",
     [](const ServerConfig& c) { check_duration("--free-memory-after-idle-ms", c.free_memory_after_idle_ms, kDayMs); }},
    {"encode-stall-ms", [](const ServerConfig& c) { check_duration("--encode-stall-ms", c.encode_stall_ms, kDayMs); }},
    {"stream-stall-timeout-ms",
     [](const ServerConfig& c) { check_duration("--stream-stall-timeout-ms", c.stream_stall_timeout_ms, kDayMs); }},
    {"engine-stall-timeout-ms",
     [](const ServerConfig& c) { check_duration("--engine-stall-timeout-ms", c.engine_stall_timeout_ms, kDayMs); }},
    {"max-connection-age-ms",
     [](const ServerConfig& c) {
       check_duration("--max-connection-age-ms", c.max_connection_age_ms, kDayMs);
       // Under a second gRPC closes connections about as fast as clients open them, and calls fail with
       // UNAVAILABLE ("GOAWAY received", "Connection reset by peer"; at 1 ms about half of them, at 10 ms
       // some). gRPC Java raises such an age to a second.
       if (c.max_connection_age_ms > 0 && c.max_connection_age_ms < 1000) {
         throw ConfigError("--max-connection-age-ms is " + std::to_string(c.max_connection_age_ms) +
                           "; 0 (never) or at least 1000 (a second): shorter closes connections before their calls "
                           "finish (minutes are usual)");
       }
     }},
    {"max-streams-per-connection",
     [](const ServerConfig& c) {
       if (c.max_streams_per_connection > std::numeric_limits<int>::max()) {
         throw ConfigError("--max-streams-per-connection is " + std::to_string(c.max_streams_per_connection) +
                           "; at most " + std::to_string(std::numeric_limits<int>::max()) + " (0: unlimited)");
       }
     }},
    {"max-message-bytes",
     [](const ServerConfig& c) {
       // gRPC takes it as an int (2^32 read as 0 refused every message).
       if (c.max_message_bytes > std::numeric_limits<int>::max()) {
         throw ConfigError("--max-message-bytes is " + std::to_string(c.max_message_bytes) + "; at most " +
                           std::to_string(std::numeric_limits<int>::max()) + " (gRPC's limit)");
       }
     }},
    {"max-input-tokens",
     [](const ServerConfig& c) {
       // ListModels reports it as an int32, and no request message can hold more tokens (it has fewer than
       // its bytes, which --max-message-bytes bounds by the same number).
       if (c.max_input_tokens > std::numeric_limits<int32_t>::max()) {
         throw ConfigError("--max-input-tokens is " + std::to_string(c.max_input_tokens) + "; at most " +
                           std::to_string(std::numeric_limits<int32_t>::max()) + " (0 = each model's own limit)");
       }
     }},
    {"max-new-tokens-cap",
     [](const ServerConfig& c) {
       if (c.max_new_tokens_cap > kMaxNewTokensLimit) {
         throw ConfigError("--max-new-tokens-cap is " + std::to_string(c.max_new_tokens_cap) + "; at most " +
                           std::to_string(kMaxNewTokensLimit) + ", the most any request may generate");
       }
     }},
    {"max-beams", [](const ServerConfig& c) {
       if (c.max_beams > kMaxNumBeams) {
         throw ConfigError("--max-beams is " + std::to_string(c.max_beams) + "; at most " +
                           std::to_string(kMaxNumBeams));
       }
     }}};

// `name`'s checks from kOptionChecks; a name without such checks passes.
void check_option(const ServerConfig& c, const std::string& name) {
  for (const auto& [option, check] : kOptionChecks) {
    if (name == option) check(c);
  }
}

}  // namespace

void validate(const ServerConfig& c) {
  if (c.models.empty()) throw ConfigError("no model given; pass --model NAME=DIR (see --help)");
  for (size_t i = 0; i < c.models.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (c.models[i].name == c.models[j].name) {
        throw ConfigError("model name '" + c.models[i].name + "' is given twice; each --model needs its own NAME");
      }
    }
  }
  for (const auto& entry : kOptionChecks) entry.second(c);
  check_distinct_ports(c);
  if (c.tls_cert.empty() != c.tls_key.empty()) {
    throw ConfigError("TLS needs both --tls-cert and --tls-key (PEM files); give both, or neither for plaintext");
  }
  if (!c.tls_client_ca.empty() && c.tls_cert.empty()) {
    throw ConfigError("--tls-client-ca needs TLS: give --tls-cert and --tls-key too");
  }
  parse_dtype(c.dtype, parse_device(c.device));
  if (c.max_beams > c.max_batch_rows) {
    // A beam search decodes all its beams in one batch.
    throw ConfigError("--max-beams (" + std::to_string(c.max_beams) +
                      (c.max_beams == ServerConfig{}.max_beams ? ", the default" : "") +
                      ") cannot exceed --max-batch-rows (" + std::to_string(c.max_batch_rows) +
                      "): a beam search decodes its beams in one batch; lower --max-beams too");
  }
}

}  // namespace srformer::server
