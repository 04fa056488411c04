// Which of gRPC's own error lines the client drops: those of setting up TLS, whose failure its status line
// carries with what to check.
#include "client/grpc_logs.h"

#include <gtest/gtest.h>

namespace srformer::client {
namespace {

TEST(GrpcLogs, TheTlsHandshakesAndCredentialsLinesAreDropped) {
  // The lines gRPC 1.51 wrote before the client's own: a refused handshake, then TLS files it cannot use.
  EXPECT_TRUE(is_tls_setup_line("src/core/tsi/ssl_transport_security.cc",
                                "Handshake failed with fatal error SSL_ERROR_SSL: error:0A000086:SSL "
                                "routines::certificate verify failed."));
  EXPECT_TRUE(is_tls_setup_line("src/core/tsi/ssl_transport_security.cc", "Invalid private key."));
  EXPECT_TRUE(is_tls_setup_line("src/core/lib/security/security_connector/ssl/ssl_security_connector.cc",
                                "Handshaker factory creation failed with TSI_INVALID_ARGUMENT."));
  EXPECT_TRUE(is_tls_setup_line("src/core/ext/transport/chttp2/client/chttp2_connector.cc",
                                "Failed to create channel args during subchannel creation: INTERNAL: Failed to create "
                                "secure subchannel for secure name '127.0.0.1:50797'; Got args: {...}"));
  EXPECT_TRUE(is_tls_setup_line("ssl_utils.cc", "Could not get default pem root certs."));
}

TEST(GrpcLogs, OtherLinesAreKept) {
  EXPECT_FALSE(is_tls_setup_line("src/core/ext/transport/chttp2/client/chttp2_connector.cc", "Something else."));
  EXPECT_FALSE(is_tls_setup_line("src/core/lib/surface/call.cc", "assertion failed: x"));
  EXPECT_FALSE(is_tls_setup_line("", ""));
}

}  // namespace
}  // namespace srformer::client
