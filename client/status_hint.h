#pragma once
// What a failure's message leaves a command-line user to guess: gRPC's words for a TLS mismatch ("Socket
// closed", "wrong version number", "empty address list"), a message over a size limit or a server that is
// not an srformer-server (UNIMPLEMENTED, often with no message), and the API's name for --truncate. One
// function for the one-shot calls and the load generator's error tally.
#include <grpcpp/support/status.h>

#include <cstdint>
#include <string>

#include "client/client_options.h"
#include "client/message_size_hint.h"

namespace srformer::client {

// A --target without a port ("localhost", "10.0.0.5", "[::1]"): gRPC connects to 443 for a name and to port 0
// for an address, and said only "Connection refused" there.
inline bool names_no_port(const std::string& target) {
  if (!target.empty() && target.front() == '[') return target.find("]:") == std::string::npos;
  return target.find(':') == std::string::npos;
}

// " (...)" to append to the status's message, or "". `sent_bytes`: the size of the request message the call
// sent.
inline std::string status_hint(const grpc::Status& s, const ClientOptions& o, uint64_t sent_bytes) {
  const std::string& m = s.error_message();
  if (std::string size = message_size_hint(s, sent_bytes); !size.empty()) return size;
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
    // A handshake refused: the connection never came up. A bare "Socket closed" is a connection lost
    // mid-call (a server that died or was killed), where TLS is not the question.
    const bool not_connected = m.find("failed to connect to all addresses") != std::string::npos;
    if (not_connected && names_no_port(o.target)) {
      return " (--target " + o.target +
             " names no port, so gRPC took its default (443 for a name, 0 for an address): " + o.target +
             ":50051 for a server on its default port)";
    }
    if (!o.tls && not_connected && m.find("Socket closed") != std::string::npos) {
      return " (does the server use TLS? then --tls, with --ca FILE where the system does not trust its CA, and "
             "--cert/--key where it asks for client certificates)";
    }
    if (o.tls && m.find("wrong version number") != std::string::npos)
      return " (the server speaks plaintext: --insecure)";
    if (o.tls && not_connected && m.find("Socket closed") != std::string::npos) {
      // With --cert the server closed the handshake on it (one its --tls-client-ca did not sign, or expired):
      // gRPC said only "Socket closed".
      return o.cert_file.empty()
                 ? " (a server with --tls-client-ca takes only clients with a certificate it signed: --cert/--key)"
                 : " (the server refused the TLS handshake: is --cert " + o.cert_file +
                       " signed by the CA of its --tls-client-ca, and still valid?)";
    }
    // A connection lost mid-call (a server killed or restarted, a proxy that dropped it): gRPC's words, "Socket
    // closed" or "recvmsg:Connection reset by peer" after a summary half streamed, named neither the server nor
    // what to do.
    if (!not_connected && (m == "Socket closed" || m.find("Connection reset by peer") != std::string::npos)) {
      return " (the connection to " + o.target +
             " was lost during the call: did the server stop or restart? Sending the call again is safe)";
    }
    // A server certificate no trusted CA signed (OpenSSL's words, then BoringSSL's).
    if (o.tls && (m.find("certificate verify failed") != std::string::npos ||
                  m.find("CERTIFICATE_VERIFY_FAILED") != std::string::npos)) {
      return o.ca_file.empty() ? " (the server's certificate did not verify against the system's CAs: signed by a "
                                 "private CA? then --ca FILE with that CA)"
                               : " (the server's certificate did not verify against --ca " + o.ca_file +
                                     ": is it signed by a CA in it, and still valid?)";
    }
    // A certificate issued for another name than the one checked (the target's host, or --tls-server-name):
    // gRPC said only "Peer name HOST is not in peer certificate", the flag that names another left to find.
    if (o.tls && m.find("is not in peer certificate") != std::string::npos) {
      return o.tls_server_name.empty()
                 ? " (the server's certificate was issued for other names than the target's host: --tls-server-name "
                   "NAME checks it for NAME, one of them)"
                 : " (the server's certificate was not issued for --tls-server-name " + o.tls_server_name +
                       ": give a name it was issued for)";
    }
    // gRPC's words when it cannot build TLS credentials from the files (its own log lines, which client/grpc_logs.h
    // drops, said why), or without --ca finds no CA certificates to trust (no system bundle, no roots.pem of its own).
    if (o.tls && m.find("empty address list") != std::string::npos) {
      if (o.ca_file.empty()) {
        const std::string roots =
            "the system's CA certificates (none installed? the ca-certificates package, or --ca FILE)";
        return o.cert_file.empty() ? " (gRPC could not use " + roots + ")"
                                   : " (gRPC could not use the TLS files: is --key " + o.key_file +
                                         " the private key of --cert " + o.cert_file + "? or " + roots + ")";
      }
      return o.cert_file.empty()
                 ? " (gRPC could not use --ca " + o.ca_file + ": is it a valid PEM certificate?)"
                 : " (gRPC could not use the TLS files: is --key " + o.key_file + " the private key of --cert " +
                       o.cert_file + ", and --ca " + o.ca_file + " a valid PEM certificate?)";
    }
  }
  // Another gRPC server at the target (a wrong port): a C++ one says nothing more, others "Method not found!".
  if (s.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
    return " (the server at " + o.target + " does not serve this call: is it an srformer-server?)";
  }
  if (s.error_code() == grpc::StatusCode::INVALID_ARGUMENT &&
      m.find("TRUNCATION_POLICY_TRUNCATE") != std::string::npos) {
    return " (srformer-client: --truncate)";
  }
  return "";
}

// A call's status about its document ("document is empty; ...", "document is 900 tokens, over the limit ...")
// with the FILE it was read from: the server knows no file, and a script summarizing many FILEs, one call
// each, was left to find which one it meant (--batch names them: naming_the_file), as was a load's report
// of a mix.
// A FILE as messages name it: "-" is stdin.
inline std::string file_name(const std::string& path) { return path == "-" ? "stdin" : path; }

inline grpc::Status naming_the_document(const grpc::Status& status, const std::string& path) {
  if (status.error_message().rfind("document ", 0) != 0) return status;
  return grpc::Status(status.error_code(), status.error_message() + " (read from " + file_name(path) + ")");
}

}  // namespace srformer::client
