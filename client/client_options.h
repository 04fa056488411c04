#pragma once
// srformer-client command line.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "srformer/v1/summarizer.pb.h"

namespace srformer::client {

// The most srformer-client reads from one FILE unless --max-document-bytes says otherwise: without it,
// /dev/zero or a mistaken huge file was read up to 2 GiB (and as much memory taken) before being refused. A
// server takes 4 MiB by default (its --max-message-bytes); this leaves room for one that takes more.
inline constexpr int64_t kDefaultMaxDocumentBytes = int64_t{64} << 20;

struct ClientOptions {
  std::string target = "localhost:50051";
  std::string model;
  bool stream = false;
  bool json = false;
  int64_t deadline_ms = 0;  // 0 = none
  int retries = 0;          // retry_service_config (client/retry_policy.h); 0 = none
  bool tls = false;
  std::string ca_file;
  std::string cert_file, key_file;  // client certificate (mutual TLS)
  std::string tls_server_name;      // the name to verify the server's certificate against, if not the target's
  bool health = false;
  bool list_models = false;
  bool batch = false;    // every input file in one SummarizeBatch call
  bool partial = false;  // with batch: partial_results
  v1::GenerationOptions generation;
  v1::TruncationPolicy truncation = v1::TRUNCATION_POLICY_UNSPECIFIED;
  std::string request_id;
  int64_t max_document_bytes = kDefaultMaxDocumentBytes;  // a FILE longer is refused before it is sent
  // Load generator.
  bool load = false;
  int concurrency = 1;
  int64_t requests = 0;             // total requests (0 = use duration)
  double duration_s = 0;            // seconds (0 = use requests)
  double grace_s = 30;              // after duration_s: how long calls in flight may take before they are cut
  std::vector<std::string> inputs;  // files; "-" = stdin
};

// Returns false after printing usage for --help. Throws std::invalid_argument for bad flags.
bool parse_client_args(int argc, char** argv, ClientOptions& options);
std::string client_usage();

}  // namespace srformer::client
