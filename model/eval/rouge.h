#pragma once
// ROUGE-1, ROUGE-2, ROUGE-L and ROUGE-Lsum with the conventions of Google's `rouge-score` Python
// package (rouge_scorer.RougeScorer + scoring.BootstrapAggregator), written from its documented
// behaviour; plain C++ (no LibTorch), so it can be linked and tested on its own.
//
// Conventions (all as rouge-score):
//  * Tokens: Python's str.lower(), every run of characters outside [a-z0-9] becomes one space,
//    split on whitespace. Non-ASCII text therefore yields no tokens, except the two code points
//    whose Python lower-case contains an ASCII letter: U+0130 (I with dot above -> "i" + U+0307,
//    so "i") and U+212A (Kelvin sign -> "k").
//  * Optional Porter stemming of tokens longer than 3 characters, with NLTK's PorterStemmer in its
//    default mode (NLTK_EXTENSIONS), which is what rouge-score constructs.
//  * ROUGE-N: clipped n-gram counts; P = hits / max(#pred n-grams, 1), R = hits / max(#ref n-grams, 1).
//  * ROUGE-L: LCS over the whole token sequences (newlines are ordinary whitespace).
//  * ROUGE-Lsum: summary-level LCS: both texts split on '\n' (empty lines dropped), for each
//    reference sentence the union of the LCS positions against every prediction sentence, hits
//    clipped by each token's counts on both sides (as ROUGE-1.5.5).
//  * F = 2PR / (P + R), 0 when P + R = 0. Empty prediction or reference: all zeros.
//  * Aggregation: bootstrap resampling of the per-pair scores (default 1000 resamples); low/mid/high
//    are the 2.5th/50th/97.5th percentiles (numpy's linear interpolation) of the resampled means.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace srformer::eval {

using Tokens = std::vector<std::string>;

enum class RougeType { kRouge1 = 0, kRouge2 = 1, kRougeL = 2, kRougeLsum = 3 };
inline constexpr std::array<RougeType, 4> kRougeTypes = {RougeType::kRouge1, RougeType::kRouge2, RougeType::kRougeL,
                                                         RougeType::kRougeLsum};
// "rouge1", "rouge2", "rougeL", "rougeLsum" (rouge-score's names).
const char* rouge_type_name(RougeType type);

struct Score {
  double precision = 0.0;
  double recall = 0.0;
  double fmeasure = 0.0;
};

struct RougeScores {
  std::array<Score, 4> by_type{};
  const Score& operator[](RougeType t) const { return by_type[static_cast<size_t>(t)]; }
  Score& operator[](RougeType t) { return by_type[static_cast<size_t>(t)]; }
};

struct RougeOptions {
  bool use_stemmer = false;
};

// NLTK PorterStemmer(mode=NLTK_EXTENSIONS).stem(word) for a lower-case ASCII word.
std::string porter_stem(std::string_view word);

// rouge-score's tokenize(text, stemmer).
Tokens tokenize(std::string_view text, bool use_stemmer = false);
// The '\n'-separated, non-empty lines of `text`, each tokenized (ROUGE-Lsum's sentences).
std::vector<Tokens> tokenize_sentences(std::string_view text, bool use_stemmer = false);

double fmeasure(double precision, double recall);
Score rouge_n(const Tokens& reference, const Tokens& prediction, int n);
Score rouge_l(const Tokens& reference, const Tokens& prediction);
Score rouge_lsum(const std::vector<Tokens>& reference_sentences, const std::vector<Tokens>& prediction_sentences);

// All four scores of one pair. Note the order: reference (target) first, as rouge-score's score().
RougeScores score_pair(std::string_view reference, std::string_view prediction, const RougeOptions& options = {});

struct Interval {
  double low = 0.0;
  double mid = 0.0;
  double high = 0.0;
};
struct AggregateScore {
  Interval precision, recall, fmeasure;
};

struct BootstrapOptions {
  int samples = 1000;
  double confidence = 0.95;
  uint64_t seed = 0;  // resampling is a pure function of the seed and the scores
};

// Bootstrap confidence intervals of the mean of `scores`. Every resample draws one set of pair
// indices (uniform with replacement, std::mt19937_64 seeded with `seed`, unbiased by rejection) that
// all four types share. Empty input: all zeros.
std::array<AggregateScore, 4> bootstrap_aggregate(const std::vector<RougeScores>& scores,
                                                  const BootstrapOptions& options = {});

struct CorpusRouge {
  std::vector<RougeScores> per_pair;  // in input order
  RougeScores mean;                   // plain arithmetic mean over pairs
  std::array<AggregateScore, 4> aggregate{};
  const AggregateScore& operator[](RougeType t) const { return aggregate[static_cast<size_t>(t)]; }
};

// What `srformer eval` reports: per-pair scores and the bootstrap aggregate. predictions.size() must
// equal references.size() (std::invalid_argument otherwise).
CorpusRouge score_corpus(const std::vector<std::string>& predictions, const std::vector<std::string>& references,
                         const RougeOptions& options = {}, const BootstrapOptions& bootstrap = {});

}  // namespace srformer::eval
