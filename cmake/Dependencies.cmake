# Every third-party dependency, found once here. Install them with deploy/setup-deps.sh.
set(_hint "Run deploy/setup-deps.sh (as root) to install the dependencies.")

find_package(Threads REQUIRED)
# gRPC and GTest compile their users with -pthread (_REENTRANT); glibc needs no flag, so Threads::Threads
# adds none. Use it everywhere so the shared precompiled header matches every target.
add_compile_options(-pthread)
find_package(Torch REQUIRED)
# Torch's exported flags add -D_GLIBCXX_USE_CXX11_ABI etc.; its include dirs are marked SYSTEM below.
# Newer LibTorch headers (2.13 on) stop with "#error C++20 or later compatible compiler is required";
# Debian's 1.13 is built and tested here as C++17. Ask the headers rather than guess from a version.
# (tools/check_torch_api.py compile-checks every source against newer headers.)
foreach(_dir IN LISTS TORCH_INCLUDE_DIRS)
  if(EXISTS "${_dir}/ATen/ATen.h" AND CMAKE_CXX_STANDARD LESS 20)
    file(READ "${_dir}/ATen/ATen.h" _aten_text)
    if(_aten_text MATCHES "C\\+\\+20 or later compatible compiler is required")
      message(STATUS "LibTorch ${Torch_VERSION} requires C++20: building as C++20")
      set(CMAKE_CXX_STANDARD 20)
    endif()
  endif()
endforeach()
find_package(Protobuf REQUIRED)
find_package(gRPC CONFIG REQUIRED)
find_package(OpenSSL REQUIRED)  # gRPC's TLS library; the server also reads its certificate (tls_certificate.cc)
find_package(spdlog REQUIRED)
# PyTorch's LibTorch (2.x) carries fmt's headers in its include directory (fmt 12 in 2.11); spdlog was
# built against the system's fmt (Debian bookworm: 9), and with torch's copy found first its <fmt/...>
# includes fail to compile (seen on the first GPU build, session 43). Put spdlog's fmt ahead of LibTorch
# for every target. (Debian's LibTorch shares /usr/include with fmt: nothing to do.)
if(TARGET fmt::fmt)
  get_target_property(_fmt_dirs fmt::fmt INTERFACE_INCLUDE_DIRECTORIES)
  foreach(_dir IN LISTS TORCH_INCLUDE_DIRS)
    if(EXISTS "${_dir}/fmt/format.h" AND _fmt_dirs AND NOT _dir IN_LIST _fmt_dirs)
      message(STATUS "LibTorch carries fmt in ${_dir}: spdlog's (${_fmt_dirs}) goes first")
      include_directories(BEFORE SYSTEM ${_fmt_dirs})
      break()
    endif()
  endforeach()
endif()
find_package(nlohmann_json 3 REQUIRED)
find_package(prometheus-cpp CONFIG REQUIRED)
find_program(GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)

# SentencePiece is only ever linked into our isolated plugin (see model/tokenizer/).
find_path(SENTENCEPIECE_INCLUDE_DIR sentencepiece_processor.h)
find_library(SENTENCEPIECE_LIBRARY sentencepiece)
find_library(SENTENCEPIECE_TRAIN_LIBRARY sentencepiece_train)
if(NOT SENTENCEPIECE_INCLUDE_DIR OR NOT SENTENCEPIECE_LIBRARY OR NOT SENTENCEPIECE_TRAIN_LIBRARY)
  message(FATAL_ERROR "sentencepiece not found. ${_hint}")
endif()

if(SRFORMER_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()

# One imported target for LibTorch with SYSTEM includes, so -Wall stays about our code.
add_library(srformer_torch INTERFACE)
target_link_libraries(srformer_torch INTERFACE ${TORCH_LIBRARIES})
target_include_directories(srformer_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
# A CUDA LibTorch (PyTorch's, on GPU machines) sets TORCH_CUDA_LIBRARIES; Debian's ships c10/cuda
# headers without CUDA, so the headers alone say nothing.
if(TORCH_CUDA_LIBRARIES)
  target_compile_definitions(srformer_torch INTERFACE SRFORMER_TORCH_CUDA=1)
endif()
if(TORCH_CXX_FLAGS)
  separate_arguments(_torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
  target_compile_options(srformer_torch INTERFACE ${_torch_flags})
endif()

# libstdc++ ahead of LibTorch in every executable's list of needed libraries. PyTorch's wheels (2.x) carry a
# static copy of part of libstdc++'s std::filesystem (recursive_directory_iterator) and export it
# (pytorch/pytorch#133437; later wheels make it weak, which the dynamic loader binds all the same). With
# libtorch_cpu.so listed before libstdc++.so, the loader binds libstdc++'s own remove_all to that copy's
# constructor. The likely cause of the first GPU build's crashes (session 43): every test that removed a
# non-empty directory died on a call through a null pointer, and those that removed only empty ones
# passed. Listed first, libstdc++ serves every std:: symbol it defines, to everyone.
# tests/link/ checks this with a stand-in library that exports such a copy.
add_library(srformer_libstdcxx_first INTERFACE)
target_link_options(srformer_libstdcxx_first INTERFACE
  "SHELL:-Wl,--push-state,--no-as-needed -lstdc++ -Wl,--pop-state")
target_link_libraries(srformer_torch INTERFACE srformer_libstdcxx_first)

# tcmalloc under every executable that runs models. LibTorch allocates and frees tensors of many MiB
# at every step; glibc hands such blocks back to the kernel (mmap/munmap) and each reuse page-faults
# afresh. Measured on a T5-small bf16 decode benchmark: 5.9M page faults and 18 s of kernel time in
# 25 s with glibc, 0.86M and 3.9 s with tcmalloc (docs/BENCHMARKS.md). Sanitizers bring their own.
option(SRFORMER_TCMALLOC "Link the executables that run models with tcmalloc (gperftools)" ON)
add_library(srformer_malloc INTERFACE)
if(SRFORMER_TCMALLOC AND SRFORMER_SANITIZE STREQUAL "")
  # The runtime package's versioned file is enough (the GPU bundle carries only that one).
  find_library(TCMALLOC_LIBRARY NAMES tcmalloc_minimal libtcmalloc_minimal.so.4)
  if(TCMALLOC_LIBRARY)
    # Kept as a dependency even where the linker drops unreferenced libraries: nothing calls it by
    # name, it replaces malloc/free for the whole process.
    target_link_libraries(srformer_malloc INTERFACE "-Wl,--push-state,--no-as-needed" ${TCMALLOC_LIBRARY}
      "-Wl,--pop-state")
  else()
    message(WARNING "tcmalloc not found: glibc's malloc is used (page faults on large tensors). ${_hint}")
  endif()
endif()
