#pragma once
// Output to stdout that never arrived (a full disk, /dev/full) fails the program, saying why, in
// srformer-client, srformer-server and the offline tools alike: they exited 0 with the text lost.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <streambuf>
#include <string>
#include <utility>

namespace srformer {

// Put in front of std::cout's buffer while it lives: keeps the errno of the first write that failed. By
// the exit check errno is long gone when the failure came while printing (a text past stdio's 4 KiB
// buffer, a stream of tokens), and the check said "Input/output error" of a full disk.
class StdoutCheck {
 public:
  explicit StdoutCheck(std::string program) : program_(std::move(program)), buffer_(std::cout.rdbuf()) {
    std::cout.rdbuf(&buffer_);
  }
  ~StdoutCheck() { std::cout.rdbuf(buffer_.inner()); }
  StdoutCheck(const StdoutCheck&) = delete;
  StdoutCheck& operator=(const StdoutCheck&) = delete;

  // `status`, or where any output failed to reach stdout (flushed here), a failing one (1 where `status`
  // is 0) after "PROGRAM: cannot write to stdout: REASON" on stderr.
  int exit_status(int status) {
    errno = 0;
    std::cout.flush();
    const bool flushed = std::fflush(stdout) == 0;
    if (std::cout && flushed && !std::ferror(stdout)) return status;
    const int error = buffer_.error() != 0 ? buffer_.error() : errno != 0 ? errno : EIO;
    std::cerr << program_ << ": cannot write to stdout: " << std::strerror(error) << "\n";
    return status == 0 ? 1 : status;
  }

 private:
  // Passes everything to std::cout's own buffer (stdio's, so that printf and std::cout still interleave)
  // and holds nothing itself.
  class KeptErrno final : public std::streambuf {
   public:
    explicit KeptErrno(std::streambuf* inner) : inner_(inner) {}
    std::streambuf* inner() const { return inner_; }
    int error() const { return error_; }

   protected:
    int_type overflow(int_type c) override {
      if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
      errno = 0;
      if (traits_type::eq_int_type(inner_->sputc(traits_type::to_char_type(c)), traits_type::eof())) {
        keep_errno();
        return traits_type::eof();
      }
      return c;
    }
    std::streamsize xsputn(const char* s, std::streamsize n) override {
      errno = 0;
      const auto written = inner_->sputn(s, n);
      if (written != n) keep_errno();
      return written;
    }
    int sync() override {
      errno = 0;
      if (inner_->pubsync() == 0) return 0;
      keep_errno();
      return -1;
    }

   private:
    void keep_errno() {
      if (error_ == 0) error_ = errno != 0 ? errno : EIO;
    }

    std::streambuf* const inner_;
    int error_ = 0;
  };

  const std::string program_;
  KeptErrno buffer_;
};

}  // namespace srformer
