"""Writes tests/goldens/rope_generation.json: token ids transformers' generate()
returns for the tiny golden models whose rotary frequencies depend on the
sequence's length, generating past the length where they change:

  llama3/llama_dynamic_rope   dynamic NTK scaling, max_position_embeddings 8
  phi3/phi3_longrope_window   longrope, original_max_position_embeddings 8
                              (short factors up to 8 positions, long past it)

With the cache, a prompt is read as one sequence (all its tokens rotated with
the prompt length's frequencies) and each generated token with those of its
own position + 1, the cached keys keeping theirs; Phi3ForCausalLM also
computes its cache again when a sequence first passes
original_max_position_embeddings. Without it (use_cache=False) every step
reads the whole sequence again. Prompts shorter than, equal to and longer
than the switching length; greedy and beam search (num_beams 3); EOS off
(min_new_tokens = max_new_tokens), so every sequence has its full length.
Each generate() call gets a freshly loaded model: transformers' dynamic
rotary module keeps the longest length it has seen between calls.

    /work/pyref/bin/python tests/goldens/gen_rope_generation_goldens.py

Made with transformers 5.25.0 and torch 2.15.0 (CPU).
"""
import json
import pathlib

import torch
from transformers import AutoModelForCausalLM

ROOT = pathlib.Path(__file__).resolve().parent

# (model directory, prompt, max_new_tokens): prompt + new tokens stay within
# max_position_embeddings where the config bounds positions (Phi-3: 16).
CASES = [
    ("llama3/llama_dynamic_rope", [5, 17, 42, 8, 3], 10),
    ("llama3/llama_dynamic_rope", [5, 17, 42, 8, 3, 60, 11, 90], 8),
    ("llama3/llama_dynamic_rope", [5, 17, 42, 8, 3, 60, 11, 90, 2, 33, 7], 9),
    ("phi3/phi3_longrope_window", [5, 17, 42, 8], 10),
    ("phi3/phi3_longrope_window", [5, 17, 42, 8, 3, 60, 11, 90], 8),
    ("phi3/phi3_longrope_window", [5, 17, 42, 8, 3, 60, 11, 90, 2, 33, 7], 5),
]


def main():
    cases = []
    for model_dir, prompt, new in CASES:
        for num_beams in (1, 3):
            for use_cache in (True, False):
                # A fresh model each time: the dynamic rotary module keeps the longest length it has seen
                # (max_seq_len_cached) from one generate() call to the next.
                model = AutoModelForCausalLM.from_pretrained(ROOT / model_dir, attn_implementation="eager")
                model = model.float().eval()
                with torch.no_grad():
                    out = model.generate(torch.tensor([prompt]), do_sample=False, num_beams=num_beams,
                                         max_new_tokens=new, min_new_tokens=new, eos_token_id=None,
                                         use_cache=use_cache)
                cases.append({"model": model_dir, "prompt": prompt, "max_new_tokens": new, "num_beams": num_beams,
                              "use_cache": use_cache, "sequence": out[0].tolist()})
    with open(ROOT / "rope_generation.json", "w") as f:
        json.dump({"generator": "gen_rope_generation_goldens.py", "cases": cases}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
