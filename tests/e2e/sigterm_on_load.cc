// Preloaded (LD_PRELOAD) into srformer-server by e2e_tests: sends the process SIGTERM from a library's
// static initializer, where a stop signal lands while LibTorch and gRPC initialize, before main().
#include <signal.h>
#include <unistd.h>

namespace {

// To the process, as kill(1) sends it, not to this thread (raise()): the startup watch's thread takes it.
__attribute__((constructor)) void send_sigterm() { kill(getpid(), SIGTERM); }

}  // namespace
