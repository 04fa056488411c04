// check_certificate_pair: the server's certificate and key, read before gRPC gets them.
#include "server/tls_certificate.h"

#include <gtest/gtest.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ui.h>
#include <openssl/x509.h>

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

namespace srformer::server {
namespace {

struct Pair {
  std::string cert, key;
};

std::string pem_of(const std::function<int(BIO*)>& write) {
  const std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), BIO_free);
  EXPECT_EQ(write(bio.get()), 1);
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(size));
}

// A self-signed P-256 certificate valid from `from_days` to `to_days` after now (negative: before), and
// its key, encrypted with `passphrase` where one is given.
Pair make_pair(long from_days, long to_days, const char* passphrase = nullptr) {
  const std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(EVP_EC_gen("P-256"), EVP_PKEY_free);
  const std::unique_ptr<X509, decltype(&X509_free)> cert(X509_new(), X509_free);
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), from_days * 86400);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), to_days * 86400);
  X509_set_pubkey(cert.get(), key.get());
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("localhost"), -1, -1, 0);
  X509_set_issuer_name(cert.get(), name);
  EXPECT_GT(X509_sign(cert.get(), key.get(), EVP_sha256()), 0);
  return {pem_of([&](BIO* b) { return PEM_write_bio_X509(b, cert.get()); }), pem_of([&](BIO* b) {
            return PEM_write_bio_PrivateKey(b, key.get(), passphrase ? EVP_aes_256_cbc() : nullptr, nullptr, 0, nullptr,
                                            const_cast<char*>(passphrase));
          })};
}

std::string refusal(const std::string& cert, const std::string& key) {
  try {
    (void)check_certificate_pair(cert, key, "cert.pem", "key.pem");
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(TlsCertificate, AValidPairPassesWithoutAWord) {
  const auto p = make_pair(-1, 30);
  EXPECT_EQ(check_certificate_pair(p.cert, p.key, "cert.pem", "key.pem"), "");
}

TEST(TlsCertificate, AnExpiredOrNotYetValidCertificateIsWarnedOf) {
  const auto expired = make_pair(-10, -1);
  const auto warning = check_certificate_pair(expired.cert, expired.key, "cert.pem", "key.pem");
  EXPECT_NE(warning.find("--tls-cert cert.pem: the certificate expired on "), std::string::npos) << warning;
  EXPECT_NE(warning.find("GMT; clients that verify it will refuse every connection: renew it"), std::string::npos)
      << warning;
  const auto early = make_pair(2, 30);
  const auto not_yet = check_certificate_pair(early.cert, early.key, "cert.pem", "key.pem");
  EXPECT_NE(not_yet.find("the certificate is not valid before "), std::string::npos) << not_yet;
  EXPECT_NE(not_yet.find("is this machine's clock right?"), std::string::npos) << not_yet;
}

TEST(TlsCertificate, AKeyThatIsNotTheCertificatesIsRefused) {
  const auto a = make_pair(-1, 30), b = make_pair(-1, 30);
  EXPECT_NE(
      refusal(a.cert, b.key).find("--tls-key key.pem is not the private key of --tls-cert cert.pem's certificate"),
      std::string::npos);
}

TEST(TlsCertificate, DamagedFilesAreRefusedWithTheFlag) {
  const auto p = make_pair(-1, 30);
  const std::string damaged = "-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n";
  EXPECT_NE(refusal(damaged, p.key).find("--tls-cert cert.pem: the first certificate cannot be read"),
            std::string::npos);
  const std::string bad_key = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
  EXPECT_NE(refusal(p.cert, bad_key).find("--tls-key key.pem: the private key cannot be read"), std::string::npos);
}

// An encrypted key is refused at once: OpenSSL's default passphrase callback asked for one on the
// terminal ("Enter PEM pass phrase:"), where a start from a shell then waited, for a key gRPC (which takes
// unencrypted keys) could not use anyway. The prompt goes through OpenSSL's default UI, replaced here by
// one that notes the question and answers it rightly.
bool passphrase_asked = false;

TEST(TlsCertificate, AnEncryptedKeyIsRefusedWithoutAskingForAPassphrase) {
  const auto p = make_pair(-1, 30, "secret");
  ASSERT_NE(p.key.find("ENCRYPTED"), std::string::npos);
  const std::unique_ptr<UI_METHOD, decltype(&UI_destroy_method)> ui(UI_create_method("notes a passphrase prompt"),
                                                                    UI_destroy_method);
  UI_method_set_reader(ui.get(), [](UI* session, UI_STRING* question) {
    passphrase_asked = true;
    return UI_set_result(session, question, "secret") == 0 ? 1 : -1;
  });
  const UI_METHOD* before = UI_get_default_method();
  UI_set_default_method(ui.get());
  const auto got = refusal(p.cert, p.key);
  UI_set_default_method(before);
  EXPECT_FALSE(passphrase_asked);
  EXPECT_NE(got.find("--tls-key key.pem: the private key cannot be read (damaged PEM, or encrypted"), std::string::npos)
      << got;
}

}  // namespace
}  // namespace srformer::server
