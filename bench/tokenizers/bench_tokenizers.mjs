// Node side of the tokenizer benchmark (see README.md):
//   node bench_tokenizers.mjs make-corpus OUT MB      deterministic corpus
//   node bench_tokenizers.mjs rust  CORPUS DIR...     npm `tokenizers` (Rust binding)
//   node bench_tokenizers.mjs js    CORPUS DIR...     npm `@huggingface/tokenizers` (pure JS)
// Prints one JSON line per measurement, like bench_tokenizers (C++).
// The Rust binding's encodeBatch uses all cores; run it with
// TOKENIZERS_PARALLELISM=false for the single-threaded number.
import fs from 'node:fs';
import path from 'node:path';
import os from 'node:os';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const [mode, ...rest] = process.argv.slice(2);

function lcg(seed) {
  let s = seed >>> 0;
  return () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32);
}

if (mode === 'make-corpus') {
  // Sentences re-assembled from the test corpus words: mostly prose with
  // some code, numbers and non-Latin text, ~MB megabytes, fixed seed.
  const [out, mb, source] = rest;
  const words = fs.readFileSync(source, 'utf8').split(/\s+/).filter(Boolean);
  const rand = lcg(42);
  const target = Number(mb) * 1e6;
  const lines = [];
  let size = 0;
  while (size < target) {
    const n = 5 + Math.floor(rand() * 40);
    const line = Array.from({ length: n }, () => words[Math.floor(rand() * words.length)]).join(' ');
    lines.push(line);
    size += Buffer.byteLength(line) + 1;
  }
  fs.writeFileSync(out, lines.join('\n') + '\n');
  console.error(`corpus: ${lines.length} lines, ${(size / 1e6).toFixed(1)} MB -> ${out}`);
  process.exit(0);
}

const [corpus, ...dirs] = rest;
const lines = fs.readFileSync(corpus, 'utf8').split('\n');
if (lines[lines.length - 1] === '') lines.pop();
const bytes = lines.reduce((a, l) => a + Buffer.byteLength(l), 0);
const report = (impl, model, threads, tokens, seconds) =>
  console.log(JSON.stringify({ impl, model, threads, lines: lines.length, tokens,
    seconds: +seconds.toFixed(3), tokens_per_s: Math.round(tokens / seconds),
    mb_per_s: +(bytes / seconds / 1e6).toFixed(2) }));

for (const dir of dirs) {
  const model = path.basename(dir);
  const file = path.join(dir, 'tokenizer.json');
  if (mode === 'rust') {
    const { Tokenizer } = require('tokenizers');
    const tok = Tokenizer.fromFile(file);
    await tok.encodeBatch(lines.slice(0, 1000));
    const t0 = performance.now();
    const enc = await tok.encodeBatch(lines);
    const t = (performance.now() - t0) / 1000;
    const tokens = enc.reduce((a, e) => a + e.getLength(), 0);
    const threads = process.env.TOKENIZERS_PARALLELISM === 'false' ? 1 : os.cpus().length;
    report('npm tokenizers (Rust)', model, threads, tokens, t);
  } else if (mode === 'js') {
    const { Tokenizer } = await import('@huggingface/tokenizers');
    const json = JSON.parse(fs.readFileSync(file, 'utf8'));
    const cfgPath = path.join(dir, 'tokenizer_config.json');
    const cfg = fs.existsSync(cfgPath) ? JSON.parse(fs.readFileSync(cfgPath, 'utf8')) : {};
    const tok = new Tokenizer(json, cfg);
    for (const l of lines.slice(0, 1000)) tok.encode(l);
    const t0 = performance.now();
    let tokens = 0;
    for (const l of lines) tokens += tok.encode(l).ids.length;
    const t = (performance.now() - t0) / 1000;
    report('@huggingface/tokenizers (JS)', model, 1, tokens, t);
  } else {
    console.error('usage: node bench_tokenizers.mjs make-corpus|rust|js ...');
    process.exit(2);
  }
}
