"""Writes tests/goldens/encoder_processors.json: what transformers'
EncoderRepetitionPenaltyLogitsProcessor and EncoderNoRepeatNGramLogitsProcessor
(generate()'s encoder_repetition_penalty and encoder_no_repeat_ngram_size)
do to crafted rows of scores, and the token ids generate() returns with them
on the tiny golden models.

    /work/pyref/bin/python tests/goldens/gen_encoder_processors_goldens.py

"rows": a row of float32 scores, the prompt (`encoder_ids`: the encoder's
input, which for a decoder-only model is its prompt), the row's ids so far
(`ids`: the decoder's input, or the decoder-only prompt and output), the
settings, and `scores` after the processor(s) in _get_logits_processor's
order (encoder repetition penalty before the repetition penalty, the encoder
n-grams after the no-repeat n-grams).

"cases": generate() greedy and num_beams 3 on `gpt2/gpt2_lm`,
`llama/llama_lm` (prompts that hold tokens their greedy output repeats) and
`t5/t5_relu_tied`, with encoder_repetition_penalty (below and above 1) and
encoder_no_repeat_ngram_size (1 to 3), alone and with repetition_penalty and
no_repeat_ngram_size; `baseline` is the plain greedy output. Sequences are
cut after the first EOS, and T5's lack the decoder start token, as kiln
returns them.

Made with transformers 5.25.0 and torch 2.15.0 (CPU).
"""
import json
import pathlib
import random

import torch
from transformers import AutoModelForCausalLM, T5ForConditionalGeneration
from transformers.generation.logits_process import (EncoderNoRepeatNGramLogitsProcessor,
                                                    EncoderRepetitionPenaltyLogitsProcessor, LogitsProcessorList,
                                                    NoRepeatNGramLogitsProcessor, RepetitionPenaltyLogitsProcessor)

ROOT = pathlib.Path(__file__).resolve().parent
MAX_NEW = 12


def row_cases(rng):
    rows = []
    for k in range(40):
        v = rng.choice([8, 12, 20])
        scores = [round(rng.uniform(-3, 3), 3) for _ in range(v)]
        if k % 5 == 0:
            scores[rng.randrange(v)] = 0.0
        encoder = [rng.randrange(v) for _ in range(rng.randrange(1, 9))]
        ids = encoder + [rng.randrange(v) for _ in range(rng.randrange(0, 5))] if k % 2 else \
            [0] + [rng.randrange(v) for _ in range(rng.randrange(0, 5))]
        if k % 3 == 0 and len(encoder) >= 2:  # the row ends with a piece of the prompt
            ids = ids + encoder[:2]
        row = {"scores_in": scores, "encoder_ids": encoder, "ids": ids,
               "encoder_repetition_penalty": rng.choice([1.0, 0.5, 1.7, 3.0]),
               "encoder_no_repeat_ngram_size": rng.choice([0, 1, 2, 3]),
               "repetition_penalty": rng.choice([1.0, 1.0, 1.3]), "no_repeat_ngram_size": rng.choice([0, 0, 2])}
        if row["encoder_repetition_penalty"] == 1.0 and row["encoder_no_repeat_ngram_size"] == 0:
            row["encoder_repetition_penalty"] = 2.0
        enc = torch.tensor([encoder])
        procs = LogitsProcessorList()
        if row["encoder_repetition_penalty"] != 1.0:
            procs.append(EncoderRepetitionPenaltyLogitsProcessor(row["encoder_repetition_penalty"], enc))
        if row["repetition_penalty"] != 1.0:
            procs.append(RepetitionPenaltyLogitsProcessor(row["repetition_penalty"]))
        if row["no_repeat_ngram_size"]:
            procs.append(NoRepeatNGramLogitsProcessor(row["no_repeat_ngram_size"]))
        if row["encoder_no_repeat_ngram_size"]:
            procs.append(EncoderNoRepeatNGramLogitsProcessor(row["encoder_no_repeat_ngram_size"], enc))
        out = procs(torch.tensor([ids]), torch.tensor([scores], dtype=torch.float32))[0].tolist()
        row["scores"] = ["-inf" if x == float("-inf") else x for x in out]
        rows.append(row)
    return rows


SETTINGS = [dict(encoder_repetition_penalty=0.5), dict(encoder_repetition_penalty=2.0),
            dict(encoder_repetition_penalty=1.3), dict(encoder_no_repeat_ngram_size=1),
            dict(encoder_no_repeat_ngram_size=2), dict(encoder_no_repeat_ngram_size=3),
            dict(encoder_repetition_penalty=0.7, repetition_penalty=1.4),
            dict(encoder_no_repeat_ngram_size=2, no_repeat_ngram_size=2, encoder_repetition_penalty=1.5)]


def cases_json():
    cases = []
    for model_dir, enc_dec in [("gpt2/gpt2_lm", False), ("llama/llama_lm", False), ("t5/t5_relu_tied", True)]:
        cls = T5ForConditionalGeneration if enc_dec else AutoModelForCausalLM
        model = cls.from_pretrained(ROOT / model_dir).float().eval()
        prompt = [4, 20, 31, 9, 1] if enc_dec else [5, 17, 42, 8]
        with torch.no_grad():
            if not enc_dec:  # a prompt that holds what greedy decoding then produces
                first = model.generate(torch.tensor([prompt]), max_new_tokens=6, do_sample=False)[0].tolist()
                prompt = first
            else:
                first = model.generate(torch.tensor([prompt]), max_new_tokens=6, do_sample=False)[0].tolist()
                prompt = prompt[:-1] + first[1:5] + prompt[-1:]
            ids = torch.tensor([prompt])
            plain = model.generate(ids, max_new_tokens=MAX_NEW, do_sample=False)[0].tolist()
            eos = model.generation_config.eos_token_id
            for beams in (1, 3):
                for s in SETTINGS:
                    out = model.generate(ids, max_new_tokens=MAX_NEW, do_sample=False, num_beams=beams, **s)[0].tolist()
                    seq = out[1:] if enc_dec else out
                    start = 0 if enc_dec else len(prompt)
                    if eos is not None and eos in seq[start:]:
                        seq = seq[:start + seq[start:].index(eos) + 1]
                    cases.append({"model": model_dir, "prompt": prompt, "num_beams": beams, "settings": s,
                                  "baseline": plain[1:] if enc_dec else plain, "sequence": seq})
    return cases


def main():
    rng = random.Random(0)
    out = {"generator": "gen_encoder_processors_goldens.py", "rows": row_cases(rng), "cases": cases_json()}
    (ROOT / "encoder_processors.json").write_text(json.dumps(out, indent=1) + "\n")
    changed = sum(c["sequence"] != c["baseline"] for c in out["cases"] if c["num_beams"] == 1)
    print(len(out["rows"]), "rows,", len(out["cases"]), "cases,", changed, "greedy cases differ from the baseline")


if __name__ == "__main__":
    main()
