#!/usr/bin/env node
// The reference GPT-2 encoder: tiktoken's GPT-2 encoding, the tokens llm.c's data
// scripts write, run by npm's tiktoken 1.0.22 (tiktoken's Rust core built as
// WebAssembly; dev/data/package.json pins it, `npm ci` in dev/data installs it).
// Prints the token ids of FILE... as ./encode writes them, one per line: the EOT
// token (50256) before each document (a FILE, read as UTF-8), its text encoded as
// ordinary text ("<|endoftext|>" in a text is no special token, as in ./encode).
//
//     node test/encoder/reference_encode.js FILE...
'use strict';
const fs = require('fs');
const path = require('path');
const modules = path.join(__dirname, '..', '..', 'dev', 'data', 'node_modules');
const { get_encoding } = require(path.join(modules, 'tiktoken'));
const { version } = require(path.join(modules, 'tiktoken', 'package.json'));
if (version !== '1.0.22') {
  throw new Error(`tiktoken ${version} installed, expected 1.0.22 (npm ci in dev/data)`);
}
const files = process.argv.slice(2);
if (files.length === 0) {
  console.error('usage: node reference_encode.js FILE...');
  process.exit(2);
}
const enc = get_encoding('gpt2');
const lines = [];
for (const file of files) {
  lines.push(50256);
  for (const id of enc.encode_ordinary(fs.readFileSync(file, 'utf8'))) { lines.push(id); }
}
enc.free();
process.stdout.write(lines.join('\n') + '\n');
