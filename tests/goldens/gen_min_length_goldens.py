"""Writes tests/goldens/min_length.json: token ids transformers' generate()
returns with min_new_tokens or min_length (MinNewTokensLengthLogitsProcessor,
MinLengthLogitsProcessor: the EOS ids cannot be chosen earlier), greedy and
with beams, for the tiny GPT-2, Llama and T5 golden models. EOS is a token
greedy decoding produces early (its third), so the minimum decides where
sequences end, or the token it produces most often, with minimums of 2-5
new tokens (given as min_new_tokens, or as min_length counting the prompt,
T5's decoder start token), so that sequences end right at the minimum;
max_new_tokens 12.

    /work/pyref/bin/python tests/goldens/gen_min_length_goldens.py

Made with transformers 5.25.0 and torch 2.15.0 (CPU).
"""
import json
import pathlib

import torch
from transformers import AutoModelForCausalLM, T5ForConditionalGeneration

ROOT = pathlib.Path(__file__).resolve().parent

MODELS = [("gpt2/gpt2_lm", False), ("llama/llama_lm", False), ("t5/t5_relu_tied", True)]
PROMPT = {False: [5, 17, 42, 8], True: [4, 20, 31, 9, 1]}
# (min_new_tokens, min_length, num_beams)
SETTINGS = [(0, 0, 1), (6, 0, 1), (0, 9, 1), (6, 0, 3), (0, 9, 3), (3, 11, 1)]


def main():
    cases = []
    for model_dir, enc_dec in MODELS:
        cls = T5ForConditionalGeneration if enc_dec else AutoModelForCausalLM
        model = cls.from_pretrained(ROOT / model_dir).float().eval()
        prompt = PROMPT[enc_dec]
        ids = torch.tensor([prompt])
        with torch.no_grad():
            early = int(model.generate(ids, max_new_tokens=3, do_sample=False, num_beams=1)[0, -1])
            greedy = model.generate(ids, max_new_tokens=12, do_sample=False, num_beams=1)[0].tolist()
            greedy = greedy[1:] if enc_dec else greedy[len(prompt):]
            frequent = max(set(greedy), key=lambda t: (greedy.count(t), -greedy.index(t)))
            used = 1 if enc_dec else len(prompt)
            settings = [(early, *s) for s in SETTINGS]
            settings += [(frequent, n, 0, b) for n in (2, 3, 4, 5) for b in (1, 3)]
            settings += [(frequent, 0, used + n, b) for n in (2, 3, 4, 5) for b in (1, 3)]
            for eos, min_new, min_len, beams in settings:
                kw = {"min_new_tokens": min_new} if min_new else {}
                if min_len:
                    kw["min_length"] = min_len
                out = model.generate(ids, do_sample=False, num_beams=beams, max_new_tokens=12, eos_token_id=eos,
                                     pad_token_id=eos if not enc_dec else None, **kw)
                seq = out[0].tolist()
                if enc_dec:
                    seq = seq[1:]  # without the decoder start token, as kiln returns it
                if eos in (seq if enc_dec else seq[len(prompt):]):  # cut the pads after the first EOS
                    start = 0 if enc_dec else len(prompt)
                    seq = seq[:start + (seq[start:].index(eos)) + 1]
                cases.append({"model": model_dir, "prompt": prompt, "eos_token_id": eos, "num_beams": beams,
                              "min_new_tokens": min_new, "min_length": min_len, "sequence": seq})
    with open(ROOT / "min_length.json", "w") as f:
        json.dump({"generator": "gen_min_length_goldens.py", "cases": cases}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
