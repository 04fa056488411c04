#include "server/reflection_v1.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>

#include <set>

namespace srformer::server {

namespace {

namespace pb = google::protobuf;
namespace v1 = grpc::reflection::v1;

// Adds `file` to the response, then those of its dependencies (transitively) not sent on this stream yet.
void add_file(const pb::FileDescriptor* file, std::set<std::string>& sent, v1::FileDescriptorResponse& out,
              bool asked = true) {
  if (!sent.insert(file->name()).second && !asked) return;
  pb::FileDescriptorProto proto;
  file->CopyTo(&proto);
  out.add_file_descriptor_proto(proto.SerializeAsString());
  for (int i = 0; i < file->dependency_count(); ++i) add_file(file->dependency(i), sent, out, false);
}

void not_found(v1::ServerReflectionResponse& response, const std::string& what) {
  response.mutable_error_response()->set_error_code(grpc::StatusCode::NOT_FOUND);
  response.mutable_error_response()->set_error_message(what + " not found");
}

}  // namespace

grpc::Status ReflectionV1::ServerReflectionInfo(
    grpc::ServerContext* /*context*/,
    grpc::ServerReaderWriter<v1::ServerReflectionResponse, v1::ServerReflectionRequest>* stream) {
  const pb::DescriptorPool* pool = pb::DescriptorPool::generated_pool();
  std::set<std::string> sent;  // file names whose descriptors this stream has had
  v1::ServerReflectionRequest request;
  while (stream->Read(&request)) {
    v1::ServerReflectionResponse response;
    response.set_valid_host(request.host());
    *response.mutable_original_request() = request;
    const pb::FileDescriptor* file = nullptr;
    std::string missing;
    switch (request.message_request_case()) {
      case v1::ServerReflectionRequest::kFileByFilename:
        file = pool->FindFileByName(request.file_by_filename());
        missing = "file " + request.file_by_filename();
        break;
      case v1::ServerReflectionRequest::kFileContainingSymbol:
        file = pool->FindFileContainingSymbol(request.file_containing_symbol());
        missing = "symbol " + request.file_containing_symbol();
        break;
      case v1::ServerReflectionRequest::kFileContainingExtension: {
        const auto& ext = request.file_containing_extension();
        const auto* type = pool->FindMessageTypeByName(ext.containing_type());
        const auto* field = type ? pool->FindExtensionByNumber(type, ext.extension_number()) : nullptr;
        file = field ? field->file() : nullptr;
        missing = "extension " + std::to_string(ext.extension_number()) + " of " + ext.containing_type();
        break;
      }
      case v1::ServerReflectionRequest::kAllExtensionNumbersOfType: {
        const auto* type = pool->FindMessageTypeByName(request.all_extension_numbers_of_type());
        if (type == nullptr) {
          not_found(response, "type " + request.all_extension_numbers_of_type());
          break;
        }
        std::vector<const pb::FieldDescriptor*> extensions;
        pool->FindAllExtensions(type, &extensions);
        auto* numbers = response.mutable_all_extension_numbers_response();
        numbers->set_base_type_name(type->full_name());
        for (const auto* e : extensions) numbers->add_extension_number(e->number());
        break;
      }
      case v1::ServerReflectionRequest::kListServices:
        for (const auto& name : services_) response.mutable_list_services_response()->add_service()->set_name(name);
        break;
      default:
        response.mutable_error_response()->set_error_code(grpc::StatusCode::UNIMPLEMENTED);
        response.mutable_error_response()->set_error_message("the request sets none of the reflection requests");
        break;
    }
    if (!missing.empty()) {
      if (file == nullptr) {
        not_found(response, missing);
      } else {
        add_file(file, sent, *response.mutable_file_descriptor_response());
      }
    }
    if (!stream->Write(response)) break;
  }
  return grpc::Status::OK;
}

}  // namespace srformer::server
