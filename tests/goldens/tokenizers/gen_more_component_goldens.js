// Goldens for BPE dropout, the ByteLevel normalizer, the UnicodeScripts
// pre-tokenizer and the CTC decoder, from Hugging Face's npm `tokenizers`.
//
//   node gen_more_component_goldens.js COMPONENTS_JSON OUT.json
//
// COMPONENTS_JSON is tests/goldens/tokenizers/components.json (its inputs and
// its RoBERTa-style byte-level BPE are reused). OUT.json holds
//   specs:   small tokenizers in the components.json format (encodings of the
//            inputs, a pair, decodes), plus explicit id lists to decode;
//   dropout: how often each segmentation of a word comes out of BPE with
//            dropout (tokenizers draws from an unseeded RNG, so kiln can only
//            agree in distribution), 20000 encodings per word and rate;
//   scripts: UnicodeScripts over every code point: where it splits the code
//            points in order, the code points without a script (ranges),
//            which of the runs between splits share a script, and the splits
//            of random strings.
'use strict';
const fs = require('fs');
const { Tokenizer } = require('tokenizers');

const [componentsPath, outPath] = process.argv.slice(2);
if (!componentsPath || !outPath) {
  console.error('usage: node gen_more_component_goldens.js COMPONENTS_JSON OUT.json');
  process.exit(2);
}
const components = JSON.parse(fs.readFileSync(componentsPath, 'utf8'));
const roberta = components.find((c) => c.name === 'roberta_byte_level');
if (!roberta) throw new Error(componentsPath + ': no roberta_byte_level tokenizer');
const inputs = roberta.cases.map((c) => c.text);
const clone = (o) => JSON.parse(JSON.stringify(o));

// A WordLevel model that knows no word: every split becomes one [UNK] whose
// offsets are the split's.
const unkOnly = { type: 'WordLevel', vocab: { '[UNK]': 0 }, unk_token: '[UNK]' };
const base = { version: '1.0', truncation: null, padding: null, added_tokens: [],
               normalizer: null, pre_tokenizer: null, post_processor: null, decoder: null };

const specs = [];
{
  const t = clone(roberta.tokenizer);
  t.model.dropout = 1.0;  // every merge skipped: bytes only
  specs.push({ name: 'bpe_dropout_one', tokenizer: t });
  const z = clone(roberta.tokenizer);
  z.model.dropout = 0.0;  // plain BPE
  specs.push({ name: 'bpe_dropout_zero', tokenizer: z });
}
{
  // ByteLevel normalizer in front of a byte-level BPE; splits before each Ġ.
  const t = clone(roberta.tokenizer);
  t.normalizer = { type: 'ByteLevel' };
  t.pre_tokenizer = { type: 'Split', pattern: { String: 'Ġ' }, behavior: 'MergedWithNext',
                      invert: false };
  t.post_processor = null;
  t.added_tokens = t.added_tokens.filter((a) => a.content !== '<mask>');
  specs.push({ name: 'byte_level_normalizer', tokenizer: t });
}
specs.push({ name: 'unicode_scripts',
             tokenizer: { ...clone(base), pre_tokenizer: { type: 'UnicodeScripts' }, model: unkOnly } });
specs.push({ name: 'unicode_scripts_after_whitespace',
             tokenizer: { ...clone(base), normalizer: { type: 'NFKC' },
                          pre_tokenizer: { type: 'Sequence', pretokenizers: [
                            { type: 'WhitespaceSplit' }, { type: 'UnicodeScripts' }] },
                          model: unkOnly } });
{
  // wav2vec2-style character vocabulary with the CTC decoder.
  const vocab = { '<pad>': 0, '<s>': 1, '</s>': 2, '<unk>': 3, '|': 4 };
  for (const c of "abcdefghijklmnopqrstuvwxyz'.,?!") vocab[c] = Object.keys(vocab).length;
  vocab[' .'] = Object.keys(vocab).length;  // a token the clean-up rewrites
  vocab['<pad>x'] = Object.keys(vocab).length;  // a token holding the pad token
  const spec = (decoder) => ({
    ...clone(base),
    added_tokens: [0, 1, 2, 3].map((id) => ({ id, content: Object.keys(vocab)[id], single_word: false,
                                              lstrip: false, rstrip: false, normalized: false,
                                              special: true })),
    normalizer: { type: 'Lowercase' },
    pre_tokenizer: { type: 'Split', pattern: { Regex: '' }, behavior: 'Isolated', invert: false },
    model: { type: 'WordLevel', vocab, unk_token: '<unk>' },
    decoder,
  });
  // Space-separated tokens; _ is the delimiter |, ~ the token ' .'.
  const ids = (s) => s.split(' ').map((t) => vocab[t === '_' ? '|' : t === '~' ? ' .' : t]);
  const sequences = [
    ids('<pad> <pad> h e e l l <pad> l o o o <pad> _ _ w o r <pad> l d d'),
    ids('a <pad> a a _ b _ _ <pad> _ c'),
    ids('i _ d o n \' t _ k n o w ?'),
    ids('h i _ . _ , _ ?'),
    ids('<s> a b </s> <unk> c'),
    ids('x ~ ~ y <pad>x <pad>x z . . ~'),
    ids('_ _ _'),
    [],
  ];
  for (const [name, decoder] of [
    ['ctc_default', { type: 'CTC', pad_token: '<pad>', word_delimiter_token: '|', cleanup: true }],
    ['ctc_no_cleanup', { type: 'CTC', pad_token: '<pad>', word_delimiter_token: '|', cleanup: false }],
    ['ctc_other_tokens', { type: 'CTC', pad_token: 'a', word_delimiter_token: 'o', cleanup: true }],
  ]) {
    specs.push({ name, tokenizer: spec(decoder), sequences });
  }
}

async function specGoldens() {
  const out = [];
  for (const s of specs) {
    const tok = Tokenizer.fromString(JSON.stringify(s.tokenizer));
    const cases = [];
    for (const text of inputs) {
      const e = await tok.encode(text);
      const ids = e.getIds();
      cases.push({ text, ids, tokens: e.getTokens(), offsets: e.getOffsets(),
                   type_ids: e.getTypeIds(), special_tokens_mask: e.getSpecialTokensMask(),
                   decoded: await tok.decode(ids, false), decoded_skip: await tok.decode(ids, true) });
    }
    const pair = await tok.encode(inputs[0], inputs[3]);
    const decodes = [];
    for (const ids of s.sequences || []) {
      decodes.push({ ids, decoded: await tok.decode(ids, false), decoded_skip: await tok.decode(ids, true) });
    }
    out.push({ name: s.name, tokenizer: s.tokenizer, cases, decodes,
               pair: { a: inputs[0], b: inputs[3], ids: pair.getIds(), type_ids: pair.getTypeIds(),
                       offsets: pair.getOffsets(), tokens: pair.getTokens() } });
  }
  return out;
}

async function dropoutGoldens() {
  const out = [];
  const n = 20000;
  for (const rate of [0.1, 0.3, 0.6]) {
    const t = clone(roberta.tokenizer);
    t.model.dropout = rate;
    t.post_processor = null;
    const tok = Tokenizer.fromString(JSON.stringify(t));
    for (const word of [' hello', ' world', 'hello']) {
      const counts = {};
      for (let i = 0; i < n; i++) {
        const e = await tok.encode(word, null, { addSpecialTokens: false });
        const key = e.getTokens().join('|');
        counts[key] = (counts[key] || 0) + 1;
      }
      out.push({ dropout: rate, word, n, counts });
    }
  }
  return { tokenizer: (() => { const t = clone(roberta.tokenizer); t.post_processor = null; return t; })(),
           samples: out };
}

function scriptGoldens() {
  const tok = Tokenizer.fromString(JSON.stringify({ ...clone(base), pre_tokenizer: { type: 'UnicodeScripts' },
                                                    model: unkOnly }));
  const pt = tok.getPreTokenizer();
  const scalar = (c) => c < 0xd800 || c > 0xdfff;
  // 1. Every code point in order, in chunks: the code points splits start at.
  const sweepStarts = [];
  const chunk = 0x10000;
  for (let lo = 0; lo < 0x110000; lo += chunk) {
    const cps = [];
    for (let c = lo; c < lo + chunk; c++) if (scalar(c)) cps.push(c);
    for (const [s] of pt.preTokenizeString(String.fromCodePoint(...cps))) sweepStarts.push(s.codePointAt(0));
  }
  // 2. Code points without a script: c between two 'a' (Latin) splits unless
  // it is Latin or scriptless, between two '0' (Common) unless Common or
  // scriptless.
  const differs = (ref) => {
    const out = new Set();
    for (let lo = 0; lo < 0x110000; lo += 0x8000) {
      const parts = [];
      for (let c = lo; c < lo + 0x8000; c++) if (scalar(c)) parts.push(ref, String.fromCodePoint(c));
      for (const [s] of pt.preTokenizeString(parts.join(''))) {
        if (s[0] !== ref) out.add(s.codePointAt(0));
      }
    }
    return out;
  };
  const notLatin = differs('a'), notCommon = differs('0');
  const anyRanges = [];
  let start = -1;
  for (let c = 0; c <= 0x110000; c++) {
    if (c < 0x110000 && !scalar(c)) continue;
    const any = c < 0x110000 && !notLatin.has(c) && !notCommon.has(c) && c !== 0x61 && c !== 0x30;
    if (any && start < 0) start = c;
    if (!any && start >= 0) { anyRanges.push([start, c - 1]); start = -1; }
  }
  // 3. Which runs of the sweep share a script: each run's first code point
  // against every other's (r s splits before s iff their scripts differ),
  // grouped into classes; runs holds [first code point, class].
  const runStarts = [];
  for (let lo = 0; lo < 0x110000; lo += chunk) {
    const cps = [];
    for (let c = lo; c < lo + chunk; c++) if (scalar(c)) cps.push(c);
    for (const [s] of pt.preTokenizeString(String.fromCodePoint(...cps))) {
      // A chunk's first piece can start with scriptless code points: its
      // representative is its first code point with a script.
      let rep = -1;
      for (const ch of s) {
        const c = ch.codePointAt(0);
        if (!(notLatin.has(c) || notCommon.has(c) || c === 0x61 || c === 0x30)) continue;
        rep = c;
        break;
      }
      if (rep >= 0) runStarts.push([s.codePointAt(0), rep]);
    }
  }
  const label = new Array(runStarts.length).fill(-1);
  let classes = 0;
  for (let i = 0; i < runStarts.length; i++) {
    if (label[i] >= 0) continue;
    label[i] = classes;
    const r = String.fromCodePoint(runStarts[i][1]);
    const parts = [];
    for (let j = i + 1; j < runStarts.length; j++) parts.push(r, String.fromCodePoint(runStarts[j][1]));
    const differs = new Set();
    for (const [s] of pt.preTokenizeString(parts.join(''))) differs.add(s.codePointAt(0));
    for (let j = i + 1; j < runStarts.length; j++) {
      if (label[j] < 0 && !differs.has(runStarts[j][1])) label[j] = classes;
    }
    classes++;
  }
  const runs = runStarts.map(([start], i) => [start, label[i]]);
  return { sweep_chunk: chunk, sweep_starts: sweepStarts, any_ranges: anyRanges, runs };
}

async function randomScriptStrings() {
  // Deterministic pseudo-random strings mixing scripts, spaces and
  // scriptless code points.
  let state = 12345;
  const rand = (n) => { state = (state * 1103515245 + 12345) % 2147483648; return state % n; };
  const pools = [[0x20, 0x7e], [0xa0, 0x24f], [0x370, 0x52f], [0x590, 0x6ff], [0x900, 0xdff],
                 [0x1100, 0x11ff], [0x3000, 0x30ff], [0x4e00, 0x4e80], [0xac00, 0xac80],
                 [0xe00, 0xe7f], [0x1f300, 0x1f6ff], [0x300, 0x36f], [0x1e900, 0x1e95f],
                 [0x10400, 0x104ff], [0x2000, 0x206f], [0xfff0, 0xffff]];
  const tok = Tokenizer.fromString(JSON.stringify({ ...clone(base), pre_tokenizer: { type: 'UnicodeScripts' },
                                                    model: unkOnly }));
  const out = [];
  for (let i = 0; i < 3000; i++) {
    const cps = [];
    const len = 2 + rand(7);
    for (let k = 0; k < len; k++) {
      const [lo, hi] = pools[rand(pools.length)];
      cps.push(rand(4) === 0 ? 0x20 : lo + rand(hi - lo + 1));
    }
    const text = String.fromCodePoint(...cps);
    const e = await tok.encode(text);
    out.push({ text, offsets: e.getOffsets() });
  }
  return out;
}

async function main() {
  const scripts = scriptGoldens();
  scripts.random = await randomScriptStrings();
  const out = { generator: 'npm tokenizers ' + require('tokenizers/package.json').version,
                specs: await specGoldens(), dropout: await dropoutGoldens(), scripts };
  fs.writeFileSync(outPath, JSON.stringify(out));
  console.log(`${out.specs.length} specs, ${out.dropout.samples.length} dropout samples, ` +
              `${scripts.sweep_starts.length} sweep splits, ${scripts.any_ranges.length} scriptless ranges, ` +
              `${scripts.random.length} random strings`);
}
main().catch((e) => { console.error(e); process.exit(1); });
