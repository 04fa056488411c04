#pragma once
// The models a server holds, by name, each with its own engine (and decode thread).
#include <memory>
#include <string>
#include <vector>

#include "server/engine/engine.h"

namespace srformer::server {

class ModelRegistry {
 public:
  // Throws std::invalid_argument when the name is taken.
  void add(std::unique_ptr<Engine> engine);
  // `name` empty = the first model added. nullptr when unknown.
  Engine* find(const std::string& name) const;
  // "a, b" for error messages.
  std::string names() const;
  const std::vector<std::unique_ptr<Engine>>& engines() const { return engines_; }

  void stop_accepting();
  // Waits for every engine to drain until `deadline`; returns whether all drained.
  bool wait_idle(Clock::time_point deadline);
  void cancel_all();
  void stop();
  // Stops every engine, waiting for their decode threads (and their last callbacks) until `deadline`; returns
  // the names of those still running (hung), which stop() and the destructor then still wait for.
  std::vector<std::string> stop(Clock::time_point deadline);

 private:
  std::vector<std::unique_ptr<Engine>> engines_;
};

}  // namespace srformer::server
