"""Writes tests/goldens/plain_sampling.json: transformers' plain sampling
(generate(num_beams=1, do_sample=True), its _sample) as kiln's
models::next_token must reproduce it.

    /work/pyref/bin/python tests/goldens/gen_plain_sampling_goldens.py

"rows": one row of logits each, with the ids so far and the generate()
settings; `probs` is softmax of the scores after the LogitsProcessorList that
transformers' own `_get_logits_processor` builds for those settings (the
processors, then temperature, top_k, top_p, in its order), the distribution
`torch.multinomial` draws the next id from. The rows sit on the boundaries of
the warpers: ties with the top_k-th value (kept), tokens tied at the top_p cut
(the ascending sort removes the lower ids first), a cumulative mass exactly
1 - top_p (removed); and min_p after them.

"cases": how often generate() on the tiny GPT-2 golden model returns each
two-token continuation of one prompt over many torch seeds (the prompt
repeated in batches of 100 rows, each drawing on its own), with `self_tvd`,
the total variation distance between two such runs on different seeds.
"""
import json
import math
import pathlib

import torch
from sampling_counts import PROMPT, SEEDS, counts, tvd
from transformers import AutoModelForCausalLM, GenerationConfig

ROOT = pathlib.Path(__file__).resolve().parent
LN2 = math.log(2.0)

ROWS = [
    # A tie with the top_k-th value: all three 1s stay (an exact-k cut keeps two of them).
    dict(logits=[3, 1, 1, 1, 0, -1], ids=[0], top_k=2),
    dict(logits=[2, 2, 2, 1, 1, 0, -3], ids=[0], top_k=4, top_p=0.9, temperature=0.8),
    # Equal logits at the top_p cut: the ascending sort removes the lower ids first, so the higher ones stay.
    dict(logits=[0, 0, 0, 0], ids=[0], top_k=0, top_p=0.5),
    dict(logits=[0] * 8, ids=[0], top_k=0, top_p=0.75),
    dict(logits=[1, 1, 0], ids=[0], top_k=0, top_p=0.01),
    # Cumulative mass exactly 1 - top_p (probabilities 1/8, 1/8, 1/4, 1/2): removed.
    dict(logits=[0, 0, LN2, 2 * LN2], ids=[0], top_k=0, top_p=0.75),
    # The processors first: repetition penalty and a banned n-gram, then the warpers.
    dict(logits=[1.5, -0.5, 2.0, 0.3, 1.9, -1.0, 0.7, 2.1], ids=[2, 4, 7, 2], repetition_penalty=1.4,
         no_repeat_ngram_size=2, top_k=4, top_p=0.7, temperature=1.3),
    # General rows: temperature, top_k and top_p together, and top_k alone at 50 (transformers' default).
    dict(logits=[0.3, -1.2, 2.2, 0.9, 1.7, -0.4, 1.1, 0.0, 2.0, -2.5], ids=[1, 3], top_k=5, top_p=0.8,
         temperature=0.7),
    dict(logits=[0.3, -1.2, 2.2, 0.9, 1.7, -0.4, 1.1, 0.0, 2.0, -2.5], ids=[1, 3], temperature=2.5),
    # min_p (MinPLogitsWarper, after top_p): below min_p times the largest probability goes.
    dict(logits=[0.3, -1.2, 2.2, 0.9, 1.7, -0.4, 1.1, 0.0, 2.0, -2.5], ids=[1, 3], top_k=0, min_p=0.3),
    dict(logits=[0.3, -1.2, 2.2, 0.9, 1.7, -0.4, 1.1, 0.0, 2.0, -2.5], ids=[1, 3], top_k=0, min_p=0.05,
         temperature=0.5),
    dict(logits=[0.3, -1.2, 2.2, 0.9, 1.7, -0.4, 1.1, 0.0, 2.0, -2.5], ids=[1, 3], top_k=6, top_p=0.95, min_p=0.2,
         temperature=1.5),
    dict(logits=[1, 1, 1, 0.5], ids=[0], top_k=0, min_p=0.9),
    dict(logits=[4, 1, 1, 0], ids=[0], top_k=0, min_p=1.0),
]

SETTINGS = [
    dict(temperature=0.8, top_k=6, top_p=0.9, max_new_tokens=2),
    dict(temperature=0.9, top_k=0, top_p=0.6, repetition_penalty=1.5, max_new_tokens=2),
]


def row_settings(row):
    """The row's generate() settings over generate()'s defaults (top_k 50)."""
    settings = {"temperature": 1.0, "top_k": 50, "top_p": 1.0, "min_p": None, "repetition_penalty": 1.0,
                "no_repeat_ngram_size": 0}
    settings.update({k: v for k, v in row.items() if k not in ("logits", "ids")})
    return settings


def row_probs(model, row):
    gc = GenerationConfig(do_sample=True, num_beams=1, **row_settings(row))
    ids = torch.tensor([row["ids"]])
    procs = model._get_logits_processor(generation_config=gc, input_ids_seq_length=ids.shape[1],
                                        encoder_input_ids=ids, device="cpu", model_kwargs={})
    scores = procs(ids, torch.tensor([row["logits"]], dtype=torch.float32))
    return [float(p) for p in scores.softmax(-1)[0]], [type(p).__name__ for p in procs]


def main():
    model = AutoModelForCausalLM.from_pretrained(ROOT / "gpt2/gpt2_lm").eval()
    rows = []
    for row in ROWS:
        probs, procs = row_probs(model, row)
        settings = row_settings(row)
        rows.append({"logits": row["logits"], "ids": row["ids"], "generate": settings, "processors": procs,
                     "probs": probs})
        print(settings, procs, [round(p, 4) for p in probs])
    cases = []
    with torch.no_grad():
        for kw in SETTINGS:
            first = counts(model, dict(kw, num_beams=1), 0, SEEDS)
            second = counts(model, dict(kw, num_beams=1), 1000, SEEDS)
            settings = {"temperature": 1.0, "top_k": 50, "top_p": 1.0, "repetition_penalty": 1.0}
            settings.update(kw)
            cases.append({"model": "gpt2/gpt2_lm", "prompt": PROMPT, "eos_token_id": model.config.eos_token_id,
                          "generate": settings, "seeds": SEEDS, "counts": dict(sorted(first.items())),
                          "self_tvd": tvd(first, second, SEEDS)})
            print(kw, len(first), "outcomes, self tvd", cases[-1]["self_tvd"])
    (ROOT / "plain_sampling.json").write_text(json.dumps({"rows": rows, "cases": cases}, indent=1) + "\n")


if __name__ == "__main__":
    main()
