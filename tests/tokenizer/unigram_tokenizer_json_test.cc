// T5 checkpoints with only tokenizer.json: the Unigram model turned back into a SentencePiece model
// must give the ids of the spiece.model it was converted from. The tokenizer.json files are written
// by tests/tokenizer/spm_to_tokenizer_json.py (Hugging Face's layout, from python3-sentencepiece).
#include "model/tokenizer/unigram_tokenizer_json.h"

#include <gtest/gtest.h>

#include <functional>

#include "model/tokenizer/protobuf_wire.h"
#include "model/tokenizer/sentencepiece_tokenizer.h"
#include "model/tokenizer/tokenizer_error.h"
#include "tests/tokenizer/tokenizer_test_support.h"

namespace srformer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::load_error;
using test::TempDir;

fs::path demo_model_dir() { return fs::path(SRFORMER_SOURCE_DIR) / "models" / "debian-synopsis-t5"; }

// `tokenizer_json` written to its own directory `dir`, alone or with the T5-style spiece.model beside it.
fs::path tokenizer_json_dir(const fs::path& dir, const json& tokenizer_json, bool beside) {
  fs::create_directories(dir);
  test::write_file(dir / "tokenizer.json", tokenizer_json.dump());
  if (beside) fs::copy_file(test::t5_style_spm_dir() / "spiece.model", dir / "spiece.model");
  return dir;
}

// Writes <out>/tokenizer.json converted from <spm_dir>/spiece.model; false when python3-sentencepiece
// is missing.
bool write_tokenizer_json(const fs::path& spm_dir, const std::string& style, const fs::path& out) {
  const std::string python = test::python_with_module("sentencepiece");
  if (python.empty()) return false;
  fs::create_directories(out);
  const std::string script = std::string(SRFORMER_SOURCE_DIR) + "/tests/tokenizer/spm_to_tokenizer_json.py";
  const auto [rc, log] = test::run_command(python + " " + script + " " + (spm_dir / "spiece.model").string() + " 100 " +
                                           style + " " + (out / "tokenizer.json").string() + " 2>&1");
  EXPECT_EQ(rc, 0) << log;
  return rc == 0;
}

TEST(ProtobufWire, EncodesAsProtobufDoes) {
  std::string out;
  wire::put_int(out, 1, 150);  // the protobuf encoding guide's example: 08 96 01
  EXPECT_EQ(out, std::string("\x08\x96\x01", 3));
  out.clear();
  wire::put_int(out, 40, -1);  // negative int32: ten varint bytes after the two-byte tag
  EXPECT_EQ(out, std::string("\xC0\x02\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\x01", 12));
  out.clear();
  wire::put_bytes(out, 2, "testing");
  EXPECT_EQ(out, std::string("\x12\x07testing", 9));
  out.clear();
  wire::put_float(out, 2, 1.0f);
  EXPECT_EQ(out, std::string("\x15\x00\x00\x80\x3F", 5));
}

struct Source {
  std::string name;
  fs::path spm_dir;
};

class UnigramTokenizerJsonParity : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

// Both layouts Hugging Face has written, for a model with byte fallback (the tests' T5-style one)
// and one with the trainer's NFKC map and none (the shipped demo model's).
TEST_P(UnigramTokenizerJsonParity, GivesTheIdsOfTheSentencePieceModel) {
  const auto& [source, style] = GetParam();
  const fs::path spm_dir = source == "demo" ? demo_model_dir() : test::t5_style_spm_dir();
  TempDir dir("unigram-json");
  if (!write_tokenizer_json(spm_dir, style, dir.path()))
    GTEST_SKIP() << "python3 with the sentencepiece module not found (apt install python3-sentencepiece)";
  const auto from_json = load_tokenizer(dir.path());
  ASSERT_NE(dynamic_cast<const SentencePieceTokenizer*>(from_json.get()), nullptr);
  // "first" is what spiece.model with "legacy": false tokenizes as (sentencepiece_tokenizer_test.cc
  // checks that against python3-sentencepiece).
  TempDir legacy_false("unigram-json-legacy-false");
  fs::copy_file(spm_dir / "spiece.model", legacy_false.path() / "spiece.model");
  test::write_file(legacy_false.path() / "tokenizer_config.json", R"({"legacy": false})");
  const auto reference = SentencePieceTokenizer::load(style == "first" ? legacy_false.path() : spm_dir);
  EXPECT_EQ(from_json->vocab_size(), reference->vocab_size());
  EXPECT_EQ(dynamic_cast<const SentencePieceTokenizer&>(*from_json).extra_ids(), 100);
  EXPECT_EQ(from_json->eos_id(), reference->eos_id());
  EXPECT_EQ(from_json->pad_id(), reference->pad_id());
  EXPECT_EQ(from_json->bos_id(), reference->bos_id());
  for (int64_t id = 0; id < reference->vocab_size(); ++id) {
    ASSERT_EQ(from_json->id_to_token(id), reference->id_to_token(id)) << id;
    ASSERT_EQ(from_json->is_special(id), reference->is_special(id)) << id;
  }
  test::TextGenerator gen(99, {"</s>", "<pad>", "<unk>", "<extra_id_0>", "<extra_id_57>"});
  size_t mismatches = 0;
  for (const auto& text : gen.texts(1500)) {
    const auto ids = reference->encode(text);
    const bool same = from_json->encode(text) == ids && from_json->decode(ids) == reference->decode(ids) &&
                      from_json->decode(ids, false) == reference->decode(ids, false);
    if (!same && ++mismatches <= 5) ADD_FAILURE() << "differs on " << json(text).dump();
  }
  EXPECT_EQ(mismatches, 0u);
}

INSTANTIATE_TEST_SUITE_P(SourcesAndLayouts, UnigramTokenizerJsonParity,
                         ::testing::Combine(::testing::Values("t5_style", "demo"),
                                            ::testing::Values("current", "legacy", "first")),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

TEST(UnigramTokenizerJson, SpecialTokenNamesComeFromTheTokenizerConfig) {
  TempDir dir("unigram-json-names");
  if (!write_tokenizer_json(test::t5_style_spm_dir(), "current", dir.path()))
    GTEST_SKIP() << "python3 with the sentencepiece module not found (apt install python3-sentencepiece)";
  test::write_file(dir.path() / "tokenizer_config.json", R"({"eos_token": {"content": "<pad>"}, "pad_token": "</s>"})");
  const auto tok = load_tokenizer(dir.path());
  EXPECT_EQ(tok->eos_id(), 0);
  EXPECT_EQ(tok->pad_id(), 1);
  EXPECT_EQ(tok->encode("").back(), 0);
}

// With spiece.model beside it, tokenizer.json's prepend_scheme still decides (it is what Hugging Face's
// fast tokenizer runs), over tokenizer_config.json's "legacy".
TEST(UnigramTokenizerJson, ItsPrependSchemeDecidesForASpieceModelBesideIt) {
  TempDir dir("unigram-json-beside");
  if (!write_tokenizer_json(test::t5_style_spm_dir(), "first", dir.path() / "first"))
    GTEST_SKIP() << "python3 with the sentencepiece module not found (apt install python3-sentencepiece)";
  ASSERT_TRUE(write_tokenizer_json(test::t5_style_spm_dir(), "current", dir.path() / "always"));
  const auto plain = SentencePieceTokenizer::load(test::t5_style_spm_dir());
  const std::string text = "the</s>fox";
  const auto first_ids = load_tokenizer(dir.path() / "first")->encode(text);
  ASSERT_NE(first_ids, plain->encode(text));
  for (const std::string scheme : {"first", "always"}) {  // each with the other's "legacy"
    fs::copy_file(test::t5_style_spm_dir() / "spiece.model", dir.path() / scheme / "spiece.model");
    test::write_file(dir.path() / scheme / "tokenizer_config.json",
                     scheme == "first" ? R"({"legacy": true})" : R"({"legacy": false})");
    EXPECT_EQ(load_tokenizer(dir.path() / scheme)->encode(text), scheme == "first" ? first_ids : plain->encode(text))
        << scheme;
  }
}

// prepend_scheme "never" (older files: add_prefix_space false): Hugging Face's Metaspace puts no U+2581
// before the first word, and its decoder keeps the first token's U+2581 as a space ("▁the" gives " the"),
// where "always" and "first" drop it. With spiece.model beside tokenizer.json too, and streamed alike.
TEST(UnigramTokenizerJson, NeverPrependKeepsTheFirstTokensSpace) {
  TempDir dir("unigram-json-never");
  if (!write_tokenizer_json(test::t5_style_spm_dir(), "current", dir.path() / "current"))
    GTEST_SKIP() << "python3 with the sentencepiece module not found (apt install python3-sentencepiece)";
  json never = json::parse(test::read_file(dir.path() / "current" / "tokenizer.json"));
  never["pre_tokenizer"]["prepend_scheme"] = "never";
  never["decoder"]["prepend_scheme"] = "never";
  json legacy = never;
  for (const char* field : {"pre_tokenizer", "decoder"}) {
    legacy[field].erase("prepend_scheme");
    legacy[field]["add_prefix_space"] = false;
  }
  const auto plain = SentencePieceTokenizer::load(test::t5_style_spm_dir());
  const TokenIds word = {plain->encode("the").front()};
  ASSERT_EQ(plain->id_to_token(word.front()), "\xE2\x96\x81the");
  ASSERT_EQ(plain->decode(word), "the");
  for (const auto& [name, tj] : {std::pair{"never", never}, std::pair{"legacy", legacy}}) {
    for (const bool beside : {false, true}) {
      const fs::path here =
          tokenizer_json_dir(dir.path() / (std::string(name) + (beside ? "-beside" : "")), tj, beside);
      SCOPED_TRACE(here.filename().string());
      const auto tok = load_tokenizer(here);
      EXPECT_EQ(tok->decode(word), " the");
      const auto ids = tok->encode("the fox");
      EXPECT_NE(tok->id_to_token(ids.front()).rfind("\xE2\x96\x81", 0), 0u) << tok->id_to_token(ids.front());
      EXPECT_EQ(tok->decode(ids), "the fox");
      // Whitespace the text starts with is its "▁" (Hugging Face: " x" gives "▁x"), also after a special token.
      EXPECT_EQ(tok->encode(" the fox"), plain->encode("the fox"));
      EXPECT_EQ(tok->encode("  the fox").front(), word.front());
      auto after_special = tok->encode("the</s>");
      after_special.pop_back();  // the EOS appended
      const auto fox = plain->encode("fox");
      after_special.insert(after_special.end(), fox.begin(), fox.end());
      EXPECT_EQ(tok->encode("the</s> fox"), after_special);
      TokenIds spaced = plain->encode("the fox  jumps");
      spaced.insert(spaced.begin(), word.front());
      IncrementalDetokenizer stream(*tok, true);
      std::string streamed;
      for (const int64_t id : spaced) streamed += stream.push(id);
      streamed += stream.finish();
      EXPECT_EQ(streamed, tok->decode(spaced));
      EXPECT_EQ(streamed.front(), ' ');
    }
  }
}

// tokenizers 0.14-0.18 wrote prepend_scheme "always" beside every add_prefix_space false and prepended nothing
// then (its decoder kept the first token's space); 0.19 on refuse the pair unless the scheme is "never". Read
// as "always", the first word got a U+2581 the file's tokenizer never gave it.
TEST(UnigramTokenizerJson, AddPrefixSpaceFalseWinsOverPrependScheme) {
  TempDir dir("unigram-json-both-keys");
  if (!write_tokenizer_json(test::t5_style_spm_dir(), "current", dir.path() / "current"))
    GTEST_SKIP() << "python3 with the sentencepiece module not found (apt install python3-sentencepiece)";
  json both = json::parse(test::read_file(dir.path() / "current" / "tokenizer.json"));
  for (const char* field : {"pre_tokenizer", "decoder"}) {
    both[field]["add_prefix_space"] = false;
    both[field]["prepend_scheme"] = "always";
  }
  const auto plain = SentencePieceTokenizer::load(test::t5_style_spm_dir());
  const TokenIds word = {plain->encode("the").front()};
  ASSERT_EQ(plain->id_to_token(word.front()), "\xE2\x96\x81the");
  for (const bool beside : {false, true}) {
    const fs::path here = tokenizer_json_dir(dir.path() / (beside ? "beside" : "alone"), both, beside);
    SCOPED_TRACE(here.filename().string());
    const auto tok = load_tokenizer(here);
    EXPECT_EQ(tok->decode(word), " the");
    const auto ids = tok->encode("the fox");
    EXPECT_NE(tok->id_to_token(ids.front()).rfind("\xE2\x96\x81", 0), 0u) << tok->id_to_token(ids.front());
  }
}

// Hugging Face's Metaspace decoder drops every U+2581 of the first token, not just its first: a first "▁▁"
// gives "" (SentencePiece's decode gave " "), a first "a▁b" gives "ab"; every later token's are spaces.
// Checked against tokenizers 0.22 (hf_reference.js): [▁▁] "", [▁▁, ▁the] " the", [a▁b, ▁▁] "ab  ",
// [<pad>, ▁▁, a▁b] "a b" skipping specials, "<pad>  a b" keeping them.
TEST(UnigramTokenizerJson, FirstTokenLosesEveryMetaspace) {
  TempDir dir("unigram-json-first-token");
  if (!write_tokenizer_json(test::t5_style_spm_dir(), "current", dir.path()))
    GTEST_SKIP() << "python3 with the sentencepiece module not found (apt install python3-sentencepiece)";
  json tj = json::parse(test::read_file(dir.path() / "tokenizer.json"));
  const int64_t spaces = static_cast<int64_t>(tj["model"]["vocab"].size()) / 2, inner = spaces + 1;
  const std::string meta = "\xE2\x96\x81";  // U+2581
  tj["model"]["vocab"][spaces][0] = meta + meta;
  tj["model"]["vocab"][inner][0] = "a" + meta + "b";
  test::write_file(dir.path() / "tokenizer.json", tj.dump());
  const auto tok = load_tokenizer(dir.path());
  ASSERT_EQ(tok->id_to_token(spaces), meta + meta);
  const int64_t the = tok->encode("the").front(), pad = *tok->pad_id();
  ASSERT_EQ(tok->id_to_token(the), "\xE2\x96\x81the");
  EXPECT_EQ(tok->decode_raw({spaces}), "");
  EXPECT_EQ(tok->decode_raw({spaces, the}), " the");
  EXPECT_EQ(tok->decode_raw({inner}), "ab");
  EXPECT_EQ(tok->decode_raw({inner, spaces}), "ab  ");
  EXPECT_EQ(tok->decode_raw({the, spaces, inner}), "the  a b");
  EXPECT_EQ(tok->decode_raw({pad, spaces, inner}, true), "a b");
  EXPECT_EQ(tok->decode_raw({pad, spaces, inner}, false), "<pad>  a b");
  const TokenIds streamed_ids = {spaces, the, spaces, inner};
  IncrementalDetokenizer stream(*tok, true);
  std::string streamed;
  for (const int64_t id : streamed_ids) streamed += stream.push(id);
  streamed += stream.finish();
  EXPECT_EQ(streamed, tok->decode(streamed_ids));
}

// transformers converted spiece.model with a normalizer that strips nothing (Precompiled, Replace " {2,}")
// before it added Strip: Hugging Face's Metaspace then gives whitespace at a text's end, and before a
// special token, a "▁" token of its own ("x " is "▁x", "▁"), where SentencePiece drops it. With Strip, or
// with WhitespaceSplit before the Metaspace (the oldest files), there is none.
TEST(UnigramTokenizerJson, TrailingWhitespaceIsAPieceWhereNoNormalizerStripsIt) {
  TempDir dir("unigram-json-trailing");
  if (!write_tokenizer_json(test::t5_style_spm_dir(), "unstripped", dir.path() / "unstripped"))
    GTEST_SKIP() << "python3 with the sentencepiece module not found (apt install python3-sentencepiece)";
  ASSERT_TRUE(write_tokenizer_json(test::t5_style_spm_dir(), "current", dir.path() / "current"));
  ASSERT_TRUE(write_tokenizer_json(test::t5_style_spm_dir(), "legacy", dir.path() / "legacy"));
  const auto plain = SentencePieceTokenizer::load(test::t5_style_spm_dir());
  const int64_t space = *plain->token_to_id("\xE2\x96\x81"), eos = *plain->eos_id();
  const auto with = [&](const std::string& text, const std::vector<size_t>& spaces_before) {
    // plain's ids of `text` with "▁" inserted before the ids at those positions
    auto ids = plain->encode(text);
    for (auto at = spaces_before.rbegin(); at != spaces_before.rend(); ++at) ids.insert(ids.begin() + *at, space);
    return ids;
  };
  for (const bool beside : {false, true}) {
    if (beside) fs::copy_file(test::t5_style_spm_dir() / "spiece.model", dir.path() / "unstripped" / "spiece.model");
    SCOPED_TRACE(beside ? "beside spiece.model" : "tokenizer.json alone");
    const auto tok = load_tokenizer(dir.path() / "unstripped");
    const auto fox = plain->encode("the fox");
    EXPECT_EQ(tok->encode("the fox"), fox);
    EXPECT_EQ(tok->encode("the fox "), with("the fox", {fox.size() - 1}));
    EXPECT_EQ(tok->encode("the fox  \n "), with("the fox", {fox.size() - 1}));
    EXPECT_EQ(tok->encode(" "), (TokenIds{space, eos}));
    EXPECT_EQ(tok->encode("  the fox"), fox) << "leading whitespace gives none";
    const auto before_eos = tok->encode("the </s> fox");
    const auto the = plain->encode("the").front();
    ASSERT_GE(before_eos.size(), 4u);
    EXPECT_EQ((TokenIds{before_eos[0], before_eos[1], before_eos[2]}), (TokenIds{the, space, eos}));
  }
  for (const char* style : {"current", "legacy"}) {
    const auto tok = load_tokenizer(dir.path() / style);
    EXPECT_EQ(tok->encode("the fox "), plain->encode("the fox")) << style;
    EXPECT_EQ(tok->encode(" "), plain->encode(" ")) << style;
  }
}

TEST(UnigramTokenizerJson, WhatSentencePieceCannotExpressIsALoadErrorNamingIt) {
  TempDir dir("unigram-json-bad");
  if (!write_tokenizer_json(test::t5_style_spm_dir(), "current", dir.path() / "good"))
    GTEST_SKIP() << "python3 with the sentencepiece module not found (apt install python3-sentencepiece)";
  const json good = json::parse(test::read_file(dir.path() / "good" / "tokenizer.json"));
  const auto error_with = [&](const std::function<void(json&)>& edit) {
    json tj = good;
    edit(tj);
    fs::create_directories(dir.path() / "bad");
    test::write_file(dir.path() / "bad" / "tokenizer.json", tj.dump());
    return load_error(dir.path() / "bad");
  };
  const auto expect_in = [](const std::string& message, const std::string& needle) {
    EXPECT_NE(message.find(needle), std::string::npos) << message;
  };
  const auto lowercase = error_with([](json& tj) { tj["normalizer"] = {{"type", "Lowercase"}}; });
  expect_in(lowercase, "\"Lowercase\" normalizer has no SentencePiece equivalent");
  expect_in(lowercase, "copy spiece.model");
  expect_in(error_with([](json& tj) {
              tj["normalizer"]["normalizers"].back()["pattern"] = {{"String", "a"}};  // the Replace
            }),
            "has no SentencePiece equivalent");
  expect_in(error_with([](json& tj) { tj["normalizer"]["normalizers"][0]["precompiled_charsmap"] = "AB%D"; }),
            "precompiled_charsmap is not valid base64");
  expect_in(error_with([](json& tj) {
              tj["pre_tokenizer"] = {{"type", "ByteLevel"}};
            }),
            "\"ByteLevel\" pre-tokenizer has no SentencePiece equivalent");
  expect_in(error_with([](json& tj) { tj["pre_tokenizer"]["replacement"] = "_"; }), "not U+2581");
  expect_in(error_with([](json& tj) { tj["pre_tokenizer"] = nullptr; }), "without a Metaspace pre-tokenizer");
  expect_in(error_with([](json& tj) { tj["pre_tokenizer"]["prepend_scheme"] = "sometimes"; }),
            "prepend_scheme is \"sometimes\"");
  expect_in(error_with([](json& tj) {
              tj["decoder"] = {{"type", "WordPiece"}, {"prefix", "##"}};
            }),
            "the \"WordPiece\" decoder has no SentencePiece equivalent");
  expect_in(error_with([](json& tj) {
              tj["decoder"] = {{"type", "Sequence"}, {"decoders", {{{"type", "Replace"}}, tj["decoder"]}}};
            }),
            "the \"Sequence\" decoder has no SentencePiece equivalent");
  expect_in(error_with([](json& tj) { tj["model"]["unk_id"] = nullptr; }), "model.unk_id must name a piece");
  expect_in(error_with([](json& tj) { tj["model"]["vocab"][5] = {1, 2}; }), "model.vocab entry 5 must be");
  expect_in(error_with([](json& tj) { tj["model"]["vocab"] = json::array(); }), "model.vocab must be a non-empty");
  expect_in(error_with([](json& tj) {
              tj["added_tokens"].push_back({{"id", 5}, {"content", "<new>"}});
            }),
            "the added token \"<new>\" (id 5) is not the vocabulary's piece");
  // What the library itself refuses comes through with the file named.
  expect_in(error_with([](json& tj) { tj["model"]["vocab"][10][0] = tj["model"]["vocab"][11][0]; }),
            "cannot load the SentencePiece model of " + (dir.path() / "bad" / "tokenizer.json").string());
}

}  // namespace
}  // namespace srformer
