#include "model/generation/logits_processors.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>

#include "model/kernels/avx2.h"

namespace srformer {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

void check_scores(const torch::Tensor& scores, size_t rows) {
  if (scores.dim() != 2 || scores.scalar_type() != torch::kFloat32 || !scores.device().is_cpu() ||
      static_cast<size_t>(scores.size(0)) != rows) {
    throw std::invalid_argument("logits processors take CPU float32 scores [rows, vocab] with one history per row");
  }
}

// Sets columns [begin, end) of every row of CPU float32 scores [rows, vocab] to `value`. Plain stores
// where the rows are dense: a request's greedy step runs a few of these, and LibTorch's select/narrow
// + fill costs microseconds of dispatch per call, a good part of the step's search at 32 requests.
void fill_columns(const torch::Tensor& scores, int64_t begin, int64_t end, float value) {
  if (begin < 0 || end > scores.size(1)) {
    throw std::out_of_range("token " + std::to_string(begin < 0 ? begin : end - 1) + " is outside the vocabulary (" +
                            std::to_string(scores.size(1)) + " tokens)");
  }
  if (begin >= end) return;
  if (scores.stride(1) != 1) {
    scores.narrow(1, begin, end - begin).fill_(value);
    return;
  }
  float* data = scores.data_ptr<float>();
  for (int64_t r = 0; r < scores.size(0); ++r)
    std::fill(data + r * scores.stride(0) + begin, data + r * scores.stride(0) + end, value);
}

}  // namespace

void check_logits(const torch::Tensor& logits, int64_t rows, const GenerationOptions& options) {
  if (!logits.defined() || logits.dim() != 2 || logits.size(0) != rows || logits.size(1) < 1) {
    throw std::invalid_argument("a searcher expects logits [" + std::to_string(rows) + ", vocab], got " +
                                (logits.defined() ? std::to_string(logits.dim()) + "-d tensor" : "none"));
  }
  const int64_t vocab = logits.size(1);
  const auto check = [vocab](const char* name, int64_t id) {
    if (id >= vocab) {
      throw std::invalid_argument(std::string(name) + " " + std::to_string(id) + " is outside the vocabulary (" +
                                  std::to_string(vocab) + " tokens); set it from the model's config");
    }
  };
  for (const int64_t eos : eos_token_ids(options)) check("eos_token_id", eos);
  check("decoder_start_token_id", options.decoder_start_token_id);
  if (options.forced_bos_token_id) check("forced_bos_token_id", *options.forced_bos_token_id);
  for (const int64_t forced : forced_eos_token_ids(options)) check("forced_eos_token_id", forced);
  // As Hugging Face's check: any id of the list, whether or not it would be banned at this step.
  for (const auto& words : options.bad_words_ids) {
    for (const int64_t id : words) check("bad_words_ids' token", id);
  }
  for (const auto& [sequence, bias] : options.sequence_bias) {
    for (const int64_t id : sequence) check("sequence_bias' token", id);
  }
  for (const auto& [index, token] : options.forced_decoder_ids) {
    if (token) check("forced_decoder_ids' token", *token);
  }
}

torch::Tensor scores_from_logits(const torch::Tensor& logits, int64_t rows, const GenerationOptions& options,
                                 torch::Tensor& buffer) {
  check_logits(logits, rows, options);
  // A copy: the processors work in place and must not touch the caller's batch logits.
  if (!buffer.defined() || buffer.sizes() != logits.sizes()) buffer = torch::empty(logits.sizes(), torch::kFloat32);
  if (logits.is_cpu() && logits.scalar_type() == torch::kFloat32 && logits.is_contiguous()) {
    std::memcpy(buffer.data_ptr<float>(), logits.data_ptr<float>(),
                static_cast<size_t>(logits.numel()) * sizeof(float));
  } else {
    buffer.copy_(logits);
  }
  return buffer;
}

void apply_repetition_penalty(const torch::Tensor& scores, const std::vector<TokenHistory>& histories, double penalty) {
  check_scores(scores, histories.size());
  if (histories.empty() || histories.front().empty()) return;
  const auto cur_len = static_cast<int64_t>(histories.front().size());
  auto index = torch::empty({static_cast<int64_t>(histories.size()), cur_len}, torch::kInt64);
  auto* out = index.data_ptr<int64_t>();
  for (const auto& history : histories) {
    if (static_cast<int64_t>(history.size()) != cur_len) {
      throw std::invalid_argument("all rows of a searcher must have the same history length");
    }
    out = std::copy(history.begin(), history.end(), out);
  }
  // Same gather/where/scatter as HF: repeated tokens are penalised once.
  const auto score = scores.gather(1, index);
  scores.scatter_(1, index, torch::where(score < 0, score * penalty, score / penalty));
}

void apply_encoder_repetition_penalty(const torch::Tensor& scores, const std::vector<int64_t>& encoder_input_ids,
                                      double penalty) {
  check_scores(scores, static_cast<size_t>(scores.size(0)));
  if (encoder_input_ids.empty() || scores.size(0) == 0) return;
  const auto ids = static_cast<int64_t>(encoder_input_ids.size());
  for (const int64_t id : encoder_input_ids) {
    if (id < 0 || id >= scores.size(1)) {
      throw std::out_of_range("encoder input token " + std::to_string(id) + " is outside the vocabulary (" +
                              std::to_string(scores.size(1)) + " tokens)");
    }
  }
  // HF's gather/where/scatter with its inverted penalty (1 / penalty, as a double), every row alike
  // (the index is only read).
  const auto index = torch::from_blob(const_cast<int64_t*>(encoder_input_ids.data()), {1, ids}, torch::kInt64)
                         .expand({scores.size(0), ids});
  const double inverse = 1.0 / penalty;
  const auto score = scores.gather(1, index);
  scores.scatter_(1, index, torch::where(score < 0, score * inverse, score / inverse));
}

std::vector<int64_t> banned_encoder_ngram_tokens(const std::vector<int64_t>& encoder_input_ids,
                                                 const TokenHistory& history, int64_t ngram_size) {
  const auto cur_len = static_cast<int64_t>(history.size());
  const auto input_len = static_cast<int64_t>(encoder_input_ids.size());
  // HF looks up the history's last n - 1 tokens (the decoder start among them while it is that short);
  // a shorter history has no such key.
  if (ngram_size <= 0 || cur_len < ngram_size - 1) return {};
  const auto prefix_begin = history.begin() + (cur_len - (ngram_size - 1));
  std::vector<int64_t> banned;
  for (int64_t start = 0; start + ngram_size <= input_len; ++start) {
    const auto ngram = encoder_input_ids.begin() + start;
    if (std::equal(prefix_begin, history.end(), ngram)) banned.push_back(ngram[ngram_size - 1]);
  }
  return banned;
}

void apply_encoder_no_repeat_ngram(const torch::Tensor& scores, const std::vector<int64_t>& encoder_input_ids,
                                   const std::vector<TokenHistory>& histories, int64_t ngram_size) {
  check_scores(scores, histories.size());
  for (size_t r = 0; r < histories.size(); ++r) {
    const auto row = scores.narrow(0, static_cast<int64_t>(r), 1);
    for (const int64_t token : banned_encoder_ngram_tokens(encoder_input_ids, histories[r], ngram_size)) {
      fill_columns(row, token, token + 1, kNegInf);
    }
  }
}

std::vector<int64_t> banned_ngram_tokens(const TokenHistory& history, int64_t ngram_size) {
  const auto cur_len = static_cast<int64_t>(history.size());
  if (ngram_size <= 0 || cur_len + 1 < ngram_size) return {};
  // The last n-1 tokens; every earlier occurrence of them bans the token that followed.
  const auto prefix_begin = history.begin() + (cur_len - (ngram_size - 1));
  std::vector<int64_t> banned;
  for (int64_t start = 0; start + ngram_size <= cur_len; ++start) {
    const auto ngram = history.begin() + start;
    if (std::equal(prefix_begin, history.end(), ngram)) banned.push_back(ngram[ngram_size - 1]);
  }
  return banned;
}

void apply_no_repeat_ngram(const torch::Tensor& scores, const std::vector<TokenHistory>& histories,
                           int64_t ngram_size) {
  check_scores(scores, histories.size());
  auto rows = scores.accessor<float, 2>();
  for (size_t r = 0; r < histories.size(); ++r) {
    for (const int64_t token : banned_ngram_tokens(histories[r], ngram_size)) {
      rows[static_cast<int64_t>(r)][token] = kNegInf;
    }
  }
}

namespace {

// A one-token bad word that HF keeps (it drops one that is an EOS id).
bool banned_always(const GenerationOptions& options, const std::vector<int64_t>& words) {
  return words.size() == 1 && !is_eos(options, words.front());
}

// A longer bad word whose last token would complete it: the history ends with the rest of it.
bool completes(const std::vector<int64_t>& words, const TokenHistory& history) {
  return words.size() > 1 && words.size() <= history.size() &&
         std::equal(words.begin(), words.end() - 1, history.end() - static_cast<std::ptrdiff_t>(words.size() - 1));
}

}  // namespace

std::vector<int64_t> banned_bad_words(const GenerationOptions& options, const TokenHistory& history) {
  std::vector<int64_t> banned;
  for (const auto& words : options.bad_words_ids) {
    if (banned_always(options, words)) banned.push_back(words.front());
    if (completes(words, history)) banned.push_back(words.back());
  }
  return banned;
}

void apply_bad_words(const torch::Tensor& scores, const GenerationOptions& options,
                     const std::vector<TokenHistory>& histories) {
  check_scores(scores, histories.size());
  // One-token sequences: the same columns of every row.
  bool longer = false;
  for (const auto& words : options.bad_words_ids) {
    if (banned_always(options, words)) fill_columns(scores, words.front(), words.front() + 1, kNegInf);
    longer = longer || words.size() > 1;
  }
  if (!longer) return;
  for (size_t r = 0; r < histories.size(); ++r) {
    const auto row = scores.narrow(0, static_cast<int64_t>(r), 1);
    for (const auto& words : options.bad_words_ids) {
      if (completes(words, histories[r])) fill_columns(row, words.back(), words.back() + 1, kNegInf);
    }
  }
}

SequenceBias::SequenceBias(const std::vector<std::pair<std::vector<int64_t>, double>>& bias) {
  // HF's dict of the pairs: a repeated sequence keeps its first place and its last bias.
  std::vector<std::pair<std::vector<int64_t>, float>> distinct;
  for (const auto& [sequence, value] : bias) {
    if (sequence.empty()) throw std::invalid_argument("sequence_bias holds an empty sequence");
    const auto same = std::find_if(distinct.begin(), distinct.end(),
                                   [&sequence = sequence](const auto& entry) { return entry.first == sequence; });
    if (same != distinct.end()) {
      same->second = static_cast<float>(value);
    } else {
      distinct.emplace_back(sequence, static_cast<float>(value));
    }
  }
  for (const auto& entry : distinct) columns_.push_back(entry.first.back());
  std::sort(columns_.begin(), columns_.end());
  columns_.erase(std::unique(columns_.begin(), columns_.end()), columns_.end());
  const auto column_of = [this](int64_t id) {
    return static_cast<size_t>(std::lower_bound(columns_.begin(), columns_.end(), id) - columns_.begin());
  };
  // A column has one one-token sequence at most: the dict holds it once.
  one_token_.assign(columns_.size(), 0.0f);
  for (auto& [sequence, value] : distinct) {
    if (sequence.size() == 1) {
      one_token_[column_of(sequence.front())] = value;
    } else {
      const size_t column = column_of(sequence.back());
      longer_.push_back({std::move(sequence), value, column});
    }
  }
}

void SequenceBias::apply(const torch::Tensor& scores, const std::vector<TokenHistory>& histories) const {
  check_scores(scores, histories.size());
  if (columns_.empty() || histories.empty()) return;
  // The first outside, as columns_ ascend.
  const int64_t vocab = scores.size(1);
  if (columns_.front() < 0 || columns_.back() >= vocab) {
    const int64_t id =
        columns_.front() < 0 ? columns_.front() : *std::lower_bound(columns_.begin(), columns_.end(), vocab);
    throw std::out_of_range("sequence_bias' token " + std::to_string(id) + " is outside the vocabulary (" +
                            std::to_string(vocab) + " tokens)");
  }
  // Each row's bias for those columns, summed in HF's float32 order: the one-token sequence's bias, then
  // every longer sequence that the row completes, in the dict's order; added to every column (0 included,
  // as HF adds its whole bias tensor: a -0 score becomes 0).
  std::vector<float> added(columns_.size());
  auto* data = scores.data_ptr<float>();
  const int64_t row_stride = scores.stride(0), column_stride = scores.stride(1);
  for (size_t r = 0; r < histories.size(); ++r) {
    std::copy(one_token_.begin(), one_token_.end(), added.begin());
    for (const auto& longer : longer_) {
      if (completes(longer.sequence, histories[r])) added[longer.column] += longer.bias;
    }
    float* row = data + static_cast<int64_t>(r) * row_stride;
    for (size_t c = 0; c < columns_.size(); ++c) row[columns_[c] * column_stride] += added[c];
  }
}

void apply_hamming_diversity(const torch::Tensor& scores, const std::vector<int64_t>& earlier_tokens, double penalty) {
  check_scores(scores, static_cast<size_t>(scores.size(0)));
  if (earlier_tokens.empty()) return;
  const int64_t rows = scores.size(0), vocab = scores.size(1), row_stride = scores.stride(0),
                column_stride = scores.stride(1);
  auto tokens = earlier_tokens;
  std::sort(tokens.begin(), tokens.end());
  float* x = scores.data_ptr<float>();
  for (size_t i = 0; i < tokens.size();) {
    size_t j = i;
    while (j < tokens.size() && tokens[j] == tokens[i]) ++j;
    const int64_t token = tokens[i];
    if (token >= 0 && token < vocab) {
      // HF subtracts penalty * bincount, a float32 product: once per token, not once per occurrence.
      const float lower = static_cast<float>(penalty) * static_cast<float>(j - i);
      for (int64_t r = 0; r < rows; ++r) x[r * row_stride + token * column_stride] -= lower;
    }
    i = j;
  }
}

void apply_exponential_decay_length_penalty(const torch::Tensor& scores, int64_t cur_len, int64_t start, double factor,
                                            const std::vector<int64_t>& eos_token_ids) {
  check_scores(scores, static_cast<size_t>(scores.size(0)));
  // HF's regulation start counts the decoder input (the start token) besides `start` new tokens.
  const int64_t regulation_start = start + 1;
  if (cur_len <= regulation_start || eos_token_ids.empty()) return;
  for (const int64_t eos : eos_token_ids) {
    if (eos < 0 || eos >= scores.size(1)) {
      throw std::out_of_range("eos_token_id " + std::to_string(eos) + " is outside the vocabulary (" +
                              std::to_string(scores.size(1)) + " tokens)");
    }
  }
  const auto index = torch::from_blob(const_cast<int64_t*>(eos_token_ids.data()),
                                      {static_cast<int64_t>(eos_token_ids.size())}, torch::kInt64);
  const auto eos = scores.index_select(1, index);
  // As HF: the absolute score times (factor^(cur_len - regulation_start) - 1), added (so negative scores
  // move the same way). An EOS already at -inf (a minimum length, a bad word) stays there, where HF's
  // -inf + inf would make it NaN.
  const auto penalised = eos + eos.abs() * (std::pow(factor, static_cast<double>(cur_len - regulation_start)) - 1.0);
  scores.index_copy_(1, index, torch::where(eos == -std::numeric_limits<float>::infinity(), eos, penalised));
}

std::optional<int64_t> forced_decoder_token(const GenerationOptions& options, int64_t cur_len) {
  // A dict of the pairs in HF: the last pair of an index wins, and its null token forces nothing.
  for (auto it = options.forced_decoder_ids.rbegin(); it != options.forced_decoder_ids.rend(); ++it) {
    if (it->first == cur_len) return it->second;
  }
  return std::nullopt;
}

void apply_min_length(const torch::Tensor& scores, int64_t cur_len, int64_t min_length,
                      const std::vector<int64_t>& eos_token_ids) {
  check_scores(scores, static_cast<size_t>(scores.size(0)));
  if (cur_len >= min_length) return;
  for (const int64_t eos : eos_token_ids) fill_columns(scores, eos, eos + 1, kNegInf);
}

void apply_forced_tokens(const torch::Tensor& scores, const std::vector<int64_t>& tokens) {
  check_scores(scores, static_cast<size_t>(scores.size(0)));
  fill_columns(scores, 0, scores.size(1), kNegInf);
  for (const int64_t token : tokens) fill_columns(scores, token, token + 1, 0.0F);
}

void apply_temperature(const torch::Tensor& scores, double temperature) { scores.div_(temperature); }

void apply_top_k(const torch::Tensor& scores, int64_t top_k, int64_t min_tokens_to_keep) {
  const int64_t k = std::min(std::max(top_k, min_tokens_to_keep), scores.size(-1));
  if (k <= 0) return;
  // Each row's k-th best score from one read with a k-entry heap (an offer costs one comparison once the
  // heap is full), then one pass setting what lies below it to -inf: torch::topk and a mask cost
  // ~140 + 150 µs on a 32k row, a sampling step's largest share. NaN (which topk ranks above everything)
  // and layouts other than dense CPU float32 rows take LibTorch's way.
  if (scores.dim() == 2 && scores.is_cpu() && scores.scalar_type() == torch::kFloat32 && scores.is_contiguous()) {
    const int64_t n = scores.size(1);
    std::vector<float> kth(static_cast<size_t>(scores.size(0)));
    std::vector<float> heap;
    heap.reserve(static_cast<size_t>(k) + 1);
    const auto worst_first = std::greater<float>();
    bool nan = false;
    for (int64_t r = 0; r < scores.size(0) && !nan; ++r) {
      const float* x = scores.data_ptr<float>() + r * n;
      heap.assign(x, x + k);
      for (const float v : heap) nan = nan || std::isnan(v);
      std::make_heap(heap.begin(), heap.end(), worst_first);
      float bar = heap.front();
      for (int64_t i = k; i < n; ++i) {
        if (!(x[i] <= bar)) {  // better than the k-th so far, or NaN
          if (std::isnan(x[i])) {
            nan = true;
            break;
          }
          std::pop_heap(heap.begin(), heap.end(), worst_first);
          heap.back() = x[i];
          std::push_heap(heap.begin(), heap.end(), worst_first);
          bar = heap.front();
        }
      }
      kth[static_cast<size_t>(r)] = bar;
    }
    if (!nan) {
      for (int64_t r = 0; r < scores.size(0); ++r) {
        float* x = scores.data_ptr<float>() + r * n;
        const float bar = kth[static_cast<size_t>(r)];
        for (int64_t i = 0; i < n; ++i) x[i] = x[i] < bar ? kNegInf : x[i];
      }
      return;
    }
  }
  const auto kth = std::get<0>(scores.topk(k, -1)).narrow(-1, k - 1, 1);
  scores.masked_fill_(scores < kth, kNegInf);
}

namespace {

// Top-p's cut without sorting the row: the smallest probability a row keeps, every token at or above it
// kept and every one below removed, as apply_top_p's loop over the descending order decides it (keep its
// first `keep` = max(the count the loop finds, min_keep) tokens). Probabilities are bucketed by their float
// bits' top 12 (sign, exponent, 3 mantissa bits: buckets are disjoint ranges of values, a higher bucket's
// values all above a lower's), the buckets summed from the top to the one the cut lies in, and only that
// bucket sorted. The sums match the loop's bit for bit because every probability summed is at least 2^-29
// and every sum below 2: all are multiples of 2^-52 that double holds exactly, in any order. std::nullopt
// (the caller then takes the loop) where that fails (the cut among smaller probabilities), on NaN, or where
// tokens of the cut's probability lie on both sides of it (which of them the loop keeps is topk's order).
// Returns -inf where the row keeps every token.
std::optional<float> top_p_bar(const float* p, int64_t n, double total, float remove_at_most, int64_t min_keep) {
  constexpr int kBuckets = 1024;                  // bits >> 20 of floats in [0, 2)
  constexpr int kExact = (127 - 29) << 23 >> 20;  // the bucket of 2^-29 and above: exact double sums
  const auto bucket_of = [](float v) {
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    return bits >> 20;
  };
  std::vector<int64_t> count(kBuckets, 0);
  std::vector<double> mass(kBuckets, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t b = bucket_of(p[i]);
    if (b >= kBuckets) return std::nullopt;  // NaN, negative or 2 and above
    ++count[b];
    mass[b] += p[i];
  }
  const auto done = [total, remove_at_most](double above) {
    return static_cast<float>(total - above) <= remove_at_most;
  };
  const auto sorted_bucket = [&](int b) {
    std::vector<float> values;
    values.reserve(static_cast<size_t>(count[static_cast<size_t>(b)]));
    for (int64_t i = 0; i < n; ++i) {
      if (bucket_of(p[i]) == static_cast<uint32_t>(b)) values.push_back(p[i]);
    }
    std::sort(values.begin(), values.end(), std::greater<float>());
    return values;
  };
  // The loop's count: the tokens it adds before the rest's probability is at most remove_at_most.
  double above = 0.0;
  int64_t passed = 0;
  int b = kBuckets - 1;
  for (; b >= kExact; --b) {
    if (count[static_cast<size_t>(b)] == 0) continue;
    if (done(above + mass[static_cast<size_t>(b)])) break;
    above += mass[static_cast<size_t>(b)];
    passed += count[static_cast<size_t>(b)];
  }
  if (b < kExact) return std::nullopt;
  int64_t keep = passed;
  auto cut_bucket = sorted_bucket(b);
  for (const float v : cut_bucket) {
    if (done(above)) break;
    above += v;
    ++keep;
  }
  keep = std::max(keep, min_keep);
  if (keep >= n) return -std::numeric_limits<float>::infinity();
  // The keep-th probability from the top, and whether the next one equals it. Its bucket is mostly the
  // cut's, already sorted (another pass over the row and sort otherwise: min_keep past the cut).
  int64_t before = 0;  // tokens in buckets above c
  int c = kBuckets - 1;
  while (before + count[static_cast<size_t>(c)] < keep) before += count[static_cast<size_t>(c--)];
  const auto values = c == b ? std::move(cut_bucket) : sorted_bucket(c);
  const auto at = static_cast<size_t>(keep - before - 1);
  if (at + 1 < values.size() && values[at + 1] == values[at]) return std::nullopt;
  return values[at];
}

}  // namespace

void apply_top_p(const torch::Tensor& scores, double top_p, int64_t min_tokens_to_keep) {
  // HF sorts the whole vocabulary ascending and removes the tokens whose cumulative probability is
  // <= 1 - top_p (float32 on both sides): what is left is a prefix of the descending order, found here
  // by a top-k of growing k, each token's ascending cumulative sum being the total minus the tokens
  // above it (in double, as LibTorch's CPU cumsum accumulates). Dense rows find the cut without the
  // top-k (top_p_bar): where the mass is spread, the doubling top-k took up to ten calls of 150-700 µs.
  const int64_t vocab = scores.size(-1);
  const auto remove_at_most = static_cast<float>(1.0 - top_p);
  const int64_t min_keep = std::min(std::max<int64_t>(min_tokens_to_keep, 1), vocab);
  const auto probs = scores.softmax(-1);
  const bool dense = scores.dim() == 2 && scores.is_cpu() && scores.scalar_type() == torch::kFloat32 &&
                     scores.is_contiguous() && probs.is_contiguous();
  for (int64_t r = 0; r < scores.size(0); ++r) {
    const double total = probs[r].sum(torch::kFloat64).item<double>();
    if (dense) {
      const float* p = probs.data_ptr<float>() + r * vocab;
      if (const auto bar = top_p_bar(p, vocab, total, remove_at_most, min_keep)) {
        float* x = scores.data_ptr<float>() + r * vocab;
        for (int64_t i = 0; i < vocab; ++i) x[i] = p[i] < *bar ? kNegInf : x[i];
        continue;
      }
    }
    int64_t k = std::min<int64_t>(vocab, std::max<int64_t>(64, min_keep));
    int64_t keep = vocab;
    torch::Tensor order;
    while (true) {
      auto [values, indices] = probs[r].topk(k);
      order = indices;
      const auto* p = values.data_ptr<float>();
      double above = 0.0;  // the probability of the tokens before i
      int64_t i = 0;
      while (i < k && !(static_cast<float>(total - above) <= remove_at_most)) above += p[i++];
      if (i < k || k == vocab) {
        keep = i;
        break;
      }
      k = std::min(vocab, 2 * k);
    }
    keep = std::max(keep, min_keep);
    if (keep >= vocab) continue;
    auto remove = torch::ones({vocab}, torch::kBool);
    remove.index_fill_(0, order.narrow(0, 0, keep), false);
    scores[r].masked_fill_(remove, kNegInf);
  }
}

void apply_min_p(const torch::Tensor& scores, double min_p, int64_t min_tokens_to_keep) {
  // As HF: the threshold is the float32 top probability times min_p; the min_tokens_to_keep likeliest stay.
  const auto probs = scores.softmax(-1);
  const auto top = std::get<0>(probs.max(-1, /*keepdim=*/true));
  auto remove = probs < top * min_p;
  const int64_t k = std::min(std::max<int64_t>(min_tokens_to_keep, 1), scores.size(-1));
  remove.scatter_(-1, std::get<1>(probs.topk(k, -1)), false);
  scores.masked_fill_(remove, kNegInf);
}

void apply_typical_p(const torch::Tensor& scores, double mass, int64_t min_tokens_to_keep) {
  // HF's tensor operations, every row at once: entropy (NaN terms of removed tokens skipped), distance
  // of each token's surprisal from it, ascending sort, cumulative probability in that order.
  const int64_t vocab = scores.size(-1);
  const auto normalized = scores.log_softmax(-1);
  const auto entropy = -(normalized * normalized.exp()).nansum(-1, /*keepdim=*/true);
  const auto shifted = ((-normalized) - entropy).abs();
  const auto [sorted_scores, sorted_indices] = shifted.sort(-1, /*descending=*/false);
  const auto cumulative = scores.gather(-1, sorted_indices).softmax(-1).cumsum(-1);
  const auto last = (cumulative < mass).sum(1).clamp_max(vocab - 1);
  auto sorted_remove = sorted_scores > sorted_scores.gather(1, last.view({-1, 1}));
  sorted_remove.narrow(1, 0, std::min(std::max<int64_t>(min_tokens_to_keep, 1), vocab)).fill_(false);
  scores.masked_fill_(sorted_remove.scatter(1, sorted_indices, sorted_remove), kNegInf);
}

namespace {

// Removes the tokens whose probability is below `cutoff` ([rows, 1] or a scalar) unless they score at least
// the min_tokens_to_keep-th best (HF's epsilon and eta warpers).
void apply_cutoff(const torch::Tensor& scores, const torch::Tensor& probs, const torch::Tensor& cutoff,
                  int64_t min_tokens_to_keep) {
  const int64_t k = std::min(std::max<int64_t>(min_tokens_to_keep, 1), scores.size(-1));
  const auto kth = std::get<0>(scores.topk(k, -1)).narrow(-1, k - 1, 1);
  scores.masked_fill_((probs < cutoff).logical_and_(scores < kth), kNegInf);
}

}  // namespace

void apply_epsilon_cutoff(const torch::Tensor& scores, double epsilon, int64_t min_tokens_to_keep) {
  const auto probs = scores.softmax(-1);
  apply_cutoff(scores, probs, torch::tensor(epsilon, torch::kFloat64).to(torch::kFloat32), min_tokens_to_keep);
}

void apply_eta_cutoff(const torch::Tensor& scores, double epsilon, int64_t min_tokens_to_keep) {
  const auto probs = scores.softmax(-1);
  // torch.distributions.Categorical(logits=scores).entropy(): logits less their logsumexp, clamped to
  // float's lowest (a removed token's -inf times 0 would be NaN), times their softmax.
  const auto logits = scores - scores.logsumexp(-1, /*keepdim=*/true);
  const auto entropy = -(logits.clamp_min(std::numeric_limits<float>::lowest()) * logits.softmax(-1)).sum(-1);
  const auto eps = torch::tensor(static_cast<float>(epsilon));  // HF holds it as a float32 tensor
  const auto eta = torch::minimum(eps, eps.sqrt() * (-entropy).exp()).unsqueeze(-1);
  apply_cutoff(scores, probs, eta, min_tokens_to_keep);
}

std::vector<int64_t> suppressed_tokens(const GenerationOptions& options, int64_t cur_len, int64_t vocab) {
  std::vector<int64_t> ids;
  const auto add = [&ids, vocab](const std::vector<int64_t>& list) {
    for (const int64_t id : list) {
      if (id >= 0 && id < vocab) ids.push_back(id);
    }
  };
  add(options.suppress_tokens);
  // HF's begin index: after the forced BOS, and after the last forced_decoder_ids pair's index.
  const int64_t begin = (options.forced_bos_token_id ? 2 : 1) +
                        (options.forced_decoder_ids.empty() ? 0 : options.forced_decoder_ids.back().first);
  if (cur_len == begin) add(options.begin_suppress_tokens);
  return ids;
}

namespace {

// The forced BOS or EOS tokens at cur_len, which process_logits forces before the suppressed tokens.
std::vector<int64_t> forced_bos_or_eos(const GenerationOptions& options, int64_t cur_len) {
  if (options.forced_eos_token_id && cur_len == options.max_new_tokens) return forced_eos_token_ids(options);
  if (options.forced_bos_token_id && cur_len == 1) return {*options.forced_bos_token_id};
  return {};
}

}  // namespace

std::vector<int64_t> forced_tokens(const GenerationOptions& options, int64_t cur_len) {
  // forced_decoder_ids come last in HF's order: their token is all that is left.
  if (const auto token = forced_decoder_token(options, cur_len)) return {*token};
  return forced_bos_or_eos(options, cur_len);
}

void process_logits(const GenerationOptions& options, const SequenceBias& sequence_bias,
                    const std::vector<TokenHistory>& histories, const torch::Tensor& scores, VocabLimit vocab_limit,
                    const std::vector<int64_t>& earlier_group_tokens) {
  check_scores(scores, histories.size());
  if (histories.empty()) return;
  const auto cur_len = static_cast<int64_t>(histories.front().size());
  sequence_bias.apply(scores, histories);
  // Second in HF's list (transformers 4.3x's _get_logits_processor): the later processors see the lowered scores.
  if (options.diversity_penalty > 0.0) apply_hamming_diversity(scores, earlier_group_tokens, options.diversity_penalty);
  if (options.encoder_repetition_penalty != 1.0) {
    apply_encoder_repetition_penalty(scores, options.encoder_input_ids, options.encoder_repetition_penalty);
  }
  if (options.repetition_penalty != 1.0) apply_repetition_penalty(scores, histories, options.repetition_penalty);
  if (options.no_repeat_ngram_size > 0) apply_no_repeat_ngram(scores, histories, options.no_repeat_ngram_size);
  if (options.encoder_no_repeat_ngram_size > 0) {
    apply_encoder_no_repeat_ngram(scores, options.encoder_input_ids, histories, options.encoder_no_repeat_ngram_size);
  }
  if (!options.bad_words_ids.empty()) apply_bad_words(scores, options, histories);
  apply_min_length(scores, cur_len, options.min_new_tokens + 1, eos_token_ids(options));
  if (vocab_limit == VocabLimit::kApply && options.vocab_limit > 0 && options.vocab_limit < scores.size(1)) {
    fill_columns(scores, options.vocab_limit, scores.size(1), kNegInf);
  }
  // Forced BOS at cur_len 1, forced EOS at cur_len max_length - 1 (EOS where both apply, as HF's order gives).
  if (const auto forced = forced_bos_or_eos(options, cur_len); !forced.empty()) apply_forced_tokens(scores, forced);
  if (const auto& decay = options.exponential_decay_length_penalty) {
    apply_exponential_decay_length_penalty(scores, cur_len, decay->first, decay->second, eos_token_ids(options));
  }
  // After the forced tokens, as HF orders them (a suppressed forced token leaves no choice).
  for (const int64_t id : suppressed_tokens(options, cur_len, scores.size(1)))
    fill_columns(scores, id, id + 1, kNegInf);
  // Last, as HF's ForceTokensLogitsProcessor: the token is forced even where it was suppressed.
  if (const auto token = forced_decoder_token(options, cur_len)) apply_forced_tokens(scores, {*token});
}

std::optional<std::vector<int64_t>> excluded_tokens(const GenerationOptions& options, const TokenHistory& history,
                                                    int64_t vocab) {
  const auto cur_len = static_cast<int64_t>(history.size());
  const auto& o = options;
  const auto outside = [vocab](int64_t id) { return id < 0 || id >= vocab; };
  // No vectors made here for the lists: this runs per row and step.
  const auto any_outside = [&outside](const std::vector<int64_t>& ids) {
    return std::any_of(ids.begin(), ids.end(), outside);
  };
  // Settings that change scores other than to -inf: a bias, a decayed EOS, a forced decoder token.
  const bool decays = o.exponential_decay_length_penalty && cur_len > o.exponential_decay_length_penalty->first + 1;
  if (!o.sequence_bias.empty() || decays || forced_decoder_token(o, cur_len)) return std::nullopt;
  if (o.repetition_penalty != 1.0 || o.encoder_repetition_penalty != 1.0 || outside(o.eos_token_id) ||
      any_outside(o.extra_eos_token_ids) || outside(o.decoder_start_token_id) ||
      (o.forced_bos_token_id && (outside(*o.forced_bos_token_id) || cur_len == 1)) ||
      (o.forced_eos_token_id &&
       (outside(*o.forced_eos_token_id) || any_outside(o.extra_forced_eos_token_ids) || cur_len == o.max_new_tokens))) {
    return std::nullopt;
  }
  std::vector<int64_t> excluded;
  if (o.no_repeat_ngram_size > 0) excluded = banned_ngram_tokens(history, o.no_repeat_ngram_size);
  if (o.encoder_no_repeat_ngram_size > 0) {
    const auto banned = banned_encoder_ngram_tokens(o.encoder_input_ids, history, o.encoder_no_repeat_ngram_size);
    excluded.insert(excluded.end(), banned.begin(), banned.end());
  }
  if (!o.bad_words_ids.empty()) {
    const auto banned = banned_bad_words(o, history);
    excluded.insert(excluded.end(), banned.begin(), banned.end());
  }
  if (!o.suppress_tokens.empty() || !o.begin_suppress_tokens.empty()) {
    const auto suppressed = suppressed_tokens(o, cur_len, vocab);
    excluded.insert(excluded.end(), suppressed.begin(), suppressed.end());
  }
  if (cur_len < o.min_new_tokens + 1) {
    excluded.push_back(o.eos_token_id);
    excluded.insert(excluded.end(), o.extra_eos_token_ids.begin(), o.extra_eos_token_ids.end());
  }
  for (const int64_t id : excluded) {
    if (outside(id)) return std::nullopt;
  }
  std::sort(excluded.begin(), excluded.end());
  return excluded;
}

bool kernels_read_in_place(const torch::Tensor& logits, int64_t rows) {
  return kernels::use_cpu_kernels() && logits.defined() && logits.dim() == 2 && logits.size(0) == rows &&
         logits.size(1) >= 1 && logits.is_cpu() && logits.scalar_type() == torch::kFloat32 && logits.is_contiguous();
}

int64_t token_limit(const GenerationOptions& options, int64_t vocab) {
  return options.vocab_limit > 0 && options.vocab_limit < vocab ? options.vocab_limit : vocab;
}

void warp_logits(const GenerationOptions& options, const torch::Tensor& scores, int64_t min_tokens_to_keep) {
  if (options.temperature != 1.0) apply_temperature(scores, options.temperature);
  if (options.top_k != 0) apply_top_k(scores, options.top_k, min_tokens_to_keep);
  if (options.top_p < 1.0) apply_top_p(scores, options.top_p, min_tokens_to_keep);
  if (options.min_p > 0.0) apply_min_p(scores, options.min_p, min_tokens_to_keep);  // 0 removes nothing
  if (options.typical_p < 1.0) apply_typical_p(scores, options.typical_p, min_tokens_to_keep);
  if (options.epsilon_cutoff > 0.0 && options.epsilon_cutoff < 1.0) {
    apply_epsilon_cutoff(scores, options.epsilon_cutoff, min_tokens_to_keep);
  }
  if (options.eta_cutoff > 0.0 && options.eta_cutoff < 1.0)
    apply_eta_cutoff(scores, options.eta_cutoff, min_tokens_to_keep);
}

}  // namespace srformer
