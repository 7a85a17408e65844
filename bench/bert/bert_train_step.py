#!/usr/bin/env python3
"""PyTorch reference for bench/bert: one training step (forward, backward,
AdamW) of BertForSequenceClassification, written like Hugging Face's modelling
code (nn.Linear/LayerNorm/Embedding, eager attention). fp32, or with --bf16 under torch.autocast("cpu", bfloat16); CPU.

usage: bert_train_step.py [--layers 12] [--hidden 768] [--heads 12] [--batch 8] [--seq 128] [--steps 10] [--warmup 2] [--bf16]
Prints one JSON line: median step seconds, peak RSS.
"""
import argparse, math, os, sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from torch_step import run_steps  # noqa: E402


class Layer(nn.Module):
    def __init__(self, h, nh, inter, p):
        super().__init__()
        self.nh, self.d = nh, h // nh
        self.query, self.key, self.value = nn.Linear(h, h), nn.Linear(h, h), nn.Linear(h, h)
        self.attn_out, self.attn_norm = nn.Linear(h, h), nn.LayerNorm(h, eps=1e-12)
        self.inter, self.out, self.out_norm = nn.Linear(h, inter), nn.Linear(inter, h), nn.LayerNorm(h, eps=1e-12)
        self.drop = nn.Dropout(p)

    def forward(self, x, mask):
        b, t, h = x.shape
        heads = lambda y: y.view(b, t, self.nh, self.d).transpose(1, 2)
        q, k, v = heads(self.query(x)), heads(self.key(x)), heads(self.value(x))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.d) + mask
        ctx = (self.drop(scores.softmax(-1)) @ v).transpose(1, 2).reshape(b, t, h)
        a = self.attn_norm(self.drop(self.attn_out(ctx)) + x)
        return self.out_norm(self.drop(self.out(F.gelu(self.inter(a)))) + a)


class Bert(nn.Module):
    def __init__(self, vocab, h, layers, nh, inter, maxpos, labels, p=0.1):
        super().__init__()
        self.word, self.pos, self.ttype = nn.Embedding(vocab, h), nn.Embedding(maxpos, h), nn.Embedding(2, h)
        self.norm, self.drop = nn.LayerNorm(h, eps=1e-12), nn.Dropout(p)
        self.layers = nn.ModuleList(Layer(h, nh, inter, p) for _ in range(layers))
        self.pooler, self.classifier = nn.Linear(h, h), nn.Linear(h, labels)

    def forward(self, ids, mask, labels):
        b, t = ids.shape
        pos = torch.arange(t).unsqueeze(0).expand(b, t)
        x = self.drop(self.norm(self.word(ids) + self.pos(pos) + self.ttype(torch.zeros_like(ids))))
        m = (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        for layer in self.layers:
            x = layer(x, m)
        logits = self.classifier(self.drop(torch.tanh(self.pooler(x[:, 0]))))
        return F.cross_entropy(logits, labels)


def main():
    ap = argparse.ArgumentParser()
    for k, v in dict(layers=12, hidden=768, heads=12, batch=8, seq=128, steps=10, vocab=30522,
                     threads=int(os.environ.get("OMP_NUM_THREADS", os.cpu_count()))).items():
        ap.add_argument("--" + k, type=int, default=v)
    ap.add_argument("--bf16", action="store_true", help='torch.autocast("cpu", dtype=torch.bfloat16)')
    ap.add_argument("--warmup", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)  # PyTorch defaults to physical cores; compare at the same count
    torch.manual_seed(0)
    model = Bert(a.vocab, a.hidden, a.layers, a.heads, 4 * a.hidden, 512, 2)
    ids = torch.randint(0, a.vocab, (a.batch, a.seq))
    mask = torch.ones(a.batch, a.seq, dtype=torch.long)
    labels = torch.randint(0, 2, (a.batch,))
    run_steps(model, lambda: model(ids, mask, labels), a.steps, warmup=a.warmup, bf16=a.bf16)


if __name__ == "__main__":
    main()
