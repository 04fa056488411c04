// Hugging Face tokenizers (Rust, via npm @anush008/tokenizers) run on a tokenizer.json, for the parity
// tests: each input line is {"text": ...} (encoded with the post-processor's special tokens, then its ids
// decoded) or {"ids": [...]} (decoded only); each output line is {"ids", "decoded", "decoded_all"}, the
// decodes with and without skip_special_tokens (the tokenizer's decoder, before transformers' clean-up).
//
// usage: node hf_reference.js MODULES_DIR TOKENIZER_JSON INPUT_JSONL OUTPUT_JSONL
'use strict';
const fs = require('fs');
const path = require('path');

async function main() {
  const [modules, tokenizerJson, input, output] = process.argv.slice(2);
  const hf = require(path.join(modules, '@anush008', 'tokenizers'));
  const tokenizer = hf.Tokenizer.fromFile(tokenizerJson);
  const lines = fs.readFileSync(input, 'utf8').split('\n').filter((l) => l.length > 0).map((l) => JSON.parse(l));
  const out = [];
  for (const line of lines) {
    const ids = 'ids' in line ? line.ids : (await tokenizer.encode(line.text, null, {addSpecialTokens: true})).getIds();
    out.push(JSON.stringify({
      ids,
      decoded: await tokenizer.decode(ids, true),
      decoded_all: await tokenizer.decode(ids, false),
    }));
  }
  fs.writeFileSync(output, out.join('\n') + '\n');
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
