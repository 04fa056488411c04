// Independent byte-level BPE tokenization for the parity test: Hugging Face tokenizers (Rust, via
// npm @anush008/tokenizers) configured as BART's tokenizer: ByteLevel pre-tokenizer without prefix
// space, RoBERTa post-processor (<s> ... </s>), special tokens with <mask> stripping the space before it.
//
// usage: node bpe_reference.js MODULES_DIR VOCAB_JSON MERGES_TXT INPUT_JSONL OUTPUT_JSONL
'use strict';
const fs = require('fs');
const path = require('path');

async function main() {
  const [modules, vocab, merges, input, output] = process.argv.slice(2);
  const hf = require(path.join(modules, '@anush008', 'tokenizers'));
  const tokenizer = new hf.Tokenizer(await hf.BPE.fromFile(vocab, merges, {}));
  tokenizer.setPreTokenizer(hf.byteLevelPreTokenizer(false, true));
  tokenizer.addAddedTokens([
    new hf.AddedToken('<s>', true), new hf.AddedToken('<pad>', true), new hf.AddedToken('</s>', true),
    new hf.AddedToken('<unk>', true), new hf.AddedToken('<mask>', true, {leftStrip: true}),
  ]);
  const id = (t) => tokenizer.tokenToId(t);
  tokenizer.setPostProcessor(hf.robertaProcessing(['</s>', id('</s>')], ['<s>', id('<s>')], true, false));
  const texts = fs.readFileSync(input, 'utf8').split('\n').filter((l) => l.length > 0).map((l) => JSON.parse(l));
  const encodings = await tokenizer.encodeBatch(texts);
  fs.writeFileSync(output, encodings.map((e) => JSON.stringify(e.getIds())).join('\n') + '\n');
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
