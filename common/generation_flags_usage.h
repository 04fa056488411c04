#pragma once
// The --help lines of the generation flags (the request's GenerationOptions) that srformer-client,
// `srformer summarize` and `srformer eval` share: one text, so that a flag reads the same in each (they had
// drifted: "--expected-length N" in one, "L (SRformer schedule; ...)" in another, eval without most).

namespace srformer {

// The options that act without sampling: all that `srformer eval`, which never samples, takes.
inline constexpr const char* kSearchFlagsUsage =
    "  --max-new-tokens N --min-new-tokens N --num-beams N --length-penalty X\n"
    "  --early-stopping | --no-early-stopping | --early-stopping-never (beam search: true, false, \"never\")\n"
    "  --no-repeat-ngram-size N --repetition-penalty X --expected-length L (SRformer schedule; default: the\n"
    "  model's srformer.expected_length, else max-new-tokens)\n"
    "  --encoder-repetition-penalty X --encoder-no-repeat-ngram-size N (the document's own tokens)\n"
    "  --bad-word WORD (never generate WORD, a word or phrase, after a space or inside a word; repeat it\n"
    "  for more, at most 256)\n"
    "  --num-beam-groups N --diversity-penalty X (diverse beam search: N groups of num-beams / N beams, a\n"
    "  token an earlier group chose at the step costs X in the later ones)\n";

// Sampling's (srformer-client and `srformer summarize`).
inline constexpr const char* kSamplingFlagsUsage =
    "  --do-sample | --no-sample, --temperature X --top-k N --top-p X --seed N\n"
    "  --min-p X --typical-p X --epsilon-cutoff X --eta-cutoff X (sampling's further warpers)\n"
    "  (--do-sample with --num-beams N > 1 samples the beams: Hugging Face's beam sampling)\n";

}  // namespace srformer
