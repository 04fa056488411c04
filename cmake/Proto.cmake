# srformer_add_proto(TARGET name PROTOS a.proto ...): generates C++ and gRPC sources at build time.
function(srformer_add_proto)
  cmake_parse_arguments(ARG "" "TARGET;ROOT" "PROTOS" ${ARGN})
  set(out_dir ${CMAKE_BINARY_DIR}/gen)
  file(MAKE_DIRECTORY ${out_dir})
  set(srcs)
  foreach(proto ${ARG_PROTOS})
    file(RELATIVE_PATH rel ${ARG_ROOT} ${proto})
    string(REGEX REPLACE "\\.proto$" "" base ${rel})
    set(gen ${out_dir}/${base}.pb.cc ${out_dir}/${base}.pb.h ${out_dir}/${base}.grpc.pb.cc ${out_dir}/${base}.grpc.pb.h)
    add_custom_command(
      OUTPUT ${gen}
      COMMAND protobuf::protoc --proto_path=${ARG_ROOT} --cpp_out=${out_dir} --grpc_out=${out_dir}
              --plugin=protoc-gen-grpc=${GRPC_CPP_PLUGIN} ${proto}
      DEPENDS ${proto} protobuf::protoc
      COMMENT "protoc ${rel}" VERBATIM)
    list(APPEND srcs ${out_dir}/${base}.pb.cc ${out_dir}/${base}.grpc.pb.cc)
  endforeach()
  add_library(${ARG_TARGET} STATIC ${srcs})
  target_include_directories(${ARG_TARGET} SYSTEM PUBLIC ${out_dir})
  # PyTorch's CMake config (found first) defines its own protobuf::libprotobuf, which links nothing (its
  # protobuf is inside libtorch); FindProtobuf then keeps that target. Link the library it found too
  # (the first GPU build, session 43, failed to link without it).
  target_link_libraries(${ARG_TARGET} PUBLIC protobuf::libprotobuf ${Protobuf_LIBRARY} gRPC::grpc++)
endfunction()
