#!/usr/bin/env node
// Encode each chapter with the pinned GPT-2 BPE of the npm package
// gpt-3-encoder (see package.json / package-lock.json).
//
// Usage: node austen_encode.js CHAPTERS_JSON TOKENS_JSON
// CHAPTERS_JSON: {"train": [{"text": ...}, ...], "val": [...]}
// TOKENS_JSON:   {"train": [[id, ...], ...], "val": [...]}, one array per
//                chapter, in the same order, without any EOT token.
'use strict';
const fs = require('fs');
const path = require('path');
const { encode } = require('gpt-3-encoder');

const pkg = require(path.join(path.dirname(require.resolve('gpt-3-encoder')), 'package.json'));
if (pkg.version !== '1.1.4') {
  throw new Error(`gpt-3-encoder ${pkg.version} installed, expected 1.1.4 (run npm ci)`);
}

const [inPath, outPath] = process.argv.slice(2);
if (!inPath || !outPath) {
  console.error('usage: node austen_encode.js CHAPTERS_JSON TOKENS_JSON');
  process.exit(2);
}

const chapters = JSON.parse(fs.readFileSync(inPath, 'utf8'));
const out = {};
for (const split of Object.keys(chapters)) {
  out[split] = chapters[split].map((ch, i) => {
    const ids = encode(ch.text);
    ids.forEach((id) => {
      if (!Number.isInteger(id) || id < 0 || id >= 50257) {
        throw new Error(`${split} chapter ${i}: bad token id ${id}`);
      }
    });
    return ids;
  });
  const n = out[split].reduce((a, t) => a + t.length, 0);
  console.log(`${split}: ${out[split].length} chapters, ${n} tokens (without EOT)`);
}
// One chapter per line keeps the file diff-able and quick to parse.
const lines = [];
for (const split of Object.keys(out)) {
  lines.push(JSON.stringify(split) + ':[\n' + out[split].map((t) => JSON.stringify(t)).join(',\n') + '\n]');
}
fs.writeFileSync(outPath, '{\n' + lines.join(',\n') + '\n}\n');
