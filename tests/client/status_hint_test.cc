// srformer-client's words on a failed call: what to change, said only where it is the question.
#include "client/status_hint.h"

#include <gtest/gtest.h>

namespace srformer::client {
namespace {

grpc::Status unavailable(const std::string& message) { return {grpc::StatusCode::UNAVAILABLE, message}; }

ClientOptions tls_options() {
  ClientOptions o;
  o.tls = true;
  o.ca_file = "ca.pem";
  return o;
}

// gRPC's words for a plaintext client at a TLS server: the connection never came up.
TEST(StatusHint, APlaintextClientAtATlsServerIsToldAboutTls) {
  EXPECT_NE(status_hint(unavailable("failed to connect to all addresses; last error: UNAVAILABLE: "
                                    "ipv4:127.0.0.1:5000: Socket closed"),
                        ClientOptions{}, 10)
                .find("does the server use TLS?"),
            std::string::npos);
  EXPECT_NE(status_hint(unavailable("failed to connect to all addresses; last error: UNAVAILABLE: "
                                    "ipv4:127.0.0.1:5000: Socket closed"),
                        tls_options(), 10)
                .find("--cert/--key"),
            std::string::npos);
}

// A server with --tls-client-ca that does not take the client's certificate (another CA's, expired) closes the
// handshake: gRPC said only "Socket closed", and --cert was given, so the hint asking for one was left out.
TEST(StatusHint, AClientCertificateTheServerRefusesIsNamed) {
  ClientOptions o = tls_options();
  o.cert_file = "client.pem";
  o.key_file = "client.key";
  EXPECT_EQ(status_hint(unavailable("failed to connect to all addresses; last error: UNAVAILABLE: "
                                    "ipv4:127.0.0.1:5000: Socket closed"),
                        o, 10),
            " (the server refused the TLS handshake: is --cert client.pem signed by the CA of its --tls-client-ca, and "
            "still valid?)");
}

// A server killed mid-call (a summary half streamed) closes the socket too: that is no TLS question, and the
// hint sent users after certificates that had worked. Nor did gRPC's bare words ("Socket closed", "recvmsg:
// Connection reset by peer") say that the server went away, or what to do: the hint says so now.
TEST(StatusHint, AConnectionLostMidCallIsNotBlamedOnTls) {
  const std::string lost =
      " (the connection to localhost:50051 was lost during the call: did the server stop or "
      "restart? Sending the call again is safe)";
  EXPECT_EQ(status_hint(unavailable("Socket closed"), ClientOptions{}, 10), lost);
  EXPECT_EQ(status_hint(unavailable("Socket closed"), tls_options(), 10), lost);
  EXPECT_EQ(status_hint(unavailable("recvmsg:Connection reset by peer"), ClientOptions{}, 10), lost);
  // Refused before it came up, it is the question of its own hint (the server not there).
  EXPECT_EQ(status_hint(unavailable("failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:5000: "
                                    "Connection reset by peer"),
                        ClientOptions{}, 10)
                .find("was lost during the call"),
            std::string::npos);
}

// Files gRPC cannot build TLS credentials from (a key that is not the certificate's, a CA that is PEM only
// on the outside): gRPC said only "empty address list".
TEST(StatusHint, TlsFilesGrpcCannotUseAreNamed) {
  ClientOptions o = tls_options();
  EXPECT_EQ(status_hint(unavailable("empty address list: "), o, 10),
            " (gRPC could not use --ca ca.pem: is it a valid PEM certificate?)");
  o.cert_file = "client.pem";
  o.key_file = "other.key";
  EXPECT_EQ(status_hint(unavailable("empty address list: "), o, 10),
            " (gRPC could not use the TLS files: is --key other.key the private key of --cert client.pem, and --ca "
            "ca.pem a valid PEM certificate?)");
  EXPECT_EQ(status_hint(unavailable("empty address list: "), ClientOptions{}, 10), "") << "no TLS, no TLS files";
}

// A health check on localhost of a server whose certificate names its DNS name: gRPC said only "Peer name
// 127.0.0.1 is not in peer certificate", and nothing led to --tls-server-name.
TEST(StatusHint, ACertificateForAnotherNameLeadsToTlsServerName) {
  const auto other_name = unavailable(
      "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:5000: Peer name 127.0.0.1 is not "
      "in peer certificate");
  ClientOptions o = tls_options();
  EXPECT_EQ(status_hint(other_name, o, 10),
            " (the server's certificate was issued for other names than the target's host: --tls-server-name NAME "
            "checks it for NAME, one of them)");
  o.tls_server_name = "wrong.example.com";
  EXPECT_EQ(status_hint(other_name, o, 10),
            " (the server's certificate was not issued for --tls-server-name wrong.example.com: give a name it was "
            "issued for)");
}

// --tls without --ca trusts the system's CAs: a server certificate none of them signed, or no CA bundle found
// at all, is told with the --ca to give.
TEST(StatusHint, WithoutCaTheSystemsCasAreNamed) {
  ClientOptions o;
  o.tls = true;
  const auto verify_failed = unavailable(
      "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:5000: Ssl handshake failed: "
      "SSL_ERROR_SSL: error:0A000086:SSL routines::certificate verify failed");
  EXPECT_EQ(status_hint(verify_failed, o, 10),
            " (the server's certificate did not verify against the system's CAs: signed by a private CA? then --ca "
            "FILE with that CA)");
  EXPECT_EQ(status_hint(unavailable("empty address list: "), o, 10),
            " (gRPC could not use the system's CA certificates (none installed? the ca-certificates package, or --ca "
            "FILE))");
  EXPECT_EQ(status_hint(verify_failed, tls_options(), 10),
            " (the server's certificate did not verify against --ca ca.pem: is it signed by a CA in it, and still "
            "valid?)");
}

// "--target localhost" (the port left out) connected to 443, "--target 127.0.0.1" to port 0, and said only
// "Connection refused" there.
TEST(StatusHint, ATargetWithoutAPortIsToldSo) {
  const auto refused = unavailable(
      "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:443: Failed to connect "
      "to remote host: Connection refused");
  ClientOptions o;
  o.target = "localhost";
  EXPECT_EQ(status_hint(refused, o, 10),
            " (--target localhost names no port, so gRPC took its default (443 for a name, 0 for an address): "
            "localhost:50051 for a server on its default port)");
  o.target = "[::1]";
  EXPECT_NE(status_hint(refused, o, 10).find("[::1]:50051"), std::string::npos);
  for (const char* with_port : {"localhost:50051", "[::1]:50051", "unix:/run/srformer.sock"}) {
    o.target = with_port;
    EXPECT_EQ(status_hint(refused, o, 10), "") << with_port;
  }
}

TEST(StatusHint, TheOtherHintsStay) {
  EXPECT_EQ(status_hint(unavailable("failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:5000: "
                                    "Ssl handshake failed: SSL_ERROR_SSL: error:0A00010B:SSL routines::wrong version "
                                    "number"),
                        tls_options(), 10),
            " (the server speaks plaintext: --insecure)");
  EXPECT_EQ(status_hint({grpc::StatusCode::INVALID_ARGUMENT, "... or set truncation=TRUNCATION_POLICY_TRUNCATE"},
                        ClientOptions{}, 10),
            " (srformer-client: --truncate)");
  EXPECT_EQ(
      status_hint({grpc::StatusCode::RESOURCE_EXHAUSTED, "Sent message larger than max (5000 vs. 4096)"},
                  ClientOptions{}, 5000),
      message_size_hint({grpc::StatusCode::RESOURCE_EXHAUSTED, "Sent message larger than max (5000 vs. 4096)"}, 5000));
}

// A target that is some other gRPC service (a wrong port) answers UNIMPLEMENTED, in gRPC's words only
// "Method not found!".
TEST(StatusHint, AServerWithoutTheCallIsAskedAbout) {
  ClientOptions o;
  o.target = "localhost:9000";
  const std::string hint = status_hint({grpc::StatusCode::UNIMPLEMENTED, "Method not found!"}, o, 10);
  EXPECT_NE(hint.find("the server at localhost:9000"), std::string::npos) << hint;
  EXPECT_NE(hint.find("is it an srformer-server?"), std::string::npos) << hint;
  EXPECT_EQ(status_hint({grpc::StatusCode::NOT_FOUND, "unknown model 'x'"}, o, 10), "");
}

}  // namespace
}  // namespace srformer::client
