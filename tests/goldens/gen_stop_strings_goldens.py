"""Writes tests/goldens/stop_strings.json and three small tokenizers under
tests/goldens/stop_strings/: what transformers' StopStringCriteria decides
on crafted token sequences, and the token ids its generate() returns with
stop_strings (and max_new_tokens 12) on the tiny golden models.

    /work/pyref/bin/python tests/goldens/gen_stop_strings_goldens.py

The tokenizers have 99 tokens, as many as the tiny models' vocabularies, and
cover StopStringCriteria's three ways of reading a token: `byte_level` (a
GPT-2 style byte-level BPE: every token's characters are bytes, among them
the halves of "é"), `byte_fallback` (a Llama style BPE whose "<0xNN>" tokens
are bytes and whose decoder replaces "▁" and strips the first space) and
`metaspace` (a T5 style "▁" vocabulary read as text). Each has multi-character
tokens that overhang a stop string on either side ("st", "op", "opera",
"topper", ...).

"tokenizers": per tokenizer, `token_bytes` (hex, by id: the text of each token
StopStringCriteria.clean_tokenizer_vocab finds, as bytes) and `rows`: a
sequence of ids, stop strings and whether StopStringCriteria stops it; the
first rows are the examples of its docstring, the rest random sequences with
stop strings cut from their own text (so that many match, some only across
tokens, some ending inside the last token, some not at the end).

"cases": generate() on `gpt2/gpt2_lm` and `llama/llama_lm` (with the
byte-level and byte-fallback tokenizers) and `t5/t5_relu_tied` (metaspace),
greedy and num_beams 3, with stop strings cut from the text of the plain
greedy output (`baseline`), so that generation stops early; T5's sequences
lack the decoder start token, as kiln returns them.

Made with transformers 5.25.0 and torch 2.15.0 (CPU).
"""
import json
import pathlib
import random

import torch
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, T5ForConditionalGeneration
from transformers.generation.stopping_criteria import StopStringCriteria

ROOT = pathlib.Path(__file__).resolve().parent
OUT = ROOT / "stop_strings"
MAX_NEW = 12

PIECES = ["st", "op", "stop", "opera", "sto", "pper", "las", "topper", "s", "to", "pped", "tion", "ing", "the",
          "en", "end", "END", "ab", "cd", "ef", "abc", "."]
SPACED = ["the", "st", "s", "to", "stop", "end", "a", "las"]


def vocab_tokens(kind):
    """The 99 tokens of one tokenizer, by id."""
    if kind == "byte_level":
        space, newline, bytes_ = "Ġ", "Ċ", ["Ã", "©", "Ã©"]
        specials = ["<|end|>"]
    else:
        space = "▁"
        newline = "<0x0A>" if kind == "byte_fallback" else "\n"
        bytes_ = ["<0xC3>", "<0xA9>", "é"] if kind == "byte_fallback" else ["é", "è", "st"]
        specials = ["<unk>", "<s>", "</s>"] if kind == "byte_fallback" else ["<pad>", "</s>", "<unk>"]
    tokens = specials + [space] + [space + w for w in SPACED] + PIECES + bytes_ + [newline]
    for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789,!?":
        if len(tokens) == 99:
            break
        if c not in tokens:
            tokens.append(c)
    seen, unique = set(), []
    for t in tokens:  # a duplicate (metaspace's "st") gives way to the next letter
        if t not in seen:
            seen.add(t)
            unique.append(t)
    for c in "0123456789,!?:;-+=*/()[]{}<>#%&@$^~_|'\"":
        if len(unique) == 99:
            break
        if c not in seen:
            unique.append(c)
            seen.add(c)
    assert len(unique) == 99, len(unique)
    return unique, len(specials)


def tokenizer_json(kind):
    tokens, n_special = vocab_tokens(kind)
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for i, t in enumerate(tokens[:n_special])]
    model = {"type": "BPE", "dropout": None, "unk_token": None if kind == "byte_level" else "<unk>",
             "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": kind != "byte_level",
             "byte_fallback": kind == "byte_fallback", "ignore_merges": False,
             "vocab": {t: i for i, t in enumerate(tokens)}, "merges": []}
    j = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "post_processor": None,
         "model": model}
    if kind == "byte_level":
        j["normalizer"] = None
        j["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
        j["decoder"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    elif kind == "byte_fallback":
        j["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                                                               {"type": "Replace", "pattern": {"String": " "},
                                                                "content": "▁"}]}
        j["pre_tokenizer"] = None
        j["decoder"] = {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
            {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    else:
        j["normalizer"] = None
        j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True}
        j["decoder"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True}
    return j


def write_tokenizer(kind):
    d = OUT / kind
    d.mkdir(parents=True, exist_ok=True)
    (d / "tokenizer.json").write_text(json.dumps(tokenizer_json(kind), indent=1, ensure_ascii=False) + "\n")
    (d / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}) + "\n")
    return PreTrainedTokenizerFast(tokenizer_file=str(d / "tokenizer.json"))


def token_bytes(tok):
    mode = StopStringCriteria._get_stop_string_matching_mode(tok)
    strings, ids = StopStringCriteria.clean_tokenizer_vocab(tok, stop_string_matching_mode=mode)
    by_id = dict(zip(ids, strings))
    return mode, [(by_id[i] if isinstance(by_id[i], bytes) else by_id[i].encode("utf-8")) for i in range(len(by_id))]


def stops(tok, ids, stop_strings):
    return bool(StopStringCriteria(tokenizer=tok, stop_strings=stop_strings)(torch.tensor([ids]), None)[0])


def cut(text_bytes, rng):
    """A random piece of text that is valid UTF-8 (None if none is)."""
    for _ in range(20):
        a = rng.randrange(len(text_bytes))
        b = rng.randrange(a + 1, min(len(text_bytes), a + 7) + 1)
        try:
            s = text_bytes[a:b].decode("utf-8")
        except UnicodeDecodeError:
            continue
        if s:
            return s
    return None


def rows_for(tok, kind, strings, rng):
    tokens, _ = vocab_tokens(kind)
    index = {t: i for i, t in enumerate(tokens)}
    examples = [["st", "op"], ["stop"], ["st", "opera"], ["sto", "pper"], ["las", "topper"], ["s", "to", "pped"],
                ["stop", "a"], ["st", "op", "a"], ["st", "opera", "tion"]]
    rows = [{"ids": [index[t] for t in e], "stop_strings": ["stop"]} for e in examples]
    while len(rows) < 120:
        n = rng.randrange(1, 8)
        ids = [rng.randrange(len(tokens)) for _ in range(n)]
        text = b"".join(strings[i] for i in ids)
        stops_ = [s for s in (cut(text, rng) for _ in range(rng.choice([1, 1, 2]))) if s]
        if rng.random() < 0.2:
            stops_.append(rng.choice(["stop", "end", "é", "the", "zz", "\n"]))
        if stops_:
            rows.append({"ids": ids, "stop_strings": stops_})
    for r in rows:
        r["stops"] = stops(tok, r["ids"], r["stop_strings"])
    return rows


def stop_settings(strings, generated, prompt_tail):
    """Stop strings cut from the greedy output's text: ending inside the 3rd, 5th and 8th new token, across the
    prompt's end, and one that never occurs."""
    out = []
    for k in (2, 4, 7):
        before = b"".join(strings[i] for i in (prompt_tail + generated)[: len(prompt_tail) + k])
        last = strings[generated[k]]
        if not last:
            continue
        end = len(before) + 1  # just after the new token's first byte
        text = before + last
        for start in range(max(0, end - 3), end):
            try:
                out.append([text[start:end].decode("utf-8")])
                break
            except UnicodeDecodeError:
                continue
    first = b"".join(strings[i] for i in prompt_tail[-1:] + generated[:1])
    try:
        out.append([first.decode("utf-8")])
    except UnicodeDecodeError:
        pass
    out.append(["zzzz"])
    if len(out) > 2:
        out.append([out[1][0], out[0][0]])
    return out


def cases_json(toks):
    cases = []
    for model_dir, kind, enc_dec in [("gpt2/gpt2_lm", "byte_level", False), ("llama/llama_lm", "byte_fallback", False),
                                     ("t5/t5_relu_tied", "metaspace", True)]:
        tok = toks[kind]
        _, strings = token_bytes(tok)
        cls = T5ForConditionalGeneration if enc_dec else AutoModelForCausalLM
        model = cls.from_pretrained(ROOT / model_dir).float().eval()
        prompt = [4, 20, 31, 9, 1] if enc_dec else [5, 17, 42, 8]
        ids = torch.tensor([prompt])
        with torch.no_grad():
            for beams in (1, 3):
                plain = model.generate(ids, max_new_tokens=MAX_NEW, do_sample=False, num_beams=beams)[0].tolist()
                generated = plain[1:] if enc_dec else plain[len(prompt):]
                tail = plain[:1] if enc_dec else prompt
                for stop in stop_settings(strings, generated, tail):
                    out = model.generate(ids, max_new_tokens=MAX_NEW, do_sample=False, num_beams=beams,
                                         stop_strings=stop, tokenizer=tok)[0].tolist()
                    cases.append({"model": model_dir, "tokenizer": kind, "prompt": prompt, "num_beams": beams,
                                  "stop_strings": stop, "baseline": plain[1:] if enc_dec else plain,
                                  "sequence": out[1:] if enc_dec else out})
    return cases


def main():
    rng = random.Random(0)
    toks = {kind: write_tokenizer(kind) for kind in ("byte_level", "byte_fallback", "metaspace")}
    tokenizers = {}
    for kind, tok in toks.items():
        mode, strings = token_bytes(tok)
        tokenizers[kind] = {"mode": mode, "token_bytes": [s.hex() for s in strings],
                            "rows": rows_for(tok, kind, strings, rng)}
    out = {"generator": "gen_stop_strings_goldens.py", "tokenizers": tokenizers, "cases": cases_json(toks)}
    (ROOT / "stop_strings.json").write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    for kind, t in tokenizers.items():
        print(kind, t["mode"], sum(r["stops"] for r in t["rows"]), "of", len(t["rows"]), "rows stop")
    for c in out["cases"]:
        print(c["model"], c["num_beams"], c["stop_strings"], len(c["baseline"]), "->", len(c["sequence"]))


if __name__ == "__main__":
    main()
