// Generates the expected encodings kiln's tokenizer tests compare against, with
// Hugging Face's own implementation (npm `tokenizers`, the Node binding of the
// Rust library Python uses). See README.md for how to run it.
//
//   node gen_tokenizer_goldens.js SHARED_TOKENIZERS_DIR CORPUS OUT_DIR
//
// Writes OUT_DIR/<model>.json for every model directory below, each holding
//   lines:  per corpus line {ids, type_ids, tokens, offsets, special_tokens_mask,
//           attention_mask, decoded, decoded_skip}
//   pairs:  pair encodings of consecutive lines
//   batches: encodeBatch results under truncation/padding settings
'use strict';
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require('tokenizers');

const [sharedDir, corpusPath, outDir] = process.argv.slice(2);
if (!sharedDir || !corpusPath || !outDir) {
  console.error('usage: node gen_tokenizer_goldens.js SHARED_TOKENIZERS_DIR CORPUS OUT_DIR');
  process.exit(2);
}
const models = ['bert-base-uncased', 'gpt2', 't5-small'];
// One corpus line is one text; the trailing newline of the file ends the last line.
const corpus = fs.readFileSync(corpusPath, 'utf8').split('\n');
if (corpus[corpus.length - 1] === '') corpus.pop();

function dump(e) {
  return {
    ids: e.getIds(),
    type_ids: e.getTypeIds(),
    tokens: e.getTokens(),
    offsets: e.getOffsets(),
    special_tokens_mask: e.getSpecialTokensMask(),
    attention_mask: e.getAttentionMask(),
  };
}

// Batches of single texts (encodeBatch) under truncation + padding settings.
const batchSettings = [
  { name: 'longest_first_16_pad_longest', truncation: { maxLength: 16, strategy: 'LongestFirst' },
    padding: {} },
  { name: 'longest_first_24_pad_multiple_8', truncation: { maxLength: 24, strategy: 'LongestFirst' },
    padding: { padToMultipleOf: 8 } },
  { name: 'left_truncate_20_left_pad_fixed_32',
    truncation: { maxLength: 20, strategy: 'LongestFirst', direction: 'left' },
    padding: { maxLength: 32, direction: 'left' } },
  { name: 'no_truncation_pad_longest', truncation: null, padding: {} },
];
// Pairs encoded one by one under each truncation strategy (no padding).
const pairTruncations = [
  { name: 'longest_first_16', maxLength: 16, strategy: 'LongestFirst' },
  { name: 'only_first_24', maxLength: 24, strategy: 'OnlyFirst' },
  { name: 'only_second_20', maxLength: 20, strategy: 'OnlySecond' },
];

async function main() {
  fs.mkdirSync(outDir, { recursive: true });
  for (const name of models) {
    const file = path.join(sharedDir, name, 'tokenizer.json');
    const tok = Tokenizer.fromFile(file);
    const lines = [];
    for (const text of corpus) {
      const e = await tok.encode(text);
      const d = dump(e);
      d.decoded = await tok.decode(d.ids, false);
      d.decoded_skip = await tok.decode(d.ids, true);
      const raw = await tok.encode(text, null, { addSpecialTokens: false });
      d.ids_no_special = raw.getIds();
      lines.push(d);
    }
    const pairs = [];
    for (let i = 0; i + 1 < corpus.length && pairs.length < 40; i += 4) {
      const e = await tok.encode(corpus[i], corpus[i + 1]);
      pairs.push({ a: i, b: i + 1, ...dump(e) });
    }
    const batchInputs = [];
    for (let i = 0; i < corpus.length && batchInputs.length < 24; i += 7) batchInputs.push(i);
    const batches = [];
    for (const s of batchSettings) {
      if (s.truncation) {
        tok.setTruncation(s.truncation.maxLength,
                          { strategy: s.truncation.strategy, direction: s.truncation.direction });
      } else {
        tok.disableTruncation();
      }
      tok.setPadding(s.padding);
      const enc = await tok.encodeBatch(batchInputs.map((i) => corpus[i]));
      batches.push({ ...s, inputs: batchInputs, encodings: enc.map(dump) });
      tok.disableTruncation();
      tok.disablePadding();
    }
    const pairTruncation = [];
    for (const t of pairTruncations) {
      tok.setTruncation(t.maxLength, { strategy: t.strategy });
      const results = [];
      for (const p of pairs) {
        try {
          const e = await tok.encode(corpus[p.a], corpus[p.b]);
          results.push({ a: p.a, b: p.b, ...dump(e) });
        } catch (err) {
          results.push({ a: p.a, b: p.b, error: String(err.message || err) });
        }
      }
      pairTruncation.push({ ...t, results });
      tok.disableTruncation();
    }
    const out = { model: name, generator: 'npm tokenizers ' + require('tokenizers/package.json').version,
                  lines, pairs, batches, pair_truncation: pairTruncation };
    fs.writeFileSync(path.join(outDir, name + '.json'), JSON.stringify(out));
    console.log(`${name}: ${lines.length} lines, ${pairs.length} pairs, ${batches.length} batch settings`);
  }
}
main().catch((e) => { console.error(e); process.exit(1); });
