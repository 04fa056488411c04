// srformer-client's command line: what it refuses, with words that say what to change, rather than doing
// something else than was asked.
#include "client/client_options.h"

#include <google/protobuf/stubs/logging.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace srformer::client {
namespace {

ClientOptions parse(std::vector<std::string> args) {
  args.insert(args.begin(), "srformer-client");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  ClientOptions o;
  parse_client_args(static_cast<int>(argv.size()), argv.data(), o);
  return o;
}

// The message of the std::invalid_argument that parsing `args` throws ("" if it throws none).
std::string refusal(const std::vector<std::string>& args) {
  try {
    parse(args);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

// "--do-sample=false" sampled and "--json=false" printed JSON: the value after '=' was dropped.
TEST(ClientOptions, ASwitchGivenAValueIsRefused) {
  EXPECT_EQ(refusal({"--do-sample=false", "doc.txt"}),
            "--do-sample takes no value, got '--do-sample=false' (see --help)");
  EXPECT_EQ(refusal({"--json=false", "doc.txt"}), "--json takes no value, got '--json=false' (see --help)");
  EXPECT_EQ(refusal({"--stream=", "doc.txt"}), "--stream takes no value, got '--stream=' (see --help)");
  EXPECT_TRUE(parse({"--do-sample", "--json", "doc.txt"}).generation.do_sample());
  EXPECT_EQ(parse({"--max-new-tokens=5", "doc.txt"}).generation.max_new_tokens(), 5);  // flags with values keep '='
}

// "-x doc.txt" was read as two FILEs: "one FILE at a time (got 2)".
TEST(ClientOptions, ASingleDashFlagIsAnUnknownFlagAndDashDashEndsTheFlags) {
  EXPECT_EQ(refusal({"-x", "doc.txt"}), "unknown flag -x (see --help)");
  EXPECT_EQ(parse({"-"}).inputs, std::vector<std::string>{"-"});
  EXPECT_EQ(parse({"--json", "--", "-x"}).inputs, std::vector<std::string>{"-x"});
  EXPECT_TRUE(parse({"--json", "--", "-x"}).json);
  EXPECT_EQ(parse({"--batch", "--", "--json", "a"}).inputs, (std::vector<std::string>{"--json", "a"}));
}

// Without --load they did nothing: the FILE was summarized once, exit 0.
TEST(ClientOptions, LoadGeneratorFlagsNeedLoad) {
  EXPECT_EQ(refusal({"--requests", "5", "doc.txt"}), "--requests goes with --load (the load generator)");
  EXPECT_EQ(refusal({"--concurrency", "4", "doc.txt"}), "--concurrency goes with --load (the load generator)");
  EXPECT_EQ(refusal({"--duration", "2", "doc.txt"}), "--duration goes with --load (the load generator)");
  const auto o = parse({"--load", "--concurrency", "4", "--requests", "5", "doc.txt"});
  EXPECT_EQ(o.concurrency, 4);
  EXPECT_EQ(o.requests, 5);
}

// --tls alone was refused ("--tls needs --ca FILE"): a server with a certificate from a public CA needed the
// system's bundle named. Without --ca the client trusts the CAs gRPC finds (the system's).
// A FILE was read up to 2 GiB (gRPC's largest message) before being refused: the client bounds it at 64 MiB
// now, which --max-document-bytes moves within what gRPC carries.
TEST(ClientOptions, MaxDocumentBytesBoundsWhatIsRead) {
  EXPECT_EQ(parse({"doc.txt"}).max_document_bytes, int64_t{64} << 20);
  EXPECT_EQ(parse({"--max-document-bytes", "1000", "doc.txt"}).max_document_bytes, 1000);
  EXPECT_EQ(parse({"--max-document-bytes", "2147483647", "doc.txt"}).max_document_bytes, 2147483647);
  EXPECT_EQ(refusal({"--max-document-bytes", "0", "doc.txt"}),
            "--max-document-bytes must be from 1 to 2147483647, got 0");
  EXPECT_EQ(refusal({"--max-document-bytes", "2147483648", "doc.txt"}),
            "--max-document-bytes must be from 1 to 2147483647, got 2147483648");
  EXPECT_EQ(refusal({"--health", "--max-document-bytes", "10"}),
            "--max-document-bytes does nothing with --health, which checks the server's state and summarizes nothing");
}

TEST(ClientOptions, TlsWithoutCaTrustsTheSystemsCas) {
  const auto o = parse({"--tls", "--health"});
  EXPECT_TRUE(o.tls);
  EXPECT_EQ(o.ca_file, "");
  const auto mutual = parse({"--tls", "--cert", "c.pem", "--key", "k.pem", "--health"});
  EXPECT_TRUE(mutual.tls);
  EXPECT_EQ(mutual.cert_file, "c.pem");
  EXPECT_EQ(refusal({"--cert", "c.pem", "--key", "k.pem", "--health"}), "--cert/--key need --tls");
  EXPECT_EQ(refusal({"--tls-server-name", "x", "--health"}), "--tls-server-name needs --tls");
  EXPECT_EQ(refusal({"--tls", "--insecure", "--health"}), "--insecure (plaintext) and --tls/--ca do not go together");
}

// How long the calls in flight at the end of --duration may take before they are cut.
TEST(ClientOptions, GraceGoesWithDuration) {
  EXPECT_EQ(parse({"--load", "--duration", "5", "doc.txt"}).grace_s, 30);
  EXPECT_EQ(parse({"--load", "--duration", "5", "--grace", "0", "doc.txt"}).grace_s, 0);
  EXPECT_EQ(refusal({"--load", "--requests", "5", "--grace", "1", "doc.txt"}),
            "--grace goes with --duration (a run of --requests M ends with its last request)");
  EXPECT_EQ(refusal({"--grace", "1", "doc.txt"}), "--grace goes with --load (the load generator)");
  EXPECT_EQ(refusal({"--load", "--duration", "5", "--grace", "-1", "doc.txt"}),
            "--grace must be from 0 to 86400 seconds (a day), got -1");
  EXPECT_EQ(refusal({"--load", "--duration", "5", "--grace", "nan", "doc.txt"}),
            "--grace must be from 0 to 86400 seconds (a day), got nan");
}

// The load always streams: --load --stream was taken without a word, as if it chose the kind of call.
TEST(ClientOptions, StreamDoesNothingWithLoad) {
  EXPECT_EQ(refusal({"--load", "--stream", "--requests", "1", "doc.txt"}),
            "--stream does nothing with --load, which streams every request (SummarizeStream)");
  EXPECT_EQ(refusal({"--load", "--requests", "1", "doc.txt"}), "");
  EXPECT_EQ(refusal({"--stream", "doc.txt"}), "");
}

// The server answered "requests is empty; send at least one request", exit 1, where --load says what it needs.
TEST(ClientOptions, BatchNeedsAFile) {
  EXPECT_EQ(refusal({"--batch"}), "--batch needs at least one FILE");
  EXPECT_EQ(parse({"--batch", "a", "b"}).inputs.size(), 2u);
}

// 1e40 went out as inf and 1e-50 as 0: the server then refused a value that was not the one typed.
TEST(ClientOptions, AFloatFlagOutsideFloat32IsRefusedAsTyped) {
  EXPECT_EQ(refusal({"--temperature", "1e40", "doc.txt"}), "--temperature 1e40 is out of range (a float32 field)");
  EXPECT_EQ(refusal({"--top-p", "1e-50", "doc.txt"}), "--top-p 1e-50 is out of range (a float32 field)");
  EXPECT_FLOAT_EQ(parse({"--temperature", "0.7", "doc.txt"}).generation.temperature(), 0.7F);
  EXPECT_EQ(parse({"--temperature", "0", "doc.txt"}).generation.temperature(), 0.0F);  // the server's to judge
}

// A number past double's range, or an integer past int64's, is out of range too; they "needed a number" and
// "needed an integer".
TEST(ClientOptions, ANumberPastTheParsersRangeIsOutOfRangeNotNoNumber) {
  EXPECT_EQ(refusal({"--temperature", "1e400", "doc.txt"}), "--temperature 1e400 is out of range (a float32 field)");
  EXPECT_EQ(refusal({"--top-p", "-1e400", "doc.txt"}), "--top-p -1e400 is out of range (a float32 field)");
  EXPECT_EQ(refusal({"--max-new-tokens", "99999999999999999999", "doc.txt"}),
            "--max-new-tokens 99999999999999999999 is out of range (an int32 field)");
  EXPECT_EQ(refusal({"--top-k", "-99999999999999999999", "doc.txt"}),
            "--top-k -99999999999999999999 is out of range (an int32 field)");
  EXPECT_EQ(refusal({"--deadline-ms", "99999999999999999999", "doc.txt"}),
            "--deadline-ms 99999999999999999999 is out of range");
  EXPECT_EQ(refusal({"--load", "--duration", "1e400", "doc.txt"}), "--duration 1e400 is out of range");
  EXPECT_EQ(refusal({"--max-new-tokens", "12x", "doc.txt"}), "--max-new-tokens needs an integer, got '12x'");
  EXPECT_EQ(refusal({"--max-new-tokens", "-", "doc.txt"}), "--max-new-tokens needs an integer, got '-'");
  EXPECT_EQ(refusal({"--temperature", "x", "doc.txt"}), "--temperature needs a number, got 'x'");
}

// std::to_string wrote a tiny negative value as "-0.000000".
TEST(ClientOptions, ABadDurationIsQuotedAsTyped) {
  EXPECT_EQ(refusal({"--load", "--duration", "-1e-9", "doc.txt"}),
            "--duration must be more than 0 and at most 86400 seconds (a day), got -1e-9");
}

// gRPC's words for an empty target were "Failed to create secure client channel", for plaintext too.
TEST(ClientOptions, AnEmptyTargetIsRefused) {
  EXPECT_EQ(refusal({"--target", "", "doc.txt"}), "--target needs an address (HOST:PORT, unix:PATH), got ''");
  EXPECT_EQ(refusal({"--target=", "--health"}), "--target needs an address (HOST:PORT, unix:PATH), got ''");
  EXPECT_EQ(parse({"--target", "unix:/tmp/s", "doc.txt"}).target, "unix:/tmp/s");
}

// gRPC took an IPv6 address and its port without brackets for a DNS name ("DNS resolution failed for
// ::1:50051 ... Domain name not found").
TEST(ClientOptions, AnIpv6TargetNeedsBrackets) {
  EXPECT_EQ(refusal({"--target", "::1:50051", "--health"}),
            "--target '::1:50051': an IPv6 address goes in brackets: [::1]:50051");
  EXPECT_EQ(refusal({"--target", ":::50051", "--health"}),
            "--target ':::50051': an IPv6 address goes in brackets: [::]:50051");
  EXPECT_EQ(refusal({"--target=fe80::1:8080", "--health"}),
            "--target 'fe80::1:8080': an IPv6 address goes in brackets: [fe80::1]:8080");
  for (const std::string target : {"[::1]:50051", "localhost:50051", "127.0.0.1:50051", "unix:/tmp/s.sock",
                                   "ipv6:[::1]:50051", "dns:///summarizer:50051", "localhost", "fe80::1"}) {
    EXPECT_EQ(parse({"--target", target, "--health"}).target, target);
  }
}

// A bracketed host without its closing bracket ("[::1", "[::1:50051"), or with something other than ":PORT"
// after it ("[::1]50051"): gRPC logged an error and then said only that DNS resolution failed.
TEST(ClientOptions, AnUnclosedOrMisplacedIpv6BracketIsRefused) {
  EXPECT_EQ(refusal({"--target", "[::1", "--health"}),
            "--target '[::1': the '[' before an IPv6 address is not closed; write [ADDRESS]:PORT, e.g. [::1]:50051");
  EXPECT_EQ(refusal({"--target=[::1:50051", "--health"}),
            "--target '[::1:50051': the '[' before an IPv6 address is not closed; write [ADDRESS]:PORT, e.g. "
            "[::1]:50051");
  EXPECT_EQ(refusal({"--target", "[::1]50051", "--health"}),
            "--target '[::1]50051': after the ']' comes ':PORT' or nothing; write [ADDRESS]:PORT, e.g. [::1]:50051");
  EXPECT_EQ(refusal({"--target", "[]:50051", "--health"}),
            "--target '[]:50051': the brackets hold no address; write [ADDRESS]:PORT, e.g. [::1]:50051");
  for (const std::string target : {"[::1]:50051", "[::1]", "[fe80::1%eth0]:8080", "ipv6:[::1]:50051"}) {
    EXPECT_EQ(parse({"--target", target, "--health"}).target, target);
  }
}

// A port past 65535 was taken modulo 65536 by gRPC ("127.0.0.1:99999" connected to 34463, "Connection refused"
// of a port no one typed), and a URL whole for a DNS name ("DNS resolution failed for http://host:50051"): both
// are refused now, saying what to write.
TEST(ClientOptions, APortPastItsRangeOrAUrlIsRefused) {
  EXPECT_EQ(refusal({"--target", "127.0.0.1:99999", "--health"}),
            "--target '127.0.0.1:99999': the port must be from 1 to 65535, got 99999");
  EXPECT_EQ(refusal({"--target", "localhost:0", "--health"}),
            "--target 'localhost:0': the port must be from 1 to 65535, got 0");
  EXPECT_EQ(refusal({"--target", "[::1]:65536", "--health"}),
            "--target '[::1]:65536': the port must be from 1 to 65535, got 65536");
  EXPECT_EQ(refusal({"--target", "host:123456789012345678901", "--health"}),
            "--target 'host:123456789012345678901': the port must be from 1 to 65535, got 123456789012345678901");
  EXPECT_EQ(refusal({"--target", "http://summarizer:50051/", "--health"}),
            "--target 'http://summarizer:50051/': a HOST:PORT, not a URL: --target summarizer:50051");
  EXPECT_EQ(refusal({"--target=HTTPS://summarizer.example.com", "--health"}),
            "--target 'HTTPS://summarizer.example.com': a HOST:PORT, not a URL: --tls --target summarizer.example.com");
  for (const std::string target : {"localhost:65535", "127.0.0.1:1", "[::1]:50051", "ipv4:127.0.0.1:50051",
                                   "dns:///summarizer:50051", "unix:/tmp/s:1", "localhost"}) {
    EXPECT_EQ(parse({"--target", target, "--health"}).target, target);
  }
}

// --early-stopping, --no-early-stopping and --early-stopping-never are one setting, and the last given wins, as
// for srformer summarize: "--early-stopping --early-stopping-never" sent both fields and the server refused
// them as disagreeing, "--early-stopping-never --no-early-stopping" ran as never.
TEST(ClientOptions, TheLastEarlyStoppingFlagWins) {
  const std::vector<std::string> flags = {"--early-stopping", "--no-early-stopping", "--early-stopping-never"};
  for (const auto& first : flags) {
    for (const auto& last : flags) {
      const auto both = parse({first, last, "doc.txt"}).generation;
      const auto alone = parse({last, "doc.txt"}).generation;
      EXPECT_EQ(both.SerializeAsString(), alone.SerializeAsString()) << first << " " << last;
    }
  }
  EXPECT_TRUE(parse({"--early-stopping", "doc.txt"}).generation.early_stopping());
  EXPECT_FALSE(parse({"--no-early-stopping", "doc.txt"}).generation.early_stopping());
  EXPECT_TRUE(parse({"--no-early-stopping", "doc.txt"}).generation.has_early_stopping());
  EXPECT_EQ(parse({"--early-stopping-never", "doc.txt"}).generation.early_stopping_mode(),
            v1::EARLY_STOPPING_MODE_NEVER);
}

// The request fields for Hugging Face's further warpers and the encoder-input settings each have a flag,
// set only when given (unset: the model's default), and summary flags like the others.
TEST(ClientOptions, WarperAndEncoderInputFlagsSetTheirFields) {
  const auto g = parse({"--min-p", "0.05", "--typical-p=0.9", "--epsilon-cutoff", "3e-4", "--eta-cutoff", "1e-3",
                        "--encoder-repetition-penalty", "1.5", "--encoder-no-repeat-ngram-size", "3", "doc.txt"})
                     .generation;
  EXPECT_FLOAT_EQ(g.min_p(), 0.05F);
  EXPECT_FLOAT_EQ(g.typical_p(), 0.9F);
  EXPECT_FLOAT_EQ(g.epsilon_cutoff(), 3e-4F);
  EXPECT_FLOAT_EQ(g.eta_cutoff(), 1e-3F);
  EXPECT_FLOAT_EQ(g.encoder_repetition_penalty(), 1.5F);
  EXPECT_EQ(g.encoder_no_repeat_ngram_size(), 3);
  const auto unset = parse({"doc.txt"}).generation;
  EXPECT_FALSE(unset.has_min_p() || unset.has_typical_p() || unset.has_epsilon_cutoff() || unset.has_eta_cutoff() ||
               unset.has_encoder_repetition_penalty() || unset.has_encoder_no_repeat_ngram_size());
  EXPECT_TRUE(parse({"--min-p", "0", "doc.txt"}).generation.has_min_p()) << "0 is sent (it turns a default off)";
  EXPECT_EQ(refusal({"--min-p", "x", "doc.txt"}), "--min-p needs a number, got 'x'");
  EXPECT_EQ(refusal({"--encoder-no-repeat-ngram-size", "4294967299", "doc.txt"}),
            "--encoder-no-repeat-ngram-size 4294967299 is out of range (an int32 field)");
  EXPECT_EQ(refusal({"--health", "--typical-p", "0.9"}),
            "--typical-p does nothing with --health, which checks the server's state and summarizes nothing");
}

// --bad-word WORD adds one bad_words entry, repeatable, in order, any text (a value starting with '-', a
// phrase, "--bad-word=WORD"); a summary flag like the others, and UTF-8 as a string field must be.
TEST(ClientOptions, BadWordIsRepeatableAndAddsAnEntryEach) {
  const auto g =
      parse({"--bad-word", "Debian", "--bad-word=free software", "--bad-word", "-ish", "doc.txt"}).generation;
  EXPECT_EQ(std::vector<std::string>(g.bad_words().begin(), g.bad_words().end()),
            (std::vector<std::string>{"Debian", "free software", "-ish"}));
  EXPECT_TRUE(parse({"doc.txt"}).generation.bad_words().empty());
  EXPECT_EQ(parse({"--bad-word", "", "doc.txt"}).generation.bad_words_size(), 1) << "the server says what is wrong";
  EXPECT_EQ(refusal({"--bad-word"}), "--bad-word needs a value (see --help)");
  // In srformer summarize's and eval's words, with where the bytes break (it said only that they did).
  EXPECT_EQ(refusal({"--bad-word", "ab\xFF", "doc.txt"}),
            "--bad-word is not valid UTF-8 (bad byte sequence at byte offset 2); re-encode it as UTF-8");
  EXPECT_EQ(refusal({"--health", "--bad-word", "x"}),
            "--bad-word does nothing with --health, which checks the server's state and summarizes nothing");
}

// Diverse beam search's request fields have flags, set only when given (unset: the model's default).
TEST(ClientOptions, DiverseBeamSearchFlagsSetTheirFields) {
  const auto g = parse({"--num-beams", "6", "--num-beam-groups", "3", "--diversity-penalty=0.5", "doc.txt"}).generation;
  EXPECT_EQ(g.num_beam_groups(), 3);
  EXPECT_FLOAT_EQ(g.diversity_penalty(), 0.5F);
  const auto unset = parse({"doc.txt"}).generation;
  EXPECT_FALSE(unset.has_num_beam_groups() || unset.has_diversity_penalty());
  EXPECT_TRUE(parse({"--diversity-penalty", "0", "doc.txt"}).generation.has_diversity_penalty())
      << "0 is sent (it turns a default off)";
  EXPECT_EQ(refusal({"--diversity-penalty", "x", "doc.txt"}), "--diversity-penalty needs a number, got 'x'");
  EXPECT_EQ(refusal({"--num-beam-groups", "4294967299", "doc.txt"}),
            "--num-beam-groups 4294967299 is out of range (an int32 field)");
  EXPECT_EQ(refusal({"--health", "--num-beam-groups", "2"}),
            "--num-beam-groups does nothing with --health, which checks the server's state and summarizes nothing");
}

// The retry policy covers srformer.v1.Summarizer's calls, not the health check: --health --retries 3 checked
// once.
TEST(ClientOptions, RetriesDoNotGoWithHealth) {
  EXPECT_EQ(refusal({"--health", "--retries", "3"}),
            "--retries does nothing with --health, which reports the server's state now (a probe retries by running "
            "again)");
  EXPECT_EQ(parse({"--health", "--retries", "0"}).retries, 0);
  EXPECT_EQ(parse({"--list-models", "--retries", "2"}).retries, 2);
}

// --health and --list-models send no summary request: "--health --model bart" said SERVING for a server
// without bart, and "--list-models --max-new-tokens 3" listed the models, the flags dropped without a word.
TEST(ClientOptions, SummaryFlagsDoNotGoWithHealthOrListModels) {
  EXPECT_EQ(refusal({"--health", "--model", "bart"}),
            "--model does nothing with --health, which checks the server's state and summarizes nothing");
  EXPECT_EQ(refusal({"--max-new-tokens", "3", "--health", "--stream"}),
            "--max-new-tokens does nothing with --health, which checks the server's state and summarizes nothing");
  EXPECT_EQ(refusal({"--list-models", "--do-sample"}),
            "--do-sample does nothing with --list-models, which lists every model and summarizes nothing");
  EXPECT_EQ(refusal({"--list-models", "--request-id=x"}),
            "--request-id does nothing with --list-models, which lists every model and summarizes nothing");
  EXPECT_EQ(refusal({"--list-models", "--truncate"}),
            "--truncate does nothing with --list-models, which lists every model and summarizes nothing");
  EXPECT_TRUE(parse({"--health", "--json", "--deadline-ms", "500"}).health);
  EXPECT_TRUE(parse({"--list-models", "--json", "--retries", "1"}).list_models);
  EXPECT_EQ(parse({"--model", "bart", "--max-new-tokens", "3", "doc.txt"}).model, "bart");
}

// Whether protobuf takes `text` in a string field of the request: what the server does with the body.
bool protobuf_takes(const std::string& text) {
  const google::protobuf::LogSilencer quiet;  // its "contains invalid UTF-8 data" lines
  v1::SummarizeRequest request;
  request.set_request_id(text);
  v1::SummarizeRequest parsed;
  return parsed.ParseFromString(request.SerializeAsString());
}

// --model and --request-id not in UTF-8 (a Latin-1 terminal) went out as typed, and the server refused the
// body as "not a valid srformer.v1.SummarizeRequest message ... build the client from this server's proto".
// The client now refuses what protobuf refuses, and only that.
TEST(ClientOptions, StringFlagsThatAreNotUtf8AreRefusedAsProtobufWould) {
  const std::vector<std::string> values = {"plain",
                                           "caf\xc3\xa9",
                                           "\xf0\x9f\x98\x80",  // ASCII, é, an emoji
                                           "caf\xe9",
                                           "\xc0\xaf",
                                           "\xed\xa0\x80",  // Latin-1 é, overlong '/', a surrogate
                                           "\xf4\x90\x80\x80",
                                           "\xe2\x82",
                                           "\x80",  // past U+10FFFF, cut short, a lone continuation
                                           "a\xf8\x88\x80\x80\x80"};
  for (const std::string flag : {"--model", "--request-id"}) {
    for (const auto& value : values) {
      const bool taken = protobuf_takes(value);
      EXPECT_EQ(refusal({flag, value, "doc.txt"}).empty(), taken) << flag << " " << ::testing::PrintToString(value);
      if (!taken) {
        EXPECT_EQ(refusal({flag, value, "doc.txt"}),
                  flag + " must be UTF-8 text (a string field of the request); the value given is not");
      }
    }
  }
  EXPECT_EQ(parse({"--model", "caf\xc3\xa9", "doc.txt"}).model, "caf\xc3\xa9");
  EXPECT_FALSE(protobuf_takes("caf\xe9")) << "the check above needs protobuf to refuse something";
}

}  // namespace
}  // namespace srformer::client
