#pragma once
// Child processes for end-to-end tests: the real srformer-server binary (port read from its
// "listening on HOST:PORT" log line) and command lines whose output is captured.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace srformer::testing {

struct CommandResult {
  int exit_code = -1;
  std::string out;
};

// Runs a shell command, capturing stdout (stderr goes to the test log).
inline CommandResult run_command(const std::string& command) {
  CommandResult r;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) throw std::runtime_error("popen failed: " + command);
  char buf[4096];
  size_t n = 0;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) r.out.append(buf, n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

class ServerProcess {
 public:
  // Starts `binary args...` with stderr to `log_path`; waits for "listening on HOST:PORT".
  ServerProcess(const std::string& binary, const std::vector<std::string>& args, const std::string& log_path)
      : log_path_(log_path) {
    // Emptied here, not only in the child: a log left by an earlier server at this path would
    // otherwise be read (and its port taken) before the child truncates it.
    std::ofstream(log_path, std::ios::trunc).close();
    pid_ = fork();
    if (pid_ == 0) {
      const int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 2);
      dup2(fd, 1);
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(binary.c_str()));
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(binary.c_str(), argv.data());
      _exit(127);
    }
    // HOST:PORT, or a unix: socket (port() then 0).
    const std::regex listening("listening on ([^ \\n]+)");
    const std::regex port(":([0-9]+)$");
    for (int i = 0; i < 600; ++i) {
      std::smatch m;
      const std::string log = this->log();
      if (std::regex_search(log, m, listening)) {
        const std::string address = m[1];
        std::smatch p;
        if (address.rfind("unix:", 0) != 0 && std::regex_search(address, p, port)) port_ = std::stoi(p[1]);
        return;
      }
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error("srformer-server exited early:\n" + log);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    throw std::runtime_error("srformer-server did not log 'listening on' within 60 s:\n" + log());
  }
  ~ServerProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }
  std::string log() const {
    std::ifstream in(log_path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  void signal(int sig) { kill(pid_, sig); }
  // Waits for exit; returns the exit code, or -1 on timeout / death by signal.
  int wait(std::chrono::seconds timeout) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }

 private:
  std::string log_path_;
  pid_t pid_ = -1;
  int port_ = 0;
};

}  // namespace srformer::testing
