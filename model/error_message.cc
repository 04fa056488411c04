#include "model/error_message.h"

#include <c10/util/Exception.h>

namespace srformer {

std::string error_message(const std::exception& e) {
  const auto* torch_error = dynamic_cast<const c10::Error*>(&e);
  if (torch_error == nullptr) return e.what();
  std::string message = torch_error->what_without_backtrace();
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
  return message;
}

}  // namespace srformer
