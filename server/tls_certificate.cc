#include "server/tls_certificate.h"

#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <memory>
#include <stdexcept>

namespace srformer::server {
namespace {

using Bio = std::unique_ptr<BIO, decltype(&BIO_free)>;

Bio memory_bio(const std::string& text) {
  return {BIO_new_mem_buf(text.data(), static_cast<int>(text.size())), BIO_free};
}

// "Jan  1 00:00:00 2026 GMT", OpenSSL's form of an ASN.1 time.
std::string time_text(const ASN1_TIME* t) {
  Bio out(BIO_new(BIO_s_mem()), BIO_free);
  if (!out || ASN1_TIME_print(out.get(), t) != 1) return "?";
  char* data = nullptr;
  const long size = BIO_get_mem_data(out.get(), &data);
  return size > 0 ? std::string(data, static_cast<size_t>(size)) : "?";
}

}  // namespace

std::string check_certificate_pair(const std::string& cert_pem, const std::string& key_pem,
                                   const std::string& cert_path, const std::string& key_path) {
  auto cert_bio = memory_bio(cert_pem);
  const std::unique_ptr<X509, decltype(&X509_free)> cert(
      cert_bio ? PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr) : nullptr, X509_free);
  if (!cert) {
    throw std::runtime_error("--tls-cert " + cert_path + ": the first certificate cannot be read (damaged PEM?)");
  }
  auto key_bio = memory_bio(key_pem);
  // No passphrase: without a callback OpenSSL asks for one on the terminal, and the start waited there for a
  // key gRPC cannot use (it takes unencrypted keys only).
  pem_password_cb* const no_passphrase = [](char*, int, int, void*) { return 0; };
  const std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      key_bio ? PEM_read_bio_PrivateKey(key_bio.get(), nullptr, no_passphrase, nullptr) : nullptr, EVP_PKEY_free);
  if (!key) {
    throw std::runtime_error("--tls-key " + key_path +
                             ": the private key cannot be read (damaged PEM, or encrypted: the server takes an "
                             "unencrypted key, e.g. openssl pkey -in KEY -out PLAIN_KEY)");
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    throw std::runtime_error("--tls-key " + key_path + " is not the private key of --tls-cert " + cert_path +
                             "'s certificate (the first in the file); give the key the certificate was issued for");
  }
  const ASN1_TIME* not_after = X509_get0_notAfter(cert.get());
  const ASN1_TIME* not_before = X509_get0_notBefore(cert.get());
  if (X509_cmp_current_time(not_after) < 0) {
    return "--tls-cert " + cert_path + ": the certificate expired on " + time_text(not_after) +
           "; clients that verify it will refuse every connection: renew it";
  }
  if (X509_cmp_current_time(not_before) > 0) {
    return "--tls-cert " + cert_path + ": the certificate is not valid before " + time_text(not_before) +
           " (is this machine's clock right?); clients that verify it will refuse every connection until then";
  }
  return "";
}

}  // namespace srformer::server
