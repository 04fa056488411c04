#pragma once
// Closed-loop load generator: N concurrent streaming clients over a set of documents.
#include <grpcpp/grpcpp.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "client/client_options.h"

namespace srformer::client {

// Runs the load described by `options` against `channel` with the text of each of its input FILEs
// (`documents`, in the same order); returns the report (also printed).
nlohmann::json run_load(const std::shared_ptr<grpc::Channel>& channel, const ClientOptions& options,
                        const std::vector<std::string>& documents);

// The signal (SIGINT, SIGTERM) that interrupted the run, 0 if none.
int load_interrupted_by();

}  // namespace srformer::client
