// Proves the sentencepiece/protobuf clash is solved: this binary links gRPC, protobuf (our
// generated API) and LibTorch, and still trains, loads and runs a real SentencePiece model.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "model/tokenizer/sentencepiece_library.h"
#include "srformer/v1/summarizer.pb.h"

namespace fs = std::filesystem;

namespace {

fs::path train_tiny_model(const fs::path& dir) {
  fs::create_directories(dir);
  const auto corpus = dir / "corpus.txt";
  {
    std::ofstream out(corpus);
    const char* lines[] = {
        "the quick brown fox jumps over the lazy dog",
        "segmented recurrent attention reads one segment of keys per step",
        "a gRPC server streams summary tokens as they are generated",
        "sentencepiece splits text into subword pieces",
        "unicode text such as café, naïve, Straße and 日本語 must survive",
    };
    for (int rep = 0; rep < 40; ++rep) {
      for (const char* l : lines) out << l << " " << rep << "\n";
    }
  }
  const auto prefix = dir / "tiny";
  srformer::train_sentencepiece("--input=" + corpus.string() + " --model_prefix=" + prefix.string() +
                                " --vocab_size=80 --model_type=unigram --character_coverage=1.0"
                                " --pad_id=0 --eos_id=1 --unk_id=2 --bos_id=-1 --minloglevel=2");
  return prefix.string() + ".model";
}

}  // namespace

TEST(SentencePieceIsolation, TrainsLoadsEncodesDecodesBesideGrpcProtobufTorch) {
  // Touch every library that would clash so none of them can be dropped by the linker.
  EXPECT_FALSE(grpc::Version().empty());
  srformer::v1::SummarizeRequest req;
  req.set_document("protobuf 3.21 lives here");
  EXPECT_EQ(srformer::v1::SummarizeRequest().GetDescriptor()->full_name(), "srformer.v1.SummarizeRequest");
  EXPECT_FALSE(req.SerializeAsString().empty());
  EXPECT_EQ(torch::ones({2, 2}).sum().item<float>(), 4.0f);

  const fs::path dir = fs::temp_directory_path() / ("srformer-spm-" + std::to_string(::getpid()));
  const auto model_file = train_tiny_model(dir);
  ASSERT_TRUE(fs::exists(model_file));

  const auto sp = srformer::SentencePieceProcessor::load(model_file);
  EXPECT_EQ(sp.vocab_size(), 80);
  EXPECT_EQ(sp.pad_id(), 0);
  EXPECT_EQ(sp.eos_id(), 1);
  EXPECT_TRUE(sp.is_control(1));

  const std::string text = "the lazy fox streams summary tokens";
  const auto ids = sp.encode(text);
  ASSERT_FALSE(ids.empty());
  for (const auto id : ids) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, 80);
  }
  EXPECT_EQ(sp.decode(ids), text);
  EXPECT_EQ(sp.decode(sp.encode("café naïve")), "café naïve");
  fs::remove_all(dir);
}

TEST(SentencePieceIsolation, MissingModelIsAClearError) {
  try {
    (void)srformer::SentencePieceProcessor::load("/nonexistent/spiece.model");
    FAIL() << "expected an exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/spiece.model"), std::string::npos) << e.what();
  }
}
