// SentencePieceTokenizer (T5): conventions, round trips, and id parity with Debian's
// python3-sentencepiece driven by tests/tokenizer/spm_reference.py.
#include "model/tokenizer/sentencepiece_tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "model/tokenizer/tokenizer_error.h"
#include "tests/tokenizer/tokenizer_test_support.h"

namespace srformer {
namespace {

using test::TempDir;
namespace fs = std::filesystem;

class SentencePieceTokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { tok_ = SentencePieceTokenizer::load(test::t5_style_spm_dir()).release(); }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }
  static SentencePieceTokenizer* tok_;
};
SentencePieceTokenizer* SentencePieceTokenizerTest::tok_ = nullptr;

TEST_F(SentencePieceTokenizerTest, ReportsT5VocabularyLayout) {
  const auto sp = SentencePieceProcessor::load(test::t5_style_spm_dir() / "spiece.model");
  EXPECT_EQ(tok_->extra_ids(), 100);
  EXPECT_EQ(tok_->vocab_size(), 600 + 100);
  EXPECT_EQ(tok_->pad_id(), 0);
  EXPECT_EQ(tok_->eos_id(), 1);
  EXPECT_EQ(tok_->bos_id(), std::nullopt);
  EXPECT_EQ(tok_->token_to_id("<extra_id_0>"), 699);
  EXPECT_EQ(tok_->token_to_id("<extra_id_99>"), 600);
  EXPECT_EQ(tok_->token_to_id("<extra_id_100>"), std::nullopt);
  EXPECT_EQ(tok_->id_to_token(699), "<extra_id_0>");
  EXPECT_EQ(tok_->id_to_token(600), "<extra_id_99>");
  EXPECT_EQ(tok_->token_to_id("</s>"), 1);
  EXPECT_EQ(tok_->token_to_id("<unk>"), 2);
  EXPECT_EQ(tok_->token_to_id("no-such-piece-here"), std::nullopt);
  EXPECT_TRUE(tok_->is_special(0));
  EXPECT_TRUE(tok_->is_special(1));
  EXPECT_TRUE(tok_->is_special(2)) << "<unk> is one of Hugging Face's special tokens";
  EXPECT_TRUE(tok_->is_special(650));
  EXPECT_FALSE(tok_->is_special(sp.encode("the").back()));
  EXPECT_THROW(tok_->id_to_token(700), std::invalid_argument);
  EXPECT_THROW(tok_->decode({5, 700}), std::invalid_argument);
}

TEST_F(SentencePieceTokenizerTest, AppendsEosAndMatchesTheLibrary) {
  const auto sp = SentencePieceProcessor::load(test::t5_style_spm_dir() / "spiece.model");
  const std::string text = "the quick brown fox";
  const auto ids = tok_->encode(text);
  const auto raw = sp.encode(text);
  ASSERT_EQ(ids.size(), raw.size() + 1);
  EXPECT_EQ(ids.back(), 1);
  for (size_t i = 0; i < raw.size(); ++i) EXPECT_EQ(ids[i], raw[i]);
  EXPECT_EQ(tok_->encode(""), TokenIds{1});
}

TEST_F(SentencePieceTokenizerTest, SplitsLiteralSpecialTokens) {
  const auto sp = SentencePieceProcessor::load(test::t5_style_spm_dir() / "spiece.model");
  const auto ids = tok_->encode("the <extra_id_0> fox</s><pad> dog <extra_id_17><unk>");
  TokenIds expected;
  for (const int32_t id : sp.encode("the")) expected.push_back(id);
  expected.push_back(699);
  for (const int32_t id : sp.encode(" fox")) expected.push_back(id);
  expected.push_back(1);
  expected.push_back(0);
  for (const int32_t id : sp.encode(" dog ")) expected.push_back(id);
  expected.push_back(682);
  expected.push_back(2);
  expected.push_back(1);
  EXPECT_EQ(ids, expected);
  // <unk> goes with the special tokens, or shows as "<unk>" (Hugging Face's T5 tokenizers; SentencePiece's
  // own decode renders it " \u2047 ").
  EXPECT_EQ(tok_->decode(ids), "the fox dog");
  EXPECT_EQ(tok_->decode(ids, false), "the<extra_id_0> fox</s><pad> dog<extra_id_17><unk></s>");
}

TEST_F(SentencePieceTokenizerTest, RoundTripsVariedText) {
  // The model normalizes with NFKC and collapses whitespace, so compare against the library's own
  // normalization: decode(encode(x)) must equal the library's decode of its encode.
  const auto sp = SentencePieceProcessor::load(test::t5_style_spm_dir() / "spiece.model");
  test::TextGenerator gen(11);
  for (const auto& text : gen.texts(500)) {
    const auto ids = tok_->encode(text);
    EXPECT_EQ(tok_->decode(ids), sp.decode(sp.encode(text))) << text;
  }
  EXPECT_EQ(tok_->decode(tok_->encode("the lazy dog jumps")), "the lazy dog jumps");
  EXPECT_EQ(tok_->decode(tok_->encode("日本語 😀 café")), "日本語 😀 café");  // byte fallback covers rare chars
}

TEST_F(SentencePieceTokenizerTest, ExtraIdsComeFromTokenizerConfig) {
  TempDir dir("t5cfg");
  std::filesystem::copy_file(test::t5_style_spm_dir() / "spiece.model", dir.path() / "spiece.model");
  test::write_file(dir.path() / "tokenizer_config.json", R"({"extra_ids": 3})");
  const auto tok = SentencePieceTokenizer::load(dir.path());
  EXPECT_EQ(tok->vocab_size(), 603);
  EXPECT_EQ(tok->token_to_id("<extra_id_0>"), 602);
  EXPECT_EQ(tok->token_to_id("<extra_id_3>"), std::nullopt);
  // Only 3 sentinels exist, so "<extra_id_3>" is ordinary text.
  EXPECT_NE(tok->encode("<extra_id_3>").size(), 2u);

  test::write_file(dir.path() / "tokenizer_config.json",
                   R"({"additional_special_tokens": ["<extra_id_0>", "<extra_id_1>"]})");
  EXPECT_EQ(SentencePieceTokenizer::load(dir.path())->vocab_size(), 602);
  test::write_file(dir.path() / "tokenizer_config.json", "{broken");
  EXPECT_THROW(SentencePieceTokenizer::load(dir.path()), TokenizerLoadError);

  // A typo's hundred million sentinels took 11 GB and 43 s before: refused at once, saying where.
  for (const char* config :
       {R"({"extra_ids": 100000000})", R"({"additional_special_tokens": ["<extra_id_100000>"]})"}) {
    test::write_file(dir.path() / "tokenizer_config.json", config);
    try {
      SentencePieceTokenizer::load(dir.path());
      ADD_FAILURE() << config << " was accepted";
    } catch (const TokenizerLoadError& e) {
      EXPECT_NE(std::string(e.what()).find("sentinel tokens"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(dir.path().string()), std::string::npos) << e.what();
    }
  }
  test::write_file(dir.path() / "tokenizer_config.json", R"({"extra_ids": 100000})");
  EXPECT_EQ(SentencePieceTokenizer::load(dir.path())->extra_ids(), 100000);
}

// transformers 5 names additional_special_tokens extra_special_tokens: an added token listed there alone is
// special (skipped in summaries) as Hugging Face reads it; it was ordinary text, kept in the summary.
TEST_F(SentencePieceTokenizerTest, ExtraSpecialTokensMakeAddedTokensSpecial) {
  TempDir dir("t5-extra-special");
  std::filesystem::copy_file(test::t5_style_spm_dir() / "spiece.model", dir.path() / "spiece.model");
  test::write_file(dir.path() / "tokenizer_config.json", R"({"extra_ids": 3, "extra_special_tokens": ["<sep>"]})");
  test::write_file(dir.path() / "added_tokens.json", R"({"<sep>": 603})");
  const auto tok = SentencePieceTokenizer::load(dir.path());
  EXPECT_TRUE(tok->is_special(603));
  EXPECT_EQ(tok->decode(tok->encode("the<sep>")), "the");
}

// Tokens a checkpoint added after the sentinels (added_tokens.json, tokenizer_config.json's
// added_tokens_decoder) are matched in text and decoded, special or not, as Hugging Face's T5 tokenizers
// do; they were split into pieces, and their ids refused in decoding.
TEST_F(SentencePieceTokenizerTest, AddedTokensAfterTheSentinelsAreMatchedAndDecoded) {
  TempDir dir("t5-added");
  std::filesystem::copy_file(test::t5_style_spm_dir() / "spiece.model", dir.path() / "spiece.model");
  test::write_file(dir.path() / "tokenizer_config.json",
                   R"({"extra_ids": 3, "additional_special_tokens": ["<sep>"],
                       "added_tokens_decoder": {"1": {"content": "</s>", "special": true},
                                                "604": {"content": "[kw]", "special": false, "lstrip": true}}})");
  test::write_file(dir.path() / "added_tokens.json", R"({"<sep>": 603, "<extra_id_0>": 602})");
  const auto tok = SentencePieceTokenizer::load(dir.path());
  EXPECT_EQ(tok->vocab_size(), 605);
  EXPECT_EQ(tok->token_to_id("<sep>"), 603);
  EXPECT_EQ(tok->id_to_token(604), "[kw]");
  EXPECT_TRUE(tok->is_special(603));
  EXPECT_FALSE(tok->is_special(604));
  const auto sp = SentencePieceProcessor::load(dir.path() / "spiece.model");
  TokenIds expected;
  for (const int32_t id : sp.encode("the")) expected.push_back(id);
  expected.push_back(603);
  for (const int32_t id : sp.encode(" fox")) expected.push_back(id);
  expected.push_back(604);  // its lstrip takes the space before it
  for (const int32_t id : sp.encode(" dog")) expected.push_back(id);
  expected.push_back(1);
  const auto ids = tok->encode("the<sep> fox [kw] dog");
  EXPECT_EQ(ids, expected);
  EXPECT_EQ(tok->decode(ids), "the fox[kw] dog") << "<sep> skipped with the special tokens, [kw] kept";
  EXPECT_EQ(tok->decode(ids, false), "the<sep> fox[kw] dog</s>");
  // An added token given the id of a piece or sentinel that is something else: named.
  for (const auto& [added, says] : std::vector<std::pair<std::string, std::string>>{
           {R"({"<sep>": 602})", "give '<sep>' the id 602, which is '<extra_id_0>' in spiece.model and the sentinels"},
           {R"({"<sep>": 5})", "give '<sep>' the id 5, which is '"},
           {R"({"<sep>": -1})", "give '<sep>' the id -1, which is outside the vocabulary"}}) {
    test::write_file(dir.path() / "added_tokens.json", added);
    try {
      (void)SentencePieceTokenizer::load(dir.path());
      ADD_FAILURE() << added << " loaded";
    } catch (const TokenizerLoadError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  }
}

// Added ids past a gap: Hugging Face's fast tokenizer (AutoTokenizer's) gives each token the vocabulary lacks the
// next free id after the vocabulary and the tokens added before it, by the ids the entries write (transformers'
// PreTrainedTokenizerFast adds added_tokens_decoder's sorted by id; tokenizers adds tokenizer.json's in their
// order and only warns of another id; HfParity.T5AddedTokensPastAGapTakeTheNextFreeIds runs tokenizers 0.22 on
// the latter). The load was refused ("added tokens take the ids after the SentencePiece pieces and the 3
// sentinels, one after another").
TEST_F(SentencePieceTokenizerTest, AddedTokensPastAGapTakeTheNextFreeIdsAsHuggingFaceGivesThem) {
  TempDir dir("t5-added-gap");
  std::filesystem::copy_file(test::t5_style_spm_dir() / "spiece.model", dir.path() / "spiece.model");
  test::write_file(dir.path() / "tokenizer_config.json",
                   R"({"extra_ids": 3, "additional_special_tokens": ["<sep>"],
                       "added_tokens_decoder": {"1": {"content": "</s>", "special": true},
                                                "610": {"content": "[kw]", "special": false, "lstrip": true}}})");
  // "<sep>" (650) after "[kw]" (610); "<extra_id_1>" and "[kw]" again keep their ids.
  test::write_file(dir.path() / "added_tokens.json", R"({"<sep>": 650, "<extra_id_1>": 700, "[kw]": 800})");
  const auto tok = SentencePieceTokenizer::load(dir.path());
  EXPECT_EQ(tok->vocab_size(), 605);
  EXPECT_EQ(tok->token_to_id("[kw]"), 603);
  EXPECT_EQ(tok->token_to_id("<sep>"), 604);
  EXPECT_EQ(tok->token_to_id("<extra_id_1>"), 601);
  EXPECT_TRUE(tok->is_special(604));
  EXPECT_FALSE(tok->is_special(603));
  const auto ids = tok->encode("the<sep> fox [kw] dog");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 604), 1);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 603), 1);
  EXPECT_EQ(tok->decode(ids, false), "the<sep> fox[kw] dog</s>");
}

// Sentinels saved by transformers' T5Tokenizer carry lstrip and rstrip (its added_tokens_decoder); Hugging Face's
// fast tokenizer takes those flags for them and strips the whitespace around a sentinel, so that with
// legacy: false the text after it gets no "▁" (HfParity.T5SentinelsStripWhitespaceWhereTheFilesSaySo runs
// tokenizers 0.22 on tokenizer.json's). They were matched without.
TEST_F(SentencePieceTokenizerTest, SentinelsStripWhitespaceWhereTheFilesSaySo) {
  TempDir dir("t5-sentinel-strip");
  std::filesystem::copy_file(test::t5_style_spm_dir() / "spiece.model", dir.path() / "spiece.model");
  test::write_file(dir.path() / "tokenizer_config.json", R"({"extra_ids": 3, "legacy": false})");
  const auto plain = SentencePieceTokenizer::load(dir.path());
  ASSERT_NE(plain->encode("a <extra_id_0> fox"), plain->encode("a<extra_id_0>fox"));
  test::write_file(dir.path() / "tokenizer_config.json",
                   R"({"extra_ids": 3, "legacy": false, "added_tokens_decoder": {
                         "602": {"content": "<extra_id_0>", "lstrip": true, "rstrip": true, "special": true},
                         "601": {"content": "<extra_id_1>", "lstrip": false, "rstrip": true, "special": true}}})");
  const auto tok = SentencePieceTokenizer::load(dir.path());
  EXPECT_EQ(tok->encode("a <extra_id_0> fox"), tok->encode("a<extra_id_0>fox"));
  EXPECT_EQ(tok->encode("a <extra_id_1>  fox"), tok->encode("a <extra_id_1>fox"));
}

// Hugging Face's decode runs added tokens' text through the Metaspace decoder too: an added "▁word" (as
// tokenizer.add_tokens keeps one meant to follow a space) gives " word", or "word" as the first token, every
// "▁" of it dropped there. They were given as their text ("▁word"). Checked against tokenizers 0.22
// (hf_reference.js; HfParity.T5AddedTokensDecodeThroughTheMetaspaceDecoder runs it).
TEST_F(SentencePieceTokenizerTest, AddedTokensDecodeThroughTheMetaspaceDecoder) {
  TempDir dir("t5-added-metaspace");
  std::filesystem::copy_file(test::t5_style_spm_dir() / "spiece.model", dir.path() / "spiece.model");
  test::write_file(dir.path() / "tokenizer_config.json",
                   R"({"extra_ids": 3, "added_tokens_decoder": {
                         "603": {"content": "\u2581foo", "special": false},
                         "604": {"content": "a\u2581\u2581b", "special": false},
                         "605": {"content": "\u2581<sp>", "special": true}}})");
  const auto tok = SentencePieceTokenizer::load(dir.path());
  const int64_t the = tok->encode("the").front(), pad = *tok->pad_id();
  ASSERT_EQ(tok->id_to_token(the), "\xE2\x96\x81the");
  EXPECT_EQ(tok->decode_raw({603}), "foo");
  EXPECT_EQ(tok->decode_raw({the, 603}), "the foo");
  EXPECT_EQ(tok->decode_raw({603, the}), "foo the");
  EXPECT_EQ(tok->decode_raw({pad, 603}, true), "foo");
  EXPECT_EQ(tok->decode_raw({pad, 603}, false), "<pad> foo");
  EXPECT_EQ(tok->decode_raw({604}), "ab");
  EXPECT_EQ(tok->decode_raw({the, 604}), "thea  b");
  EXPECT_EQ(tok->decode_raw({605, the}, false), "<sp> the");
  EXPECT_EQ(tok->decode_raw({the, 605, the}, false), "the <sp> the");
  EXPECT_EQ(tok->decode_raw({the, 605, the}, true), "the the");
}

// After other output (a special token kept, an added token), every "▁" of the pieces is a space, whether
// the model removes extra whitespace (T5's: SentencePiece drops every leading "▁" of a text) or keeps it
// (models for code: it drops the first piece's alone). The second had one space too many after a kept
// special token when lone "▁" pieces came first.
TEST_F(SentencePieceTokenizerTest, SpacesAfterOtherOutputAreThePiecesOwn) {
  TempDir dir("t5-extra-whitespace");
  const auto corpus = dir.path() / "corpus.txt";
  {
    std::ofstream out(corpus, std::ios::binary);
    test::TextGenerator gen(11);
    gen.without_random_code_points();
    for (int i = 0; i < 2000; ++i) {
      std::string line = gen.text();
      std::replace(line.begin(), line.end(), '\n', ' ');
      std::replace(line.begin(), line.end(), '\r', ' ');
      out << line << "  the  a\n";
    }
  }
  train_sentencepiece("--input=" + corpus.string() + " --model_prefix=" + (dir.path() / "keep").string() +
                      " --vocab_size=600 --model_type=unigram --character_coverage=0.98 --byte_fallback=true"
                      " --remove_extra_whitespaces=false --pad_id=0 --eos_id=1 --unk_id=2 --bos_id=-1"
                      " --minloglevel=2");
  fs::create_directories(dir.path() / "keep-model");
  fs::copy_file(dir.path() / "keep.model", dir.path() / "keep-model" / "spiece.model");
  test::write_file(dir.path() / "keep-model" / "tokenizer_config.json",
                   R"({"extra_ids": 3, "added_tokens_decoder": {"603": {"content": "[kw]", "special": false}}})");
  fs::create_directories(dir.path() / "remove-model");
  fs::copy_file(test::t5_style_spm_dir() / "spiece.model", dir.path() / "remove-model" / "spiece.model");
  test::write_file(dir.path() / "remove-model" / "tokenizer_config.json",
                   R"({"extra_ids": 3, "added_tokens_decoder": {"603": {"content": "[kw]", "special": false}}})");
  for (const char* model : {"keep-model", "remove-model"}) {
    SCOPED_TRACE(model);
    const auto tok = SentencePieceTokenizer::load(dir.path() / model);
    const auto space = tok->token_to_id("\xE2\x96\x81");
    const auto the = tok->token_to_id("\xE2\x96\x81the");
    ASSERT_TRUE(space && the) << "the test models should have the pieces '▁' and '▁the'";
    const int64_t eos = 1, kw = 603, e6 = *tok->token_to_id("<0xE6>"), x97 = *tok->token_to_id("<0x97>"),
                  xa5 = *tok->token_to_id("<0xA5>");
    EXPECT_EQ(tok->decode({eos, *space, *the}, false), "</s>  the");
    EXPECT_EQ(tok->decode({eos, *space, *space, *the, *space}, false), "</s>   the ");
    EXPECT_EQ(tok->decode({kw, *space, *the}), "[kw]  the");
    EXPECT_EQ(tok->decode({kw, *the, *space, *the}), "[kw] the  the");
    EXPECT_EQ(tok->decode({kw, *space, e6, x97, xa5, *the}), "[kw] \xE6\x97\xA5 the");
    EXPECT_EQ(tok->decode({kw, e6, x97, xa5}), "[kw]\xE6\x97\xA5");
    // At the very start, as Hugging Face's fast tokenizer (its Metaspace decoder) decodes: the first token's
    // "▁" dropped, every later one a space. SentencePiece's rule for T5's models gave "the" for the first two
    // (it drops the leading "▁" of each piece up to the first text).
    EXPECT_EQ(tok->decode({*space, *the}), " the");
    EXPECT_EQ(tok->decode({eos, *space, *space, *the}), "  the");
    EXPECT_EQ(tok->decode({*the, *space, *the}), "the  the");
    EXPECT_EQ(tok->decode({*space, e6, x97, xa5}), "\xE6\x97\xA5");
    // And streamed as decoded whole, past the detokenizer's window.
    TokenIds ids;
    for (int i = 0; i < 40; ++i) {
      for (const int64_t id : {eos, *space, *the, kw, *space, *space, *the}) ids.push_back(id);
    }
    for (const bool skip : {true, false}) {
      IncrementalDetokenizer detok(*tok, skip);
      std::string streamed;
      for (const int64_t id : ids) streamed += detok.push(id);
      streamed += detok.finish();
      EXPECT_EQ(streamed, tok->decode(ids, skip));
    }
  }
}

// The files listing added tokens are read as the byte-level BPE loader reads them: a key of
// added_tokens_decoder that is no id, or an added_tokens.json that is no object, is named (both were
// skipped without a word here).
TEST_F(SentencePieceTokenizerTest, MalformedAddedTokenFilesAreNamed) {
  TempDir dir("t5-added-bad");
  std::filesystem::copy_file(test::t5_style_spm_dir() / "spiece.model", dir.path() / "spiece.model");
  const auto expect_error = [&](const std::string& needle) {
    try {
      (void)SentencePieceTokenizer::load(dir.path());
      ADD_FAILURE() << "expected TokenizerLoadError mentioning " << needle;
    } catch (const TokenizerLoadError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  test::write_file(dir.path() / "tokenizer_config.json",
                   R"({"added_tokens_decoder": {"six hundred": {"content": "<sep>"}}})");
  expect_error("tokenizer_config.json: added_tokens_decoder key 'six hundred' is not a token id");
  std::filesystem::remove(dir.path() / "tokenizer_config.json");
  test::write_file(dir.path() / "added_tokens.json", R"(["<sep>", 603])");
  expect_error("added_tokens.json must be an object of {token: id}");
}

TEST_F(SentencePieceTokenizerTest, AModelFileThatIsADirectoryIsNamedSo) {
  TempDir dir("t5-dir-model");
  std::filesystem::create_directories(dir.path() / "spiece.model");
  try {
    SentencePieceTokenizer::load(dir.path());
    ADD_FAILURE() << "a directory loaded as spiece.model";
  } catch (const TokenizerLoadError& e) {
    EXPECT_NE(std::string(e.what()).find("spiece.model is not a regular file (a directory)"), std::string::npos)
        << e.what();  // it said "is empty (0 bytes): download it again"
  }
}

// Hugging Face's "first" prepend scheme (T5 with "legacy": false): the text after a special token
// gets no U+2581 of its own unless it starts with whitespace; the start of the input still does.
TEST_F(SentencePieceTokenizerTest, LegacyFalseGivesTextAfterASpecialTokenNoSpaceOfItsOwn) {
  TempDir dir("t5-legacy-false");
  std::filesystem::copy_file(test::t5_style_spm_dir() / "spiece.model", dir.path() / "spiece.model");
  test::write_file(dir.path() / "tokenizer_config.json", R"({"legacy": false})");
  const auto first = SentencePieceTokenizer::load(dir.path());
  const auto first_piece_after_eos = [](const SentencePieceTokenizer& tok, const std::string& text) {
    const auto ids = tok.encode(text);
    const auto eos = std::find(ids.begin(), ids.end(), 1);
    EXPECT_LT(eos + 1, ids.end() - 1) << text;  // something between it and the final EOS
    return tok.id_to_token(*(eos + 1));
  };
  const std::string space = "\xE2\x96\x81";
  EXPECT_EQ(first_piece_after_eos(*tok_, "</s>fox").rfind(space, 0), 0u);  // "always"
  EXPECT_EQ(first_piece_after_eos(*tok_, "the</s>fox").rfind(space, 0), 0u);
  EXPECT_NE(first_piece_after_eos(*first, "</s>fox").rfind(space, 0), 0u);
  EXPECT_NE(first_piece_after_eos(*first, "the</s>fox").rfind(space, 0), 0u);
  EXPECT_EQ(first_piece_after_eos(*first, "the</s> fox").rfind(space, 0), 0u);   // its own space stays
  EXPECT_EQ(first_piece_after_eos(*first, "the</s>\tfox").rfind(space, 0), 0u);  // whitespace of any kind
  // ... as the model's character map has it: T5's (nmt_nfkc) turns U+200B into a space and drops U+000B.
  const std::string zero_width_space = "\xE2\x80\x8B", vertical_tab = "\x0B";
  EXPECT_EQ(first_piece_after_eos(*first, "the</s>" + zero_width_space + "fox").rfind(space, 0), 0u);
  EXPECT_NE(first_piece_after_eos(*first, "the</s>" + vertical_tab + "fox").rfind(space, 0), 0u);
  EXPECT_EQ(first->encode("the</s> fox"), tok_->encode("the</s> fox"));
  EXPECT_EQ(first->decode(first->encode("the</s>fox")), "thefox");
  EXPECT_EQ(tok_->decode(tok_->encode("the</s>fox")), "the fox");
  // Text without special tokens, and the start of any input, are tokenized as before.
  test::TextGenerator gen(5);
  for (const auto& text : gen.texts(200)) EXPECT_EQ(first->encode(text), tok_->encode(text)) << text;

  test::write_file(dir.path() / "tokenizer_config.json", R"({"legacy": true})");
  EXPECT_EQ(SentencePieceTokenizer::load(dir.path())->encode("</s>fox"), tok_->encode("</s>fox"));
}

class SentencePieceParity : public SentencePieceTokenizerTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(SentencePieceParity, GivesPythonSentencePiecesIds) {
  const std::string python = test::python_with_module("sentencepiece");
  if (python.empty())
    GTEST_SKIP() << "python3 with the sentencepiece module not found (apt install python3-sentencepiece)";

  TempDir dir("spm-parity");
  const std::string scheme = GetParam();
  std::filesystem::copy_file(test::t5_style_spm_dir() / "spiece.model", dir.path() / "spiece.model");
  test::write_file(dir.path() / "tokenizer_config.json",
                   scheme == "first" ? R"({"legacy": false})" : R"({"legacy": true})");
  const auto tok = SentencePieceTokenizer::load(dir.path());
  std::vector<std::string> specials = {"</s>", "<pad>", "<unk>", "<extra_id_0>", "<extra_id_42>", "<extra_id_99>"};
  test::TextGenerator gen(2024, specials);
  const auto texts = gen.texts(3000);
  test::write_json_lines(dir.path() / "in.jsonl", texts);
  const std::string script = std::string(SRFORMER_SOURCE_DIR) + "/tests/tokenizer/spm_reference.py";
  const auto [rc, out] = test::run_command(python + " " + script + " " + (dir.path() / "spiece.model").string() +
                                           " 100 " + (dir.path() / "in.jsonl").string() + " " +
                                           (dir.path() / "out.jsonl").string() + " " + scheme + " 2>&1");
  ASSERT_EQ(rc, 0) << out;
  const auto expected = test::read_id_lines(dir.path() / "out.jsonl");
  ASSERT_EQ(expected.size(), texts.size());
  size_t mismatches = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    if (tok->encode(texts[i]) != expected[i]) {
      if (++mismatches <= 5) ADD_FAILURE() << "mismatch on " << nlohmann::json(texts[i]).dump();
    }
  }
  std::cout << "[ parity ] SentencePiece (" << scheme << ") vs python3-sentencepiece: " << texts.size() << " strings, "
            << mismatches << " mismatches\n";
  EXPECT_EQ(mismatches, 0u);
}

INSTANTIATE_TEST_SUITE_P(PrependSchemes, SentencePieceParity, ::testing::Values("always", "first"));

}  // namespace
}  // namespace srformer
