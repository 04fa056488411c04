#pragma once
// Checks of the server's TLS certificate and key that gRPC would only report as "cannot listen" or, worse,
// as handshakes that every client refuses while the server reports nothing.
#include <string>

namespace srformer::server {

// Throws std::runtime_error naming --tls-cert/--tls-key when the certificate cannot be read or the key is
// not its private key. Returns a warning when the certificate is outside its validity period now (expired,
// or not yet valid): clients that verify it refuse every handshake. "" when it is valid.
std::string check_certificate_pair(const std::string& cert_pem, const std::string& key_pem,
                                   const std::string& cert_path, const std::string& key_path);

}  // namespace srformer::server
