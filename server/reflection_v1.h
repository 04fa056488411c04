#pragma once
// grpc.reflection.v1 for gRPC releases whose reflection plugin serves only v1alpha (before 1.60):
// the same answers from the descriptors compiled into this binary, under the package current clients
// ask for first (grpcurl falls back to v1alpha, not every tool does).
#include <string>
#include <vector>

#include "grpc/reflection/v1/reflection.grpc.pb.h"

namespace srformer::server {

class ReflectionV1 final : public grpc::reflection::v1::ServerReflection::Service {
 public:
  // `services`: the fully qualified names list_services reports.
  explicit ReflectionV1(std::vector<std::string> services) : services_(std::move(services)) {}

  grpc::Status ServerReflectionInfo(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<grpc::reflection::v1::ServerReflectionResponse,
                               grpc::reflection::v1::ServerReflectionRequest>* stream) override;

 private:
  const std::vector<std::string> services_;
};

}  // namespace srformer::server
