// Independent ROUGE for the parity test: npm js-rouge (a TypeScript port of Lin's ROUGE equations).
//
// What js-rouge computes, and how it is driven here to be comparable with rouge-score:
//  * n(cand, ref, {n, beta}) / l(cand, ref, {beta, segmenter}) return one F-beta number. Its own
//    tokenizer is Penn Treebank (punctuation kept as tokens) and is case-sensitive, so we pass a
//    tokenizer with rouge-score's rule (lower-case, runs of non-[a-z0-9] -> one space, split); with
//    a custom tokenizer and no segmenter n() sees the whole text as one sentence.
//  * beta = 1 gives F1 = 2PR/(P+R); beta = 0 gives P and beta = Infinity gives R (fMeasure's special
//    cases), so precision and recall are compared too.
//  * l() is summary-level union LCS (what rouge-score calls rougeLsum), hits clipped by the
//    candidate's token counts (rouge-score also clips by the reference's, which never binds because
//    each reference position is counted once). With the segmenter s => [s] it is plain ROUGE-L;
//    with s => s.split('\n') minus empty lines it is rougeLsum. Ties between equally long LCS are
//    broken the same way (prefer moving along the reference), so the unions agree.
//  * js-rouge has no stemmer: stemming is not compared here (it is checked against NLTK instead).
//  * js-rouge throws RangeError on empty or whitespace-only text; such pairs come back as null.
//
// usage: node rouge_reference.js MODULES_DIR INPUT_JSONL OUTPUT_JSONL
//   input lines {"reference": "...", "prediction": "..."}; output lines
//   {"rouge1": [p, r, f], "rouge2": [...], "rougeL": [...], "rougeLsum": [...]} or null.
'use strict';
const fs = require('fs');
const path = require('path');

const rouge = require(path.join(process.argv[2], 'js-rouge'));
const tokenizer = (s) =>
  s.toLowerCase().replace(/[^a-z0-9]+/g, ' ').split(/\s+/).filter((t) => /^[a-z0-9]+$/.test(t));
const whole = (s) => [s];
const lines = (s) => s.split('\n').filter((x) => x.length > 0);

function prf(fn) {
  return [fn(0), fn(Infinity), fn(1)];
}

const out = [];
for (const line of fs.readFileSync(process.argv[3], 'utf8').split('\n')) {
  if (line.length === 0) continue;
  const {reference, prediction} = JSON.parse(line);
  try {
    out.push(JSON.stringify({
      rouge1: prf((beta) => rouge.n(prediction, reference, {n: 1, beta, tokenizer})),
      rouge2: prf((beta) => rouge.n(prediction, reference, {n: 2, beta, tokenizer})),
      rougeL: prf((beta) => rouge.l(prediction, reference, {beta, tokenizer, segmenter: whole})),
      rougeLsum: prf((beta) => rouge.l(prediction, reference, {beta, tokenizer, segmenter: lines})),
    }));
  } catch (e) {
    if (!(e instanceof RangeError)) throw e;
    out.push('null');
  }
}
fs.writeFileSync(process.argv[4], out.join('\n') + '\n');
