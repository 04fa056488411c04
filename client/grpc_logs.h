#pragma once
// gRPC writes its own error lines to stderr, in its log format, before the client's line for the same failure:
// a TLS handshake refused printed "E1129 00:34:17.195053909 2867 ssl_transport_security.cc:1501] Handshake
// failed with fatal error SSL_ERROR_SSL: ... certificate verify failed." and then the client's line, which has
// gRPC's reason and what to check (client/status_hint.h); TLS files gRPC cannot use, three such lines, one of
// them a dump of the channel's arguments. The TLS handshake's and credentials' lines are dropped; any other
// gRPC error line is kept, in the client's words. With GRPC_VERBOSITY or GRPC_TRACE set, gRPC logs as asked.
#include <grpc/support/log.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <string_view>

namespace srformer::client {

inline std::string_view base_name(std::string_view path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

// A gRPC log line about setting up TLS, whose failure the call's status carries.
inline bool is_tls_setup_line(std::string_view file, std::string_view message) {
  const std::string_view name = base_name(file);
  for (const std::string_view tls : {"ssl_transport_security.cc", "ssl_security_connector.cc", "security_handshaker.cc",
                                     "ssl_credentials.cc", "ssl_utils.cc"}) {
    if (name == tls) return true;
  }
  // The channel's arguments, dumped after TLS credentials failed to build ("empty address list" to the call).
  return name == "chttp2_connector.cc" && message.rfind("Failed to create channel args", 0) == 0;
}

inline void write_grpc_log_line(gpr_log_func_args* args) {
  if (is_tls_setup_line(args->file, args->message)) return;
  // One write: gRPC logs from its own threads too.
  std::cerr << "srformer-client: gRPC: " + std::string(args->message) + " (" + std::string(base_name(args->file)) +
                   ":" + std::to_string(args->line) + ")\n";
}

inline void quiet_grpc_tls_logs() {
  if (std::getenv("GRPC_VERBOSITY") != nullptr || std::getenv("GRPC_TRACE") != nullptr) return;
  gpr_set_log_function(write_grpc_log_line);
}

}  // namespace srformer::client
