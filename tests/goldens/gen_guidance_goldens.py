"""Writes tests/goldens/guidance.json: the token ids transformers' generate()
returns with guidance_scale (UnbatchedClassifierFreeGuidanceLogitsProcessor:
each step's log-softmax is guidance_scale * (conditional - unconditional) +
unconditional, the unconditional scores from the model run on the prompt's
last token and the tokens generated since, without a negative prompt) on the
tiny decoder-only golden models, greedy and with num_beams 3, alone and with
a repetition penalty; `baseline` is the plain greedy output. max_new_tokens
10, sequences cut after the first EOS.

    /work/pyref/bin/python tests/goldens/gen_guidance_goldens.py

Made with transformers 5.25.0 and torch 2.15.0 (CPU).
"""
import json
import pathlib

import torch
from transformers import AutoModelForCausalLM

ROOT = pathlib.Path(__file__).resolve().parent
MAX_NEW = 10
SETTINGS = [dict(guidance_scale=1.5), dict(guidance_scale=3.0), dict(guidance_scale=0.5),
            dict(guidance_scale=2.0, repetition_penalty=1.3)]


def main():
    cases = []
    for model_dir in ("gpt2/gpt2_lm", "llama/llama_lm"):
        model = AutoModelForCausalLM.from_pretrained(ROOT / model_dir).float().eval()
        eos = model.generation_config.eos_token_id
        for prompt in ([5, 17, 42, 8], [3]):
            ids = torch.tensor([prompt])
            with torch.no_grad():
                plain = model.generate(ids, max_new_tokens=MAX_NEW, do_sample=False)[0].tolist()
                for beams in (1, 3):
                    for s in SETTINGS:
                        seq = model.generate(ids, max_new_tokens=MAX_NEW, do_sample=False, num_beams=beams,
                                             **s)[0].tolist()
                        if eos is not None and eos in seq[len(prompt):]:
                            seq = seq[:len(prompt) + seq[len(prompt):].index(eos) + 1]
                        cases.append({"model": model_dir, "prompt": prompt, "num_beams": beams, "settings": s,
                                      "baseline": plain, "sequence": seq})
    (ROOT / "guidance.json").write_text(json.dumps({"generator": "gen_guidance_goldens.py", "cases": cases},
                                                   indent=1) + "\n")
    print(len(cases), "cases,", sum(c["sequence"] != c["baseline"] for c in cases), "differ from the baseline")


if __name__ == "__main__":
    main()
