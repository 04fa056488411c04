#include "client/client_options.h"

#include <arpa/inet.h>

#include <cctype>
#include <iostream>
#include <limits>
#include <set>
#include <stdexcept>

#include "client/retry_policy.h"
#include "common/generation_flags_usage.h"
#include "common/number_flags.h"
#include "model/tokenizer/document_check.h"
#include "model/tokenizer/utf8.h"

namespace srformer::client {

namespace {

constexpr int64_t kDayMs = int64_t{24} * 3600 * 1000;
constexpr int64_t kMaxConcurrency = 4096;

// A flag whose value goes into a string field of the request: protobuf sends other bytes as they are, and
// the server refused the body as "not a valid srformer.v1.SummarizeRequest message ... build the client from
// this server's proto", which blamed the client's build for what was typed.
std::string utf8_value(const std::string& flag, const std::string& v) {
  if (!utf8::is_valid(v))
    throw std::invalid_argument(flag + " must be UTF-8 text (a string field of the request); the value given is not");
  return v;
}

// An IPv6 address and its port without brackets ("::1:50051"): gRPC took it all for a DNS name and said
// "DNS resolution failed for ::1:50051 ... Domain name not found". The server's --listen refuses it alike.
void check_ipv6_brackets(const std::string& target) {
  const size_t colon = target.rfind(':');
  if (colon == std::string::npos || colon + 1 == target.size()) return;
  const std::string host = target.substr(0, colon), port = target.substr(colon + 1);
  in6_addr address{};
  if (port.find_first_not_of("0123456789") == std::string::npos && inet_pton(AF_INET6, host.c_str(), &address) == 1) {
    throw std::invalid_argument("--target '" + target + "': an IPv6 address goes in brackets: [" + host + "]:" + port);
  }
}

// A bracketed host left open ("[::1", "[::1:50051"), empty ("[]:50051") or followed by other than ":PORT"
// ("[::1]50051"): gRPC logged its own parse error and then said only "DNS resolution failed".
void check_bracketed_host(const std::string& target) {
  if (target.empty() || target.front() != '[') return;
  const auto refuse = [&target](const std::string& what) {
    throw std::invalid_argument("--target '" + target + "': " + what + "; write [ADDRESS]:PORT, e.g. [::1]:50051");
  };
  const size_t close = target.find(']');
  if (close == std::string::npos) refuse("the '[' before an IPv6 address is not closed");
  if (close == 1) refuse("the brackets hold no address");
  if (close + 1 < target.size() && target[close + 1] != ':') refuse("after the ']' comes ':PORT' or nothing");
}

// A URL ("http://host:50051", "https://host"): gRPC took it whole for a DNS name and said "DNS resolution failed
// for http://host:50051 ... Domain name not found".
void check_not_a_url(const std::string& target) {
  for (const std::string scheme : {"http://", "https://"}) {
    if (target.size() < scheme.size()) continue;
    std::string head = target.substr(0, scheme.size());
    for (auto& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (head != scheme) continue;
    const std::string address = target.substr(scheme.size(), target.find('/', scheme.size()) - scheme.size());
    throw std::invalid_argument("--target '" + target +
                                "': a HOST:PORT, not a URL: " + (scheme == "https://" ? "--tls " : "") + "--target " +
                                (address.empty() ? "HOST:PORT" : address));
  }
}

// A HOST:PORT whose port is past 65535 ("localhost:99999"): gRPC took it modulo 65536 and connected to another
// port (127.0.0.1:99999 to 34463), saying "Connection refused" of a port no one typed. Port 0 is no server's.
void check_port(const std::string& target) {
  const size_t colon = target.rfind(':');
  if (colon == std::string::npos) return;
  const std::string host = target.substr(0, colon), port = target.substr(colon + 1);
  // A scheme's form (ipv4:ADDRESS:PORT, dns:///NAME:PORT, unix:PATH) is gRPC's to read.
  const bool bracketed = !host.empty() && host.front() == '[' && host.back() == ']';
  if (port.empty() || port.find_first_not_of("0123456789") != std::string::npos) return;
  if (!bracketed && host.find(':') != std::string::npos) return;
  if (port.size() <= 5 && std::stoi(port) >= 1 && std::stoi(port) <= 65535) return;
  throw std::invalid_argument("--target '" + target + "': the port must be from 1 to 65535, got " + port);
}

// Flags that take no value: "--do-sample=false" sampled and "--json=false" printed JSON, the value dropped.
bool is_switch(const std::string& flag) {
  static const std::set<std::string> kSwitches = {"--help",
                                                  "--stream",
                                                  "--json",
                                                  "--batch",
                                                  "--partial",
                                                  "--tls",
                                                  "--insecure",
                                                  "--health",
                                                  "--list-models",
                                                  "--early-stopping",
                                                  "--no-early-stopping",
                                                  "--early-stopping-never",
                                                  "--do-sample",
                                                  "--no-sample",
                                                  "--truncate",
                                                  "--load"};
  return kSwitches.count(flag) > 0;
}

// Flags that shape a summary request: --health and --list-models send none, and took them without a word
// ("--health --model bart" said SERVING for a server without that model).
bool is_summary_flag(const std::string& flag) {
  static const std::set<std::string> kSummaryFlags = {"--model",
                                                      "--stream",
                                                      "--request-id",
                                                      "--max-document-bytes",
                                                      "--truncate",
                                                      "--max-new-tokens",
                                                      "--min-new-tokens",
                                                      "--num-beams",
                                                      "--num-beam-groups",
                                                      "--diversity-penalty",
                                                      "--num-return-sequences",
                                                      "--length-penalty",
                                                      "--early-stopping",
                                                      "--no-early-stopping",
                                                      "--early-stopping-never",
                                                      "--do-sample",
                                                      "--no-sample",
                                                      "--temperature",
                                                      "--top-k",
                                                      "--top-p",
                                                      "--seed",
                                                      "--no-repeat-ngram-size",
                                                      "--repetition-penalty",
                                                      "--min-p",
                                                      "--typical-p",
                                                      "--epsilon-cutoff",
                                                      "--eta-cutoff",
                                                      "--encoder-repetition-penalty",
                                                      "--encoder-no-repeat-ngram-size",
                                                      "--bad-word",
                                                      "--expected-length"};
  return kSummaryFlags.count(flag) > 0;
}

}  // namespace

std::string client_usage() {
  return R"(usage: srformer-client --target HOST:PORT [--model NAME] [options] [FILE|-]   (--batch, --load: FILE...)
       (-- ends the flags: the arguments after it are FILEs, also one named -x)

Summarizes FILE (or stdin) with an srformer-server.
  --target HOST:PORT       server address (default localhost:50051; IPv6 in brackets, [::1]:50051; unix:PATH)
  --model NAME             model to use (default: the server's first)
  --stream                 print the summary as tokens arrive (SummarizeStream)
  --json                   print one JSON object (summary, token_ids, finish_reason, usage, ...; with
                           --stream also "stream", the token deltas as they came; docs/API.md)
  --batch                  send every FILE in one SummarizeBatch call; a line per FILE (a line break
                           in a summary written \n or \r, a backslash \\; --json's text as it is)
  --partial                with --batch: each FILE succeeds or fails on its own (partial_results); a
                           failed one prints an empty line (--json: {"error": ...}) and its error on
                           stderr, and the exit status is 1
  --deadline-ms N          per-call deadline (covers every attempt; --health without it waits 3 s); without
                           it a call waits as long as the server takes, and stderr, on a terminal, says so
                           once nothing has come for 10 s ("no answer from TARGET in 10 s; still waiting ...")
  --retries N              retry a call refused with UNAVAILABLE or RESOURCE_EXHAUSTED up to N times
                           (0-4; default 0), after the server's grpc-retry-pushback-ms or a backoff
                           from 0.2 s; a stream only until its first token has arrived (not --health)
  --tls [--ca FILE]        TLS, trusting the system's CAs (/etc/ssl/certs/ca-certificates.crt, as gRPC
                           finds them) or those of FILE (PEM) | --insecure (default) plaintext
  --cert FILE --key FILE   client certificate and its key (PEM), for a server with --tls-client-ca
  --tls-server-name NAME   verify the server's certificate for NAME instead of the target's host (e.g.
                           a health check on localhost of a server whose certificate names its DNS name)
  --request-id ID          id echoed in server logs and the response (--batch, --load: ID-0, ID-1, ...)
  --max-document-bytes N   refuse a FILE of more than N bytes before sending it (default 67108864, 64 MiB;
                           at most 2147483647; a server takes 4194304 by default, its --max-message-bytes)
  --health                 check grpc.health.v1; exit 0 if SERVING, 1 otherwise (--json: {"status": ...};
                           no answer: {"status": null, "error": {"code": ..., "message": ...}})
  --list-models            print the server's models
  --help, -h               this text
generation options (unset = the model's defaults; as `srformer summarize` takes them):
)" + std::string(kSearchFlagsUsage) +
         kSamplingFlagsUsage +
         R"(  --num-return-sequences N (beams: also the next best hypotheses; sampling with one beam: N samples;
                           one line each after the summary, "[alternative K, score S] TEXT" (TEXT's
                           line breaks written as --batch's), or --json's alternatives; with --batch,
                           whose output is a line per FILE, --json's only)
  --truncate               cut over-long input instead of failing
load generator:
  --load --concurrency N (--requests M and/or --duration S [--grace G]) FILE...
      streams requests over the FILEs round-robin (name a FILE twice to send it twice as often);
      after --duration, the calls in flight have G seconds (default 30) to finish and count, then are
      cancelled, counted apart ("requests_cut") and neither ok nor failed (but the exit status is 1
      unless G is 0, which asks for them to be cut);
      prints throughput (tokens/s, requests/s over the run's wall time), time to first token (from the
      request's send), inter-token and request latency p50/p90/p99, all of the requests that succeeded (a
      failed one counts in the failures and errors alone), and with several distinct FILEs each one's own
      (with --json: one JSON object, those under "by_document"); a target it cannot connect to (in 10 s)
      fails at once, before the run (exit 1, no report); the run stops early ("stopped_early") when no
      request has succeeded and every FILE was refused with an error that sending it again does not
      change (INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION, OUT_OF_RANGE, UNIMPLEMENTED,
      UNAUTHENTICATED, PERMISSION_DENIED, a message over a size limit), and when max(10, 2 x N) requests
      have failed with the same code (DEADLINE_EXCEEDED, INTERNAL, ...; not UNAVAILABLE or a full queue,
      which are waited out) with none succeeding in between ("stopped_because" says which); other errors
      are counted and the run goes on; --requests M with --duration S ends at whichever comes first
exit status: 0 done (--health: SERVING; --load: every request succeeded); 1 a call failed, a FILE could
  not be read or the output not written (--health: not SERVING, or no answer; --load: a request failed,
  none succeeded, or one was cut after a --grace of more than 0); 2 a command line it refuses; 130 (143)
  --load ended by Ctrl-C (SIGTERM), after its report
)";
}

bool parse_client_args(int argc, char** argv, ClientOptions& o) {
  auto& g = o.generation;
  bool tls_asked = false, insecure_asked = false;
  bool only_files = false;  // after "--": a FILE whose name starts with '-'
  bool grace_given = false;
  std::string load_flag_given;     // the first flag of the load generator's, which without --load did nothing
  std::string summary_flag_given;  // the first flag that shapes a summary request
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (only_files || arg == "-" || arg.empty() || arg[0] != '-') {
      o.inputs.push_back(arg);
      continue;
    }
    if (arg == "--") {
      only_files = true;
      continue;
    }
    std::string value;
    bool has_value = false;
    if (arg.rfind("--", 0) == 0) {
      const auto eq = arg.find('=');
      if (eq != std::string::npos) {
        value = arg.substr(eq + 1);
        arg = arg.substr(0, eq);
        has_value = true;
      }
    }
    const auto next = [&]() -> std::string {
      if (has_value) return value;
      if (i + 1 >= argc) throw std::invalid_argument(arg + " needs a value (see --help)");
      return argv[++i];
    };
    if (has_value && is_switch(arg)) {
      throw std::invalid_argument(arg + " takes no value, got '" + arg + "=" + value + "' (see --help)");
    }
    if (arg == "--concurrency" || arg == "--requests" || arg == "--duration" || arg == "--grace") {
      if (load_flag_given.empty()) load_flag_given = arg;
    }
    if (summary_flag_given.empty() && is_summary_flag(arg)) summary_flag_given = arg;
    if (arg == "--help" || arg == "-h") {
      std::cout << client_usage();
      return false;
    } else if (arg == "--target") {
      o.target = next();
      // gRPC's words for it were "Failed to create secure client channel", for a plaintext one too.
      if (o.target.empty()) throw std::invalid_argument("--target needs an address (HOST:PORT, unix:PATH), got ''");
      check_not_a_url(o.target);
      check_ipv6_brackets(o.target);
      check_bracketed_host(o.target);
      check_port(o.target);
    } else if (arg == "--model") {
      o.model = utf8_value(arg, next());
    } else if (arg == "--stream") {
      o.stream = true;
    } else if (arg == "--json") {
      o.json = true;
    } else if (arg == "--batch") {
      o.batch = true;
    } else if (arg == "--partial") {
      o.partial = true;
    } else if (arg == "--deadline-ms") {
      o.deadline_ms = int64_flag(arg, next());
      if (o.deadline_ms < 0 || o.deadline_ms > kDayMs) {
        // Past a day it is no deadline a summary needs; far past it, now + it overflowed into the past.
        throw std::invalid_argument("--deadline-ms must be from 0 (no deadline) to " + std::to_string(kDayMs) +
                                    " (a day), got " + std::to_string(o.deadline_ms));
      }
    } else if (arg == "--retries") {
      const int64_t n = int64_flag(arg, next());
      if (n < 0 || n > kMaxRetries) {
        throw std::invalid_argument("--retries must be between 0 and " + std::to_string(kMaxRetries) +
                                    " (gRPC makes at most 5 attempts), got " + std::to_string(n));
      }
      o.retries = static_cast<int>(n);
    } else if (arg == "--tls") {
      o.tls = true;
      tls_asked = true;
    } else if (arg == "--ca") {
      o.ca_file = next();
      o.tls = true;
      tls_asked = true;
    } else if (arg == "--cert") {
      o.cert_file = next();
    } else if (arg == "--key") {
      o.key_file = next();
    } else if (arg == "--tls-server-name") {
      o.tls_server_name = next();
    } else if (arg == "--insecure") {
      insecure_asked = true;
    } else if (arg == "--request-id") {
      o.request_id = utf8_value(arg, next());
    } else if (arg == "--max-document-bytes") {
      const int64_t n = int64_flag(arg, next());
      if (n < 1 || n > std::numeric_limits<int>::max()) {  // gRPC carries no larger message
        throw std::invalid_argument("--max-document-bytes must be from 1 to " +
                                    std::to_string(std::numeric_limits<int>::max()) + ", got " + std::to_string(n));
      }
      o.max_document_bytes = n;
    } else if (arg == "--health") {
      o.health = true;
    } else if (arg == "--list-models") {
      o.list_models = true;
    } else if (arg == "--max-new-tokens") {
      g.set_max_new_tokens(int32_flag(arg, next()));
    } else if (arg == "--min-new-tokens") {
      g.set_min_new_tokens(int32_flag(arg, next()));
    } else if (arg == "--num-beams") {
      g.set_num_beams(int32_flag(arg, next()));
    } else if (arg == "--num-beam-groups") {
      g.set_num_beam_groups(int32_flag(arg, next()));
    } else if (arg == "--diversity-penalty") {
      g.set_diversity_penalty(float32_flag(arg, next()));
    } else if (arg == "--num-return-sequences") {
      g.set_num_return_sequences(int32_flag(arg, next()));
    } else if (arg == "--length-penalty") {
      g.set_length_penalty(float32_flag(arg, next()));
    } else if (arg == "--early-stopping") {
      // The three are one setting, the last given wins (as --do-sample/--no-sample, and srformer summarize's):
      // each set its own field, so "--early-stopping --early-stopping-never" sent both and the server refused
      // them, and "--early-stopping-never --no-early-stopping" ran as "never".
      g.set_early_stopping(true);
      g.clear_early_stopping_mode();
    } else if (arg == "--no-early-stopping") {  // where the model stops early by default
      g.set_early_stopping(false);
      g.clear_early_stopping_mode();
    } else if (arg == "--early-stopping-never") {
      g.set_early_stopping_mode(v1::EARLY_STOPPING_MODE_NEVER);
      g.clear_early_stopping();
    } else if (arg == "--do-sample") {
      g.set_do_sample(true);
    } else if (arg == "--no-sample") {  // where the model samples by default
      g.set_do_sample(false);
    } else if (arg == "--temperature") {
      g.set_temperature(float32_flag(arg, next()));
    } else if (arg == "--top-k") {
      g.set_top_k(int32_flag(arg, next()));
    } else if (arg == "--top-p") {
      g.set_top_p(float32_flag(arg, next()));
    } else if (arg == "--seed") {
      g.set_seed(uint64_flag(arg, next()));
    } else if (arg == "--no-repeat-ngram-size") {
      g.set_no_repeat_ngram_size(int32_flag(arg, next()));
    } else if (arg == "--repetition-penalty") {
      g.set_repetition_penalty(float32_flag(arg, next()));
    } else if (arg == "--min-p") {
      g.set_min_p(float32_flag(arg, next()));
    } else if (arg == "--typical-p") {
      g.set_typical_p(float32_flag(arg, next()));
    } else if (arg == "--epsilon-cutoff") {
      g.set_epsilon_cutoff(float32_flag(arg, next()));
    } else if (arg == "--eta-cutoff") {
      g.set_eta_cutoff(float32_flag(arg, next()));
    } else if (arg == "--encoder-repetition-penalty") {
      g.set_encoder_repetition_penalty(float32_flag(arg, next()));
    } else if (arg == "--encoder-no-repeat-ngram-size") {
      g.set_encoder_no_repeat_ngram_size(int32_flag(arg, next()));
    } else if (arg == "--bad-word") {
      // Where the bytes break, in srformer summarize's and eval's words (add_bad_words), not only that they do.
      const std::string word = next();
      if (const auto fault = find_document_fault(word); fault && fault->kind == DocumentFault::Kind::kNotUtf8) {
        throw std::invalid_argument(arg + " " + fault->what + "; re-encode it as UTF-8");
      }
      g.add_bad_words(word);
    } else if (arg == "--expected-length") {
      g.set_expected_length(int32_flag(arg, next()));
    } else if (arg == "--truncate") {
      o.truncation = v1::TRUNCATION_POLICY_TRUNCATE;
    } else if (arg == "--load") {
      o.load = true;
    } else if (arg == "--concurrency") {
      const int64_t n = int64_flag(arg, next());
      if (n < 1 || n > kMaxConcurrency) {
        // Each stream is a thread: 50000 of them aborted the client.
        throw std::invalid_argument("--concurrency must be from 1 to " + std::to_string(kMaxConcurrency) + ", got " +
                                    std::to_string(n));
      }
      o.concurrency = static_cast<int>(n);
    } else if (arg == "--requests") {
      o.requests = int64_flag(arg, next());
      if (o.requests < 1) throw std::invalid_argument("--requests must be >= 1");
    } else if (arg == "--duration") {
      const std::string v = next();
      o.duration_s = number_flag(arg, v);
      if (!(o.duration_s > 0 && o.duration_s <= kDayMs / 1000.0)) {  // NaN ran forever; 1e10 not at all
        // As typed: std::to_string wrote -1e-9 as "-0.000000".
        throw std::invalid_argument("--duration must be more than 0 and at most 86400 seconds (a day), got " + v);
      }
    } else if (arg == "--grace") {
      const std::string v = next();
      o.grace_s = number_flag(arg, v);
      if (!(o.grace_s >= 0 && o.grace_s <= kDayMs / 1000.0)) {
        throw std::invalid_argument("--grace must be from 0 to 86400 seconds (a day), got " + v);
      }
      grace_given = true;
    } else {  // a single-dash "-x" too: it was read as a FILE ("one FILE at a time (got 2)")
      throw std::invalid_argument("unknown flag " + arg + " (see --help)");
    }
  }
  if (tls_asked && insecure_asked)
    throw std::invalid_argument("--insecure (plaintext) and --tls/--ca do not go together");
  if (o.cert_file.empty() != o.key_file.empty()) {
    throw std::invalid_argument("--cert and --key go together (the client certificate and its private key)");
  }
  if (!o.cert_file.empty() && !o.tls) throw std::invalid_argument("--cert/--key need --tls");
  if (!o.tls_server_name.empty() && !o.tls) throw std::invalid_argument("--tls-server-name needs --tls");
  if (o.batch && o.stream)
    throw std::invalid_argument("--batch and --stream do not go together (SummarizeBatch answers once)");
  if (o.batch && o.load) throw std::invalid_argument("--batch and --load do not go together");
  // Taken without a word, as if it chose the load's kind of call: it streams whether given or not.
  if (o.load && o.stream)
    throw std::invalid_argument("--stream does nothing with --load, which streams every request (SummarizeStream)");
  if (o.partial && !o.batch)
    throw std::invalid_argument("--partial goes with --batch (SummarizeBatch's partial_results)");
  if (o.load && o.requests <= 0 && o.duration_s <= 0) {
    throw std::invalid_argument("--load needs --requests M or --duration S");
  }
  if (o.load && o.inputs.empty()) throw std::invalid_argument("--load needs at least one input FILE");
  if (o.load && grace_given && o.duration_s <= 0) {
    throw std::invalid_argument("--grace goes with --duration (a run of --requests M ends with its last request)");
  }
  if (!o.load && !load_flag_given.empty()) {
    // Without --load it summarized one FILE once, as if the flag were not there.
    throw std::invalid_argument(load_flag_given + " goes with --load (the load generator)");
  }
  // The server's "requests is empty" named no flag.
  if (o.batch && o.inputs.empty()) throw std::invalid_argument("--batch needs at least one FILE");
  if (o.health + o.list_models + o.batch + o.load > 1) {
    throw std::invalid_argument("--health, --list-models, --batch and --load each pick what the client does; give one");
  }
  if ((o.health || o.list_models) && !o.inputs.empty()) {
    throw std::invalid_argument(std::string(o.health ? "--health" : "--list-models") + " reads no FILE, got '" +
                                o.inputs.front() + "'");
  }
  if ((o.health || o.list_models) && !summary_flag_given.empty()) {
    throw std::invalid_argument(summary_flag_given + " does nothing with " +
                                (o.health ? "--health, which checks the server's state and summarizes nothing"
                                          : "--list-models, which lists every model and summarizes nothing"));
  }
  if (o.health && o.retries > 0) {
    // The retry policy names srformer.v1.Summarizer only: the check ran once, the flag ignored.
    throw std::invalid_argument(
        "--retries does nothing with --health, which reports the server's state now "
        "(a probe retries by running again)");
  }
  if (!o.batch && !o.load && o.inputs.size() > 1) {
    // The others were ignored without a word.
    throw std::invalid_argument("one FILE at a time (got " + std::to_string(o.inputs.size()) +
                                "); --batch summarizes several in one call");
  }
  return true;
}

}  // namespace srformer::client
