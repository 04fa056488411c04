#include "server/engine/model_registry.h"

#include <stdexcept>

namespace srformer::server {

void ModelRegistry::add(std::unique_ptr<Engine> engine) {
  if (find(engine->name()) && !engine->name().empty()) {
    throw std::invalid_argument("model name '" + engine->name() + "' is used twice; give each --model a unique NAME");
  }
  engines_.push_back(std::move(engine));
}

Engine* ModelRegistry::find(const std::string& name) const {
  if (engines_.empty()) return nullptr;
  if (name.empty()) return engines_.front().get();
  for (const auto& e : engines_) {
    if (e->name() == name) return e.get();
  }
  return nullptr;
}

std::string ModelRegistry::names() const {
  std::string out;
  for (const auto& e : engines_) out += (out.empty() ? "" : ", ") + e->name();
  return out;
}

void ModelRegistry::stop_accepting() {
  for (auto& e : engines_) e->stop_accepting();
}

bool ModelRegistry::wait_idle(Clock::time_point deadline) {
  bool all = true;
  for (auto& e : engines_) all = e->wait_idle(deadline) && all;
  return all;
}

void ModelRegistry::cancel_all() {
  for (auto& e : engines_) e->cancel_all();
}

void ModelRegistry::stop() {
  for (auto& e : engines_) e->stop();
}

std::vector<std::string> ModelRegistry::stop(Clock::time_point deadline) {
  // All asked first: an engine behind a hung one gets the same time to end, not what the hung one left.
  for (auto& e : engines_) e->begin_stop();
  std::vector<std::string> running;
  for (auto& e : engines_) {
    if (!e->stop(deadline)) running.push_back(e->name());
  }
  return running;
}

}  // namespace srformer::server
