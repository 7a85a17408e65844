"""Writes tests/goldens/top_h.json: the ids transformers' TopHLogitsWarper
(generate()'s top_h, with do_sample) keeps of crafted rows of scores: random
float32 rows of 8, 30 and 150 ids (past its 100-id cap), peaked and flat,
with -inf entries, for top_h from 0.05 to 1.

    /work/pyref/bin/python tests/goldens/gen_top_h_goldens.py

Made with transformers 5.25.0 and torch 2.15.0 (CPU).
"""
import json
import pathlib
import random

import torch
from transformers.generation.logits_process import TopHLogitsWarper

ROOT = pathlib.Path(__file__).resolve().parent


def main():
    rng = random.Random(0)
    rows = []
    for k in range(90):
        v = [8, 30, 150][k % 3]
        spread = [0.3, 1.0, 3.0][(k // 3) % 3]
        scores = [round(rng.gauss(0, spread), 4) for _ in range(v)]
        if k % 7 == 0:
            for i in rng.sample(range(v), v // 4):
                scores[i] = float("-inf")
        top_h = [0.05, 0.2, 0.4, 0.6, 0.8, 0.95, 1.0][k % 7]
        out = TopHLogitsWarper(top_h=top_h)(None, torch.tensor([scores], dtype=torch.float32))[0]
        kept = [i for i in range(v) if out[i] != float("-inf")]
        rows.append({"scores": ["-inf" if x == float("-inf") else x for x in scores], "top_h": top_h, "kept": kept})
    (ROOT / "top_h.json").write_text(json.dumps({"generator": "gen_top_h_goldens.py", "rows": rows}) + "\n")
    print(len(rows), "rows, kept", sum(len(r["kept"]) for r in rows), "of", sum(len(r["scores"]) for r in rows))


if __name__ == "__main__":
    main()
