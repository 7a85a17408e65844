"""Writes tests/goldens/beam_search.json: token ids transformers' generate()
returns with beam search (num_beams > 1, do_sample=False) for the tiny GPT-2,
Llama and T5 golden models, over num_beams 2-4, length_penalty 0.6/1.0/2.0,
early_stopping True/False/"never", num_return_sequences, with and without the
repetition_penalty / no_repeat_ngram_size logits processors.

    /work/pyref/bin/python tests/goldens/gen_beam_goldens.py

Each case names the model directory (under tests/goldens), the prompts, the
generate() arguments and the expected sequences: per prompt
num_return_sequences id lists, cut to their generated length (counted from
beam_indices, so the pads HF appends after EOS are gone). A decoder-only
model's sequences are prompt + generated ids, each prompt generated alone
(batch 1); T5's prompts are one padded batch and its sequences the decoder
output without the decoder start token. EOS is given explicitly: a token the
greedy continuation produces early (so that beams finish at different
lengths) or the config's; the multi-EOS cases give a list of two.
"""
import json
import pathlib

import torch
from transformers import AutoModelForCausalLM, T5ForConditionalGeneration

ROOT = pathlib.Path(__file__).resolve().parent
torch.manual_seed(0)

CAUSAL_PROMPTS = [[5, 17, 42, 8], [3, 60, 11], [90, 2, 33, 33, 7]]
T5_PROMPTS = [[4, 20, 31, 9, 1], [7, 7, 50, 1], [12, 1]]

# (num_beams, length_penalty, early_stopping, num_return_sequences, repetition_penalty, no_repeat_ngram_size)
SETTINGS = [
    (2, 1.0, False, 1, 1.0, 0),
    (3, 0.6, True, 2, 1.0, 0),
    (4, 2.0, "never", 3, 1.0, 0),
    (4, 1.0, True, 1, 1.0, 0),
    (3, 2.0, False, 3, 1.0, 0),
    (2, 0.6, "never", 2, 1.0, 0),
    (3, 1.0, False, 1, 1.3, 2),
]


def generated_length(beam_indices):
    return int((beam_indices != -1).sum())


def early_token(model, prompt, **kw):
    """The third token greedy decoding produces: a likely EOS for beams."""
    out = model.generate(torch.tensor([prompt]), max_new_tokens=3, do_sample=False, num_beams=1, **kw)
    return int(out[0, -1])


def causal_cases(name, max_new_tokens):
    model = AutoModelForCausalLM.from_pretrained(ROOT / name).eval()
    config_eos = model.config.eos_token_id
    cases = []
    for i, s in enumerate(SETTINGS):
        nb, lp, es, nrs, rp, ngram = s
        for prompt in CAUSAL_PROMPTS:
            eos = early_token(model, prompt, pad_token_id=0) if i % 2 == 0 else config_eos
            out = model.generate(torch.tensor([prompt]), max_new_tokens=max_new_tokens, do_sample=False, num_beams=nb,
                                 length_penalty=lp, early_stopping=es, num_return_sequences=nrs,
                                 repetition_penalty=rp, no_repeat_ngram_size=ngram, eos_token_id=eos, pad_token_id=0,
                                 return_dict_in_generate=True, output_scores=True)
            seqs = [out.sequences[r, :len(prompt) + generated_length(out.beam_indices[r])].tolist() for r in range(nrs)]
            cases.append({"model": name, "prompts": [prompt], "num_beams": nb, "length_penalty": lp,
                          "early_stopping": es, "num_return_sequences": nrs, "repetition_penalty": rp,
                          "no_repeat_ngram_size": ngram, "eos_token_id": eos, "max_new_tokens": max_new_tokens,
                          "sequences": [seqs], "sequences_scores": [out.sequences_scores.tolist()]})
    return cases


def multi_eos_cases(name, max_new_tokens):
    """A config listing several EOS ids (as Llama 3's does): (1 + #eos) * num_beams candidates a step. The
    case's eos_token_id is the list, which the test writes into a copy of the model's config.json."""
    model = AutoModelForCausalLM.from_pretrained(ROOT / name).eval()
    cases = []
    for nb, lp, es, nrs in [(2, 1.0, False, 1), (3, 2.0, "never", 2), (4, 0.6, True, 3)]:
        for prompt in CAUSAL_PROMPTS:
            greedy = model.generate(torch.tensor([prompt]), max_new_tokens=5, do_sample=False, num_beams=1,
                                    pad_token_id=0)[0, len(prompt):].tolist()
            eos = [greedy[1], greedy[3]] if greedy[1] != greedy[3] else [greedy[1], greedy[4]]
            out = model.generate(torch.tensor([prompt]), max_new_tokens=max_new_tokens, do_sample=False, num_beams=nb,
                                 length_penalty=lp, early_stopping=es, num_return_sequences=nrs, eos_token_id=eos,
                                 pad_token_id=0, return_dict_in_generate=True, output_scores=True)
            seqs = [out.sequences[r, :len(prompt) + generated_length(out.beam_indices[r])].tolist() for r in range(nrs)]
            cases.append({"model": name, "prompts": [prompt], "num_beams": nb, "length_penalty": lp,
                          "early_stopping": es, "num_return_sequences": nrs, "repetition_penalty": 1.0,
                          "no_repeat_ngram_size": 0, "eos_token_id": eos, "max_new_tokens": max_new_tokens,
                          "sequences": [seqs], "sequences_scores": [out.sequences_scores.tolist()]})
    return cases


def t5_cases(name, max_new_tokens):
    model = T5ForConditionalGeneration.from_pretrained(ROOT / name).eval()
    S = max(len(p) for p in T5_PROMPTS)
    ids = torch.tensor([p + [0] * (S - len(p)) for p in T5_PROMPTS])
    mask = torch.tensor([[1] * len(p) + [0] * (S - len(p)) for p in T5_PROMPTS])
    greedy = model.generate(ids, attention_mask=mask, max_new_tokens=3, do_sample=False, num_beams=1)
    cases = []
    for i, s in enumerate(SETTINGS):
        nb, lp, es, nrs, rp, ngram = s
        eos = int(greedy[0, 3]) if i % 2 == 0 else model.config.eos_token_id
        out = model.generate(ids, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=False, num_beams=nb,
                             length_penalty=lp, early_stopping=es, num_return_sequences=nrs, repetition_penalty=rp,
                             no_repeat_ngram_size=ngram, eos_token_id=eos, return_dict_in_generate=True,
                             output_scores=True)
        seqs = [[out.sequences[b * nrs + r, 1:1 + generated_length(out.beam_indices[b * nrs + r])].tolist()
                 for r in range(nrs)] for b in range(len(T5_PROMPTS))]
        scores = out.sequences_scores.view(len(T5_PROMPTS), nrs).tolist()
        cases.append({"model": name, "prompts": T5_PROMPTS, "num_beams": nb, "length_penalty": lp,
                      "early_stopping": es, "num_return_sequences": nrs, "repetition_penalty": rp,
                      "no_repeat_ngram_size": ngram, "eos_token_id": eos, "max_new_tokens": max_new_tokens,
                      "sequences": seqs, "sequences_scores": scores})
    return cases


if __name__ == "__main__":
    import transformers
    cases = causal_cases("gpt2/gpt2_lm", 9) + causal_cases("llama/llama_lm", 8) + t5_cases("t5/t5_relu_tied", 8) \
        + t5_cases("t5/t5_gated_untied", 7) + multi_eos_cases("llama/llama_lm", 8)
    path = ROOT / "beam_search.json"
    path.write_text(json.dumps({"transformers": transformers.__version__, "cases": cases}, indent=1) + "\n")
    lens = [len(s) for c in cases for p in c["sequences"] for s in p]
    print(f"transformers {transformers.__version__}: {len(cases)} cases, sequence lengths {min(lens)}..{max(lens)} "
          f"-> {path}")
