#!/usr/bin/env python3
"""PyTorch reference for bench/gpt2: one GPT-2 causal-LM training step (forward,
backward, AdamW), written like Hugging Face's modelling code (Conv1D as
[in, out] matmuls, eager attention, tied lm_head). fp32, or with --bf16 under torch.autocast("cpu", bfloat16); CPU.

usage: gpt2_train_step.py [--layers 12] [--embd 768] [--heads 12] [--batch 4] [--seq 256] [--steps 5] [--warmup 2] [--bf16]
Prints one JSON line: median step seconds, peak RSS.
"""
import argparse, math, os, sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from torch_step import run_steps  # noqa: E402


class Conv1D(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_in, n_out) * 0.02)
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(*x.shape[:-1], -1)


class Block(nn.Module):
    def __init__(self, c, nh, p):
        super().__init__()
        self.nh = nh
        self.ln_1, self.ln_2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.c_attn, self.attn_proj = Conv1D(c, 3 * c), Conv1D(c, c)
        self.c_fc, self.mlp_proj = Conv1D(c, 4 * c), Conv1D(4 * c, c)
        self.drop = nn.Dropout(p)

    def forward(self, x, causal):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        heads = lambda y: y.view(b, t, self.nh, c // self.nh).transpose(1, 2)
        q, k, v = heads(q), heads(k), heads(v)
        w = q @ k.transpose(-1, -2) / math.sqrt(c // self.nh)
        w = torch.where(causal[:, :, :t, :t], w, torch.tensor(torch.finfo(w.dtype).min))
        a = (self.drop(w.softmax(-1)) @ v).transpose(1, 2).reshape(b, t, c)
        x = x + self.drop(self.attn_proj(a))
        return x + self.drop(self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")))


class GPT2(nn.Module):
    def __init__(self, vocab, pos, c, layers, nh, p=0.1):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, c), nn.Embedding(pos, c)
        nn.init.normal_(self.wte.weight, std=0.02)
        nn.init.normal_(self.wpe.weight, std=0.01)
        self.h = nn.ModuleList(Block(c, nh, p) for _ in range(layers))
        self.ln_f, self.drop = nn.LayerNorm(c), nn.Dropout(p)
        self.register_buffer("causal", torch.tril(torch.ones(pos, pos, dtype=torch.bool)).view(1, 1, pos, pos))

    def forward(self, ids):
        b, t = ids.shape
        x = self.drop(self.wte(ids) + self.wpe(torch.arange(t)))
        for blk in self.h:
            x = blk(x, self.causal)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    for k, v in dict(layers=12, embd=768, heads=12, batch=4, seq=256, steps=5, vocab=50257,
                     threads=int(os.environ.get("OMP_NUM_THREADS", os.cpu_count()))).items():
        ap.add_argument("--" + k, type=int, default=v)
    ap.add_argument("--bf16", action="store_true", help='torch.autocast("cpu", dtype=torch.bfloat16)')
    ap.add_argument("--warmup", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = GPT2(a.vocab, 1024, a.embd, a.layers, a.heads)
    ids = torch.randint(0, a.vocab, (a.batch, a.seq))
    run_steps(model, lambda: model(ids), a.steps, warmup=a.warmup, bf16=a.bf16)


if __name__ == "__main__":
    main()
