#pragma once
// One short request through each model before the server listens. The first request of a process would
// otherwise pay for what happens once: the weights' pages faulted in, thread pools started, buffers
// grown, and on CUDA the context, the libraries' handles and every kernel loaded on first use.
#include <string>
#include <vector>

#include "server/engine/model_registry.h"
#include "server/service/request_builder.h"

namespace srformer::server {

struct WarmUpReport {
  std::string model;
  double milliseconds = 0;  // from submit to the result
  int64_t input_tokens = 0;
  int64_t output_tokens = 0;
  int64_t segments = 0;
};

// Builds the request as a client's would be (the service's own checks and tokenizer), greedy, a few
// tokens over an input of two segments or more where the model has them (a segment switch runs too),
// runs it on every engine at once and waits. The engines' metrics are detached meanwhile: no client
// asked for this work, so no series counts it. Call it while no client's request runs. Throws
// std::runtime_error naming the model whose request failed: a model that cannot summarize a sentence
// should not start serving.
std::vector<WarmUpReport> warm_up(const ModelRegistry& models, const ServiceLimits& limits);

}  // namespace srformer::server
