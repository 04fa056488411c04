#include "model/eval/rouge.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <unordered_map>

namespace srformer::eval {

const char* rouge_type_name(RougeType type) {
  switch (type) {
    case RougeType::kRouge1:
      return "rouge1";
    case RougeType::kRouge2:
      return "rouge2";
    case RougeType::kRougeL:
      return "rougeL";
    case RougeType::kRougeLsum:
      return "rougeLsum";
  }
  return "?";
}

// ---------------------------------------------------------------------------------------------
// Porter stemmer, NLTK_EXTENSIONS mode (NLTK's default, used by rouge-score). Steps and rule order
// follow Porter (1980) with NLTK's departures: the irregular-forms table, 'ies'/'ied' of 4-letter
// words -> 'ie', step 1c's y->i only after a consonant that is not the first letter, the cvc test
// also true for a 2-letter vowel-consonant stem, step 2's 'alli' first (then step 2 again),
// 'bli'->'ble', 'fulli'->'ful' and 'logi'->'log' (measured with the 'l' kept in the stem).
namespace {

class Porter {
 public:
  static std::string stem(std::string w) {
    static const std::unordered_map<std::string, std::string> kIrregular = {
        {"sky", "sky"},        {"skies", "sky"},       {"dying", "die"},        {"lying", "lie"},
        {"tying", "tie"},      {"news", "news"},       {"innings", "inning"},   {"inning", "inning"},
        {"outings", "outing"}, {"outing", "outing"},   {"cannings", "canning"}, {"canning", "canning"},
        {"howe", "howe"},      {"proceed", "proceed"}, {"exceed", "exceed"},    {"succeed", "succeed"},
    };
    if (auto it = kIrregular.find(w); it != kIrregular.end()) return it->second;
    if (w.size() <= 2) return w;
    w = step1a(std::move(w));
    w = step1b(std::move(w));
    w = step1c(std::move(w));
    w = step2(std::move(w));
    w = step3(std::move(w));
    w = step4(std::move(w));
    w = step5a(std::move(w));
    w = step5b(std::move(w));
    return w;
  }

 private:
  enum class Cond { kNone, kM0, kM1, kIon, kLogi, kNotLsz, kCvcE };
  struct Rule {
    const char* suffix;  // "*d" = ends with a double consonant (removes its last letter)
    const char* replacement;
    Cond cond;
  };

  static bool is_vowel_letter(char c) { return c == 'a' || c == 'e' || c == 'i' || c == 'o' || c == 'u'; }
  static bool cons(const std::string& w, size_t i) {
    // y is a consonant at the start and after a vowel, a vowel after a consonant.
    bool consonant = true;
    for (size_t k = 0; k <= i; ++k) {
      const char c = w[k];
      if (is_vowel_letter(c)) {
        consonant = false;
      } else if (c == 'y') {
        consonant = (k == 0) ? true : !consonant;
      } else {
        consonant = true;
      }
    }
    return consonant;
  }
  // Porter's m: the number of vowel->consonant transitions.
  static int measure(const std::string& s) {
    int m = 0;
    bool prev_vowel = false;
    bool consonant = true;
    for (size_t k = 0; k < s.size(); ++k) {
      const char c = s[k];
      if (is_vowel_letter(c)) {
        consonant = false;
      } else if (c == 'y') {
        consonant = (k == 0) ? true : !consonant;
      } else {
        consonant = true;
      }
      if (consonant && prev_vowel) ++m;
      prev_vowel = !consonant;
    }
    return m;
  }
  static bool contains_vowel(const std::string& s) {
    for (size_t i = 0; i < s.size(); ++i) {
      if (!cons(s, i)) return true;
    }
    return false;
  }
  static bool ends_double_consonant(const std::string& w) {
    const size_t n = w.size();
    return n >= 2 && w[n - 1] == w[n - 2] && cons(w, n - 1);
  }
  static bool ends_cvc(const std::string& w) {
    const size_t n = w.size();
    if (n >= 3 && cons(w, n - 3) && !cons(w, n - 2) && cons(w, n - 1) && w[n - 1] != 'w' && w[n - 1] != 'x' &&
        w[n - 1] != 'y') {
      return true;
    }
    return n == 2 && !cons(w, 0) && cons(w, 1);
  }
  static bool ends_with(const std::string& w, std::string_view suffix) {
    return w.size() >= suffix.size() && std::string_view(w).substr(w.size() - suffix.size()) == suffix;
  }

  static bool holds(Cond cond, const std::string& stem, const std::string& word) {
    switch (cond) {
      case Cond::kNone:
        return true;
      case Cond::kM0:
        return measure(stem) > 0;
      case Cond::kM1:
        return measure(stem) > 1;
      case Cond::kIon:
        return measure(stem) > 1 && (stem.back() == 's' || stem.back() == 't');
      case Cond::kLogi:  // measured on the word less "ogi": the 'l' stays with the stem
        return measure(word.substr(0, word.size() - 3)) > 0;
      case Cond::kNotLsz: {
        const char last = word.back();
        return last != 'l' && last != 's' && last != 'z';
      }
      case Cond::kCvcE:
        return measure(stem) == 1 && ends_cvc(stem);
    }
    return false;
  }

  // The first rule whose suffix matches decides: its replacement when its condition holds, else the
  // word unchanged (later rules are not tried).
  template <size_t N>
  static std::string apply(const std::string& w, const std::array<Rule, N>& rules) {
    for (const Rule& r : rules) {
      const std::string_view suffix = r.suffix;
      if (suffix == "*d") {
        if (!ends_double_consonant(w)) continue;
        const std::string stem = w.substr(0, w.size() - 2);
        return holds(r.cond, stem, w) ? stem + w.substr(w.size() - 1) : w;
      }
      if (!ends_with(w, suffix)) continue;
      const std::string stem = w.substr(0, w.size() - suffix.size());
      return holds(r.cond, stem, w) ? stem + r.replacement : w;
    }
    return w;
  }

  static std::string step1a(std::string w) {
    if (w.size() == 4 && ends_with(w, "ies")) return w.substr(0, 1) + "ie";
    static constexpr std::array<Rule, 4> kRules = {{
        {"sses", "ss", Cond::kNone},
        {"ies", "i", Cond::kNone},
        {"ss", "ss", Cond::kNone},
        {"s", "", Cond::kNone},
    }};
    return apply(w, kRules);
  }
  static std::string step1b(std::string w) {
    if (ends_with(w, "ied")) return w.substr(0, w.size() - 3) + (w.size() == 4 ? "ie" : "i");
    if (ends_with(w, "eed")) {
      const std::string stem = w.substr(0, w.size() - 3);
      return measure(stem) > 0 ? stem + "ee" : w;
    }
    std::string stem;
    bool trimmed = false;
    for (std::string_view suffix : {std::string_view("ed"), std::string_view("ing")}) {
      if (ends_with(w, suffix)) {
        stem = w.substr(0, w.size() - suffix.size());
        if (contains_vowel(stem)) {
          trimmed = true;
          break;
        }
      }
    }
    if (!trimmed) return w;
    static constexpr std::array<Rule, 5> kRules = {{
        {"at", "ate", Cond::kNone},
        {"bl", "ble", Cond::kNone},
        {"iz", "ize", Cond::kNone},
        {"*d", "", Cond::kNotLsz},
        {"", "e", Cond::kCvcE},
    }};
    return apply(stem, kRules);
  }
  static std::string step1c(std::string w) {
    if (ends_with(w, "y") && w.size() > 2 && cons(w, w.size() - 2)) w.back() = 'i';
    return w;
  }
  static std::string step2(std::string w) {
    if (ends_with(w, "alli") && measure(w.substr(0, w.size() - 4)) > 0) return step2(w.substr(0, w.size() - 2));
    static constexpr std::array<Rule, 22> kRules = {{
        {"ational", "ate", Cond::kM0}, {"tional", "tion", Cond::kM0}, {"enci", "ence", Cond::kM0},
        {"anci", "ance", Cond::kM0},   {"izer", "ize", Cond::kM0},    {"bli", "ble", Cond::kM0},
        {"alli", "al", Cond::kM0},     {"entli", "ent", Cond::kM0},   {"eli", "e", Cond::kM0},
        {"ousli", "ous", Cond::kM0},   {"ization", "ize", Cond::kM0}, {"ation", "ate", Cond::kM0},
        {"ator", "ate", Cond::kM0},    {"alism", "al", Cond::kM0},    {"iveness", "ive", Cond::kM0},
        {"fulness", "ful", Cond::kM0}, {"ousness", "ous", Cond::kM0}, {"aliti", "al", Cond::kM0},
        {"iviti", "ive", Cond::kM0},   {"biliti", "ble", Cond::kM0},  {"fulli", "ful", Cond::kM0},
        {"logi", "log", Cond::kLogi},
    }};
    return apply(w, kRules);
  }
  static std::string step3(std::string w) {
    static constexpr std::array<Rule, 7> kRules = {{
        {"icate", "ic", Cond::kM0},
        {"ative", "", Cond::kM0},
        {"alize", "al", Cond::kM0},
        {"iciti", "ic", Cond::kM0},
        {"ical", "ic", Cond::kM0},
        {"ful", "", Cond::kM0},
        {"ness", "", Cond::kM0},
    }};
    return apply(w, kRules);
  }
  static std::string step4(std::string w) {
    static constexpr std::array<Rule, 19> kRules = {{
        {"al", "", Cond::kM1},    {"ance", "", Cond::kM1}, {"ence", "", Cond::kM1}, {"er", "", Cond::kM1},
        {"ic", "", Cond::kM1},    {"able", "", Cond::kM1}, {"ible", "", Cond::kM1}, {"ant", "", Cond::kM1},
        {"ement", "", Cond::kM1}, {"ment", "", Cond::kM1}, {"ent", "", Cond::kM1},  {"ion", "", Cond::kIon},
        {"ou", "", Cond::kM1},    {"ism", "", Cond::kM1},  {"ate", "", Cond::kM1},  {"iti", "", Cond::kM1},
        {"ous", "", Cond::kM1},   {"ive", "", Cond::kM1},  {"ize", "", Cond::kM1},
    }};
    return apply(w, kRules);
  }
  static std::string step5a(std::string w) {
    if (!ends_with(w, "e")) return w;
    std::string stem = w.substr(0, w.size() - 1);
    const int m = measure(stem);
    if (m > 1 || (m == 1 && !ends_cvc(stem))) return stem;
    return w;
  }
  static std::string step5b(std::string w) {
    if (ends_with(w, "ll") && measure(w.substr(0, w.size() - 1)) > 1) w.pop_back();
    return w;
  }
};

bool is_token_char(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

// Appends the lower-cased ASCII alphanumerics of `text` to `out`, every other run of characters
// becoming a single space (so `out` splits on spaces into rouge-score's pre-stemming tokens).
void normalize(std::string_view text, std::string& out) {
  out.clear();
  out.reserve(text.size());
  auto space = [&out] {
    if (!out.empty() && out.back() != ' ') out.push_back(' ');
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      const unsigned char lower = (c >= 'A' && c <= 'Z') ? static_cast<unsigned char>(c - 'A' + 'a') : c;
      if (is_token_char(lower)) {
        out.push_back(static_cast<char>(lower));
      } else {
        space();
      }
      continue;
    }
    // Python: "\u0130".lower() == "i\u0307" and "\u212a".lower() == "k"; every other non-ASCII
    // character lower-cases to non-ASCII and so separates tokens.
    if (c == 0xC4 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) == 0xB0) {
      out.push_back('i');
      space();  // the combining dot above
      i += 1;
    } else if (c == 0xE2 && i + 2 < text.size() && static_cast<unsigned char>(text[i + 1]) == 0x84 &&
               static_cast<unsigned char>(text[i + 2]) == 0xAA) {
      out.push_back('k');
      i += 2;
    } else {
      space();
    }
  }
}

// Maps tokens to dense ids so that the LCS tables compare integers.
class Interner {
 public:
  std::vector<int> ids(const Tokens& tokens) {
    std::vector<int> out;
    out.reserve(tokens.size());
    for (const auto& t : tokens) out.push_back(map_.emplace(t, static_cast<int>(map_.size())).first->second);
    return out;
  }
  size_t size() const { return map_.size(); }

 private:
  std::unordered_map<std::string, int> map_;
};

// (rows+1) x (cols+1) LCS length table, row-major.
std::vector<int> lcs_table(const std::vector<int>& ref, const std::vector<int>& can) {
  const size_t rows = ref.size();
  const size_t cols = can.size();
  std::vector<int> t((rows + 1) * (cols + 1), 0);
  for (size_t i = 1; i <= rows; ++i) {
    for (size_t j = 1; j <= cols; ++j) {
      t[i * (cols + 1) + j] = ref[i - 1] == can[j - 1]
                                  ? t[(i - 1) * (cols + 1) + j - 1] + 1
                                  : std::max(t[(i - 1) * (cols + 1) + j], t[i * (cols + 1) + j - 1]);
    }
  }
  return t;
}

// The reference positions of one LCS, read back from the end: a match is taken; otherwise the
// prediction index moves only when that keeps a strictly longer LCS, else the reference index does.
// (Which LCS is picked matters for the union in ROUGE-Lsum; this is rouge-score's choice.)
void lcs_reference_positions(const std::vector<int>& ref, const std::vector<int>& can, std::vector<char>& marked) {
  const auto t = lcs_table(ref, can);
  const size_t cols = can.size() + 1;
  size_t i = ref.size();
  size_t j = can.size();
  while (i > 0 && j > 0) {
    if (ref[i - 1] == can[j - 1]) {
      marked[i - 1] = 1;
      --i;
      --j;
    } else if (t[i * cols + j - 1] > t[(i - 1) * cols + j]) {
      --j;
    } else {
      --i;
    }
  }
}

}  // namespace

std::string porter_stem(std::string_view word) { return Porter::stem(std::string(word)); }

Tokens tokenize(std::string_view text, bool use_stemmer) {
  std::string norm;
  normalize(text, norm);
  Tokens tokens;
  size_t pos = 0;
  while (pos < norm.size()) {
    size_t end = norm.find(' ', pos);
    if (end == std::string::npos) end = norm.size();
    if (end > pos) {
      std::string tok = norm.substr(pos, end - pos);
      if (use_stemmer && tok.size() > 3) tok = porter_stem(tok);
      if (!tok.empty()) tokens.push_back(std::move(tok));
    }
    pos = end + 1;
  }
  return tokens;
}

std::vector<Tokens> tokenize_sentences(std::string_view text, bool use_stemmer) {
  std::vector<Tokens> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    if (end > pos) out.push_back(tokenize(text.substr(pos, end - pos), use_stemmer));
    pos = end + 1;
  }
  return out;
}

double fmeasure(double precision, double recall) {
  return precision + recall > 0 ? 2.0 * precision * recall / (precision + recall) : 0.0;
}

Score rouge_n(const Tokens& reference, const Tokens& prediction, int n) {
  if (n <= 0) throw std::invalid_argument("rouge_n: n must be positive");
  Interner interner;
  const auto ref = interner.ids(reference);
  const auto pred = interner.ids(prediction);
  const size_t un = static_cast<size_t>(n);
  auto grams = [un](const std::vector<int>& ids) {
    std::vector<std::vector<int>> g;
    for (size_t i = 0; i + un <= ids.size(); ++i) g.emplace_back(ids.begin() + i, ids.begin() + i + un);
    std::sort(g.begin(), g.end());
    return g;
  };
  const auto rg = grams(ref);
  const auto pg = grams(pred);
  // Clipped matches = size of the multiset intersection of the two sorted gram lists.
  size_t hits = 0;
  for (size_t a = 0, b = 0; a < rg.size() && b < pg.size();) {
    if (rg[a] == pg[b]) {
      ++hits;
      ++a;
      ++b;
    } else if (rg[a] < pg[b]) {
      ++a;
    } else {
      ++b;
    }
  }
  Score s;
  s.precision = static_cast<double>(hits) / static_cast<double>(std::max<size_t>(pg.size(), 1));
  s.recall = static_cast<double>(hits) / static_cast<double>(std::max<size_t>(rg.size(), 1));
  s.fmeasure = fmeasure(s.precision, s.recall);
  return s;
}

Score rouge_l(const Tokens& reference, const Tokens& prediction) {
  if (reference.empty() || prediction.empty()) return {};
  Interner interner;
  const auto ref = interner.ids(reference);
  const auto pred = interner.ids(prediction);
  const auto t = lcs_table(ref, pred);
  const double lcs = t.back();
  Score s;
  s.precision = lcs / static_cast<double>(pred.size());
  s.recall = lcs / static_cast<double>(ref.size());
  s.fmeasure = fmeasure(s.precision, s.recall);
  return s;
}

Score rouge_lsum(const std::vector<Tokens>& reference_sentences, const std::vector<Tokens>& prediction_sentences) {
  if (reference_sentences.empty() || prediction_sentences.empty()) return {};
  Interner interner;
  std::vector<std::vector<int>> refs;
  std::vector<std::vector<int>> preds;
  size_t m = 0;
  size_t n = 0;
  for (const auto& s : reference_sentences) {
    refs.push_back(interner.ids(s));
    m += s.size();
  }
  for (const auto& s : prediction_sentences) {
    preds.push_back(interner.ids(s));
    n += s.size();
  }
  if (m == 0 || n == 0) return {};
  std::vector<int> count_ref(interner.size(), 0);
  std::vector<int> count_pred(interner.size(), 0);
  for (const auto& s : refs) {
    for (int id : s) ++count_ref[id];
  }
  for (const auto& s : preds) {
    for (int id : s) ++count_pred[id];
  }
  size_t hits = 0;
  for (const auto& r : refs) {
    std::vector<char> in_union(r.size(), 0);
    for (const auto& c : preds) lcs_reference_positions(r, c, in_union);
    for (size_t i = 0; i < r.size(); ++i) {
      if (!in_union[i]) continue;
      const int id = r[i];
      if (count_pred[id] > 0 && count_ref[id] > 0) {
        ++hits;
        --count_pred[id];
        --count_ref[id];
      }
    }
  }
  Score s;
  s.recall = static_cast<double>(hits) / static_cast<double>(m);
  s.precision = static_cast<double>(hits) / static_cast<double>(n);
  s.fmeasure = fmeasure(s.precision, s.recall);
  return s;
}

RougeScores score_pair(std::string_view reference, std::string_view prediction, const RougeOptions& options) {
  const Tokens ref = tokenize(reference, options.use_stemmer);
  const Tokens pred = tokenize(prediction, options.use_stemmer);
  RougeScores out;
  out[RougeType::kRouge1] = rouge_n(ref, pred, 1);
  out[RougeType::kRouge2] = rouge_n(ref, pred, 2);
  out[RougeType::kRougeL] = rouge_l(ref, pred);
  out[RougeType::kRougeLsum] = rouge_lsum(tokenize_sentences(reference, options.use_stemmer),
                                          tokenize_sentences(prediction, options.use_stemmer));
  return out;
}

namespace {

// numpy.percentile(values, q) with the default linear interpolation; `values` sorted.
double percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0.0;
  const double pos = q / 100.0 * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

Interval interval(std::vector<double> means, double confidence) {
  std::sort(means.begin(), means.end());
  const double delta = (1.0 - confidence) / 2.0;
  return {percentile(means, 100.0 * delta), percentile(means, 50.0), percentile(means, 100.0 * (1.0 - delta))};
}

// Uniform in [0, n), unbiased (rejection), from the standardized mt19937_64 stream only (the
// standard distributions are implementation-defined, which would break seed reproducibility).
uint64_t uniform_index(std::mt19937_64& rng, uint64_t n) {
  const uint64_t limit = UINT64_MAX - (UINT64_MAX % n);
  uint64_t x = rng();
  while (x >= limit) x = rng();
  return x % n;
}

}  // namespace

std::array<AggregateScore, 4> bootstrap_aggregate(const std::vector<RougeScores>& scores,
                                                  const BootstrapOptions& options) {
  std::array<AggregateScore, 4> out{};
  if (scores.empty()) return out;
  if (options.samples <= 0) throw std::invalid_argument("bootstrap: samples must be positive");
  if (options.confidence < 0.0 || options.confidence > 1.0) {
    throw std::invalid_argument("bootstrap: confidence must be in [0, 1]");
  }
  const size_t n = scores.size();
  const size_t samples = static_cast<size_t>(options.samples);
  // means[type][measure][sample]
  std::array<std::array<std::vector<double>, 3>, 4> means;
  for (auto& per_type : means) {
    for (auto& v : per_type) v.resize(samples);
  }
  std::mt19937_64 rng(options.seed);
  std::vector<size_t> idx(n);
  for (size_t s = 0; s < samples; ++s) {
    for (auto& i : idx) i = static_cast<size_t>(uniform_index(rng, n));
    for (size_t t = 0; t < 4; ++t) {
      double p = 0, r = 0, f = 0;
      for (size_t i : idx) {
        const Score& sc = scores[i].by_type[t];
        p += sc.precision;
        r += sc.recall;
        f += sc.fmeasure;
      }
      means[t][0][s] = p / static_cast<double>(n);
      means[t][1][s] = r / static_cast<double>(n);
      means[t][2][s] = f / static_cast<double>(n);
    }
  }
  for (size_t t = 0; t < 4; ++t) {
    out[t].precision = interval(std::move(means[t][0]), options.confidence);
    out[t].recall = interval(std::move(means[t][1]), options.confidence);
    out[t].fmeasure = interval(std::move(means[t][2]), options.confidence);
  }
  return out;
}

CorpusRouge score_corpus(const std::vector<std::string>& predictions, const std::vector<std::string>& references,
                         const RougeOptions& options, const BootstrapOptions& bootstrap) {
  if (predictions.size() != references.size()) {
    throw std::invalid_argument("score_corpus: " + std::to_string(predictions.size()) + " predictions but " +
                                std::to_string(references.size()) + " references");
  }
  CorpusRouge out;
  out.per_pair.reserve(predictions.size());
  for (size_t i = 0; i < predictions.size(); ++i)
    out.per_pair.push_back(score_pair(references[i], predictions[i], options));
  if (!out.per_pair.empty()) {
    for (size_t t = 0; t < 4; ++t) {
      Score sum;
      for (const auto& s : out.per_pair) {
        sum.precision += s.by_type[t].precision;
        sum.recall += s.by_type[t].recall;
        sum.fmeasure += s.by_type[t].fmeasure;
      }
      const double n = static_cast<double>(out.per_pair.size());
      out.mean.by_type[t] = {sum.precision / n, sum.recall / n, sum.fmeasure / n};
    }
  }
  out.aggregate = bootstrap_aggregate(out.per_pair, bootstrap);
  return out;
}

}  // namespace srformer::eval
