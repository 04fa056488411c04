# Warnings, ccache, sanitizers.
find_program(CCACHE_PROGRAM ccache)
if(CCACHE_PROGRAM)
  # PCH + ccache need this sloppiness to hit, and it must reach ccache when it compiles: an environment
  # variable set here would only last for the configure step (every PCH compile was then uncacheable,
  # "could not use precompiled header", and every clean build compiled everything again).
  # The base directory makes paths under the checkout relative, so that another clone (CI's) hits too.
  set(CMAKE_CXX_COMPILER_LAUNCHER ${CMAKE_COMMAND} -E env
                                  "CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime"
                                  "CCACHE_BASEDIR=${CMAKE_SOURCE_DIR}" ${CCACHE_PROGRAM})
endif()

# Flags for our own targets only (third-party headers are included as SYSTEM).
add_library(srformer_warnings INTERFACE)
target_compile_options(srformer_warnings INTERFACE -Wall -Wextra -Wno-unused-parameter)
if(SRFORMER_WERROR)
  target_compile_options(srformer_warnings INTERFACE -Werror)
endif()

if(SRFORMER_SANITIZE STREQUAL "address")
  add_compile_options(-fsanitize=address -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address)
elseif(SRFORMER_SANITIZE STREQUAL "undefined")
  add_compile_options(-fsanitize=undefined -fno-omit-frame-pointer)
  add_link_options(-fsanitize=undefined)
elseif(SRFORMER_SANITIZE STREQUAL "address,undefined")  # both in one build: one build, one run
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
elseif(SRFORMER_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread)
  add_link_options(-fsanitize=thread)
elseif(NOT SRFORMER_SANITIZE STREQUAL "")
  message(FATAL_ERROR "SRFORMER_SANITIZE must be address, undefined, address,undefined or thread (got '${SRFORMER_SANITIZE}')")
endif()
if(NOT SRFORMER_SANITIZE STREQUAL "")
  add_compile_definitions(SRFORMER_SANITIZER=1)
endif()
