#!/usr/bin/env node
// The reference GPT-2 encoder: npm's gpt-3-encoder 1.1.4, the package that made the
// shipped Austen tokens (dev/data/package.json pins it; `npm ci` in dev/data installs
// it). Prints the token ids of FILE... as ./encode writes them, one per line: the EOT
// token (50256) before each document (a FILE, read as UTF-8).
//
//     node test/encoder/reference_encode.js FILE...
'use strict';
const fs = require('fs');
const path = require('path');
const modules = path.join(__dirname, '..', '..', 'dev', 'data', 'node_modules');
const { encode } = require(path.join(modules, 'gpt-3-encoder'));
const { version } = require(path.join(modules, 'gpt-3-encoder', 'package.json'));
if (version !== '1.1.4') {
  throw new Error(`gpt-3-encoder ${version} installed, expected 1.1.4 (npm ci in dev/data)`);
}
const files = process.argv.slice(2);
if (files.length === 0) {
  console.error('usage: node reference_encode.js FILE...');
  process.exit(2);
}
const lines = [];
for (const file of files) {
  lines.push(50256);
  for (const id of encode(fs.readFileSync(file, 'utf8'))) { lines.push(id); }
}
process.stdout.write(lines.join('\n') + '\n');
