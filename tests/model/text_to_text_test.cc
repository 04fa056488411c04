// The whole offline path on a small model with a real tokenizer trained in the test:
// text -> tokens -> generation (greedy, beam, streaming) -> text.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
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

  // Each searcher's score is the model's likelihood of the tokens it returns, teacher-forced: greedy's is
  // the sum of their log-probabilities, each token the likeliest after those before it; beam search's is
  // that sum / (tokens without EOS + 1) ** length_penalty (HF's sequences_scores), its hypotheses best first.
  // Beam search is not bound to beat greedy (greedy's prefix can fall out of the beam to beams that then
  // do worse), so that is not asserted.
  const torch::NoGradGuard no_grad;
  const auto encoded = model->encode(input, torch::ones_like(input));
  const auto expected_length = torch::full({1}, default_expected_length(model->config(), o.max_new_tokens));
  // Per token of `tokens`: [log-probability of that token, of the likeliest token there].
  const auto teacher_forced = [&](const std::vector<int64_t>& tokens) {
    std::vector<int64_t> decoder_input{o.decoder_start_token_id};
    decoder_input.insert(decoder_input.end(), tokens.begin(), tokens.end() - 1);
    const auto logits =
        model->forward(encoded, torch::tensor(decoder_input, torch::kLong).view({1, -1}), expected_length);
    const auto logprobs = torch::log_softmax(logits[0].to(torch::kDouble), -1);
    std::vector<std::pair<double, double>> out;
    for (size_t t = 0; t < tokens.size(); ++t) {
      const auto row = logprobs[static_cast<int64_t>(t)];
      out.emplace_back(row[tokens[t]].item<double>(), row.max().item<double>());
    }
    return out;
  };
  double greedy_sum = 0;
  const auto greedy_tf = teacher_forced(best.tokens);
  for (size_t t = 0; t < best.tokens.size(); ++t) {
    EXPECT_NEAR(greedy_tf[t].first, greedy_tf[t].second, 1e-4) << "greedy token " << t << " is not the likeliest";
    EXPECT_NEAR(greedy_tf[t].first, best.token_logprobs.at(t), 1e-4) << "token " << t;
    greedy_sum += greedy_tf[t].first;
  }
  EXPECT_NEAR(best.score, greedy_sum, 1e-3);

  o.num_beams = 4;
  o.num_return_sequences = 4;
  const auto beam = generate(*model, input, torch::ones_like(input), o).at(0).hypotheses;
  ASSERT_EQ(beam.size(), 4u);
  for (size_t h = 0; h < beam.size(); ++h) {
    const auto& tokens = beam[h].tokens;
    ASSERT_FALSE(tokens.empty());
    EXPECT_NO_THROW((void)tokenizer->decode(tokens));
    double sum = 0;
    for (const auto& token : teacher_forced(tokens)) sum += token.first;
    const auto length = static_cast<double>(tokens.size() - (is_eos(o, tokens.back()) ? 1 : 0) + 1);
    EXPECT_NEAR(beam[h].score, sum / std::pow(length, o.length_penalty), 1e-3) << "hypothesis " << h;
    if (h > 0) {
      EXPECT_LE(beam[h].score, beam[h - 1].score) << "hypothesis " << h;
    }
  }
}

}  // namespace
}  // namespace srformer
