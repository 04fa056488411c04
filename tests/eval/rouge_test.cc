// ROUGE (model/eval/rouge.h): hand-checked examples, edge cases, the Porter stemmer against NLTK
// (python3-nltk), the bootstrap aggregate, and parity with an independent implementation (npm
// js-rouge, driven by rouge_reference.js) on generated pairs.
#include "model/eval/rouge.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/temp_dir.h"

namespace srformer::eval {
namespace {

namespace fs = std::filesystem;
using srformer::testing::TempDir;

constexpr double kEps = 1e-12;

std::pair<int, std::string> run_command(const std::string& cmd) {
  std::string out;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return {-1, ""};
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

void expect_score(const Score& s, double p, double r, double f, const char* what) {
  EXPECT_NEAR(s.precision, p, kEps) << what;
  EXPECT_NEAR(s.recall, r, kEps) << what;
  EXPECT_NEAR(s.fmeasure, f, kEps) << what;
}

// ---------------------------------------------------------------------------------------------
// Tokenization

TEST(RougeTokenize, LowerCasesAndSplitsOnNonAlphanumerics) {
  EXPECT_EQ(tokenize("The quick-brown FOX, jumps!! (x2)\n\tover_it"),
            (Tokens{"the", "quick", "brown", "fox", "jumps", "x2", "over", "it"}));
  EXPECT_EQ(tokenize("  ...  "), Tokens{});
  EXPECT_EQ(tokenize(""), Tokens{});
  EXPECT_EQ(tokenize("3.14 e-mail"), (Tokens{"3", "14", "e", "mail"}));
}

TEST(RougeTokenize, NonAsciiSeparatesTokensExceptPythonsTwoAsciiLowerCases) {
  // "Café" -> "caf" (é is removed); "naïve" -> "na" "ve"; CJK and Cyrillic vanish entirely.
  EXPECT_EQ(tokenize("Café naïve 日本語 Привет"), (Tokens{"caf", "na", "ve"}));
  EXPECT_EQ(tokenize("日本語 ÄÖÜ ☃"), Tokens{});
  // Python: "İ".lower() == "i\u0307" (so "İstanbul" -> "i stanbul"), "\u212a".lower() == "k".
  EXPECT_EQ(tokenize("İstanbul 5\u212a"), (Tokens{"i", "stanbul", "5k"}));
  // Invalid UTF-8 bytes are separators too.
  EXPECT_EQ(tokenize(std::string("ab\xff\xfe"
                                 "cd")),
            (Tokens{"ab", "cd"}));
}

TEST(RougeTokenize, StemsOnlyTokensLongerThanThreeCharacters) {
  // "does" (4) -> "doe"; "was" (3) is left alone although Porter would strip its s.
  EXPECT_EQ(tokenize("Cats were running, was does", true), (Tokens{"cat", "were", "run", "was", "doe"}));
  EXPECT_EQ(tokenize("Cats were running, was does", false), (Tokens{"cats", "were", "running", "was", "does"}));
}

TEST(RougeTokenize, SentencesAreNonEmptyLines) {
  const auto s = tokenize_sentences("First one.\n\nSecond, two\n \n");
  ASSERT_EQ(s.size(), 3u);  // the " " line is kept (as rouge-score does) but has no tokens
  EXPECT_EQ(s[0], (Tokens{"first", "one"}));
  EXPECT_EQ(s[1], (Tokens{"second", "two"}));
  EXPECT_TRUE(s[2].empty());
}

// ---------------------------------------------------------------------------------------------
// Porter stemmer

TEST(PorterStemmer, KnownStems) {
  // Expected values printed by NLTK 3.8's PorterStemmer() (default mode NLTK_EXTENSIONS).
  const std::vector<std::pair<const char*, const char*>> cases = {
      {"caresses", "caress"},
      {"ponies", "poni"},
      {"ties", "tie"},
      {"cats", "cat"},
      {"feed", "feed"},
      {"agreed", "agre"},
      {"plastered", "plaster"},
      {"motoring", "motor"},
      {"conflated", "conflat"},
      {"running", "run"},
      {"generously", "gener"},
      {"happy", "happi"},
      {"enjoy", "enjoy"},
      {"skies", "sky"},
      {"dying", "die"},
      {"news", "news"},
      {"relational", "relat"},
      {"conditional", "condit"},
      {"rational", "ration"},
      {"digitizer", "digit"},
      {"radically", "radic"},
      {"differently", "differ"},
      {"analogously", "analog"},
      {"vietnamization", "vietnam"},
      {"operator", "oper"},
      {"feudalism", "feudal"},
      {"decisiveness", "decis"},
      {"hopefulness", "hope"},
      {"callousness", "callous"},
      {"formality", "formal"},
      {"sensitivity", "sensit"},
      {"sensibility", "sensibl"},
      {"archaeology", "archaeolog"},
      {"geology", "geolog"},
      {"triplicate", "triplic"},
      {"formative", "form"},
      {"formalize", "formal"},
      {"electricity", "electr"},
      {"electrical", "electr"},
      {"hopeful", "hope"},
      {"goodness", "good"},
      {"revival", "reviv"},
      {"allowance", "allow"},
      {"inference", "infer"},
      {"airliner", "airlin"},
      {"gyroscopic", "gyroscop"},
      {"adjustable", "adjust"},
      {"defensible", "defens"},
      {"irritant", "irrit"},
      {"replacement", "replac"},
      {"adjustment", "adjust"},
      {"dependent", "depend"},
      {"adoption", "adopt"},
      {"homologous", "homolog"},
      {"communism", "commun"},
      {"activate", "activ"},
      {"angularity", "angular"},
      {"effective", "effect"},
      {"bowdlerize", "bowdler"},
      {"probate", "probat"},
      {"rate", "rate"},
      {"cease", "ceas"},
      {"controlling", "control"},
      {"rolling", "roll"},
      {"hopping", "hop"},
      {"tanned", "tan"},
      {"falling", "fall"},
      {"hissing", "hiss"},
      {"fizzed", "fizz"},
      {"failing", "fail"},
      {"filing", "file"},
      {"spied", "spi"},
      {"died", "die"},
      {"flies", "fli"},
      {"proceed", "proceed"},
      {"succeeded", "succeed"},
      {"meetings", "meet"},
  };
  for (const auto& [word, stem] : cases) EXPECT_EQ(porter_stem(word), stem) << word;
}

// Random words built from syllables and English suffixes, so every rule's branches are reached.
std::vector<std::string> generated_words(size_t count, uint64_t seed) {
  static const std::vector<std::string> kOnsets = {"",  "b", "c", "d", "f", "g",  "h",  "l",  "m",  "n",  "p", "r",
                                                   "s", "t", "v", "w", "y", "st", "tr", "pl", "sk", "ch", "sh"};
  static const std::vector<std::string> kVowels = {"a", "e", "i", "o", "u", "y", "ee", "oa", "ou", "ie"};
  static const std::vector<std::string> kSuffixes = {
      "",      "s",      "es",      "ies",    "sses",  "ss",    "ed",      "eed",     "ied",     "ing",
      "ly",    "y",      "ational", "tional", "enci",  "anci",  "izer",    "bli",     "alli",    "entli",
      "eli",   "ousli",  "ization", "ation",  "ator",  "alism", "iveness", "fulness", "ousness", "aliti",
      "iviti", "biliti", "fulli",   "logi",   "icate", "ative", "alize",   "iciti",   "ical",    "ful",
      "ness",  "al",     "ance",    "ence",   "er",    "ic",    "able",    "ible",    "ant",     "ement",
      "ment",  "ent",    "sion",    "tion",   "ion",   "ou",    "ism",     "ate",     "iti",     "ous",
      "ive",   "ize",    "e",       "ll",     "at",    "bl",    "iz"};
  std::mt19937_64 rng(seed);
  auto pick = [&rng](const std::vector<std::string>& v) { return v[rng() % v.size()]; };
  std::vector<std::string> words;
  for (size_t i = 0; i < count; ++i) {
    std::string w;
    const int syllables = 1 + static_cast<int>(rng() % 3);
    for (int s = 0; s < syllables; ++s) w += pick(kOnsets) + pick(kVowels) + (rng() % 3 == 0 ? pick(kOnsets) : "");
    w += pick(kSuffixes);
    if (rng() % 5 == 0) w += pick(kSuffixes);
    if (w.size() > 3) words.push_back(w);
  }
  return words;
}

TEST(PorterStemmer, MatchesNltkOnManyWords) {
  if (run_command("/usr/bin/python3 -c 'from nltk.stem import porter' 2>/dev/null").first != 0) {
    GTEST_SKIP() << "python3 with nltk not found (apt install python3-nltk)";
  }
  TempDir dir("porter");
  std::vector<std::string> words = generated_words(40000, 7);
  std::ifstream dict("/usr/share/dict/words");
  for (std::string line; std::getline(dict, line);) {
    std::string lower;
    bool ascii = true;
    for (char c : line) {
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      if (c < 'a' || c > 'z') ascii = false;
      lower.push_back(c);
    }
    if (ascii && lower.size() > 3) words.push_back(lower);
  }
  {
    std::ofstream f(dir.path() / "words.txt");
    for (const auto& w : words) f << w << '\n';
  }
  const auto [rc, out] =
      run_command("/usr/bin/python3 " + std::string(SRFORMER_SOURCE_DIR) + "/tests/eval/nltk_porter_reference.py " +
                  (dir.path() / "words.txt").string() + " " + (dir.path() / "stems.txt").string() + " 2>&1");
  ASSERT_EQ(rc, 0) << out;
  std::ifstream f(dir.path() / "stems.txt");
  size_t i = 0;
  size_t mismatches = 0;
  for (std::string stem; std::getline(f, stem); ++i) {
    ASSERT_LT(i, words.size());
    const std::string ours = porter_stem(words[i]);
    if (ours != stem && ++mismatches <= 10) ADD_FAILURE() << words[i] << ": nltk " << stem << ", ours " << ours;
  }
  EXPECT_EQ(i, words.size());
  std::cout << "[ parity ] Porter stemmer vs NLTK: " << words.size() << " words, " << mismatches << " mismatches\n";
  EXPECT_EQ(mismatches, 0u);
}

// ---------------------------------------------------------------------------------------------
// Hand-checked scores

TEST(Rouge, HandCheckedSentence) {
  // reference: the quick brown fox jumps over the lazy dog            (9 tokens, 8 bigrams)
  // prediction: the quick brown dog jumps on the log                   (8 tokens, 7 bigrams)
  // ROUGE-1: common unigrams with clipping: the x2, quick, brown, dog, jumps = 6
  //   P = 6/8, R = 6/9, F = 2PR/(P+R) = 12/17
  // ROUGE-2: common bigrams: "the quick", "quick brown" = 2; P = 2/7, R = 2/8, F = 4/15
  // ROUGE-L: LCS = the quick brown jumps the = 5; P = 5/8, R = 5/9, F = 10/17
  // ROUGE-Lsum: one sentence each, so equal to ROUGE-L.
  const auto s = score_pair("The quick brown fox jumps over the lazy dog", "The quick brown dog jumps on the log.");
  expect_score(s[RougeType::kRouge1], 6.0 / 8, 6.0 / 9, 12.0 / 17, "rouge1");
  expect_score(s[RougeType::kRouge2], 2.0 / 7, 2.0 / 8, 4.0 / 15, "rouge2");
  expect_score(s[RougeType::kRougeL], 5.0 / 8, 5.0 / 9, 10.0 / 17, "rougeL");
  expect_score(s[RougeType::kRougeLsum], 5.0 / 8, 5.0 / 9, 10.0 / 17, "rougeLsum");
}

TEST(Rouge, StemmingOnAndOff) {
  // reference "The cats are running" / prediction "A cat runs".
  // Without stemming nothing matches. With stemming (only tokens of more than 3 characters):
  // cats -> cat, running -> run, runs -> run: reference [the cat are run], prediction [a cat run]:
  // ROUGE-1 hits cat, run = 2: P = 2/3, R = 2/4, F = 4/7; ROUGE-2 "cat run" vs "cat are", "are run": 0;
  // ROUGE-L: LCS cat run = 2: as ROUGE-1.
  const auto off = score_pair("The cats are running", "A cat runs", {false});
  for (RougeType t : kRougeTypes) expect_score(off[t], 0, 0, 0, rouge_type_name(t));
  const auto on = score_pair("The cats are running", "A cat runs", {true});
  expect_score(on[RougeType::kRouge1], 2.0 / 3, 2.0 / 4, 4.0 / 7, "rouge1");
  expect_score(on[RougeType::kRouge2], 0, 0, 0, "rouge2");
  expect_score(on[RougeType::kRougeL], 2.0 / 3, 2.0 / 4, 4.0 / 7, "rougeL");
}

TEST(Rouge, LsumUnionLcs) {
  // Lin (2004) §3.2's example: reference sentence r = w1 w2 w3 w4 w5, prediction sentences
  // c1 = w1 w2 w6 w7 w8 and c2 = w1 w3 w8 w9 w5. LCS(r, c1) = w1 w2, LCS(r, c2) = w1 w3 w5, union =
  // w1 w2 w3 w5: 4 hits; R = 4/5, P = 4/10, F = 2(.8)(.4)/1.2 = 8/15.
  const auto s = score_pair("w1 w2 w3 w4 w5", "w1 w2 w6 w7 w8\nw1 w3 w8 w9 w5");
  expect_score(s[RougeType::kRougeLsum], 4.0 / 10, 4.0 / 5, 8.0 / 15, "rougeLsum");
}

TEST(Rouge, LsumSentenceOrderDoesNotMatterButLDoes) {
  // reference "a b\nc d", prediction "c d\na b".
  // ROUGE-L over [a b c d] vs [c d a b]: LCS = 2 -> P = R = F = 1/2.
  // ROUGE-Lsum: "a b" is matched whole by the second prediction sentence, "c d" by the first: 4 hits,
  // P = R = F = 1. ROUGE-2: bigrams ab, bc, cd vs cd, da, ab: 2 hits of 3 -> 2/3.
  const auto s = score_pair("a b\nc d", "c d\na b");
  expect_score(s[RougeType::kRougeL], 0.5, 0.5, 0.5, "rougeL");
  expect_score(s[RougeType::kRougeLsum], 1, 1, 1, "rougeLsum");
  expect_score(s[RougeType::kRouge2], 2.0 / 3, 2.0 / 3, 2.0 / 3, "rouge2");
}

TEST(Rouge, LsumClipsRepeatedMatches) {
  // reference "x y\nx z", prediction "x": both reference sentences' LCS contain x, but the prediction
  // has one x, so only 1 hit: P = 1/1, R = 1/4, F = 2(.25)/1.25 = 0.4 (not P = 2).
  const auto s = score_pair("x y\nx z", "x");
  expect_score(s[RougeType::kRougeLsum], 1.0, 0.25, 0.4, "rougeLsum");
  // ROUGE-N clips too: reference "the the the", prediction "the": P = 1, R = 1/3, F = 0.5.
  expect_score(score_pair("the the the", "the")[RougeType::kRouge1], 1.0, 1.0 / 3, 0.5, "rouge1 clipping");
}

TEST(Rouge, EdgeCases) {
  const std::vector<std::pair<std::string, std::string>> zero = {
      {"", "something here"},                    // empty reference
      {"something here", ""},                    // empty prediction
      {"", ""},                                  // both empty
      {"alpha beta gamma", "delta epsilon"},     // disjoint
      {"日本語のテキスト", "日本語のテキスト"},  // identical but Unicode-only: no tokens at all
      {"!!! ...", "!!! ..."},                    // punctuation only
  };
  for (const auto& [ref, pred] : zero) {
    const auto s = score_pair(ref, pred, {true});
    for (RougeType t : kRougeTypes) expect_score(s[t], 0, 0, 0, (ref + " | " + pred).c_str());
  }
  // Identical (after normalisation): every score is 1.
  const auto same = score_pair("The Same text, twice.\nSecond line!", "the same TEXT twice\nsecond line");
  for (RougeType t : kRougeTypes) expect_score(same[t], 1, 1, 1, rouge_type_name(t));
  // A single identical word: ROUGE-2 has no bigram on either side, so 0 (as rouge-score).
  const auto one = score_pair("word", "word");
  expect_score(one[RougeType::kRouge1], 1, 1, 1, "rouge1");
  expect_score(one[RougeType::kRouge2], 0, 0, 0, "rouge2");
}

TEST(Rouge, RougeNRejectsNonPositiveN) { EXPECT_THROW(rouge_n({"a"}, {"a"}, 0), std::invalid_argument); }

// ---------------------------------------------------------------------------------------------
// Corpus aggregation

std::vector<std::string> generated_texts(size_t count, uint64_t seed, bool messy);

TEST(RougeCorpus, BootstrapIntervalContainsMeanAndIsReproducible) {
  const auto refs = generated_texts(200, 11, false);
  auto preds = generated_texts(200, 12, false);
  for (size_t i = 0; i < preds.size(); i += 2) preds[i] = refs[i].substr(0, refs[i].size() / 2) + " " + preds[i];
  const auto a = score_corpus(preds, refs, {}, {1000, 0.95, 42});
  const auto b = score_corpus(preds, refs, {}, {1000, 0.95, 42});
  const auto c = score_corpus(preds, refs, {}, {1000, 0.95, 43});
  ASSERT_EQ(a.per_pair.size(), 200u);
  for (RougeType t : kRougeTypes) {
    const auto& ag = a[t];
    const double mean = a.mean[t].fmeasure;
    EXPECT_LT(ag.fmeasure.low, mean) << rouge_type_name(t);
    EXPECT_GT(ag.fmeasure.high, mean) << rouge_type_name(t);
    EXPECT_LE(ag.fmeasure.low, ag.fmeasure.mid);
    EXPECT_LE(ag.fmeasure.mid, ag.fmeasure.high);
    // The bootstrap median of the means sits near the mean (within a standard error or so).
    EXPECT_NEAR(ag.fmeasure.mid, mean, (ag.fmeasure.high - ag.fmeasure.low) / 2);
    EXPECT_LE(ag.precision.low, a.mean[t].precision);
    EXPECT_GE(ag.recall.high, a.mean[t].recall);
    // Same seed: bit-identical; another seed: a different interval.
    EXPECT_EQ(ag.fmeasure.low, b[t].fmeasure.low);
    EXPECT_EQ(ag.fmeasure.mid, b[t].fmeasure.mid);
    EXPECT_EQ(ag.fmeasure.high, b[t].fmeasure.high);
    EXPECT_NE(ag.fmeasure.low, c[t].fmeasure.low);
  }
  std::cout << "[ rouge ] 200 pairs: rouge1 F " << a.mean[RougeType::kRouge1].fmeasure << " ["
            << a[RougeType::kRouge1].fmeasure.low << ", " << a[RougeType::kRouge1].fmeasure.high << "]\n";
}

TEST(RougeCorpus, HandCheckedPercentiles) {
  // Two pairs with F 1 and 0, one resample of size 2 is one of {1,1}, {1,0}, {0,1}, {0,0}: every
  // resampled mean is 0, 0.5 or 1, so low/mid/high lie in [0, 1] and mid is one of those or between.
  // With a single pair every resample is that pair: low = mid = high = its score.
  const auto one = score_corpus({"a b c"}, {"a b d"}, {}, {100, 0.95, 1});
  // a b c vs a b d: rouge1 2/3 each way.
  EXPECT_NEAR(one[RougeType::kRouge1].fmeasure.low, 2.0 / 3, kEps);
  EXPECT_NEAR(one[RougeType::kRouge1].fmeasure.mid, 2.0 / 3, kEps);
  EXPECT_NEAR(one[RougeType::kRouge1].fmeasure.high, 2.0 / 3, kEps);
  const auto two = score_corpus({"a", "b"}, {"a", "c"}, {}, {1000, 0.95, 1});
  EXPECT_NEAR(two.mean[RougeType::kRouge1].fmeasure, 0.5, kEps);
  EXPECT_NEAR(two[RougeType::kRouge1].fmeasure.low, 0.0, kEps);   // P(mean 0) = 1/4 > 2.5%
  EXPECT_NEAR(two[RougeType::kRouge1].fmeasure.mid, 0.5, kEps);   // P(mean 0.5) = 1/2 covers the median
  EXPECT_NEAR(two[RougeType::kRouge1].fmeasure.high, 1.0, kEps);  // P(mean 1) = 1/4 > 2.5%
}

TEST(RougeCorpus, EmptyAndMismatchedInput) {
  const auto empty = score_corpus({}, {});
  EXPECT_TRUE(empty.per_pair.empty());
  EXPECT_EQ(empty[RougeType::kRougeL].fmeasure.high, 0.0);
  EXPECT_THROW(score_corpus({"a"}, {}), std::invalid_argument);
  EXPECT_THROW(bootstrap_aggregate({RougeScores{}}, {0, 0.95, 0}), std::invalid_argument);
}

// ---------------------------------------------------------------------------------------------
// Parity with npm js-rouge

// Texts over a small vocabulary (so pairs overlap, with repeats), mixed case, punctuation, digits,
// newlines (sentences for ROUGE-Lsum) and, when `messy`, non-ASCII words, blank lines and empty texts.
std::vector<std::string> generated_texts(size_t count, uint64_t seed, bool messy) {
  static const std::vector<std::string> kWords = {
      "the",     "a",     "of",      "package",  "library",      "tool",    "for",           "and",
      "to",      "files", "data",    "server",   "client",       "python",  "module",        "support",
      "GNU",     "Linux", "network", "x11",      "v2",           "font",    "documentation", "plugin",
      "is",      "it",    "this",    "provides", "command-line", "utility", "development",   "headers",
      "runtime", "shared"};
  static const std::vector<std::string> kMessy = {"Café", "naïve", "日本語", "İstanbul", "\u212a", "—", "é", "Ω"};
  static const std::vector<std::string> kSeparators = {" ", " ", " ", " ", ", ", ". ", "; ", " (", ") ", "-", "\n"};
  std::mt19937_64 rng(seed);
  std::vector<std::string> out;
  for (size_t i = 0; i < count; ++i) {
    if (messy && rng() % 40 == 0) {
      out.push_back(rng() % 2 ? "" : " \n ");
      continue;
    }
    const size_t n = 1 + rng() % 40;
    std::string text;
    for (size_t k = 0; k < n; ++k) {
      std::string w = (messy && rng() % 15 == 0) ? kMessy[rng() % kMessy.size()] : kWords[rng() % kWords.size()];
      if (rng() % 6 == 0 && !w.empty() && w[0] >= 'a' && w[0] <= 'z') w[0] = static_cast<char>(w[0] - 'a' + 'A');
      text += w;
      if (k + 1 < n) text += kSeparators[rng() % kSeparators.size()];
      if (messy && rng() % 30 == 0) text += "\n\n";
    }
    out.push_back(text);
  }
  return out;
}

// A prediction made from the reference: words dropped, swapped, replaced and lines rejoined, so the
// scores cover the whole range rather than clustering near zero.
std::string perturb(const std::string& ref, const std::string& noise, std::mt19937_64& rng) {
  std::vector<std::string> parts;
  std::string cur;
  for (char c : ref) {
    if (c == ' ' || c == '\n') {
      if (!cur.empty()) parts.push_back(cur);
      cur.clear();
      if (c == '\n') parts.push_back("\n");
    } else {
      cur.push_back(c);
    }
  }
  if (!cur.empty()) parts.push_back(cur);
  std::istringstream extra(noise);
  std::vector<std::string> noise_words;
  for (std::string w; extra >> w;) noise_words.push_back(w);
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    const auto r = rng() % 10;
    if (r == 0) continue;  // drop
    if (r == 1 && i + 1 < parts.size()) std::swap(parts[i], parts[i + 1]);
    if (r == 2 && !noise_words.empty()) parts[i] = noise_words[rng() % noise_words.size()];
    if (r == 3) parts[i] = parts[i] == "\n" ? " " : parts[i] + "\n";
    out += parts[i] == "\n" ? "\n" : parts[i] + " ";
  }
  return out;
}

TEST(RougeParity, MatchesJsRouge) {
  const fs::path modules = fs::path(SRFORMER_SOURCE_DIR) / "tests" / "reference" / "node_modules";
  if (!fs::exists(modules / "js-rouge")) GTEST_SKIP() << "npm js-rouge not installed (run tests/reference/install.sh)";
  if (run_command("node --version >/dev/null 2>&1").first != 0) GTEST_SKIP() << "node not found";

  TempDir dir("rouge-parity");
  const auto refs = generated_texts(600, 21, true);
  const auto noise = generated_texts(600, 22, true);
  std::mt19937_64 rng(23);
  std::vector<std::string> preds;
  for (size_t i = 0; i < refs.size(); ++i) {
    const auto r = rng() % 10;
    preds.push_back(r == 0 ? noise[i] : r == 1 ? refs[i] : perturb(refs[i], noise[i], rng));
  }
  {
    std::ofstream f(dir.path() / "in.jsonl");
    for (size_t i = 0; i < refs.size(); ++i) {
      f << nlohmann::json({{"reference", refs[i]}, {"prediction", preds[i]}}).dump() << '\n';
    }
  }
  const auto [rc, out] =
      run_command("node " + std::string(SRFORMER_SOURCE_DIR) + "/tests/eval/rouge_reference.js " + modules.string() +
                  " " + (dir.path() / "in.jsonl").string() + " " + (dir.path() / "out.jsonl").string() + " 2>&1");
  ASSERT_EQ(rc, 0) << out;

  std::ifstream f(dir.path() / "out.jsonl");
  std::array<double, 4> max_diff{};
  std::array<double, 4> mean_f{};
  size_t compared = 0;
  size_t skipped = 0;
  size_t i = 0;
  for (std::string line; std::getline(f, line); ++i) {
    ASSERT_LT(i, refs.size());
    const auto s = score_pair(refs[i], preds[i]);
    const auto j = nlohmann::json::parse(line);
    if (j.is_null()) {  // js-rouge refuses empty / whitespace-only text; we score it 0
      ++skipped;
      for (RougeType t : kRougeTypes) EXPECT_EQ(s[t].fmeasure, 0.0);
      continue;
    }
    ++compared;
    for (RougeType t : kRougeTypes) {
      const auto& ref = j.at(rouge_type_name(t));
      const size_t k = static_cast<size_t>(t);
      const double d =
          std::max({std::abs(ref[0].get<double>() - s[t].precision), std::abs(ref[1].get<double>() - s[t].recall),
                    std::abs(ref[2].get<double>() - s[t].fmeasure)});
      max_diff[k] = std::max(max_diff[k], d);
      mean_f[k] += s[t].fmeasure;
      if (d > 1e-12) {
        ADD_FAILURE() << rouge_type_name(t) << " differs by " << d << " on pair " << i << ": "
                      << nlohmann::json({refs[i], preds[i]}).dump() << " js " << ref.dump();
      }
    }
  }
  EXPECT_EQ(i, refs.size());
  EXPECT_GE(compared, 500u);
  std::cout << "[ parity ] ROUGE vs js-rouge: " << compared << " pairs compared (" << skipped
            << " empty, refused by js-rouge); max |diff| of P/R/F:";
  for (RougeType t : kRougeTypes) {
    std::cout << " " << rouge_type_name(t) << " " << max_diff[static_cast<size_t>(t)] << " (mean F "
              << mean_f[static_cast<size_t>(t)] / static_cast<double>(compared) << ")";
  }
  std::cout << "\n";
}

}  // namespace
}  // namespace srformer::eval
