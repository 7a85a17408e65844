// Overflowing-token goldens: what Hugging Face's npm `tokenizers` puts in
// Encoding.overflowing when it truncates (with a stride), for single texts and
// pairs, each post-processor family, truncation direction and padding. kiln's
// tests/tokenizers/overflow_test.cpp must reproduce every piece, recursively.
//
//   node gen_overflow_goldens.js SHARED_TOKENIZERS_DIR CORPUS COMPONENTS_JSON OUT.json
//
// COMPONENTS_JSON is tests/goldens/tokenizers/components.json (its RoBERTa-style
// byte-level tokenizer is reused). Each case records the encoding with all its
// fields and its overflowing pieces (which can have pieces of their own).
//
// The Rust library panics (and the Node process aborts) when a sequence has
// to be cut to a length <= stride, so the cases keep stride below every
// length a sequence can be cut to: < max_length for single texts,
// < max_length / 2 for LongestFirst pairs, 0 for OnlyFirst / OnlySecond.
// Setting a stride above max_length less the special tokens of a single text
// is refused by the library (setTruncation panics in Node), so those are left
// out too. Budgets smaller than the special tokens are left out (the library
// wraps around; kiln rejects them).
'use strict';
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require('tokenizers');

const [sharedDir, corpusPath, componentsPath, outPath] = process.argv.slice(2);
if (!sharedDir || !corpusPath || !componentsPath || !outPath) {
  console.error('usage: node gen_overflow_goldens.js SHARED_TOKENIZERS_DIR CORPUS COMPONENTS_JSON OUT.json');
  process.exit(2);
}

function dump(e) {
  return {
    ids: e.getIds(),
    type_ids: e.getTypeIds(),
    tokens: e.getTokens(),
    offsets: e.getOffsets(),
    special_tokens_mask: e.getSpecialTokensMask(),
    attention_mask: e.getAttentionMask(),
    word_ids: e.getWordIds().map((w) => (w === undefined ? null : w)),
    overflowing: e.getOverflowing().map(dump),
  };
}

const special = (id, content) => ({ id, content, single_word: false, lstrip: false, rstrip: false,
                                    normalized: false, special: true });
// Words a0..a39 and b0..b39, one token each; processor: 'bert', 'template' or null.
function wordLevel(processor) {
  const vocab = { '[UNK]': 0, '[CLS]': 1, '[SEP]': 2 };
  for (let i = 0; i < 40; i++) vocab['a' + i] = 10 + i;
  for (let i = 0; i < 40; i++) vocab['b' + i] = 100 + i;
  const post = {
    bert: { type: 'BertProcessing', sep: ['[SEP]', 2], cls: ['[CLS]', 1] },
    // B takes type id 0 in the template: its overflowing pieces keep 1.
    template: {
      type: 'TemplateProcessing',
      single: [{ SpecialToken: { id: '[CLS]', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } },
               { SpecialToken: { id: '[SEP]', type_id: 0 } }],
      pair: [{ SpecialToken: { id: '[CLS]', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } },
             { SpecialToken: { id: '[SEP]', type_id: 0 } }, { Sequence: { id: 'B', type_id: 0 } },
             { SpecialToken: { id: '[SEP]', type_id: 1 } }],
      special_tokens: { '[CLS]': { id: '[CLS]', ids: [1], tokens: ['[CLS]'] },
                        '[SEP]': { id: '[SEP]', ids: [2], tokens: ['[SEP]'] } },
    },
  };
  return {
    version: '1.0', truncation: null, padding: null,
    added_tokens: [special(0, '[UNK]'), special(1, '[CLS]'), special(2, '[SEP]')],
    normalizer: null, pre_tokenizer: { type: 'WhitespaceSplit' },
    post_processor: processor ? post[processor] : null, decoder: null,
    model: { type: 'WordLevel', vocab, unk_token: '[UNK]' },
  };
}
const words = (p, n) => Array.from({ length: n }, (_, i) => p + i).join(' ');

async function run(tok, c) {
  tok.setTruncation(c.truncation.max_length, { strategy: c.truncation.strategy,
                                               direction: c.truncation.direction,
                                               stride: c.truncation.stride });
  if (c.padding) tok.setPadding(c.padding); else tok.disablePadding();
  try {
    if (c.batch) {
      const encs = await tok.encodeBatch(c.batch, { addSpecialTokens: c.add_special_tokens });
      return { ...c, encodings: encs.map(dump) };
    }
    const e = await tok.encode(c.text, c.pair, { addSpecialTokens: c.add_special_tokens });
    return { ...c, encoding: dump(e) };
  } catch (err) {
    return { ...c, error: String(err.message || err) };
  } finally {
    tok.disableTruncation();
    tok.disablePadding();
  }
}

// full: every combination of special tokens on/off and direction; otherwise
// special tokens on, right truncation (the other processors share the
// truncation and differ only in how pieces are wrapped and merged).
function wordLevelCases(processor, full) {
  const added = (pair, add) => (add && processor ? (pair ? 3 : 2) : 0);
  const cases = [];
  const trunc = (max_length, stride, strategy, direction) => ({ max_length, stride, strategy, direction });
  for (const add of full ? [true, false] : [true]) {
    for (const direction of full ? ['right', 'left'] : ['right']) {
      // Single texts.
      for (const max of [4, 6]) {
        const m = max - added(false, add);
        for (let stride = 0; stride < Math.min(m, 3) && stride <= max - added(false, true); stride++) {
          for (const n of [max + 1, 2 * max + 1]) {
            cases.push({ text: words('a', n), pair: null, add_special_tokens: add,
                         truncation: trunc(max, stride, 'LongestFirst', direction), padding: null });
          }
        }
      }
      // Pairs, LongestFirst.
      for (const stride of [0, 1]) {
        for (const [n1, n2] of [[2, 10], [7, 6], [6, 6]]) {
          cases.push({ text: words('a', n1), pair: words('b', n2), add_special_tokens: add,
                       truncation: trunc(8, stride, 'LongestFirst', direction), padding: null });
        }
      }
      // Pairs, OnlyFirst / OnlySecond (stride 0).
      for (const strategy of ['OnlyFirst', 'OnlySecond']) {
        for (const [n1, n2] of [[2, 12], [12, 2], [11, 11]]) {
          cases.push({ text: words('a', n1), pair: words('b', n2), add_special_tokens: add,
                       truncation: trunc(9, 0, strategy, direction), padding: null });
        }
      }
    }
  }
  // max_length 0: everything overflows (without special tokens; with them the
  // budget is below the special tokens).
  for (const strategy of ['LongestFirst', 'OnlyFirst', 'OnlySecond']) {
    cases.push({ text: words('a', 3), pair: words('b', 2), add_special_tokens: false,
                 truncation: trunc(0, 0, strategy, 'right'), padding: null });
  }
  cases.push({ text: words('a', 3), pair: null, add_special_tokens: false,
               truncation: trunc(0, 0, 'LongestFirst', 'right'), padding: null });
  if (!full) return cases;
  // Padding reaches the overflowing pieces.
  for (const padding of [{ maxLength: 9 }, { maxLength: 9, direction: 'left', padId: 0, padToken: '[UNK]' },
                         {}, { padToMultipleOf: 4 }]) {
    cases.push({ text: words('a', 11), pair: null, add_special_tokens: true,
                 truncation: trunc(6, 1, 'LongestFirst', 'right'), padding });
    cases.push({ text: words('a', 7), pair: words('b', 3), add_special_tokens: true,
                 truncation: trunc(8, 1, 'LongestFirst', 'right'), padding });
    cases.push({ batch: [words('a', 11), words('a', 3), words('a', 6)], add_special_tokens: true,
                 truncation: trunc(5, 1, 'LongestFirst', 'right'), padding });
  }
  return cases;
}

function textCases(texts, pairs, singleMax, pairMax) {
  const cases = [];
  for (const [add, direction, stride] of [[true, 'right', 0], [true, 'left', 2], [false, 'right', 2]]) {
    for (const t of texts) {
      cases.push({ text: t, pair: null, add_special_tokens: add, padding: null,
                   truncation: { max_length: singleMax, stride, strategy: 'LongestFirst', direction } });
    }
    for (const [a, b] of pairs) {
      cases.push({ text: a, pair: b, add_special_tokens: add, padding: null,
                   truncation: { max_length: pairMax, stride, strategy: 'LongestFirst', direction } });
    }
  }
  return cases;
}

async function main() {
  const corpus = fs.readFileSync(corpusPath, 'utf8').split('\n');
  if (corpus[corpus.length - 1] === '') corpus.pop();
  const components = JSON.parse(fs.readFileSync(componentsPath, 'utf8'));
  const roberta = components.find((c) => c.name === 'roberta_byte_level');
  if (!roberta) throw new Error(componentsPath + ': no roberta_byte_level tokenizer');
  const componentTexts = roberta.cases.map((c) => c.text);

  const specs = [
    { name: 'word_level_bert', tokenizer: wordLevel('bert'), cases: wordLevelCases('bert', true) },
    { name: 'word_level_template', tokenizer: wordLevel('template'), cases: wordLevelCases('template', false) },
    { name: 'word_level_none', tokenizer: wordLevel(null), cases: wordLevelCases(null, false) },
    { name: 'roberta_byte_level', tokenizer: roberta.tokenizer,
      cases: textCases(componentTexts.slice(0, 4), [[componentTexts[0], componentTexts[3]]], 7, 12) },
  ];
  const lines = [corpus[3], corpus[4], corpus[10]];
  for (const model of ['bert-base-uncased', 'gpt2', 't5-small']) {
    specs.push({ name: model, shared: model + '/tokenizer.json',
                 cases: textCases(lines, [[corpus[3], corpus[10]]], 9, 14) });
  }

  const out = { generator: 'npm tokenizers ' + require('tokenizers/package.json').version,
                tokenizers: [] };
  let n = 0;
  for (const s of specs) {
    const tok = s.shared ? Tokenizer.fromFile(path.join(sharedDir, s.shared))
                         : Tokenizer.fromString(JSON.stringify(s.tokenizer));
    const cases = [];
    for (const c of s.cases) cases.push(await run(tok, c));
    n += cases.length;
    out.tokenizers.push(s.shared ? { name: s.name, shared: s.shared, cases }
                                 : { name: s.name, tokenizer: s.tokenizer, cases });
  }
  fs.writeFileSync(outPath, JSON.stringify(out));
  console.log(`${out.tokenizers.length} tokenizers, ${n} cases`);
}
main().catch((e) => { console.error(e); process.exit(1); });
