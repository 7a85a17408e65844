// Goldens for pre-split input (is_pretokenized: a list of words).
//
//   node gen_pretokenized_goldens.js SHARED_TOKENIZERS_DIR CORPUS COMPONENTS_JSON OUT.json
//
// The Node binding cannot encode a list of words (its isPretokenized option
// is not wired), so each case is put together from its parts the way the
// Rust library's encode does for pre-tokenized input: every word encoded on
// its own (no special tokens, no truncation), the encodings merged without
// moving offsets (mergeEncodings(…, false)), then the tokenizer's
// postProcess (truncation, special tokens). Word ids are left out (the
// library numbers them by word, these parts by split). Pairs are made only
// with post-processors that set every type id themselves (the parts are all
// encoded with type id 0), and truncation cases are single texts whose words
// are each shorter than max_length.
'use strict';
const fs = require('fs');
const path = require('path');
const { Tokenizer, mergeEncodings } = require('tokenizers');

const [sharedDir, corpusPath, componentsPath, outPath] = process.argv.slice(2);
if (!sharedDir || !corpusPath || !componentsPath || !outPath) {
  console.error('usage: node gen_pretokenized_goldens.js SHARED_TOKENIZERS_DIR CORPUS COMPONENTS_JSON OUT.json');
  process.exit(2);
}
const corpus = fs.readFileSync(corpusPath, 'utf8').split('\n');
if (corpus[corpus.length - 1] === '') corpus.pop();
const components = JSON.parse(fs.readFileSync(componentsPath, 'utf8'));

function dump(e) {
  return { ids: e.getIds(), tokens: e.getTokens(), offsets: e.getOffsets(), type_ids: e.getTypeIds(),
           special_tokens_mask: e.getSpecialTokensMask(), attention_mask: e.getAttentionMask() };
}

async function parts(tok, words) {
  const out = [];
  for (const w of words) out.push(await tok.encode(w, null, { addSpecialTokens: false }));
  return out;
}

// Word lists: corpus lines split at spaces, and a few made-up ones (empty
// words, added tokens inside words, spaces inside words).
const wordLists = [];
for (let i = 0; i < corpus.length && wordLists.length < 16; i += 7) wordLists.push(corpus[i].split(' '));
wordLists.push(['[MASK]', 'hello[SEP]world', '', '<s>', ' leading', 'trailing ', 'a b']);
wordLists.push(['Straße', 'İstanbul', '你好', '😀', 'e\u0301']);
wordLists.push([]);

async function main() {
  const specs = [
    { name: 'bert-base-uncased', shared: 'bert-base-uncased/tokenizer.json', pairs: true },
    { name: 'gpt2', shared: 'gpt2/tokenizer.json', pairs: false },
    { name: 't5-small', shared: 't5-small/tokenizer.json', pairs: true },
  ];
  for (const name of ['roberta_byte_level', 'unigram_metaspace', 'llama_style_byte_fallback']) {
    const c = components.find((x) => x.name === name);
    if (!c) throw new Error(componentsPath + ': no ' + name);
    // RobertaProcessing and TemplateProcessing set every type id.
    specs.push({ name, tokenizer: c.tokenizer, pairs: name !== 'unigram_metaspace' });
  }
  const out = { generator: 'npm tokenizers ' + require('tokenizers/package.json').version, tokenizers: [] };
  let n = 0;
  for (const s of specs) {
    const tok = s.shared ? Tokenizer.fromFile(path.join(sharedDir, s.shared))
                         : Tokenizer.fromString(JSON.stringify(s.tokenizer));
    const cases = [];
    for (const words of wordLists) {
      const merged = () => parts(tok, words).then((p) => mergeEncodings(p, false));
      for (const add of [true, false]) {
        cases.push({ words, add_special_tokens: add, ...dump(tok.postProcess(await merged(), null, add)) });
      }
      const maxLength = 12;
      let longest = 0;
      for (const p of await parts(tok, words)) longest = Math.max(longest, p.getIds().length);
      if (longest < maxLength) {
        for (const direction of ['right', 'left']) {
          tok.setTruncation(maxLength, { strategy: 'LongestFirst', direction });
          cases.push({ words, add_special_tokens: true, truncation: { max_length: maxLength, direction },
                       ...dump(tok.postProcess(await merged(), null, true)) });
          tok.disableTruncation();
        }
      }
    }
    if (s.pairs) {
      for (let i = 0; i + 1 < wordLists.length; i += 3) {
        const a = mergeEncodings(await parts(tok, wordLists[i]), false);
        const b = mergeEncodings(await parts(tok, wordLists[i + 1]), false);
        cases.push({ words: wordLists[i], pair: wordLists[i + 1], add_special_tokens: true,
                     ...dump(tok.postProcess(a, b, true)) });
      }
    }
    n += cases.length;
    out.tokenizers.push(s.shared ? { name: s.name, shared: s.shared, cases }
                                 : { name: s.name, tokenizer: s.tokenizer, cases });
  }
  fs.writeFileSync(outPath, JSON.stringify(out));
  console.log(`${out.tokenizers.length} tokenizers, ${n} cases`);
}
main().catch((e) => { console.error(e); process.exit(1); });
