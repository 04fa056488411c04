#pragma once
// PEM files named by TLS flags (server and client), read and checked for what the flag needs before gRPC
// sees them: gRPC's own errors name neither the flag nor the file ("empty address list", "Socket closed").
#include <stdexcept>
#include <string>

#include "common/read_input.h"

namespace srformer {

enum class PemKind { kCertificate, kPrivateKey };

// The file's text; std::runtime_error naming `flag` and the file when it cannot be read (a directory, a
// missing file) or holds no PEM block of `kind`.
inline std::string read_pem(const std::string& path, const std::string& flag, PemKind kind) {
  std::string pem;
  try {
    pem = read_input(path);
  } catch (const std::exception& e) {
    throw std::runtime_error(flag + ": " + e.what());
  }
  // "-----BEGIN CERTIFICATE-----"; keys: "PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY".
  const bool found = kind == PemKind::kCertificate ? pem.find("-----BEGIN CERTIFICATE-----") != std::string::npos
                                                   : pem.find("-----BEGIN") != std::string::npos &&
                                                         pem.find("PRIVATE KEY-----") != std::string::npos;
  if (!found) {
    throw std::runtime_error(flag + " " + path + " holds no PEM " +
                             (kind == PemKind::kCertificate ? "certificate (-----BEGIN CERTIFICATE-----)"
                                                            : "private key (-----BEGIN ... PRIVATE KEY-----)") +
                             "; check the path and the format");
  }
  return pem;
}

}  // namespace srformer
