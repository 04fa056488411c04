// srformer-server flags and config file: flags override the file, errors name what to fix.
#include "server/config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <tuple>
#include <utility>
#include <vector>

#include "model/tokenizer/utf8.h"
#include "server/server.h"

namespace srformer::server {
namespace {

bool parse(std::vector<std::string> args, ServerConfig& c) {
  args.insert(args.begin(), "srformer-server");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  return parse_server_args(static_cast<int>(argv.size()), argv.data(), c);
}

// What parsing and validating `args` says: the ConfigError's message, or "no error".
std::string config_error(std::vector<std::string> args) {
  ServerConfig c;
  try {
    parse(std::move(args), c);
    validate(c);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

TEST(ServerConfig, FlagsOverrideTheFile) {
  const auto path = std::filesystem::temp_directory_path() / "srformer_server_config_test.json";
  std::ofstream(path) << R"({"model": {"a": "/models/a"}, "listen": "127.0.0.1:1234", "max_batch_rows": 16,
                             "max-queue": 9, "max_encode_tokens": 777, "encode-stall-ms": 35, "log-json": true,
                             "warm_up": false, "retry_pushback_ms": 250,
                             "max_connection_age_ms": 600000})";
  ServerConfig c;
  ASSERT_TRUE(parse({"--config", path.string(), "--max-batch-rows=32", "--device", "cpu", "--precompute-switches",
                     "false", "--packed-weights=false"},
                    c));
  ASSERT_EQ(c.models.size(), 1u);
  EXPECT_EQ(c.models[0].name, "a");
  EXPECT_EQ(c.models[0].dir, "/models/a");
  EXPECT_EQ(c.listen, "127.0.0.1:1234");
  EXPECT_EQ(c.max_batch_rows, 32);
  EXPECT_EQ(c.max_queue, 9);
  EXPECT_EQ(c.max_encode_tokens, 777);
  EXPECT_EQ(c.encode_stall_ms, 35);
  EXPECT_TRUE(c.log_json);
  EXPECT_FALSE(c.precompute_switches);
  EXPECT_FALSE(c.packed_weights);
  EXPECT_TRUE(ServerConfig{}.packed_weights);
  EXPECT_FALSE(c.warm_up);
  EXPECT_TRUE(ServerConfig{}.warm_up);
  EXPECT_EQ(c.retry_pushback_ms, 250);
  EXPECT_EQ(ServerConfig{}.retry_pushback_ms, 1000);
  EXPECT_EQ(c.max_connection_age_ms, 600000);
  EXPECT_EQ(ServerConfig{}.max_connection_age_ms, 0);
  validate(c);
  ServerConfig pieces;
  ASSERT_TRUE(parse({"--encode-piece-scores", "65536", "--encode-piece-positions=256"}, pieces));
  EXPECT_EQ(load_options(pieces).encode_piece_scores, 65536);
  EXPECT_EQ(load_options(pieces).encode_piece_positions, 256);
  EXPECT_FALSE(load_options(c).pack_projections);
  EXPECT_FALSE(load_options(c).precompute_switches);
  // Unset, the model library's own defaults.
  EXPECT_EQ(load_options(ServerConfig{}).encode_piece_scores, LoadOptions{}.encode_piece_scores);
  EXPECT_EQ(load_options(ServerConfig{}).encode_piece_positions, LoadOptions{}.encode_piece_positions);

  ServerConfig d;
  ASSERT_TRUE(parse({"--config", path.string(), "--model", "b=/m/b", "--model", "c=/m/c", "--metrics-listen", ""}, d));
  ASSERT_EQ(d.models.size(), 2u);  // --model replaces the file's list
  EXPECT_EQ(d.models[1].name, "c");
  EXPECT_EQ(d.metrics_listen, "");
  std::filesystem::remove(path);
}

// A flag replaces the config file's value for its key, so the file's value does not matter, a bad one
// included: a shared file with a bad value (or one of another version's shape) refused the start even
// where the operator overrode it on the command line. The file is still read whole: an unknown key or
// a key given twice stays an error.
TEST(ServerConfig, AFlagOverridesABadValueInTheConfigFile) {
  const auto path = std::filesystem::temp_directory_path() / "srformer_server_config_overridden.json";
  const auto message = [&](const std::string& text, std::vector<std::string> flags) {
    std::ofstream(path) << text;
    flags.insert(flags.begin(), {"--config", path.string()});
    return config_error(flags);
  };
  for (const auto& [text, flag, value] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {R"({"model": "a=/x", "max_queue": 0})", "--max-queue", "5"},
           {R"({"model": "a=/x", "max-queue": "lots"})", "--max-queue", "5"},
           {R"({"model": "a=/x", "max_batch_rows": 16.5})", "--max-batch-rows", "16"},
           {R"({"model": "a=/x", "threads": -1})", "--threads", "1"},
           {R"({"model": "a=/x", "log_json": "maybe"})", "--log-json", "false"},
           {R"({"model": "a=/x", "max_state_memory": "lots"})", "--max-state-memory", "auto"},
           {R"({"model": {"a\u0001": "/x"}})", "--model", "a=/x"},
           {R"({"models": 7})", "--model", "a=/x"}}) {
    EXPECT_NE(message(text, {}), "no error") << text;
    EXPECT_EQ(message(text, {flag, value}), "no error") << text;
    EXPECT_EQ(message(text, {flag + "=" + value}), "no error") << text;
  }
  ServerConfig c;
  std::ofstream(path) << R"({"model": "a=/x", "max_queue": 0, "max_batch_rows": 4})";
  ASSERT_TRUE(parse({"--config", path.string(), "--max-queue", "7"}, c));
  EXPECT_EQ(c.max_queue, 7);
  EXPECT_EQ(c.max_batch_rows, 4);  // the file's other keys still count
  // Still refused: what no flag can replace.
  EXPECT_NE(
      message(R"({"model": "a=/x", "max_queue": 0, "bogus": 1})", {"--max-queue", "5"}).find("unknown config key"),
      std::string::npos);
  EXPECT_NE(message(R"({"model": "a=/x", "max_queue": 0, "max-queue": 1})", {"--max-queue", "5"}).find("twice"),
            std::string::npos);
  std::filesystem::remove(path);
}

// On the command line the last of a flag given twice counts (the cuda image's entrypoint gives
// --device cuda, which a --device after it replaces); --model adds a model each time.
TEST(ServerConfig, AFlagGivenTwiceOnTheCommandLineCountsAsGivenLast) {
  ServerConfig c;
  ASSERT_TRUE(parse({"--device", "cuda", "--model", "a=/m/a", "--listen", "127.0.0.1:1", "--device", "cuda:1",
                     "--listen=127.0.0.1:2", "--model", "b=/m/b", "--warm-up", "false", "--warm-up", "true"},
                    c));
  EXPECT_EQ(c.device, "cuda:1");
  EXPECT_EQ(c.listen, "127.0.0.1:2");
  EXPECT_TRUE(c.warm_up);
  ASSERT_EQ(c.models.size(), 2u);
  EXPECT_EQ(c.models[0].name, "a");
  EXPECT_EQ(c.models[1].name, "b");
  // Each value given is checked, the replaced ones too, whichever check the flag has: a bad --log-level or
  // --max-beams before a good one passed, while a bad --max-queue was refused.
  for (const auto& [flag, bad, good, says] :
       std::vector<std::tuple<std::string, std::string, std::string, std::string>>{
           {"--max-queue", "0", "5", "--max-queue must be >= 1, got 0"},
           {"--log-level", "INFO", "info", "--log-level must be trace"},
           {"--max-beams", "100", "4", "--max-beams is 100; at most 64"},
           {"--listen", ":50051", "127.0.0.1:0", "--listen ':50051' has no host"},
           {"--device", "gpu", "cpu", "--device must be cpu, cuda or cuda:N"},
           {"--shutdown-grace-ms", "86400001", "1000", "--shutdown-grace-ms is 86400001; at most 86400000"}}) {
    const auto got = config_error({"--model", "a=/x", flag, bad, flag, good});
    EXPECT_EQ(got.rfind(says, 0), 0u) << flag << ": " << got;
    EXPECT_EQ(config_error({"--model", "a=/x", flag, good, flag, good}), "no error") << flag;
  }
}

// Every flag --help names is one the server takes (and a config file key).
TEST(ServerConfig, EveryFlagInTheHelpIsAccepted) {
  std::istringstream usage(server_usage());
  std::set<std::string> flags;
  for (std::string line; std::getline(usage, line);) {
    if (line.rfind("  --", 0) != 0) continue;  // an option's first line, not a continuation
    std::istringstream words(line);
    for (std::string word; words >> word;) {
      if (word.rfind("--", 0) == 0) flags.insert(word.substr(0, word.find_first_of("[=")));
    }
  }
  EXPECT_GT(flags.size(), 30u);
  for (const auto& flag : flags) {
    if (flag == "--help") continue;
    EXPECT_EQ(config_error({"--model", "a=/x", flag, "1"}).find("unknown flag"), std::string::npos) << flag;
  }
}

// Every field of a ServerConfig, for comparing two (it has no operator==). A field left out here is
// caught below: setting its flag away from the default must change what this compares.
auto fields(const ServerConfig& c) {
  std::vector<std::pair<std::string, std::string>> models;
  for (const auto& m : c.models) models.emplace_back(m.name, m.dir);
  return std::make_tuple(
      models, c.listen, c.metrics_listen, c.tls_cert, c.tls_key, c.tls_client_ca, c.device, c.dtype, c.threads,
      c.max_batch_rows, c.max_queue, c.max_input_tokens, c.max_new_tokens_cap, c.max_beams, c.max_tokens_in_flight,
      c.max_encode_tokens, c.encode_stall_ms, c.encode_piece_scores, c.encode_piece_positions, c.queue_bypass_ms,
      c.free_memory_after_idle_ms, c.max_state_bytes, c.encoder_cache_bytes, c.max_message_bytes,
      c.max_connection_age_ms, c.max_connection_age_grace_ms, c.max_streams_per_connection, c.max_unread_stream_bytes,
      c.stream_stall_timeout_ms, c.engine_stall_timeout_ms, c.retry_pushback_ms, c.shutdown_grace_ms, c.log_level,
      c.log_json, c.precompute_switches, c.warm_up, c.packed_weights);
}

// {flag: the default its --help states}, read as tests/metrics/doc_flags_test.py reads it: "(default X"
// is the default of the flag just before it ("--grace-ms (default 60000)"), else of the entry's next flag.
std::map<std::string, std::string> help_defaults() {
  const std::string usage = server_usage();
  std::vector<std::string> entries;
  for (size_t at = 0; at < usage.size();) {
    const size_t next = usage.find("\n  --", at + 1);
    entries.push_back(usage.substr(at, next == std::string::npos ? std::string::npos : next - at));
    at = next == std::string::npos ? usage.size() : next;
  }
  const std::regex flag_re("--[a-z][a-z0-9-]*");
  const std::regex default_re(R"((?:(--[a-z][a-z0-9-]*)(?: [A-Z]+)? )?\(default ([^\s;,)]+))");
  std::map<std::string, std::string> defaults;
  for (const auto& entry : entries) {
    const std::string first_line = entry.substr(0, entry.find('\n', 1));
    std::vector<std::string> lead;
    for (std::sregex_iterator m(first_line.begin(), first_line.end(), flag_re), end; m != end; ++m) {
      lead.push_back(m->str());
    }
    for (std::sregex_iterator m(entry.begin(), entry.end(), default_re), end; m != end; ++m) {
      std::string value = (*m)[2].str();
      if (!value.empty() && value.back() == ':') value.pop_back();  // "(default auto: half ..."
      if ((*m)[1].matched) {
        defaults.emplace((*m)[1].str(), value);
      } else if (!lead.empty()) {
        defaults.emplace(lead.front(), value);
        if (lead.size() > 1) lead.erase(lead.begin());
      }
    }
  }
  return defaults;
}

// A value of the flag's own kind other than `stated`: a number one more, a boolean the other way.
std::string another_value(const std::string& flag, const std::string& stated) {
  const std::map<std::string, std::string> words = {{"auto", "1G"}, {"cpu", "cuda"}, {"info", "debug"}};
  if (words.count(stated)) return words.at(stated);
  if (stated == "true" || stated == "false") return stated == "true" ? "false" : "true";
  if (flag == "--listen" || flag == "--metrics-listen") return "127.0.0.1:1234";
  if (flag == "--max-connection-age-ms") return "60000";  // 0 or at least a second
  const size_t digits = stated.find_first_not_of("0123456789");
  return std::to_string(std::stoll(stated.substr(0, digits)) + 1) +
         (digits == std::string::npos ? "" : stated.substr(digits));
}

// The defaults srformer-server --help states are the ones it runs with: each flag set to its stated
// default parses to the config of no flags at all (docs.command_flags checks the docs against --help;
// nothing checked --help against ServerConfig, so a changed default could leave --help stating the old).
TEST(ServerConfig, EveryDefaultTheHelpStatesIsTheRealOne) {
  // Stated as words rather than a value the flag takes.
  const std::map<std::string, std::string> as_value = {{"unlimited", "0"}};
  // Defaults that are no single value: TLS is off with no certificate, and the dtype follows the device.
  const std::set<std::string> not_a_value = {"--tls-cert", "--dtype"};
  const auto defaults = help_defaults();
  EXPECT_GE(defaults.size(), 25u);
  EXPECT_EQ(defaults.at("--max-connection-age-grace-ms"), "60000");
  EXPECT_EQ(defaults.at("--encode-piece-positions"), "2048");
  const ServerConfig none;
  EXPECT_TRUE(none.tls_cert.empty() && none.tls_key.empty());
  EXPECT_TRUE(none.dtype.empty());
  for (const auto& [flag, stated] : defaults) {
    if (not_a_value.count(flag)) continue;
    const std::string value = as_value.count(stated) ? as_value.at(stated) : stated;
    ServerConfig at_default;
    ASSERT_NO_THROW(parse({flag, value}, at_default)) << flag << " " << value;
    EXPECT_TRUE(fields(at_default) == fields(none)) << flag << ": --help says (default " << stated << ")";
    // And the comparison sees the flag's field: a value other than the default changes it.
    ServerConfig changed;
    const std::string other = another_value(flag, value);
    ASSERT_NO_THROW(parse({flag, other}, changed)) << flag << " " << other;
    EXPECT_FALSE(fields(changed) == fields(none)) << flag << " " << other << " changed no field fields() compares";
  }
}

TEST(ServerConfig, ErrorsSayWhatToFix) {
  const auto message = config_error;
  EXPECT_NE(message({"--model", "nodir"}).find("NAME=DIR"), std::string::npos);
  EXPECT_NE(message({}).find("--model"), std::string::npos);
  EXPECT_NE(message({"--model", "a=/x", "--max-batch-rows", "zero"}).find("integer"), std::string::npos);
  EXPECT_NE(message({"--model", "a=/x", "--dtype", "fp16"}).find("needs --device cuda"), std::string::npos);
  // bf16 runs on either of the CPU's backends (model/kernels/bf16_linear.h), not only on AMX.
  EXPECT_NE(message({"--model", "a=/x", "--dtype", "fp16"}).find("bf16 where the CPU has AMX or AVX512-BF16"),
            std::string::npos);
  EXPECT_NE(message({"--model", "a=/x", "--device", "tpu"}).find("cpu, cuda or cuda:N"), std::string::npos);
  EXPECT_NE(message({"--model", "a=/x", "--model", "a=/y"}).find("twice"), std::string::npos);
  EXPECT_NE(message({"--model", "a=/x", "--bogus", "1"}).find("unknown flag --bogus"), std::string::npos);
  EXPECT_NE(message({"--model", "a=/x", "--encode-piece-positions", "0"}).find("--encode-piece-positions must be >= 1"),
            std::string::npos);
  EXPECT_NE(message({"--config", "/nonexistent.json"}).find("cannot open"), std::string::npos);
  EXPECT_NE(message({"--model", "a=/x", "--retry-pushback-ms", "86400000"})
                .find("--retry-pushback-ms is 86400000; at most 3600000 (an hour)"),
            std::string::npos);
  EXPECT_NE(message({"--model", "a=/x", "--retry-pushback-ms", "-1"}).find("--retry-pushback-ms"), std::string::npos);
  // The config file's model list: a non-string directory is named, not a JSON library type error.
  const auto path = std::filesystem::temp_directory_path() / "srformer_server_config_models.json";
  for (const char* models : {R"({"a": 5})", R"([5])", "7"}) {
    std::ofstream(path) << R"({"model": )" << models << "}";
    const auto got = message({"--config", path.string()});
    EXPECT_NE(got.find("config key 'model' in '" + path.string() + "' must be {\"name\": \"dir\", ...}"),
              std::string::npos)
        << models << ": " << got;
  }
  std::ofstream(path) << R"({"model": "a=/models/a"})";  // one model as a string, as --model takes it
  ServerConfig one;
  ASSERT_TRUE(parse({"--config", path.string()}, one));
  ASSERT_EQ(one.models.size(), 1u);
  EXPECT_EQ(one.models[0].dir, "/models/a");
  std::filesystem::remove(path);
  ServerConfig c;
  EXPECT_FALSE(parse({"--help"}, c));
}

// What gRPC would bend without a word: ports past 65535 wrap (99999 listened on 34463), "HOST:" is 443.
TEST(ServerConfig, AddressesNeedAPortInRange) {
  const auto message = [](const std::string& flag, const std::string& address) {
    return config_error({"--model", "a=/x", flag, address});
  };
  for (const char* bad : {"127.0.0.1:99999", "127.0.0.1:65536", "127.0.0.1:", "localhost", "[::1]:-1", ":5x"}) {
    EXPECT_NE(message("--listen", bad).find("--listen needs HOST:PORT with a port from 0 to 65535"), std::string::npos)
        << bad << ": " << message("--listen", bad);
    EXPECT_NE(message("--metrics-listen", bad).find("--metrics-listen needs HOST:PORT with a port from 0 to 65535"),
              std::string::npos)
        << bad;
  }
  for (const char* good : {"127.0.0.1:0", "0.0.0.0:65535", "[::]:50052", "localhost:9465"}) {
    EXPECT_EQ(message("--listen", good), "no error") << good;
    EXPECT_EQ(message("--metrics-listen", good), "no error") << good;
  }
  EXPECT_EQ(message("--listen", "unix:/tmp/srformer.sock"), "no error");
  EXPECT_NE(message("--metrics-listen", "unix:/tmp/m.sock"), "no error");
}

// An operator's slips with addresses are named before anything is bound: gRPC could not parse ":PORT"
// and both said only "is the port in use?"; the two listeners on one port collided with each other.
TEST(ServerConfig, ListenersNeedAHostAndPortsOfTheirOwn) {
  const auto message = [](std::vector<std::string> flags) {
    flags.insert(flags.begin(), {"--model", "a=/x"});
    return config_error(flags);
  };
  EXPECT_NE(message({"--listen", ":50152"})
                .find("--listen ':50152' has no host: use 0.0.0.0:50152 for every interface, or 127.0.0.1:50152"),
            std::string::npos)
      << message({"--listen", ":50152"});
  EXPECT_EQ(message({"--metrics-listen", ":9566"}), "no error");  // the metrics server reads it as every interface
  for (const auto& [grpc, metrics] :
       std::vector<std::pair<std::string, std::string>>{{"127.0.0.1:5000", "127.0.0.1:5000"},
                                                        {"127.0.0.1:5000", "0.0.0.0:5000"},
                                                        {"[::]:5000", "127.0.0.1:5000"},
                                                        {"0.0.0.0:5000", ":5000"}}) {
    EXPECT_NE(message({"--listen", grpc, "--metrics-listen", metrics})
                  .find("--listen " + grpc + " and --metrics-listen " + metrics + " name the same port"),
              std::string::npos)
        << grpc << " " << metrics;
  }
  EXPECT_EQ(message({"--listen", "127.0.0.1:5000", "--metrics-listen", "127.0.0.2:5000"}), "no error");
  EXPECT_EQ(message({"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"}), "no error");
  EXPECT_EQ(message({"--listen", "unix:/tmp/s.sock", "--metrics-listen", "127.0.0.1:5000"}), "no error");
}

// The object form of the config file's models keeps the file's order (the first is the default model,
// as with --model flags; nlohmann's default object sorted them by name) and checks names as --model does.
TEST(ServerConfig, ConfigFileModelsKeepTheirOrder) {
  const auto path = std::filesystem::temp_directory_path() / "srformer_server_config_order.json";
  std::ofstream(path) << R"({"model": {"t5": "/m/t5", "bart": "/m/bart", "mt5": "/m/mt5"}})";
  ServerConfig c;
  ASSERT_TRUE(parse({"--config", path.string()}, c));
  ASSERT_EQ(c.models.size(), 3u);
  EXPECT_EQ(c.models[0].name, "t5");
  EXPECT_EQ(c.models[1].name, "bart");
  EXPECT_EQ(c.models[2].name, "mt5");
  std::ofstream(path) << R"({"model": {"": "/m/t5"}})";
  EXPECT_NE(config_error({"--config", path.string()}).find("needs NAME=DIR"), std::string::npos);
  std::filesystem::remove(path);
  const auto dir = std::filesystem::temp_directory_path();
  EXPECT_EQ(config_error({"--config", dir.string()}),
            "config file '" + dir.string() + "' is a directory; --config takes a JSON file");
}

// A model's name is sent in every response as a protobuf string and typed by clients: one that is not
// UTF-8 made every ListModels and Summarize answer unreadable to the client (which reported UNIMPLEMENTED),
// and a control character, an outer space or the object form's '=' (read back as NAME=DIR's split) named a
// model no client could ask for as it meant.
TEST(ServerConfig, AModelNameClientsCannotSendOrTypeIsRefused) {
  for (const std::string& name : {std::string("a\xff"), std::string("a\nb"), std::string("tab\there"),
                                  std::string("bart "), std::string(" bart")}) {
    const auto got = config_error({"--model", name + "=/m"});
    EXPECT_EQ(got.rfind("model name '", 0), 0u) << got;
    EXPECT_NE(got.find("use letters, digits"), std::string::npos) << got;
    // The message itself is UTF-8 without control characters.
    EXPECT_TRUE(utf8::is_valid(got)) << got;
    EXPECT_EQ(got.find_first_of("\n\t"), std::string::npos) << got;
  }
  EXPECT_NE(config_error({"--model", "a\xff=/m"}).find("is not UTF-8"), std::string::npos);
  EXPECT_NE(config_error({"--model", "a\nb=/m"}).find("holds a control character"), std::string::npos);
  EXPECT_NE(config_error({"--model", "bart =/m"}).find("starts or ends with a space"), std::string::npos);
  // What a client can send is taken as it is, '=' in the directory included (split at the first '=').
  ServerConfig c;
  ASSERT_TRUE(parse({"--model", "résumé-v2.1_x=/m/a=b", "--model", "two words=/m/c"}, c));
  EXPECT_EQ(c.models[0].name, "résumé-v2.1_x");
  EXPECT_EQ(c.models[0].dir, "/m/a=b");
  EXPECT_EQ(c.models[1].name, "two words");
  const auto path = std::filesystem::temp_directory_path() / "srformer_server_config_names.json";
  std::ofstream(path) << R"({"model": {"a=b": "/m/x"}})";
  EXPECT_NE(config_error({"--config", path.string()}).find("model name 'a=b' holds '='"), std::string::npos)
      << config_error({"--config", path.string()});
  std::ofstream(path) << R"({"model": {"a\u0001": "/m/x"}})";
  EXPECT_NE(config_error({"--config", path.string()}).find("holds a control character"), std::string::npos);
  std::ofstream(path) << R"({"model": {"a": ""}})";
  EXPECT_NE(config_error({"--config", path.string()}).find("needs NAME=DIR"), std::string::npos);
  std::filesystem::remove(path);
}

// A relative path in the config file is the file's directory's (model directories and TLS files), as
// Prometheus and kubeconfig read theirs; it was the server's current directory's, so one file meant other
// models wherever the server was started. On the command line a path stays the current directory's.
TEST(ServerConfig, RelativePathsInTheConfigFileAreReadFromItsDirectory) {
  const auto dir = std::filesystem::temp_directory_path() / "srformer_server_config_paths";
  std::filesystem::create_directories(dir);
  const auto path = dir / "server.json";
  std::ofstream(path) << R"({"model": {"a": "models/a", "b": "/abs/b"}, "tls_cert": "certs/server.pem",
                             "tls_key": "/abs/key.pem", "tls-client-ca": "ca.pem"})";
  ServerConfig c;
  ASSERT_TRUE(parse({"--config", path.string()}, c));
  ASSERT_EQ(c.models.size(), 2u);
  EXPECT_EQ(c.models[0].dir, (dir / "models/a").string());
  EXPECT_EQ(c.models[1].dir, "/abs/b");
  EXPECT_EQ(c.tls_cert, (dir / "certs/server.pem").string());
  EXPECT_EQ(c.tls_key, "/abs/key.pem");
  EXPECT_EQ(c.tls_client_ca, (dir / "ca.pem").string());
  for (const char* models : {R"(["a=models/a"])", R"("a=models/a")"}) {
    std::ofstream(path) << R"({"model": )" << models << "}";
    ServerConfig other;
    ASSERT_TRUE(parse({"--config", path.string()}, other));
    EXPECT_EQ(other.models.at(0).dir, (dir / "models/a").string()) << models;
  }
  ServerConfig flags;
  ASSERT_TRUE(parse({"--config", path.string(), "--model", "c=models/c", "--tls-cert", "certs/s.pem"}, flags));
  EXPECT_EQ(flags.models.at(0).dir, "models/c");
  EXPECT_EQ(flags.tls_cert, "certs/s.pem");
  std::filesystem::remove_all(dir);
}

// A config file means one thing: a key given twice (in either spelling), text after the object, or a
// second --config file are errors, not a silent choice.
TEST(ServerConfig, AConfigFileThatSaysTwoThingsIsRefused) {
  const auto path = std::filesystem::temp_directory_path() / "srformer_server_config_twice.json";
  const auto message = [&](const std::string& text, std::vector<std::string> more = {}) {
    std::ofstream(path) << text;
    more.insert(more.begin(), {"--config", path.string()});
    return config_error(more);
  };
  EXPECT_NE(message(R"({"model": "a=/x", "max_queue": 4, "max_queue": 9999})").find("gives key 'max_queue' twice"),
            std::string::npos);
  EXPECT_NE(message(R"({"model": "a=/x", "max_queue": 4, "max-queue": 8})")
                .find("gives 'max-queue' twice (as 'max_queue' and 'max-queue'); keep one"),
            std::string::npos)
      << message(R"({"model": "a=/x", "max_queue": 4, "max-queue": 8})");
  EXPECT_NE(message(R"({"model": {"a": "/x", "a": "/y"}})").find("gives key 'a' twice"), std::string::npos);
  // "models", the list's other spelling, with "model": two lists in one file were served as one.
  EXPECT_NE(message(R"({"model": {"a": "/x"}, "models": ["b=/y"]})")
                .find("gives 'model' twice (as 'model' and 'models'); keep one"),
            std::string::npos)
      << message(R"({"model": {"a": "/x"}, "models": ["b=/y"]})");
  EXPECT_EQ(message(R"({"models": ["b=/y"]})"), "no error");
  EXPECT_NE(message(R"({"model": "a=/x"} {"max_queue": 8})").find("is not valid JSON"), std::string::npos);
  EXPECT_NE(message(R"({"model": "a=/x"} garbage)").find("is not valid JSON"), std::string::npos);
  EXPECT_NE(message(R"({"model": "a=/x"})", {"--config", path.string()}).find("--config is given twice"),
            std::string::npos);
  // The same keys in separate objects are not repeats.
  EXPECT_EQ(message(R"({"model": {"a": "/x", "b": "/y"}, "max_queue": 4})"), "no error");
  std::filesystem::remove(path);
}

TEST(ServerConfig, LimitsTheEngineCannotHonourAreRefused) {
  const auto message = [](std::vector<std::string> args) {
    args.insert(args.begin(), {"--model", "a=/x"});
    return config_error(args);
  };
  // ListModels advertised 5000 while requests over 4096 were refused.
  EXPECT_NE(message({"--max-new-tokens-cap", "5000"}).find("--max-new-tokens-cap is 5000; at most 4096"),
            std::string::npos);
  EXPECT_EQ(message({"--max-new-tokens-cap", "4096"}), "no error");
  EXPECT_NE(message({"--max-beams", "65"}).find("--max-beams is 65; at most 64"), std::string::npos);
  EXPECT_NE(message({"--max-batch-rows", "4"}).find("--max-beams (8, the default) cannot exceed --max-batch-rows (4)"),
            std::string::npos)
      << message({"--max-batch-rows", "4"});
  EXPECT_EQ(message({"--max-batch-rows", "4", "--max-beams", "4"}), "no error");
  // Durations past a day (a huge --shutdown-grace-ms overflowed the clock and cancelled every request at
  // once) and a message limit past gRPC's int (2^32 was read as 0: every message refused).
  for (const std::string flag :
       {"--shutdown-grace-ms", "--queue-bypass-ms", "--encode-stall-ms", "--max-connection-age-ms",
        "--free-memory-after-idle-ms", "--stream-stall-timeout-ms", "--engine-stall-timeout-ms"}) {
    EXPECT_NE(message({flag, "10000000000000"}).find(flag + " is 10000000000000; at most 86400000 (a day)"),
              std::string::npos)
        << message({flag, "10000000000000"});
    EXPECT_EQ(message({flag, "86400000"}), "no error") << flag;
  }
  EXPECT_NE(message({"--max-message-bytes", "4294967296"}).find("at most 2147483647"), std::string::npos);
  EXPECT_EQ(message({"--max-message-bytes", "2147483647"}), "no error");
  // A connection age under a second: gRPC closes connections as fast as clients open them, and calls fail
  // with UNAVAILABLE (at 1 ms about half of them: "GOAWAY received").
  for (const std::string ms : {"1", "999"}) {
    EXPECT_NE(message({"--max-connection-age-ms", ms})
                  .find("--max-connection-age-ms is " + ms + "; 0 (never) or at least 1000 (a second)"),
              std::string::npos)
        << message({"--max-connection-age-ms", ms});
  }
  EXPECT_EQ(message({"--max-connection-age-ms", "1000"}), "no error");
  EXPECT_EQ(message({"--max-connection-age-ms", "0"}), "no error");
}

TEST(ServerConfig, StateMemoryTakesSizesWithBinarySuffixes) {
  const auto size = [](const std::string& v) { return parse_memory_size("--max-state-memory", v); };
  EXPECT_EQ(ServerConfig{}.max_state_bytes, ServerConfig::kAutoStateMemory);
  EXPECT_EQ(size("auto"), ServerConfig::kAutoStateMemory);
  EXPECT_EQ(size("0"), 0);
  EXPECT_EQ(size("1073741824"), int64_t{1} << 30);
  EXPECT_EQ(size("512M"), int64_t{512} << 20);
  EXPECT_EQ(size("8g"), int64_t{8} << 30);
  EXPECT_EQ(size("1.5GiB"), int64_t{3} << 29);
  EXPECT_EQ(size("64KB"), int64_t{64} << 10);
  EXPECT_EQ(size("2T"), int64_t{2} << 40);
  for (const char* bad : {"", "G", "-1G", "8X", "1e9", "8 G", "auto2", "99999999999T"}) {
    try {
      (void)size(bad);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("K, M, G or T suffix"), std::string::npos) << e.what();
    }
  }
  ServerConfig c;
  ASSERT_TRUE(parse({"--model", "a=/x", "--max-state-memory", "3G"}, c));
  EXPECT_EQ(c.max_state_bytes, int64_t{3} << 30);
}

TEST(ServerConfig, EncoderCacheMemoryIsOffByDefaultAndTakesASize) {
  EXPECT_EQ(ServerConfig{}.encoder_cache_bytes, 0);
  ServerConfig c;
  ASSERT_TRUE(parse({"--model", "a=/x", "--encoder-cache-memory", "256M"}, c));
  EXPECT_EQ(c.encoder_cache_bytes, int64_t{256} << 20);
  try {
    ServerConfig d;
    (void)parse({"--model", "a=/x", "--encoder-cache-memory", "auto"}, d);
    ADD_FAILURE() << "auto was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("not auto"), std::string::npos) << e.what();
  }
}

TEST(ServerConfig, StreamsPerConnectionAndUnreadStreamMemoryAreBoundedByDefault) {
  EXPECT_EQ(ServerConfig{}.max_streams_per_connection, 100);
  EXPECT_EQ(ServerConfig{}.max_unread_stream_bytes, int64_t{64} << 20);
  ServerConfig c;
  ASSERT_TRUE(parse({"--model", "a=/x", "--max-streams-per-connection", "0", "--max-unread-stream-memory", "1G"}, c));
  EXPECT_EQ(c.max_streams_per_connection, 0);
  EXPECT_EQ(c.max_unread_stream_bytes, int64_t{1} << 30);
  // A stream its client takes nothing of is ended after a minute (a web server's send timeout); 0: never.
  EXPECT_EQ(ServerConfig{}.stream_stall_timeout_ms, 60000);
  ServerConfig never;
  ASSERT_TRUE(parse({"--model", "a=/x", "--stream-stall-timeout-ms", "0"}, never));
  EXPECT_EQ(never.stream_stall_timeout_ms, 0);
  EXPECT_NE(config_error({"--model", "a=/x", "--stream-stall-timeout-ms", "-1"}), "no error");
  // An engine with work that does not move for a minute turns health NOT_SERVING; 0: never.
  EXPECT_EQ(ServerConfig{}.engine_stall_timeout_ms, 60000);
  ASSERT_TRUE(parse({"--model", "a=/x", "--engine-stall-timeout-ms", "0"}, never));
  EXPECT_EQ(never.engine_stall_timeout_ms, 0);
  EXPECT_NE(config_error({"--model", "a=/x", "--engine-stall-timeout-ms", "-1"}), "no error");
  EXPECT_NE(config_error({"--model", "a=/x", "--max-streams-per-connection", "4294967296"}).find("at most 2147483647"),
            std::string::npos);
  EXPECT_NE(config_error({"--model", "a=/x", "--max-streams-per-connection", "-1"}), "no error");
}

// --encoder-cache-memory refuses auto, so its error for a bad size does not offer it: "12X" said "needs
// auto or a size", and auto then said "needs a size, not auto".
TEST(ServerConfig, EncoderCacheMemoryErrorDoesNotOfferAuto) {
  const auto got = config_error({"--model", "a=/x", "--encoder-cache-memory", "12X"});
  EXPECT_EQ(got.rfind("--encoder-cache-memory needs a size", 0), 0u) << got;
  EXPECT_EQ(got.find("auto"), std::string::npos) << got;
  EXPECT_NE(config_error({"--model", "a=/x", "--max-state-memory", "12X"}).find("needs auto or a size"),
            std::string::npos);
}

TEST(ServerConfig, DeviceAndDtype) {
  EXPECT_TRUE(parse_device("cpu").is_cpu());
  EXPECT_EQ(parse_device("cuda:1").index(), 1);
  EXPECT_EQ(parse_dtype("", parse_device("cpu")), torch::kFloat32);
  EXPECT_EQ(parse_dtype("", parse_device("cuda")), torch::kFloat16);
  EXPECT_EQ(parse_dtype("bf16", parse_device("cuda")), torch::kBFloat16);
  EXPECT_EQ(parse_dtype("bf16", parse_device("cpu")), torch::kBFloat16);  // AMX checked at load
}

// A size under one byte was read as 0, which turns the bound off ("--max-state-memory 0.5" logged
// "decoder state budget: none (--max-state-memory 0)"); a unit after B ("8BB", "8BiB") was dropped.
TEST(ServerConfig, ASizeUnderAByteOrWithAStrayUnitIsRefused) {
  for (const std::string flag : {"--max-state-memory", "--encoder-cache-memory"}) {
    for (const std::string bad : {"0.5", "0.0001K", "8BB", "8BiB"}) {
      const auto got = config_error({"--model", "a=/x", flag, bad});
      EXPECT_EQ(got.rfind(flag, 0), 0u) << flag << " " << bad << ": " << got;
    }
    EXPECT_NE(config_error({"--model", "a=/x", flag, "0.5"}).find("less than a byte"), std::string::npos);
    for (const char* good : {"0", "0.0", "1", "8B", "8KiB", "0.5K"}) {
      EXPECT_EQ(config_error({"--model", "a=/x", flag, good}), "no error") << flag << " " << good;
    }
  }
  EXPECT_EQ(parse_memory_size("--max-state-memory", "0.5K"), 512);
  EXPECT_EQ(parse_memory_size("--max-state-memory", "8b"), 8);
}

// c10::DeviceIndex is 8 bits: cuda:256 was read as cuda:0 (another GPU than the one named, without a
// word) and cuda:200 as cuda:-56.
TEST(ServerConfig, ACudaIndexLibTorchCannotHoldIsRefused) {
  EXPECT_EQ(parse_device("cuda:127").index(), 127);
  for (const char* bad : {"cuda:128", "cuda:200", "cuda:256", "cuda:4294967296"}) {
    try {
      const auto device = parse_device(bad);
      ADD_FAILURE() << bad << " was read as " << device.str();
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("--device cuda:N takes N from 0 to 127"), std::string::npos) << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << bad << ": not a ConfigError: " << e.what();
    }
  }
}

// A value from the config file is named with its file and key (the message named only the flag, which
// is nowhere on the command line), and an integer past int64 is quoted as written (18446744073709551615
// was read back as -1: "--max-batch-rows must be >= 1, got -1").
TEST(ServerConfig, AConfigFileValueIsNamedWithItsFileAndKey) {
  const auto path = std::filesystem::temp_directory_path() / "srformer_server_config_values.json";
  const auto message = [&](const std::string& text) {
    std::ofstream(path) << text;
    return config_error({"--config", path.string()});
  };
  EXPECT_NE(message(R"({"model": "a=/x", "max_queue": 0})")
                .find("config file '" + path.string() + "', key 'max_queue': --max-queue must be >= 1, got 0"),
            std::string::npos)
      << message(R"({"model": "a=/x", "max_queue": 0})");
  const auto huge = message(R"({"model": "a=/x", "max_batch_rows": 18446744073709551615})");
  EXPECT_NE(huge.find("key 'max_batch_rows': --max-batch-rows 18446744073709551615 is out of range (1 to "
                      "9223372036854775807)"),
            std::string::npos)
      << huge;
  EXPECT_NE(message(R"({"model": "a=/x", "log_json": "maybe"})").find("key 'log_json': --log-json needs true or false"),
            std::string::npos);
  EXPECT_EQ(
      message(R"({"model": "a=/x", "max_batch_rows": 16.0})"),
      "config key 'max_batch_rows' in '" + path.string() + "' must be a string, whole number or boolean, got 16.0");
  std::filesystem::remove(path);
  EXPECT_EQ(config_error({"--model", "a=/x", "--max-queue", "99999999999999999999"}),
            "--max-queue 99999999999999999999 is out of range (1 to 9223372036854775807)");
}

// Every value the server refuses is refused with the config file and key it came from, also those checked
// once the file and the flags are merged (validate()): a file's "log_level": "INFO" or "max_beams": 100 was
// refused as "--log-level must be ..." and "--max-beams is 100", flags that were nowhere on the command line.
TEST(ServerConfig, AConfigFileValueRefusedAfterMergingIsNamedWithItsFileAndKey) {
  const auto path = std::filesystem::temp_directory_path() / "srformer_server_config_merged.json";
  for (const auto& [key, value, says] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"log_level", R"("INFO")", "--log-level must be trace"},
           {"listen", R"(":50051")", "--listen ':50051' has no host"},
           {"metrics_listen", R"("9464")", "--metrics-listen needs HOST:PORT"},
           {"device", R"("gpu")", "--device must be cpu, cuda or cuda:N, got 'gpu'"},
           {"dtype", R"("fp8")", "--dtype must be fp32, fp16 or bf16, got 'fp8'"},
           {"shutdown_grace_ms", "86400001", "--shutdown-grace-ms is 86400001; at most 86400000 (a day)"},
           {"retry-pushback-ms", "3600001", "--retry-pushback-ms is 3600001; at most 3600000 (an hour)"},
           {"max_connection_age_ms", "10", "--max-connection-age-ms is 10; 0 (never) or at least 1000"},
           {"max_streams_per_connection", "2147483648", "--max-streams-per-connection is 2147483648"},
           {"max_message_bytes", "2147483648", "--max-message-bytes is 2147483648"},
           {"max_input_tokens", "2147483648", "--max-input-tokens is 2147483648"},
           {"max_new_tokens_cap", "4097", "--max-new-tokens-cap is 4097"},
           {"max_beams", "65", "--max-beams is 65; at most 64"}}) {
    std::ofstream(path) << R"({"model": "a=/x", ")" << key << R"(": )" << value << "}";
    const auto got = config_error({"--config", path.string()});
    EXPECT_EQ(got.rfind("config file '" + path.string() + "', key '" + key + "': " + says, 0), 0u) << got;
  }
  // On the command line the flag is named as before, and combinations are checked once merged.
  EXPECT_EQ(config_error({"--model", "a=/x", "--max-beams", "65"}), "--max-beams is 65; at most 64");
  std::ofstream(path) << R"({"model": "a=/x", "dtype": "fp16"})";
  EXPECT_EQ(config_error({"--config", path.string()}).rfind("--dtype fp16 needs --device cuda", 0), 0u);
  EXPECT_EQ(config_error({"--config", path.string(), "--device", "cuda"}), "no error");
  std::filesystem::remove(path);
}

// ListModels reports the input limit as an int32: 2^31 and more were advertised wrapped (2^63 - 1 as
// -1). No request message can hold that many tokens anyway (--max-message-bytes is at most 2^31 - 1).
TEST(ServerConfig, AnInputLimitListModelsCannotReportIsRefused) {
  EXPECT_NE(config_error({"--model", "a=/x", "--max-input-tokens", "2147483648"})
                .find("--max-input-tokens is 2147483648; at most 2147483647"),
            std::string::npos)
      << config_error({"--model", "a=/x", "--max-input-tokens", "2147483648"});
  EXPECT_EQ(config_error({"--model", "a=/x", "--max-input-tokens", "2147483647"}), "no error");
}

// gRPC took "unix:" and "unix-abstract:" (bound where no client can name it) and said only "is the port
// in use?" of a path longer than a socket address holds.
TEST(ServerConfig, AUnixSocketAddressNeedsANameThatFits) {
  const std::string longest = "/tmp/" + std::string(102, 's');  // 107 bytes, and sun_path's terminating NUL
  for (const std::string& bad :
       {std::string("unix:"), std::string("unix://"), std::string("unix-abstract:"), "unix:" + longest + "s",
        "unix://" + longest + "s", "unix-abstract:" + longest + "s"}) {
    const auto got = config_error({"--model", "a=/x", "--listen", bad});
    EXPECT_EQ(got.rfind("--listen '" + bad + "'", 0), 0u) << bad << ": " << got;
  }
  EXPECT_NE(config_error({"--model", "a=/x", "--listen", "unix:"}).find("names no socket"), std::string::npos);
  EXPECT_NE(config_error({"--model", "a=/x", "--listen", "unix:" + longest + "s"}).find("at most 107"),
            std::string::npos);
  for (const std::string& good :
       {"unix:" + longest, "unix://" + longest, "unix-abstract:" + longest, std::string("unix:s")}) {
    EXPECT_EQ(config_error({"--model", "a=/x", "--listen", good}), "no error") << good;
  }
}

// gRPC cannot read an IPv6 address without brackets, and said only "is the port in use or the address
// wrong?" once the metrics server had started.
TEST(ServerConfig, AnIpv6ListenAddressNeedsBrackets) {
  EXPECT_EQ(config_error({"--model", "a=/x", "--listen", "::1:50051"}),
            "--listen '::1:50051': an IPv6 address goes in brackets: [::1]:50051");
  EXPECT_EQ(config_error({"--model", "a=/x", "--listen", ":::50051"}),
            "--listen ':::50051': an IPv6 address goes in brackets: [::]:50051");
  for (const char* good : {"[::1]:50051", "[fe80::1%eth0]:50051", "dns:///127.0.0.1:50051", "localhost:50051"}) {
    EXPECT_EQ(config_error({"--model", "a=/x", "--listen", good}), "no error") << good;
  }
  EXPECT_EQ(config_error({"--model", "a=/x", "--metrics-listen", "::1:9464"}), "no error");  // civetweb reads it
}

// An unknown level is refused before anything starts, naming the flag (it said "unknown log level").
TEST(ServerConfig, LogLevelNamesTheFlagWhenItIsUnknown) {
  EXPECT_EQ(config_error({"--model", "a=/x", "--log-level", "INFO"}),
            "--log-level must be trace, debug, info, warn, error, critical or off, got 'INFO'");
  EXPECT_NE(config_error({"--model", "a=/x", "--log-level", ""}).find("--log-level must be"), std::string::npos);
  for (const char* good : {"trace", "debug", "info", "warn", "warning", "error", "critical", "off"}) {
    EXPECT_EQ(config_error({"--model", "a=/x", "--log-level", good}), "no error") << good;
  }
}

// --log-json takes a value as the other true|false flags do (--warm-up false), or none: "--log-json false"
// was refused as "unexpected argument 'false'".
TEST(ServerConfig, LogJsonTakesAValueOrNone) {
  for (const auto& [args, json] :
       std::vector<std::pair<std::vector<std::string>, bool>>{{{"--log-json", "--model", "a=/x"}, true},
                                                              {{"--model", "a=/x", "--log-json"}, true},
                                                              {{"--log-json", "false", "--model", "a=/x"}, false},
                                                              {{"--log-json", "true"}, true},
                                                              {{"--log-json=no"}, false}}) {
    ServerConfig c;
    ASSERT_TRUE(parse(args, c)) << args.front();
    EXPECT_EQ(c.log_json, json) << args.size() << " " << args.front();
  }
  EXPECT_EQ(config_error({"--model", "a=/x", "--log-json", "maybe"}), "unexpected argument 'maybe' (see --help)");
}

// A config file's log_json holds for an error in the same file whatever the order of its keys: with the
// bad key written first the error was plain text, after it a JSON line.
TEST(ServerConfig, AConfigFileErrorIsToldAsTheFilesLogJsonAsksWhereverItIsWritten) {
  const auto path = std::filesystem::temp_directory_path() / "srformer_server_config_log_json.json";
  for (const char* text :
       {R"({"bogus": 1, "log_json": true})", R"({"log_json": true, "bogus": 1})",
        R"({"max_queue": 0, "log-json": "yes"})", R"({"model": {"a\u0001": "/x"}, "log_json": 1})"}) {
    std::ofstream(path) << text;
    const std::vector<std::string> args{"srformer-server", "--config", path.string()};
    std::vector<const char*> argv;
    for (const auto& a : args) argv.push_back(a.c_str());
    ServerConfig c;
    EXPECT_THROW(parse_server_args(static_cast<int>(argv.size()), argv.data(), c), ConfigError) << text;
    EXPECT_TRUE(log_json_asked(static_cast<int>(argv.size()), argv.data(), c)) << text;
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace srformer::server
