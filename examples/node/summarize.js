#!/usr/bin/env node
// Summarize a file with srformer-server from Node.js (@grpc/grpc-js + @grpc/proto-loader).
//   npm install && node summarize.js --target localhost:50051 [--stream] [--model NAME] [--max-new-tokens N]
//       [--num-beams N] [--deadline-ms N] FILE
// A call has no deadline unless --deadline-ms gives one: a long document on a CPU may rightly take minutes
// (docs/API.md, as srformer-client's --deadline-ms).
'use strict';
const fs = require('fs');
const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const usage = 'usage: node summarize.js [--target HOST:PORT] [--model NAME] [--stream] [--max-new-tokens N] ' +
              '[--num-beams N] [--deadline-ms N] FILE';
const fail = (message) => {
  console.error(`error: ${message}\n${usage}`);
  process.exit(2);
};
// Flags as the Python example's argparse takes them: '--flag value' or '--flag=value', '--' before a FILE
// that starts with '-'; an unknown flag is refused by name (it was taken as the FILE: 'cannot read
// --num-beams').
const valued = new Set(['--target', '--model', '--max-new-tokens', '--num-beams', '--deadline-ms']);
const given = {};
const files = [];
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; ++i) {
  const arg = argv[i];
  if (arg === '--') {
    files.push(...argv.slice(i + 1));
    break;
  }
  if (!arg.startsWith('-') || arg === '-') {
    files.push(arg);
    continue;
  }
  const eq = arg.indexOf('=');
  const name = eq < 0 ? arg : arg.slice(0, eq);
  if (name === '--stream') {
    if (eq >= 0) fail('--stream takes no value');
    given.stream = true;
  } else if (valued.has(name)) {
    if (eq >= 0) {
      given[name] = arg.slice(eq + 1);
    } else {
      if (i + 1 >= argv.length) fail(`${name} needs a value`);
      given[name] = argv[++i];
    }
  } else {
    fail(`unknown flag '${name}'`);
  }
}
const target = given['--target'] ?? 'localhost:50051';
const model = given['--model'] ?? '';
const stream = given.stream === true;
// A whole number in int32's range: Number() would send 'abc' as 0 and 1.5 as 1, and protobufjs wraps
// 2^32 + 5 to 5. Unset: the model's default.
const int32Flag = (name) => {
  const text = given[name];
  if (text === undefined) return undefined;
  if (!/^[+-]?\d+$/.test(text.trim()) || Math.abs(Number(text)) > 2147483647) {
    fail(`${name} takes a whole number (int32), not '${text}'`);
  }
  return Number(text);
};
const maxNewTokens = int32Flag('--max-new-tokens');
const numBeams = int32Flag('--num-beams');
// As srformer-client's --deadline-ms: 0 (the default) is none; past a day is no deadline a summary needs.
const deadlineMs = (() => {
  const text = given['--deadline-ms'];
  if (text === undefined) return 0;
  if (!/^[+-]?\d+$/.test(text.trim()) || Number(text) < 0 || Number(text) > 24 * 3600 * 1000) {
    fail(`--deadline-ms must be from 0 (no deadline) to 86400000 (a day), got ${text}`);
  }
  return Number(text);
})();
if (files.length === 0) fail('no FILE given');
if (files.length > 1) fail(`one FILE at a time: got ${files.map((f) => `'${f}'`).join(' and ')}`);
const file = files[0];

const def = protoLoader.loadSync(path.join(__dirname, '../../proto/srformer/v1/summarizer.proto'), {
  keepCase: true, longs: Number, enums: String, defaults: true, oneofs: true,
});
const {Summarizer} = grpc.loadPackageDefinition(def).srformer.v1;
// Calls refused before any work (a full queue, a server shutting down) are sent again, after the
// server's grpc-retry-pushback-ms where it gives one (docs/API.md, "Retries"). gRPC sends again only what
// fits its retry buffers, 1 MiB a call and 16 MiB for the channel's calls together unless set: a longer
// document was sent once.
const retry = {methodConfig: [{name: [{service: 'srformer.v1.Summarizer'}], retryPolicy: {
  maxAttempts: 3, initialBackoff: '0.2s', maxBackoff: '5s', backoffMultiplier: 2,
  retryableStatusCodes: ['UNAVAILABLE', 'RESOURCE_EXHAUSTED']}}]};
const client = new Summarizer(target, grpc.credentials.createInsecure(), {
  'grpc.service_config': JSON.stringify(retry),
  'grpc.per_rpc_retry_buffer_size': 2147483647,
  'grpc.retry_buffer_size': 2147483647,
});
// document is bytes on the wire: send the UTF-8 encoding of the text.
// Set only when given (0 included: the server then says why it refuses it).
const options = {};
if (maxNewTokens !== undefined) options.max_new_tokens = maxNewTokens;
if (numBeams !== undefined) options.num_beams = numBeams;
let document;
try {
  document = fs.readFileSync(file);
} catch (e) {
  console.error(`error: cannot read ${file}: ${e.code === 'ENOENT' ? 'No such file or directory' : e.message}`);
  process.exit(2);
}
const request = {model, document, options};
// No deadline unless asked for: a long document on a CPU may rightly take minutes.
const callOptions = deadlineMs > 0 ? {deadline: Date.now() + deadlineMs} : {};
// Status codes by name (14 is UNAVAILABLE).
const codeName = (code) => Object.keys(grpc.status).find((k) => grpc.status[k] === code) || String(code);

if (stream) {
  const call = client.SummarizeStream(request, callOptions);
  call.on('data', (msg) => {
    if (msg.event === 'token') process.stdout.write(msg.token.text);
    else console.log('\n' + JSON.stringify(msg.final.usage));
  });
  call.on('error', (e) => { console.error(`error: ${codeName(e.code)}: ${e.details}`); process.exit(1); });
} else {
  client.Summarize(request, callOptions, (err, resp) => {
    if (err) { console.error(`error: ${codeName(err.code)}: ${err.details}`); process.exit(1); }
    console.log(resp.summary);
    console.log(JSON.stringify(resp.usage));
  });
}
