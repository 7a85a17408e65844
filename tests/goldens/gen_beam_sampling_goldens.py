"""Writes tests/goldens/beam_sampling.json: how often transformers' beam
sampling (generate(num_beams > 1, do_sample=True)) returns each continuation
of one prompt with the tiny GPT-2 golden model, over many torch seeds.

    /work/pyref/bin/python tests/goldens/gen_beam_sampling_goldens.py

kiln draws with its own generator, so its sequences cannot equal
transformers' seed for seed; BeamSampling.DistributionAsTransformers in
test_models compares the two distributions instead. Each case gives the
generate() arguments, the number of outputs (`seeds`), the count of each
generated continuation (the ids after the prompt, up to EOS, joined by
spaces; the prompt is repeated in batches of 100 rows, each row drawing on
its own) and `self_tvd`, the total variation distance between two such runs
on different torch seeds: how far two runs of the same algorithm land apart
by chance.
"""
import json
import pathlib

import torch
from sampling_counts import PROMPT, SEEDS, counts, tvd
from transformers import AutoModelForCausalLM

ROOT = pathlib.Path(__file__).resolve().parent
# generate() arguments: the warpers each way (temperature with top_k; top_p alone), 2 new tokens.
SETTINGS = [
    dict(num_beams=3, temperature=1.5, top_k=6, top_p=1.0, max_new_tokens=2),
    dict(num_beams=2, temperature=0.7, top_k=0, top_p=0.6, max_new_tokens=2),
]


def main():
    model = AutoModelForCausalLM.from_pretrained(ROOT / "gpt2/gpt2_lm").eval()
    cases = []
    with torch.no_grad():
        for kw in SETTINGS:
            first = counts(model, dict(kw, num_return_sequences=1), 0, SEEDS)
            second = counts(model, dict(kw, num_return_sequences=1), 1000, SEEDS)
            cases.append({"model": "gpt2/gpt2_lm", "prompt": PROMPT, "eos_token_id": model.config.eos_token_id,
                          "generate": kw, "seeds": SEEDS, "counts": dict(sorted(first.items())),
                          "self_tvd": tvd(first, second, SEEDS)})
            print(kw, len(first), "outcomes, self tvd", cases[-1]["self_tvd"])
    (ROOT / "beam_sampling.json").write_text(json.dumps({"cases": cases}, indent=1) + "\n")


if __name__ == "__main__":
    main()
