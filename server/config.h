#pragma once
// srformer-server configuration: command-line flags and an optional JSON file (flags override the file).
#include <torch/types.h>

#include <cstdint>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace srformer::server {

class ConfigError : public std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

struct ModelSpec {
  std::string name;
  std::string dir;
};

struct ServerConfig {
  std::vector<ModelSpec> models;
  std::string listen = "0.0.0.0:50051";
  std::string metrics_listen = "0.0.0.0:9464";  // empty disables the /metrics endpoint
  std::string tls_cert, tls_key;                // PEM files; both set = TLS on the gRPC port
  std::string tls_client_ca;                    // PEM CA bundle; set = clients must present a cert it signed
  std::string device = "cpu";                   // cpu | cuda | cuda:N
  std::string dtype;                            // fp32 | fp16 | bf16; empty = fp32 on CPU, fp16 on CUDA
  int threads = 0;                              // torch intra-op threads per engine; 0 = cores / models
  int64_t max_batch_rows = 64;
  int64_t max_queue = 256;
  int64_t max_input_tokens = 0;  // 0 = each model's own limit
  int64_t max_new_tokens_cap = 512;
  int64_t max_beams = 8;
  int64_t max_tokens_in_flight = 0;  // 0 = unlimited
  int64_t max_encode_tokens = 512;   // input tokens encoded per engine iteration; 0 = unlimited
  int64_t encode_stall_ms = 200;     // EngineLimits::encode_stall; 0 = encodes run whole
  // The pieces a paused encode runs in (LoadOptions::encode_piece_scores, encode_piece_positions).
  int64_t encode_piece_scores = int64_t{1} << 22;
  int64_t encode_piece_positions = 2048;
  int64_t queue_bypass_ms = 1000;             // EngineLimits::queue_bypass; 0 = first come, first served
  int64_t free_memory_after_idle_ms = 10000;  // EngineLimits::free_memory_after_idle; 0 = never
  // Decoder-state bytes per model (EngineLimits::max_state_bytes); kAutoStateMemory = half the memory
  // available once the models are loaded (host memory, or the GPU's), shared by the models; 0 = unlimited.
  static constexpr int64_t kAutoStateMemory = -1;
  int64_t max_state_bytes = kAutoStateMemory;
  int64_t encoder_cache_bytes = 0;  // EngineLimits::encoder_cache_bytes; 0 = off
  int64_t max_message_bytes = 4 << 20;
  // gRPC's max connection age: a client connection is closed (GOAWAY) after about this long, so that
  // clients balancing over DNS (round_robin) reconnect and find replicas added since; 0 = never.
  int64_t max_connection_age_ms = 0;
  int64_t max_connection_age_grace_ms = 60000;  // calls still open on such a connection get this long
  // HTTP/2 streams (calls) a client connection may have open at once (GRPC_ARG_MAX_CONCURRENT_STREAMS):
  // a client's further calls wait on its side; 0 = gRPC's default, unlimited.
  int64_t max_streams_per_connection = 100;
  // ServiceLimits::max_unread_stream_bytes; 0 = unlimited.
  int64_t max_unread_stream_bytes = int64_t{64} << 20;
  int64_t stream_stall_timeout_ms = 60000;  // ServiceLimits::stream_stall_timeout_ms; 0 = never
  int64_t retry_pushback_ms = 1000;         // ServiceLimits::retry_pushback_ms; 0 = none
  int64_t shutdown_grace_ms = 10000;
  // A model's engine that has had requests this long without moving (no decode step, no piece of an
  // encode) turns the health service NOT_SERVING until it moves again; 0 = never.
  int64_t engine_stall_timeout_ms = 60000;
  std::string log_level = "info";
  bool log_json = false;
  bool precompute_switches = true;  // SRformer: switch drives computed when a request starts decoding
  bool warm_up = true;              // one short request per model before listening (server/service/warm_up.h)
  bool packed_weights = true;  // fp32 on AVX2/AVX-512: projections also held packed (LoadOptions::pack_projections)
};

// Parses argv. Returns false when --help was asked for (usage already printed to stdout).
// Throws ConfigError with a message that names the flag and what it accepts.
bool parse_server_args(int argc, const char* const* argv, ServerConfig& config);
// Applies a JSON config file ({"model": {"name": "dir"} | ["name=dir"], "listen": ..., "max-batch-rows": ...}).
// Keys named in `overridden` (flag names, without dashes: the command line's) are checked for being known
// and given once, not for their values, which the flags replace.
void apply_config_file(const std::string& path, ServerConfig& config, const std::set<std::string>& overridden = {});
// Checks ranges and combinations; throws ConfigError.
void validate(const ServerConfig& config);
// Whether the log is to be JSON lines as far as argv and what parsed of it say (the command line's last
// --log-json, else `parsed`'s, the config file's): for a configuration error, which may come before the
// rest is read.
bool log_json_asked(int argc, const char* const* argv, const ServerConfig& parsed);
// gRPC's Unix-socket addresses (unix:PATH, unix-abstract:NAME): no port, and the address is its own name.
bool is_unix_socket_address(const std::string& address);
std::string server_usage();

// "auto" (where `takes_auto`), or bytes with an optional binary suffix: 512M, 8G, 1.5GiB, 1073741824
// (0 = unlimited).
int64_t parse_memory_size(const std::string& flag, const std::string& value, bool takes_auto = true);

torch::Device parse_device(const std::string& device);
// dtype for a device ("" picks the default); throws ConfigError for fp16/bf16 on CPU.
torch::ScalarType parse_dtype(const std::string& dtype, const torch::Device& device);

}  // namespace srformer::server
