// Component goldens: small tokenizers built here (tokenizer.json objects with
// tiny vocabularies), each exercising a few normalizers / pre-tokenizers /
// models / post-processors / decoders / added-token flags, encoded with
// Hugging Face's npm `tokenizers`. kiln loads the same JSON and must agree.
//
//   node gen_component_goldens.js OUT.json
'use strict';
const fs = require('fs');
const { Tokenizer } = require('tokenizers');

const inputs = [
  'Hello, World!',
  '  leading and trailing  ',
  'Café naïve ÉCOLE ﬁne ①②',
  "I don't know 12345 it's 3.5",
  'multi   spaces\tand\ttabs',
  'Straße İstanbul ΣΟΦΟΣ',
  'e\u0301 decomposed and \u00e9 composed',
  'emoji 😀 and 你好 中文',
  'hello world hello_world helloworld',
  '<mask>, hello<s>hello </s> [SPECIAL] special [special]',
  'x ▁ y',
  '',
  ' ',
  'a-b_c.d e--f',
];

function byteChars() {
  const bs = [];
  for (let b = 33; b <= 126; b++) bs.push(b);
  for (let b = 0xa1; b <= 0xac; b++) bs.push(b);
  for (let b = 0xae; b <= 0xff; b++) bs.push(b);
  const cs = bs.slice();
  let n = 0;
  for (let b = 0; b < 256; b++) {
    if (!bs.includes(b)) { bs.push(b); cs.push(256 + n); n++; }
  }
  const m = {};
  bs.forEach((b, i) => { m[b] = String.fromCodePoint(cs[i]); });
  return m;
}

// Every character of the (already normalized) inputs, plus ## forms.
function charVocab(extra, norm) {
  const v = {};
  let id = 0;
  for (const t of extra) v[t] = id++;
  for (const s of inputs) {
    for (const c of norm(s)) {
      if (!(c in v)) v[c] = id++;
      if (!('##' + c in v)) v['##' + c] = id++;
    }
  }
  for (const w of ['hello', 'world', '##llo', 'he', '##orld', 'wor', '##ld']) if (!(w in v)) v[w] = id++;
  return v;
}

function added(id, content, o = {}) {
  return { id, content, single_word: false, lstrip: false, rstrip: false, normalized: false,
           special: true, ...o };
}

const specs = [];

// 1. RoBERTa-style byte-level BPE: ByteLevel(add_prefix_space), RobertaProcessing
// with trim_offsets, <mask> with lstrip, ByteLevel decoder.
{
  const bc = byteChars();
  const vocab = { '<s>': 0, '<pad>': 1, '</s>': 2, '<unk>': 3 };
  let id = 4;
  for (let b = 0; b < 256; b++) vocab[bc[b]] = id++;
  const merges = [['Ġ', 'h'], ['e', 'l'], ['el', 'l'], ['Ġh', 'ell'], ['Ġhell', 'o'], ['o', 'r'],
                  ['Ġ', 'w'], ['Ġw', 'or'], ['l', 'd'], ['Ġwor', 'ld'], ['h', 'ell'], ['hell', 'o']];
  for (const [a, b] of merges) if (!(a + b in vocab)) vocab[a + b] = id++;
  vocab['<mask>'] = id++;
  specs.push({
    name: 'roberta_byte_level',
    tokenizer: {
      version: '1.0', truncation: null, padding: null,
      added_tokens: [added(0, '<s>'), added(1, '<pad>'), added(2, '</s>'), added(3, '<unk>'),
                     added(vocab['<mask>'], '<mask>', { lstrip: true })],
      normalizer: null,
      pre_tokenizer: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
      post_processor: { type: 'RobertaProcessing', sep: ['</s>', 2], cls: ['<s>', 0],
                        trim_offsets: true, add_prefix_space: true },
      decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
      model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null,
               end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, vocab,
               merges: merges.map(([a, b]) => a + ' ' + b) },
    },
  });
}

// 2. Normalizer chain + Whitespace/Digits/Punctuation + WordPiece (cleanup decoder).
{
  const norm = (s) => s.normalize('NFKC').toLowerCase().trim();
  const vocab = charVocab(['[UNK]', '[CLS]', '[SEP]'], norm);
  specs.push({
    name: 'normalizer_chain_wordpiece',
    tokenizer: {
      version: '1.0', truncation: null, padding: null,
      added_tokens: [added(0, '[UNK]'), added(1, '[CLS]'), added(2, '[SEP]'),
                     added(Object.keys(vocab).length, '[special]', { special: false, normalized: true, single_word: true })],
      normalizer: { type: 'Sequence', normalizers: [
        { type: 'NFKC' }, { type: 'Lowercase' }, { type: 'Strip', strip_left: true, strip_right: true },
        { type: 'Replace', pattern: { Regex: '\\s+' }, content: ' ' },
        { type: 'Replace', pattern: { String: 'hello' }, content: 'hello' }] },
      pre_tokenizer: { type: 'Sequence', pretokenizers: [
        { type: 'Whitespace' }, { type: 'Digits', individual_digits: true },
        { type: 'Punctuation', behavior: 'Isolated' }] },
      post_processor: { type: 'BertProcessing', sep: ['[SEP]', 2], cls: ['[CLS]', 1] },
      decoder: { type: 'WordPiece', prefix: '##', cleanup: true },
      model: { type: 'WordPiece', unk_token: '[UNK]', continuing_subword_prefix: '##',
               max_input_chars_per_word: 100, vocab },
    },
  });
}

// 3. NFD + StripAccents, Prepend, Metaspace (prepend first, no split),
// Split regex MergedWithPrevious, CharDelimiterSplit; BPE with byte_fallback
// and a Llama-style decoder sequence.
{
  const vocab = { '<unk>': 0, '<s>': 1, '</s>': 2 };
  let id = 3;
  for (let b = 0; b < 256; b++) vocab['<0x' + b.toString(16).toUpperCase().padStart(2, '0') + '>'] = id++;
  const norm = (s) => ('▁' + s.normalize('NFD').replace(/\p{M}/gu, '')).replace(/ /g, '▁');
  for (const s of inputs) for (const c of norm(s)) if (!(c in vocab) && c.codePointAt(0) < 0x2000 || c === '▁') { if (!(c in vocab)) vocab[c] = id++; }
  const merges = [['▁', 'h'], ['e', 'l'], ['▁h', 'el'], ['▁hel', 'l'], ['▁hell', 'o'], ['l', 'l']];
  for (const [a, b] of merges) { for (const t of [a, b, a + b]) if (!(t in vocab)) vocab[t] = id++; }
  specs.push({
    name: 'llama_style_byte_fallback',
    tokenizer: {
      version: '1.0', truncation: null, padding: null,
      added_tokens: [added(0, '<unk>'), added(1, '<s>'), added(2, '</s>')],
      normalizer: { type: 'Sequence', normalizers: [
        { type: 'NFD' }, { type: 'StripAccents' }, { type: 'Prepend', prepend: '▁' },
        { type: 'Replace', pattern: { String: ' ' }, content: '▁' }] },
      pre_tokenizer: { type: 'Split', pattern: { Regex: '[,.!]' }, behavior: 'MergedWithPrevious', invert: false },
      post_processor: { type: 'TemplateProcessing',
        single: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
        pair: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } },
               { SpecialToken: { id: '<s>', type_id: 1 } }, { Sequence: { id: 'B', type_id: 1 } }],
        special_tokens: { '<s>': { id: '<s>', ids: [1], tokens: ['<s>'] } } },
      decoder: { type: 'Sequence', decoders: [
        { type: 'Replace', pattern: { String: '▁' }, content: ' ' }, { type: 'ByteFallback' },
        { type: 'Fuse' }, { type: 'Strip', content: ' ', start: 1, stop: 0 }] },
      model: { type: 'BPE', dropout: null, unk_token: '<unk>', continuing_subword_prefix: null,
               end_of_word_suffix: null, fuse_unk: true, byte_fallback: true, vocab,
               merges: merges.map(([a, b]) => [a, b]) },
    },
  });
}

// 4. Unigram + Metaspace(prepend first, split) + WhitespaceSplit + NFKD + CharDelimiterSplit.
{
  const pieces = [['<unk>', 0], ['▁', -2], ['▁hello', -3], ['hello', -4], ['▁he', -5], ['llo', -5],
                  ['▁world', -3], ['wor', -6], ['ld', -6], ['o', -4], ['l', -4], ['e', -4], ['h', -4],
                  ['▁a', -5], ['a', -5], ['-', -5], ['b', -5], ['_', -5], ['c', -5], ['d', -5], ['.', -5]];
  specs.push({
    name: 'unigram_metaspace',
    tokenizer: {
      version: '1.0', truncation: null, padding: null, added_tokens: [added(0, '<unk>')],
      normalizer: { type: 'NFKD' },
      pre_tokenizer: { type: 'Sequence', pretokenizers: [
        { type: 'CharDelimiterSplit', delimiter: '_' }, { type: 'WhitespaceSplit' },
        { type: 'Metaspace', replacement: '▁', prepend_scheme: 'first', split: true }] },
      post_processor: null,
      decoder: { type: 'Metaspace', replacement: '▁', prepend_scheme: 'first', split: true },
      model: { type: 'Unigram', unk_id: 0, vocab: pieces, byte_fallback: false },
    },
  });
}

// 5. BPE with continuing_subword_prefix / end_of_word_suffix, BPEDecoder,
// Split with Removed + invert and Contiguous, added tokens rstrip / normalized.
{
  const vocab = { '<unk>': 0 };
  let id = 1;
  for (const s of inputs) for (const c of s.toLowerCase()) {
    for (const t of [c, c + '</w>', '##' + c, '##' + c + '</w>']) if (!(t in vocab)) vocab[t] = id++;
  }
  const merges = [['h', '##e'], ['he', '##l'], ['hel', '##l'], ['hell', '##o</w>'], ['w', '##o'], ['wo', '##r']];
  for (const [a, b] of merges) {
    for (const t of [a, b, a + b.slice(2)]) if (!(t in vocab)) vocab[t] = id++;
  }
  vocab['[SPECIAL]'] = id++;
  specs.push({
    name: 'bpe_suffix_split',
    tokenizer: {
      version: '1.0', truncation: null, padding: null,
      added_tokens: [added(0, '<unk>'), added(vocab['[SPECIAL]'], '[SPECIAL]', { rstrip: true, normalized: true, special: false })],
      normalizer: { type: 'Lowercase' },
      pre_tokenizer: { type: 'Sequence', pretokenizers: [
        { type: 'Split', pattern: { Regex: '\\w+|[^\\w\\s]+' }, behavior: 'Removed', invert: true },
        { type: 'Split', pattern: { String: 'l' }, behavior: 'Contiguous', invert: false }] },
      post_processor: null,
      decoder: { type: 'BPEDecoder', suffix: '</w>' },
      model: { type: 'BPE', dropout: null, unk_token: '<unk>', continuing_subword_prefix: '##',
               end_of_word_suffix: '</w>', fuse_unk: false, byte_fallback: false, vocab,
               merges: merges.map(([a, b]) => a + ' ' + b) },
    },
  });
}

// 6. Cased BERT normalizer (no lowercase, accents kept) + MergedWithNext split.
{
  const norm = (s) => s;
  const vocab = charVocab(['[UNK]', '[CLS]', '[SEP]'], norm);
  specs.push({
    name: 'bert_cased_merged_next',
    tokenizer: {
      version: '1.0', truncation: null, padding: null,
      added_tokens: [added(0, '[UNK]'), added(1, '[CLS]'), added(2, '[SEP]')],
      normalizer: { type: 'BertNormalizer', clean_text: true, handle_chinese_chars: true,
                    strip_accents: false, lowercase: false },
      pre_tokenizer: { type: 'Sequence', pretokenizers: [
        { type: 'BertPreTokenizer' },
        { type: 'Split', pattern: { String: 'o' }, behavior: 'MergedWithNext', invert: false }] },
      post_processor: null,
      decoder: { type: 'WordPiece', prefix: '##', cleanup: false },
      model: { type: 'WordPiece', unk_token: '[UNK]', continuing_subword_prefix: '##',
               max_input_chars_per_word: 5, vocab },
    },
  });
}

async function main() {
  const out = [];
  for (const spec of specs) {
    const tok = Tokenizer.fromString(JSON.stringify(spec.tokenizer));
    const cases = [];
    for (const text of inputs) {
      const e = await tok.encode(text);
      const ids = e.getIds();
      cases.push({ text, ids, tokens: e.getTokens(), offsets: e.getOffsets(),
                   type_ids: e.getTypeIds(), special_tokens_mask: e.getSpecialTokensMask(),
                   decoded: await tok.decode(ids, false), decoded_skip: await tok.decode(ids, true) });
    }
    const pair = await tok.encode(inputs[0], inputs[3]);
    out.push({ name: spec.name, tokenizer: spec.tokenizer, cases,
               pair: { a: inputs[0], b: inputs[3], ids: pair.getIds(), type_ids: pair.getTypeIds(),
                       offsets: pair.getOffsets(), tokens: pair.getTokens() } });
  }
  fs.writeFileSync(process.argv[2], JSON.stringify(out));
  console.log(`${out.length} component tokenizers, ${inputs.length} inputs each`);
}
main().catch((e) => { console.error(e); process.exit(1); });
