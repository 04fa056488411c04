// grpc.reflection.v1 as this server provides it where gRPC serves only v1alpha (server/reflection_v1.h):
// each kind of request through a real gRPC client on loopback. (The e2e test drives both versions
// from Python, through to summarizing.)
#include <gtest/gtest.h>

#if defined(SRFORMER_OWN_REFLECTION_V1)
#include <google/protobuf/descriptor.pb.h>

#include <set>

#include "client/grpc_health.h"
#include "grpc/reflection/v1/reflection.grpc.pb.h"
#include "tests/server/test_server.h"

namespace srformer::testing {
namespace {

namespace rv1 = grpc::reflection::v1;

class ReflectionV1Test : public ::testing::Test {
 protected:
  // Sends `requests` on one stream; returns the responses in order.
  std::vector<rv1::ServerReflectionResponse> ask(const std::vector<rv1::ServerReflectionRequest>& requests) {
    auto stub = rv1::ServerReflection::NewStub(server_.channel());
    grpc::ClientContext ctx;
    auto stream = stub->ServerReflectionInfo(&ctx);
    for (const auto& r : requests) EXPECT_TRUE(stream->Write(r));
    stream->WritesDone();
    std::vector<rv1::ServerReflectionResponse> out;
    rv1::ServerReflectionResponse resp;
    while (stream->Read(&resp)) out.push_back(resp);
    EXPECT_TRUE(stream->Finish().ok());
    return out;
  }
  static rv1::ServerReflectionRequest symbol(const std::string& name) {
    rv1::ServerReflectionRequest r;
    r.set_file_containing_symbol(name);
    return r;
  }
  static std::vector<std::string> file_names(const rv1::ServerReflectionResponse& resp) {
    std::vector<std::string> names;
    for (const auto& bytes : resp.file_descriptor_response().file_descriptor_proto()) {
      google::protobuf::FileDescriptorProto file;
      EXPECT_TRUE(file.ParseFromString(bytes));
      names.push_back(file.name());
    }
    return names;
  }
  TestServer server_;
};

TEST_F(ReflectionV1Test, ListsTheServicesAndSendsEachFileWithTheDependenciesNotSentYet) {
  rv1::ServerReflectionRequest list;
  list.set_list_services("");
  list.set_host("localhost");
  const auto resp = ask({list, symbol("srformer.v1.Summarizer.Summarize"), symbol("srformer.v1.SummarizeRequest")});
  ASSERT_EQ(resp.size(), 3u);
  EXPECT_EQ(resp[0].valid_host(), "localhost");
  EXPECT_EQ(resp[0].original_request().list_services(), "");
  std::set<std::string> services;
  for (const auto& s : resp[0].list_services_response().service()) services.insert(s.name());
  EXPECT_EQ(services,
            (std::set<std::string>{"srformer.v1.Summarizer", "grpc.health.v1.Health",
                                   "grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"}));
  const auto first = file_names(resp[1]);
  ASSERT_FALSE(first.empty());
  EXPECT_EQ(first[0], "srformer/v1/summarizer.proto");
  // The same file again: itself, without the dependencies the stream already has.
  EXPECT_EQ(file_names(resp[2]), std::vector<std::string>{"srformer/v1/summarizer.proto"});
  // The Summarizer's service descriptor is in the file sent, method by method.
  google::protobuf::FileDescriptorProto file;
  ASSERT_TRUE(file.ParseFromString(resp[1].file_descriptor_response().file_descriptor_proto(0)));
  ASSERT_EQ(file.service_size(), 1);
  std::set<std::string> methods;
  for (const auto& m : file.service(0).method()) methods.insert(m.name());
  EXPECT_EQ(methods, (std::set<std::string>{"Summarize", "SummarizeStream", "SummarizeBatch", "ListModels"}));
}

// The health service it lists can be described too (grpcurl describe/call): its file, by the service's name
// and by a message's, and the server's own health service still answers.
TEST_F(ReflectionV1Test, DescribesTheHealthServiceItLists) {
  const auto resp = ask({symbol("grpc.health.v1.Health"), symbol("grpc.health.v1.HealthCheckRequest"),
                         symbol("grpc.health.v1.Health.Check")});
  ASSERT_EQ(resp.size(), 3u);
  for (const auto& r : resp) {
    ASSERT_FALSE(r.has_error_response()) << r.error_response().error_message();
  }
  EXPECT_EQ(file_names(resp[0]), std::vector<std::string>{"grpc/health/v1/health.proto"});
  google::protobuf::FileDescriptorProto file;
  ASSERT_TRUE(file.ParseFromString(resp[0].file_descriptor_response().file_descriptor_proto(0)));
  EXPECT_EQ(file.package(), "grpc.health.v1");
  ASSERT_EQ(file.service_size(), 1);
  EXPECT_EQ(file.service(0).name(), "Health");
  std::set<std::string> methods;
  for (const auto& m : file.service(0).method()) methods.insert(m.name());
  EXPECT_EQ(methods, (std::set<std::string>{"Check", "Watch"}));
  EXPECT_EQ(file_names(resp[1]), std::vector<std::string>{"grpc/health/v1/health.proto"});

  // Without the generated health classes here: the descriptors must come from the server's side.
  EXPECT_EQ(client::check_health(server_.channel(), "srformer.v1.Summarizer", std::chrono::seconds(10)),
            client::HealthStatus::kServing);
}

TEST_F(ReflectionV1Test, WhatIsNotThereIsNotFoundAndTheStreamGoesOn) {
  rv1::ServerReflectionRequest by_file, bad_file, extension, numbers, bad_numbers, empty;
  by_file.set_file_by_filename("srformer/v1/summarizer.proto");
  bad_file.set_file_by_filename("no/such.proto");
  extension.mutable_file_containing_extension()->set_containing_type("srformer.v1.SummarizeRequest");
  extension.mutable_file_containing_extension()->set_extension_number(1000);
  numbers.set_all_extension_numbers_of_type("srformer.v1.SummarizeRequest");
  bad_numbers.set_all_extension_numbers_of_type("no.Such");
  const auto resp = ask({symbol("no.Such.Thing"), bad_file, extension, numbers, bad_numbers, empty, by_file});
  ASSERT_EQ(resp.size(), 7u);
  for (const size_t i : {0u, 1u, 2u, 4u}) {
    EXPECT_EQ(resp[i].error_response().error_code(), grpc::StatusCode::NOT_FOUND) << i;
  }
  EXPECT_NE(resp[0].error_response().error_message().find("symbol no.Such.Thing"), std::string::npos);
  EXPECT_NE(resp[1].error_response().error_message().find("file no/such.proto"), std::string::npos);
  EXPECT_EQ(resp[3].all_extension_numbers_response().base_type_name(), "srformer.v1.SummarizeRequest");
  EXPECT_EQ(resp[3].all_extension_numbers_response().extension_number_size(), 0);
  EXPECT_EQ(resp[5].error_response().error_code(), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(file_names(resp[6]).at(0), "srformer/v1/summarizer.proto");
}

}  // namespace
}  // namespace srformer::testing

#else
TEST(ReflectionV1Test, ServedByGrpcItself) {
  GTEST_SKIP() << "this gRPC (1.60 or later) serves grpc.reflection.v1 itself: the e2e test covers it";
}
#endif
