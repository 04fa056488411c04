#pragma once
// Beam search with exactly the decisions of Hugging Face transformers 4.11 beam_search() and
// BeamSearchScorer / BeamHypotheses (one request = one HF batch row); with do_sample, beam sampling.
#include <cstdint>
#include <random>
#include <vector>

#include "model/generation/logits_processors.h"
#include "model/generation/searcher.h"
#include "model/kernels/beam_candidates.h"

namespace srformer {

class BeamSearcher : public Searcher {
 public:
  // Any num_beams >= 1 (HF uses greedy search for 1; this class then gives the same tokens).
  // A step ranks K = max(2, 1 + the number of EOS ids) * num_beams candidates (HF 4.26+; 2 * num_beams
  // with one EOS id, as 4.11).
  // do_sample: beam sampling as transformers 4.4x's _beam_search(do_sample=True) decides a step: the
  // warpers (temperature, top-k, top-p) act on each beam's processed log-probabilities, which then get
  // the beam's score, and K candidates are drawn without replacement from the softmax over all beams'
  // candidates, then ranked by score as beam search ranks its top K. (4.11 warped after adding the beam
  // score, so its temperature rescaled the whole history at every step.) Top-k and top-p keep at least
  // K tokens per beam, where HF keeps K / num_beams and fails when fewer than K candidates are left to
  // draw. The draws use a generator seeded from options.seed.
  //
  // num_beam_groups > 1: diverse beam search as transformers 4.3x's _group_beam_search and its
  // BeamSearchScorer decide it. Group g holds rows [g * G, (g + 1) * G), G = num_beams / num_beam_groups,
  // and is a beam search of G beams with hypotheses of its own (G kept, its own early stopping); the
  // groups take their step in order, and group g's processed log-probabilities first lose
  // diversity_penalty times the number of times groups 0..g-1 chose each token at this step
  // (HammingDiversityLogitsProcessor, after the sequence bias, before the other processors). The results
  // are the best of all groups' hypotheses. A group that is done leaves the batch at once (its rows are
  // left out of parent_rows): HF keeps feeding it the pad token, which the later groups' penalty counts
  // G times, as here, and which changes nothing else.
  explicit BeamSearcher(const GenerationOptions& options);

  int64_t num_rows() const override { return rows_; }
  // Per step (per group): scores = processors(log_softmax(logits)) + beam score; the top K of all beams'
  // candidates, best first, are taken in order: an EOS candidate ranked among the first num_beams (G)
  // becomes a finished hypothesis, other candidates fill the next beams.
  SearchStep advance(const torch::Tensor& logits) override;
  bool done() const override { return done_; }
  std::vector<Hypothesis> results() const override;
  int64_t steps() const override { return steps_; }

 private:
  struct Finished {
    double score;                 // sum_logprobs / len(tokens) ** length_penalty
    TokenHistory tokens;          // decoder start included, EOS excluded
    std::vector<float> logprobs;  // each new token's processed log-probability, EOS included
    FinishReason reason;
    int64_t eos;  // the EOS id that ended it (kEos)
  };
  // One group's beam search (the whole search without groups): HF's beams of it and its BeamHypotheses.
  struct Group {
    std::vector<TokenHistory> beams;  // HF input_ids of each running beam
    std::vector<float> beam_scores;   // sum of log-probs of each running beam (float32 as in HF)
    // Each running beam's tokens' processed log-probabilities: HF's transition scores (its beam scores
    // are their running float sums, whose steps differ from them by the sums' rounding).
    std::vector<std::vector<float>> beam_logprobs;
    std::vector<Finished> finished;  // in insertion order, as HF's list (order breaks ties)
    double worst_score = 1e9;
    bool done = false;
  };
  // One step of `group` over its rows' logits [G, vocab], `earlier` the tokens the groups before it chose at
  // this step: its beams move on (parents and tokens appended to `parents` and `tokens`, rows of the group),
  // or it is done.
  void advance_group(Group& group, const torch::Tensor& logits, const std::vector<int64_t>& earlier,
                     std::vector<int64_t>& parents, std::vector<int64_t>& tokens);
  // The `count` best candidates (score, index beam * vocab + token), best first, from the logits where they
  // lie (kernels::beam_candidates); empty where that does not apply (processors that change scores,
  // no CPU kernels, NaN): advance() then scores a copy of the logits as HF does.
  std::vector<kernels::BeamCandidate> candidates_in_place(const Group& group, const torch::Tensor& logits,
                                                          int64_t count) const;
  // Beam sampling: `count` candidates drawn without replacement from softmax(scores) over all beams'
  // candidates [num_beams, vocab] (where fewer have a positive probability, the rest by score, then the
  // filtered ones at -inf, lowest index first), best score first (ties by index), each with its entry of
  // `logprobs` (the warped log-probabilities without the beam scores).
  std::vector<kernels::BeamCandidate> sample_candidates(const torch::Tensor& scores, const torch::Tensor& logprobs,
                                                        int64_t count);
  // BeamHypotheses.add: keeps the group's G best finished hypotheses.
  void add_hypothesis(Group& group, const TokenHistory& tokens, float sum_logprobs, std::vector<float> logprobs,
                      FinishReason reason, int64_t eos = -1) const;
  // BeamHypotheses.is_done.
  bool hypotheses_done(const Group& group, float best_sum_logprobs, int64_t cur_len) const;

  const GenerationOptions options_;
  SequenceBias sequence_bias_;     // options_.sequence_bias, prepared once for every step
  const int64_t group_size_;       // G = num_beams / num_beam_groups
  std::vector<Group> groups_;      // num_beam_groups of them, in HF's order
  int64_t rows_;                   // G per group not done
  torch::Tensor logits_, scores_;  // this step's logits copy and log-probabilities (reused buffers)
  std::mt19937_64 rng_;            // beam sampling's draws
  int64_t steps_ = 0;
  bool done_ = false;
};

}  // namespace srformer
