#!/usr/bin/env node
// Summarize a file with srformer-server from Node.js (@grpc/grpc-js + @grpc/proto-loader).
//   npm install && node summarize.js --target localhost:50051 [--stream] [--model NAME] [--max-new-tokens N] FILE
'use strict';
const fs = require('fs');
const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const usage = 'usage: node summarize.js [--target HOST:PORT] [--model NAME] [--stream] [--max-new-tokens N] FILE';
const fail = (message) => {
  console.error(`error: ${message}\n${usage}`);
  process.exit(2);
};
const args = process.argv.slice(2);
const flag = (name, dflt) => {
  const i = args.indexOf(name);
  if (i < 0) return dflt;
  if (i + 1 >= args.length) fail(`${name} needs a value`);
  return args.splice(i, 2)[1];
};
const target = flag('--target', 'localhost:50051');
const model = flag('--model', '');
const maxNewTokensText = flag('--max-new-tokens', undefined);  // unset: the model's default
// A whole number in int32's range: Number() would send 'abc' as 0 and 1.5 as 1, and protobufjs wraps
// 2^32 + 5 to 5.
const maxNewTokens = maxNewTokensText === undefined ? undefined : Number(maxNewTokensText);
if (maxNewTokensText !== undefined &&
    (!/^[+-]?\d+$/.test(maxNewTokensText.trim()) || Math.abs(maxNewTokens) > 2147483647)) {
  fail(`--max-new-tokens takes a whole number (int32), not '${maxNewTokensText}'`);
}
const stream = args.includes('--stream');
const file = args.filter((a) => a !== '--stream')[0];
if (!file) fail('no FILE given');

const def = protoLoader.loadSync(path.join(__dirname, '../../proto/srformer/v1/summarizer.proto'), {
  keepCase: true, longs: Number, enums: String, defaults: true, oneofs: true,
});
const {Summarizer} = grpc.loadPackageDefinition(def).srformer.v1;
// Calls refused before any work (a full queue, a server shutting down) are sent again, after the
// server's grpc-retry-pushback-ms where it gives one (docs/API.md, "Retries").
const retry = {methodConfig: [{name: [{service: 'srformer.v1.Summarizer'}], retryPolicy: {
  maxAttempts: 3, initialBackoff: '0.2s', maxBackoff: '5s', backoffMultiplier: 2,
  retryableStatusCodes: ['UNAVAILABLE', 'RESOURCE_EXHAUSTED']}}]};
const client = new Summarizer(target, grpc.credentials.createInsecure(),
                              {'grpc.service_config': JSON.stringify(retry)});
// document is bytes on the wire: send the UTF-8 encoding of the text.
const options = maxNewTokens === undefined ? {} : {max_new_tokens: Number(maxNewTokens)};
let document;
try {
  document = fs.readFileSync(file);
} catch (e) {
  console.error(`error: cannot read ${file}: ${e.code === 'ENOENT' ? 'No such file or directory' : e.message}`);
  process.exit(2);
}
const request = {model, document, options};
// Status codes by name (14 is UNAVAILABLE).
const codeName = (code) => Object.keys(grpc.status).find((k) => grpc.status[k] === code) || String(code);

if (stream) {
  const call = client.SummarizeStream(request);
  call.on('data', (msg) => {
    if (msg.event === 'token') process.stdout.write(msg.token.text);
    else console.log('\n' + JSON.stringify(msg.final.usage));
  });
  call.on('error', (e) => { console.error(`error: ${codeName(e.code)}: ${e.details}`); process.exit(1); });
} else {
  client.Summarize(request, (err, resp) => {
    if (err) { console.error(`error: ${codeName(err.code)}: ${err.details}`); process.exit(1); }
    console.log(resp.summary);
    console.log(JSON.stringify(resp.usage));
  });
}
