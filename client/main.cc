// srformer-client: summarize documents with an srformer-server, check its health, list its models,
// or generate load.
#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "client/client_options.h"
#include "client/grpc_health.h"
#include "client/grpc_logs.h"
#include "client/load_generator.h"
#include "client/message_size_hint.h"
#include "client/retry_policy.h"
#include "client/silence_notice.h"
#include "client/status_hint.h"
#include "common/alternative_line.h"
#include "common/pem_file.h"
#include "common/read_input.h"
#include "common/standard_streams.h"
#include "common/status_code_name.h"
#include "common/stdout_check.h"
#include "srformer/v1/summarizer.grpc.pb.h"

namespace {

using srformer::client::ClientOptions;
namespace v1 = srformer::v1;

using srformer::read_document;

std::shared_ptr<grpc::Channel> make_channel(const ClientOptions& o) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(static_cast<int>(srformer::client::kMaxResponseBytes));
  if (o.retries > 0) {
    args.SetServiceConfigJSON(srformer::client::retry_service_config(o.retries));
    args.SetInt(GRPC_ARG_PER_RPC_RETRY_BUFFER_SIZE, srformer::client::kRetryBufferBytes);
  }
  if (!o.tls) return grpc::CreateCustomChannel(o.target, grpc::InsecureChannelCredentials(), args);
  if (!o.tls_server_name.empty()) args.SetSslTargetNameOverride(o.tls_server_name);
  grpc::SslCredentialsOptions ssl;
  // Without --ca, empty: gRPC's default roots (GRPC_DEFAULT_SSL_ROOTS_FILE_PATH, else the system's bundle,
  // /etc/ssl/certs/ca-certificates.crt on Debian, else its own roots.pem), for a server with a public certificate.
  if (!o.ca_file.empty()) ssl.pem_root_certs = srformer::read_pem(o.ca_file, "--ca", srformer::PemKind::kCertificate);
  if (!o.cert_file.empty()) {
    ssl.pem_cert_chain = srformer::read_pem(o.cert_file, "--cert", srformer::PemKind::kCertificate);
    ssl.pem_private_key = srformer::read_pem(o.key_file, "--key", srformer::PemKind::kPrivateKey);
  }
  return grpc::CreateCustomChannel(o.target, grpc::SslCredentials(ssl), args);
}

const char* finish_name(v1::FinishReason r) {
  switch (r) {
    case v1::FINISH_REASON_EOS:
      return "eos";
    case v1::FINISH_REASON_LENGTH:
      return "length";
    case v1::FINISH_REASON_CANCELLED:
      return "cancelled";
    default:
      return "unspecified";
  }
}

// A summary's fields, shared by the response (the best) and its alternatives (the next best).
template <typename Message>
nlohmann::json sequence_json(const Message& m) {
  return {{"summary", m.summary()},
          {"token_ids", std::vector<int64_t>(m.token_ids().begin(), m.token_ids().end())},
          {"token_logprobs", std::vector<float>(m.token_logprobs().begin(), m.token_logprobs().end())},
          {"finish_reason", finish_name(m.finish_reason())},
          {"score", m.score()}};
}

nlohmann::json to_json(const v1::SummarizeResponse& r) {
  const auto& u = r.usage();
  auto alternatives = nlohmann::json::array();
  for (const auto& a : r.alternatives()) alternatives.push_back(sequence_json(a));
  auto j = sequence_json(r);
  j["model"] = r.model();
  j["request_id"] = r.request_id();
  j["alternatives"] = std::move(alternatives);
  j["usage"] = {{"input_tokens", u.input_tokens()},
                {"output_tokens", u.output_tokens()},
                {"segments", u.segments()},
                {"raf_firing_rate", u.raf_firing_rate()},
                {"state_bytes", u.state_bytes()},
                {"queue_ms", u.queue_ms()},
                {"encode_ms", u.encode_ms()},
                {"decode_ms", u.decode_ms()},
                {"truncated", u.truncated()},
                {"original_input_tokens", u.original_input_tokens()},
                {"encoder_cached", u.encoder_cached()}};
  return j;
}

// A failed call's code, its message where it has one (a C++ gRPC server without the method sends none) and
// the hint.
std::string failure(const grpc::Status& s, const ClientOptions& o, uint64_t sent_bytes) {
  const std::string& message = s.error_message();
  return std::string(srformer::status_code_name(s.error_code())) + (message.empty() ? "" : ": " + message) +
         srformer::client::status_hint(s, o, sent_bytes);
}

// With --json, what stdout says of a failed call: {"error": {"code", "message"}}, as a --batch --partial item's.
nlohmann::json error_json(const grpc::Status& s) {
  return {{"error", {{"code", srformer::status_code_name(s.error_code())}, {"message", s.error_message()}}}};
}

// The message as it came: bytes that are not UTF-8 (a server may echo them) replaced, not a throw.
void print_json(const nlohmann::json& j) {
  std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
}

// A deadline that passed said only "Deadline Exceeded": a target that never connected (nothing answering
// at the address, a firewall that drops) read as a server that was slow, which a longer deadline helps.
std::string deadline_hint(const grpc::Status& s, grpc::Channel& channel, const ClientOptions& o, int64_t waited_ms) {
  if (s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED || waited_ms <= 0) return "";
  const std::string within = " within " + std::to_string(waited_ms) + " ms";
  if (channel.GetState(false) != GRPC_CHANNEL_READY)
    return " (no connection to " + o.target + " came up" + within + ": is the server up at that address?)";
  return " (the server did not finish" + within + "; --deadline-ms gives it longer)";
}

// A script reading --json read nothing on stdout when the call failed: it gets the error object there too.
int fail(const grpc::Status& s, grpc::Channel& channel, const ClientOptions& o, uint64_t sent_bytes = 0) {
  std::cerr << "srformer-client: " << failure(s, o, sent_bytes) << deadline_hint(s, channel, o, o.deadline_ms) << "\n";
  if (o.json) print_json(error_json(s));
  return 1;
}

// What a call without --deadline-ms says once nothing has come for a while (client/silence_notice.h); "" while
// the channel is still connecting, which gRPC ends by itself (within 20 s) if it fails.
std::string silence_message(grpc::Channel& channel, const ClientOptions& o, bool heard_before) {
  if (channel.GetState(false) != GRPC_CHANNEL_READY) return "";
  return std::string(heard_before ? "nothing more" : "no answer") + " from " + o.target + " in " +
         std::to_string(srformer::client::kSilenceNoticeAfter.count()) +
         " s; still waiting, as the call has no deadline (--deadline-ms N ends it after N ms; Ctrl-C ends it now)";
}

// A unary call that says so once, without --deadline-ms, when no answer has come for a while.
template <typename Call>
grpc::Status call_saying_when_silent(grpc::Channel& channel, const ClientOptions& o, Call call) {
  const srformer::client::SilenceNotice notice(o.deadline_ms == 0, [&] { return silence_message(channel, o, false); });
  return call();
}

void set_deadline(grpc::ClientContext& ctx, const ClientOptions& o) {
  if (o.deadline_ms > 0) ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(o.deadline_ms));
}

v1::SummarizeRequest make_request(const ClientOptions& o, const std::string& doc) {
  v1::SummarizeRequest req;
  req.set_model(o.model);
  req.set_document(doc);
  *req.mutable_options() = o.generation;
  req.set_truncation(o.truncation);
  req.set_request_id(o.request_id);
  return req;
}

// With num_return_sequences > 1: the next best summaries (or the further samples), one line each.
void print_alternatives(const v1::SummarizeResponse& r) {
  for (int a = 0; a < r.alternatives_size(); ++a) {
    srformer::print_alternative_line(std::cout, static_cast<size_t>(a) + 2, r.alternatives(a).score(),
                                     r.alternatives(a).summary());
  }
}

// A FILE's text, refused as soon as it holds more than --max-document-bytes.
std::string read_client_document(const std::string& path, const ClientOptions& o) {
  // Without a FILE the client reads stdin, which from a terminal waited without a word for text the user did
  // not know to type (`srformer-client --target HOST:PORT` looked hung).
  if (path == "-" && ::isatty(STDIN_FILENO) == 1) {
    std::cerr << "srformer-client: reading the document from the terminal (stdin): type or paste it, then Ctrl-D "
                 "on a line of its own; or give a FILE (--help)\n";
  }
  return read_document(path, static_cast<std::uintmax_t>(o.max_document_bytes), "--max-document-bytes raises it");
}

int summarize(const ClientOptions& o, v1::Summarizer::Stub& stub, grpc::Channel& channel) {
  const std::string path = o.inputs.empty() ? "-" : o.inputs.front();
  const std::string doc = read_client_document(path, o);
  grpc::ClientContext ctx;
  set_deadline(ctx, o);
  const auto req = make_request(o, doc);
  if (!o.stream) {
    v1::SummarizeResponse resp;
    const grpc::Status answer = call_saying_when_silent(channel, o, [&] { return stub.Summarize(&ctx, req, &resp); });
    const auto st = srformer::client::naming_the_document(answer, path);
    if (!st.ok()) return fail(st, channel, o, req.ByteSizeLong());
    if (o.json) {
      std::cout << to_json(resp).dump() << "\n";
    } else {
      std::cout << resp.summary() << "\n";
      print_alternatives(resp);
    }
    return 0;
  }
  std::atomic<bool> heard{false};
  std::optional<srformer::client::SilenceNotice> notice;
  notice.emplace(o.deadline_ms == 0, [&] { return silence_message(channel, o, heard.load()); });
  auto reader = stub.SummarizeStream(&ctx, req);
  v1::SummarizeStreamResponse msg;
  v1::SummarizeResponse final;
  nlohmann::json tokens = nlohmann::json::array();
  bool printed = false;  // text on the line: a failure ends it (a failure before any leaves stdout empty)
  while (reader->Read(&msg)) {
    heard.store(true);
    notice->heard();
    if (msg.has_token()) {
      if (o.json) {
        tokens.push_back({{"token_id", msg.token().token_id()},
                          {"text", msg.token().text()},
                          {"step", msg.token().step()},
                          {"segment", msg.token().segment()},
                          {"logprob", msg.token().logprob()}});
      } else {
        std::cout << msg.token().text() << std::flush;
        printed = printed || !msg.token().text().empty();
        if (!std::cout) {  // nowhere to put the rest (a full disk): stop the generation, main says why
          ctx.TryCancel();
          break;
        }
      }
    } else if (msg.has_final()) {
      final = msg.final();
    }
  }
  const auto st = srformer::client::naming_the_document(reader->Finish(), path);
  notice.reset();
  if (!std::cout) return 1;
  if (!st.ok()) {
    if (printed) std::cout << "\n";
    if (!o.json) return fail(st, channel, o, req.ByteSizeLong());
    // The tokens that came before the failure (a deadline mid-summary, a server that went away) were
    // dropped: the error object carries them, as the summary's "stream" does.
    std::cerr << "srformer-client: " << failure(st, o, req.ByteSizeLong())
              << deadline_hint(st, channel, o, o.deadline_ms) << "\n";
    auto j = error_json(st);
    j["stream"] = tokens;
    print_json(j);
    return 1;
  }
  if (o.json) {
    auto j = to_json(final);
    j["stream"] = tokens;
    std::cout << j.dump() << "\n";
  } else {
    std::cout << "\n";
    print_alternatives(final);
  }
  return 0;
}

// A batch's status "requests[i]: ..." with the FILE that request i was read from.
grpc::Status naming_the_file(const grpc::Status& status, const std::vector<std::string>& inputs) {
  const std::string& message = status.error_message();
  const std::string prefix = "requests[";
  if (message.rfind(prefix, 0) != 0) return status;
  const size_t close = message.find("]: ", prefix.size());
  if (close == std::string::npos || close == prefix.size() || close - prefix.size() > 9) return status;
  const std::string digits = message.substr(prefix.size(), close - prefix.size());
  if (digits.find_first_not_of("0123456789") != std::string::npos) return status;
  const size_t index = std::stoul(digits);
  if (index >= inputs.size()) return status;
  return grpc::Status(status.error_code(),
                      message + " (requests[" + digits + "] is " + srformer::client::file_name(inputs[index]) + ")");
}

// --max-document-bytes bounds each FILE, not a batch of them: a message of more than gRPC carries (protobuf
// serializes none past 2 GiB - 1) aborted the client ("assertion failed: serializer_(msg_).ok()") once every
// FILE had been read and copied into it, twice over.
std::runtime_error batch_too_large(size_t files, std::uintmax_t bytes, std::uintmax_t limit) {
  return std::runtime_error("the " + std::to_string(files) + " FILEs of --batch come to " + std::to_string(bytes) +
                            " bytes, more than " + std::to_string(limit) +
                            ", the largest message gRPC carries; send them in several --batch calls");
}

// Which file `path` names ("-": stdin), by its device and inode, so that two names of one file ("-" and
// /dev/stdin, /dev/fd/0) are one; the name itself where it cannot be told (read_document then says why).
std::string file_identity(const std::string& path) {
  struct stat st {};
  if ((path == "-" ? ::fstat(STDIN_FILENO, &st) : ::stat(path.c_str(), &st)) != 0) return "name:" + path;
  return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
}

// The text of each FILE. Each one named is read once and every mention gets its text: a second read of stdin
// ("-", /dev/stdin, both) or of a pipe (<(...)) found it drained, and sent the second as an empty document.
// `max_total_bytes` (0: none) bounds the texts together, before they are copied.
std::vector<std::string> read_documents(const std::vector<std::string>& paths, const ClientOptions& o,
                                        std::uintmax_t max_total_bytes = 0) {
  std::map<std::string, std::string> read;
  std::vector<const std::string*> texts;
  std::uintmax_t total = 0;
  for (const auto& path : paths) {
    const std::string file = file_identity(path);
    auto text = read.find(file);
    if (text == read.end()) text = read.emplace(file, read_client_document(path, o)).first;
    texts.push_back(&text->second);
    total += text->second.size();
  }
  if (max_total_bytes > 0 && total > max_total_bytes) throw batch_too_large(paths.size(), total, max_total_bytes);
  std::vector<std::string> documents;
  for (const auto* text : texts) documents.push_back(*text);
  return documents;
}

int summarize_batch(const ClientOptions& o, v1::Summarizer::Stub& stub, grpc::Channel& channel) {
  v1::SummarizeBatchRequest batch;
  for (const auto& document : read_documents(o.inputs, o, srformer::kMaxInputBytes)) {
    auto& request = *batch.add_requests();
    request = make_request(o, document);
    // One id per FILE, as --load's: every item went out with the same id, and the server's log lines of
    // the batch (one per item) could not be told apart.
    if (!o.request_id.empty()) request.set_request_id(o.request_id + "-" + std::to_string(batch.requests_size() - 1));
  }
  batch.set_partial_results(o.partial);
  // The requests' other fields on top of documents just under the bound.
  if (batch.ByteSizeLong() > srformer::kMaxInputBytes)
    throw batch_too_large(o.inputs.size(), batch.ByteSizeLong(), srformer::kMaxInputBytes);
  grpc::ClientContext ctx;
  set_deadline(ctx, o);
  v1::SummarizeBatchResponse resp;
  const grpc::Status st = call_saying_when_silent(channel, o, [&] { return stub.SummarizeBatch(&ctx, batch, &resp); });
  if (!st.ok()) return fail(naming_the_file(st, o.inputs), channel, o, batch.ByteSizeLong());
  std::map<int, const v1::BatchItemError*> errors;
  for (const auto& e : resp.errors()) errors[e.index()] = &e;
  nlohmann::json all = nlohmann::json::array();
  for (int i = 0; i < resp.responses_size(); ++i) {
    const auto error = errors.find(i);
    if (error != errors.end()) {
      const auto code = static_cast<grpc::StatusCode>(error->second->code());
      // stdin by its name: "srformer-client: -: ..." read as a stray dash.
      std::cerr << "srformer-client: " << srformer::client::file_name(o.inputs.at(static_cast<size_t>(i))) << ": "
                << srformer::status_code_name(code) << ": " << error->second->message() << "\n";
      if (o.json) {
        all.push_back({{"error", {{"code", srformer::status_code_name(code)}, {"message", error->second->message()}}}});
      } else {
        std::cout << "\n";  // line i stays FILE i's
      }
    } else if (o.json) {
      all.push_back(to_json(resp.responses(i)));
    } else {
      std::cout << srformer::one_line(resp.responses(i).summary()) << "\n";
    }
  }
  if (o.json) std::cout << all.dump() << "\n";
  return errors.empty() ? 0 : 1;
}

// A float as the shortest decimal that reads back as it (0.7f as 0.7, not 0.699999988).
double shortest(float v) {
  char text[32];
  for (int digits = 6; digits < 9; ++digits) {
    std::snprintf(text, sizeof text, "%.*g", digits, static_cast<double>(v));
    if (std::strtof(text, nullptr) == v) return std::strtod(text, nullptr);
  }
  return static_cast<double>(v);
}

// The fields a message sets, by their proto names (scalars: what GenerationOptions holds).
nlohmann::json set_fields(const google::protobuf::Message& m) {
  using google::protobuf::FieldDescriptor;
  nlohmann::json j = nlohmann::json::object();
  const auto* reflection = m.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  reflection->ListFields(m, &fields);
  for (const auto* f : fields) {
    if (f->is_repeated()) continue;  // below
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32:
        j[f->name()] = reflection->GetInt32(m, f);
        break;
      case FieldDescriptor::CPPTYPE_INT64:
        j[f->name()] = reflection->GetInt64(m, f);
        break;
      case FieldDescriptor::CPPTYPE_UINT64:
        j[f->name()] = reflection->GetUInt64(m, f);
        break;
      case FieldDescriptor::CPPTYPE_FLOAT:
        j[f->name()] = shortest(reflection->GetFloat(m, f));
        break;
      case FieldDescriptor::CPPTYPE_BOOL:
        j[f->name()] = reflection->GetBool(m, f);
        break;
      case FieldDescriptor::CPPTYPE_ENUM:  // its name; the number where this client's proto has none
        if (const auto* value = f->enum_type()->FindValueByNumber(reflection->GetEnumValue(m, f))) {
          j[f->name()] = value->name();
        } else {
          j[f->name()] = reflection->GetEnumValue(m, f);
        }
        break;
      default:  // no other kind in GenerationOptions; a newer one is left out rather than misread
        break;
    }
  }
  // Repeated strings (bad_words) whole, an empty one as [] (ListFields leaves it out): every field is named.
  const auto* d = m.GetDescriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const auto* f = d->field(i);
    if (!f->is_repeated() || f->cpp_type() != FieldDescriptor::CPPTYPE_STRING) continue;
    auto& values = j[f->name()] = nlohmann::json::array();
    for (int k = 0; k < reflection->FieldSize(m, f); ++k) values.push_back(reflection->GetRepeatedString(m, f, k));
  }
  return j;
}

int list_models(const ClientOptions& o, v1::Summarizer::Stub& stub, grpc::Channel& channel) {
  grpc::ClientContext ctx;
  set_deadline(ctx, o);
  v1::ListModelsResponse resp;
  const grpc::Status st = call_saying_when_silent(channel, o, [&] { return stub.ListModels(&ctx, {}, &resp); });
  if (!st.ok()) return fail(st, channel, o);
  nlohmann::json all = nlohmann::json::array();
  for (const auto& m : resp.models()) {
    if (o.json) {
      all.push_back({{"name", m.name()},
                     {"architecture", m.architecture()},
                     {"cross_attention", m.cross_attention()},
                     {"segment_size", m.segment_size()},
                     {"max_input_tokens", m.max_input_tokens()},
                     {"max_new_tokens", m.max_new_tokens()},
                     {"device", m.device()},
                     {"dtype", m.dtype()},
                     {"parameters", m.parameters()},
                     {"default_expected_length", m.default_expected_length()},
                     {"defaults", m.has_defaults() ? set_fields(m.defaults()) : nlohmann::json(nullptr)}});
    } else {
      std::cout << m.name() << "\t" << m.architecture() << "\t" << m.cross_attention() << "\ts=" << m.segment_size()
                << "\tmax_input=" << m.max_input_tokens() << "\tmax_new=" << m.max_new_tokens() << "\t" << m.device()
                << "/" << m.dtype() << "\t" << m.parameters() << " params\n";
    }
  }
  if (o.json) std::cout << all.dump() << "\n";
  return 0;
}

// Before a load: whether the target answers at all. One that cannot be reached (nothing listening, a name
// that does not resolve, plaintext against a TLS server) took the whole of --requests or --duration to say
// so, each request an UNAVAILABLE in the report. ghz connects before its run likewise (its --connect-timeout, 10 s by
// default). Any answer will do (a server without the health service answers UNIMPLEMENTED); a target that goes away
// later in the run is waited for, each stream backing off.
int check_connection(const std::shared_ptr<grpc::Channel>& channel, const ClientOptions& o) {
  constexpr std::chrono::seconds kConnectTimeout{10};
  grpc::Status error;
  if (srformer::client::check_health(channel, "", kConnectTimeout, &error) != srformer::client::HealthStatus::kError)
    return 0;
  const auto code = error.error_code();
  const bool connected = channel->GetState(false) == GRPC_CHANNEL_READY;
  if (code == grpc::StatusCode::UNAVAILABLE || (code == grpc::StatusCode::DEADLINE_EXCEEDED && !connected)) {
    std::cerr << "srformer-client: cannot connect to " << o.target
              << (code == grpc::StatusCode::DEADLINE_EXCEEDED
                      ? " within " + std::to_string(kConnectTimeout.count()) + " s"
                      : "")
              << ": " << failure(error, o, 0) << "\n";
    return 1;
  }
  return 0;
}

int run(int argc, char** argv) {
  ClientOptions o;
  try {
    if (!srformer::client::parse_client_args(argc, argv, o)) return 0;
  } catch (const std::exception& e) {
    std::cerr << "srformer-client: " << e.what() << "\n";
    return 2;
  }
  try {
    const auto channel = make_channel(o);
    if (o.health) {
      grpc::Status error;
      const int64_t timeout_ms = o.deadline_ms > 0 ? o.deadline_ms : 3000;
      const auto status = srformer::client::check_health(channel, "", std::chrono::milliseconds(timeout_ms), &error);
      const char* names[] = {"UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN"};
      if (status == srformer::client::HealthStatus::kError) {
        std::cerr << "srformer-client: health check failed: " << failure(error, o, 0)
                  << deadline_hint(error, *channel, o, timeout_ms) << "\n";
        // A probe reading --json read nothing on stdout when no answer came (nothing listening, a deadline).
        if (o.json) {
          auto no_answer = error_json(error);
          no_answer["status"] = nullptr;
          print_json(no_answer);
        }
        return 1;
      }
      if (o.json) {
        std::cout << nlohmann::json{{"status", names[static_cast<int>(status)]}}.dump() << "\n";
      } else {
        std::cout << names[static_cast<int>(status)] << "\n";
      }
      return status == srformer::client::HealthStatus::kServing ? 0 : 1;
    }
    auto stub = v1::Summarizer::NewStub(channel);
    if (o.list_models) return list_models(o, *stub, *channel);
    if (o.load) {
      // The FILEs first: one that cannot be read was told only after the connection check, which to a target
      // that does not answer takes its 10 s, and to one that refuses said "cannot connect" instead.
      const auto documents = read_documents(o.inputs, o);
      if (const int status = check_connection(channel, o); status != 0) return status;
      const auto report = srformer::client::run_load(channel, o, documents);
      // As a shell reports a process that a signal ended (130 for Ctrl-C, 143 for SIGTERM), after the report.
      if (report["interrupted"].get<bool>()) return 128 + srformer::client::load_interrupted_by();
      // A request cut after --grace (G > 0) is one the server did not finish in the time the run gave it, and
      // fails the run as a failed request does; --grace 0 asks for the calls in flight at the end to be cut.
      const bool cut_unasked = report["requests_cut"].get<int64_t>() > 0 && o.grace_s > 0;
      return report["requests_failed"].get<int64_t>() == 0 && report["requests_ok"].get<int64_t>() > 0 && !cut_unasked
                 ? 0
                 : 1;
    }
    if (o.batch) return summarize_batch(o, *stub, *channel);
    return summarize(o, *stub, *channel);
  } catch (const std::exception& e) {
    std::cerr << "srformer-client: " << e.what() << "\n";
    // A FILE that could not be read (or a --ca, --cert, --key) printed nothing on stdout with --json, where a
    // failed call prints its error object: this one says so alike, with no gRPC code (no call was made).
    // --load prints its report or, for a run that did not start, nothing.
    if (o.json && !o.load) {
      nlohmann::json j = {{"error", {{"code", nullptr}, {"message", e.what()}}}};
      if (o.health) j["status"] = nullptr;
      print_json(j);
    }
    return 1;
  }
}

}  // namespace

// Before any library's initializer, which .preinit_array (an executable's only) runs ahead of: libgrpc's own
// opens an eventfd (its wakeup-fd probe), which took fd 0 when stdin was closed, before main.
__attribute__((section(".preinit_array"),
               used)) void (*const hold_standard_streams)() = srformer::hold_closed_standard_streams;

int main(int argc, char** argv) {
  // Output that never reached stdout (a full disk, /dev/full) is a failure: the exit status said 0 with the
  // summary or the load report lost. A closed pipe ends the client by SIGPIPE, as other tools.
  srformer::StdoutCheck stdout_check("srformer-client");
  srformer::client::quiet_grpc_tls_logs();
  return stdout_check.exit_status(run(argc, argv));
}
