#pragma once
// A program started with a standard stream closed (`cmd <&-`, `cmd >&-`, a supervisor that closes them): the
// next file it opened took that number. srformer-client then read its document from gRPC's wakeup eventfd
// (fd 0) and wrote its summary into gRPC's epoll descriptor (fd 1: "cannot write to stdout: Invalid
// argument"), or whatever gRPC opened there, a connection's socket included; srformer-server logged into
// gRPC's wakeup eventfd (fd 2).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace srformer {

// Holds each closed one of fds 0, 1 and 2 with /dev/null opened the other way (stdin for writing, stdout and
// stderr for reading), so that no later file takes its number and each use of it still fails with EBADF, as
// on a closed one: a document that cannot be read, output that cannot be written, said as such. Called from
// the executable's .preinit_array, before any library's initializer opens a file.
inline void hold_closed_standard_streams() {
  for (int fd = STDIN_FILENO; fd <= STDERR_FILENO; ++fd) {
    if (::fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    // The lowest free number: this one, as those below are open by now.
    const int held = ::open("/dev/null", fd == STDIN_FILENO ? O_WRONLY : O_RDONLY);
    if (held != -1 && held != fd) ::close(held);
  }
}

}  // namespace srformer
