#pragma once
// An in-process srformer server on a loopback port with fake models, plus a real gRPC client stub.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "server/server.h"
#include "srformer/v1/summarizer.grpc.pb.h"
#include "tests/server/fake_model.h"

namespace srformer::testing {

struct FakeServerOptions {
  server::ServerConfig config;
  std::vector<std::pair<std::string, FakeModelOptions>> models{{"fake", {}}};
  server::Metrics* metrics = nullptr;                         // none by default
  server::SearcherFactory searcher_factory = make_searcher;   // every engine's
  std::chrono::milliseconds long_document_tokenize_delay{0};  // every tokenizer's (FakeTokenizer)
};

class TestServer {
 public:
  explicit TestServer(FakeServerOptions o = {}) {
    o.config.listen = "127.0.0.1:0";
    o.config.metrics_listen = "";
    std::vector<server::LoadedModel> models;
    for (auto& [name, mo] : o.models) {
      server::LoadedModel m;
      m.name = name;
      m.model = std::make_unique<FakeModel>(mo);
      m.tokenizer = std::make_shared<FakeTokenizer>(o.long_document_tokenize_delay);
      models.push_back(std::move(m));
    }
    server_ = std::make_unique<server::Server>(o.config, std::move(models), o.metrics, o.searcher_factory);
    server_->start();
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()), grpc::InsecureChannelCredentials());
    stub_ = v1::Summarizer::NewStub(channel_);
  }
  server::Server& server() { return *server_; }
  server::Engine& engine(const std::string& name = "") { return *server_->models().find(name); }
  v1::Summarizer::Stub& stub() { return *stub_; }
  std::shared_ptr<grpc::Channel> channel() { return channel_; }
  std::string target() const { return "127.0.0.1:" + std::to_string(server_->port()); }

  // Waits (up to `timeout`) until `pred(engine stats)` holds.
  template <typename Pred>
  bool wait_for(Pred pred, std::chrono::milliseconds timeout = std::chrono::seconds(10),
                const std::string& model = "") {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      if (pred(engine(model).stats())) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return pred(engine(model).stats());
  }

 private:
  std::unique_ptr<server::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Summarizer::Stub> stub_;
};

inline v1::SummarizeRequest make_request(const std::string& doc, const std::string& model = "") {
  v1::SummarizeRequest r;
  r.set_document(doc);
  r.set_model(model);
  return r;
}

// A document of kLongDocumentBytes (64 KiB: tokenized on the service's start threads, where the fake
// tokenizer's long_document_tokenize_delay holds it), truncated to fit, with `max_new_tokens`.
inline v1::SummarizeRequest long_document_request(int max_new_tokens = 4) {
  auto request = make_request(std::string(size_t{64} << 10, 'a'));
  request.set_truncation(v1::TRUNCATION_POLICY_TRUNCATE);
  request.mutable_options()->set_max_new_tokens(max_new_tokens);
  return request;
}

}  // namespace srformer::testing
