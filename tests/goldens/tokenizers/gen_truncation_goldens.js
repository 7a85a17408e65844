// Truncation goldens: how Hugging Face's npm `tokenizers` cuts single texts and
// pairs under each strategy, budget and direction. kiln's
// tests/tokenizers/truncation_test.cpp must reproduce every case exactly.
//
//   node gen_truncation_goldens.js SHARED_TOKENIZERS_DIR CORPUS OUT.json
//
// Writes
//   grid:  a WordLevel tokenizer whose words a0..a39 / b0..b39 have ids that
//          name their position, with and without a BertProcessing
//          post-processor: every pair length (0..max_length+1 and
//          2*max_length+1 tokens on each side) for max_length 1..9, special
//          tokens on/off, truncation right/left, stride 0. The ids show which
//          tokens were kept.
//   models: bert-base-uncased, gpt2 and t5-small on pairs of corpus lines,
//          LongestFirst with odd and even budgets, special tokens on/off,
//          right and left.
// Budgets smaller than the special tokens of the input are left out: the
// Rust library subtracts them in unsigned arithmetic and wraps around (kiln
// rejects that budget with an error instead).
'use strict';
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require('tokenizers');

const [sharedDir, corpusPath, outPath] = process.argv.slice(2);
if (!sharedDir || !corpusPath || !outPath) {
  console.error('usage: node gen_truncation_goldens.js SHARED_TOKENIZERS_DIR CORPUS OUT.json');
  process.exit(2);
}

const kWords = 40;
function wordLevel(withProcessor) {
  const vocab = { '[UNK]': 0, '[CLS]': 1, '[SEP]': 2 };
  for (let i = 0; i < kWords; i++) vocab['a' + i] = 10 + i;
  for (let i = 0; i < kWords; i++) vocab['b' + i] = 100 + i;
  const special = (id, content) => ({ id, content, single_word: false, lstrip: false, rstrip: false,
                                      normalized: false, special: true });
  return {
    version: '1.0', truncation: null, padding: null,
    added_tokens: [special(0, '[UNK]'), special(1, '[CLS]'), special(2, '[SEP]')],
    normalizer: null, pre_tokenizer: { type: 'WhitespaceSplit' },
    post_processor: withProcessor ? { type: 'BertProcessing', sep: ['[SEP]', 2], cls: ['[CLS]', 1] }
                                  : null,
    decoder: null,
    model: { type: 'WordLevel', vocab, unk_token: '[UNK]' },
  };
}
const words = (p, n) => Array.from({ length: n }, (_, i) => p + i).join(' ');

async function grid() {
  const out = [];
  for (const withProcessor of [true, false]) {
    const spec = wordLevel(withProcessor);
    const tok = Tokenizer.fromString(JSON.stringify(spec));
    const settings = [];
    for (const addSpecialTokens of [true, false]) {
      for (const direction of ['right', 'left']) {
        for (let maxLength = 1; maxLength <= 9; maxLength++) {
          tok.setTruncation(maxLength, { strategy: 'LongestFirst', direction, stride: 0 });
          const lengths = [];
          for (let n = 0; n <= maxLength + 1; n++) lengths.push(n);
          lengths.push(2 * maxLength + 1);
          const added = withProcessor && addSpecialTokens ? 3 : 0;
          const single = [], pairs = [];
          if (maxLength >= (withProcessor && addSpecialTokens ? 2 : 0)) {
            for (const n1 of lengths) {
              const e = await tok.encode(words('a', n1), null, { addSpecialTokens });
              single.push({ n1, ids: e.getIds() });
            }
          }
          if (maxLength >= added) {
            for (const n1 of lengths) {
              for (const n2 of lengths) {
                const e = await tok.encode(words('a', n1), words('b', n2), { addSpecialTokens });
                pairs.push({ n1, n2, ids: e.getIds() });
              }
            }
          }
          settings.push({ max_length: maxLength, direction, add_special_tokens: addSpecialTokens,
                          single, pairs });
        }
      }
    }
    out.push({ name: withProcessor ? 'word_level_bert_processing' : 'word_level_no_processor',
               tokenizer: spec, settings });
  }
  return out;
}

async function models() {
  const corpus = fs.readFileSync(corpusPath, 'utf8').split('\n');
  if (corpus[corpus.length - 1] === '') corpus.pop();
  const pairs = [];
  for (let i = 0; i + 1 < corpus.length && pairs.length < 40; i += 3) pairs.push([i, i + 1]);
  const out = [];
  for (const model of ['bert-base-uncased', 'gpt2', 't5-small']) {
    const tok = Tokenizer.fromFile(path.join(sharedDir, model, 'tokenizer.json'));
    const settings = [];
    for (const [maxLength, direction] of [[9, 'right'], [10, 'right'], [15, 'right'], [16, 'right'],
                                          [31, 'right'], [32, 'right'], [15, 'left'], [16, 'left']]) {
      for (const addSpecialTokens of [true, false]) {
        tok.setTruncation(maxLength, { strategy: 'LongestFirst', direction, stride: 0 });
        const results = [];
        for (const [a, b] of pairs) {
          const e = await tok.encode(corpus[a], corpus[b], { addSpecialTokens });
          results.push({ a, b, ids: e.getIds() });
        }
        settings.push({ max_length: maxLength, direction, add_special_tokens: addSpecialTokens,
                        results });
      }
    }
    out.push({ model, settings });
  }
  return out;
}

async function main() {
  const out = { generator: 'npm tokenizers ' + require('tokenizers/package.json').version,
                grid: await grid(), models: await models() };
  fs.writeFileSync(outPath, JSON.stringify(out));
  let n = 0;
  for (const t of out.grid) for (const s of t.settings) n += s.single.length + s.pairs.length;
  console.log(`grid: ${n} encodings; models: ${out.models.length}`);
}
main().catch((e) => { console.error(e); process.exit(1); });
