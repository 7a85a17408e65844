#!/usr/bin/env python3
"""PyTorch reference for bench/t5: one T5 sequence-to-sequence training step
(forward, backward, gradient clipping at 1.0, AdamW), written like Hugging
Face's T5ForConditionalGeneration: RMS layer norms, relative position
buckets in each stack's first layer (shared by its other layers), unscaled
attention scores, ReLU feed-forward, dropout 0.1 where T5 puts it, the tied
head scaled by d_model^-0.5. fp32, CPU. The batch is `kiln bench --task
seq2seq`'s: fixed ids, labels shifted right (start id 0) into the decoder.

usage: t5_train_step.py [--batch 8] [--seq 128] [--target_len 32] [--steps 5]
                        [--layers 6] [--d_model 512] [--d_ff 2048] [--heads 8]
Prints one JSON line: median step seconds, peak RSS.
"""
import argparse, math, os, sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from torch_step import run_steps  # noqa: E402

BUCKETS, MAX_DISTANCE = 32, 128


def bucket(rel, bidirectional):
    """The relative-position bucket of each key offset rel = key - query."""
    n_buckets, out = BUCKETS, torch.zeros_like(rel)
    if bidirectional:
        n_buckets //= 2
        out += (rel > 0).long() * n_buckets
        n = rel.abs()
    else:
        n = -torch.clamp(rel, max=0)
    exact = n_buckets // 2
    far = exact + (torch.log(n.float().clamp(min=1) / exact) / math.log(MAX_DISTANCE / exact)
                   * (n_buckets - exact)).long()
    return out + torch.where(n < exact, n, far.clamp(max=n_buckets - 1))


class RMSNorm(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(c))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class Attention(nn.Module):
    def __init__(self, c, nh, dk, p, relative):
        super().__init__()
        self.nh, self.dk = nh, dk
        self.q, self.k, self.v = (nn.Linear(c, nh * dk, bias=False) for _ in range(3))
        self.o = nn.Linear(nh * dk, c, bias=False)
        self.rel = nn.Embedding(BUCKETS, nh) if relative else None
        self.drop = nn.Dropout(p)

    def forward(self, x, kv, bias):
        b, t, _ = x.shape
        heads = lambda y: y.view(b, -1, self.nh, self.dk).transpose(1, 2)
        w = heads(self.q(x)) @ heads(self.k(kv)).transpose(-1, -2) + bias  # no 1/sqrt(d)
        a = self.drop(w.softmax(-1)) @ heads(self.v(kv))
        return self.o(a.transpose(1, 2).reshape(b, t, -1))


class Block(nn.Module):
    def __init__(self, c, ff, nh, dk, p, decoder, first):
        super().__init__()
        self.self_attn, self.self_norm = Attention(c, nh, dk, p, first), RMSNorm(c)
        self.cross_attn = Attention(c, nh, dk, p, False) if decoder else None
        self.cross_norm = RMSNorm(c) if decoder else None
        self.wi, self.wo = nn.Linear(c, ff, bias=False), nn.Linear(ff, c, bias=False)
        self.ff_norm, self.drop = RMSNorm(c), nn.Dropout(p)

    def forward(self, x, self_bias, enc, cross_bias):
        h = self.self_norm(x)
        x = x + self.drop(self.self_attn(h, h, self_bias))
        if self.cross_attn is not None:
            x = x + self.drop(self.cross_attn(self.cross_norm(x), enc, cross_bias))
        return x + self.drop(self.wo(self.drop(F.relu(self.wi(self.ff_norm(x))))))


class Stack(nn.Module):
    def __init__(self, embed, layers, c, ff, nh, dk, p, decoder):
        super().__init__()
        self.embed, self.decoder = embed, decoder
        self.blocks = nn.ModuleList(Block(c, ff, nh, dk, p, decoder, i == 0) for i in range(layers))
        self.norm, self.drop = RMSNorm(c), nn.Dropout(p)

    def forward(self, ids, enc=None):
        t = ids.shape[1]
        pos = torch.arange(t)
        rel = bucket(pos[None, :] - pos[:, None], bidirectional=not self.decoder)
        bias = self.blocks[0].self_attn.rel(rel).permute(2, 0, 1)[None]  # [1, heads, t, t]
        if self.decoder:
            bias = bias + (1.0 - torch.tril(torch.ones(t, t))) * torch.finfo(torch.float32).min
        cross = torch.zeros(1, 1, 1, 1) if self.decoder else None
        x = self.drop(self.embed(ids))
        for blk in self.blocks:
            x = blk(x, bias, enc, cross)
        return self.drop(self.norm(x))


class T5(nn.Module):
    def __init__(self, vocab, layers, c, ff, nh, dk, p=0.1):
        super().__init__()
        self.c = c
        self.shared = nn.Embedding(vocab, c)
        self.encoder = Stack(self.shared, layers, c, ff, nh, dk, p, False)
        self.decoder = Stack(self.shared, layers, c, ff, nh, dk, p, True)
        # T5's own initialisation (as kiln's and HF's): normal, with these deviations.
        nn.init.normal_(self.shared.weight, std=1.0)
        for m in self.modules():
            if isinstance(m, Attention):
                nn.init.normal_(m.q.weight, std=(c * dk) ** -0.5)
                nn.init.normal_(m.k.weight, std=c ** -0.5)
                nn.init.normal_(m.v.weight, std=c ** -0.5)
                nn.init.normal_(m.o.weight, std=(nh * dk) ** -0.5)
                if m.rel is not None:
                    nn.init.normal_(m.rel.weight, std=c ** -0.5)
            elif isinstance(m, Block):
                nn.init.normal_(m.wi.weight, std=c ** -0.5)
                nn.init.normal_(m.wo.weight, std=ff ** -0.5)

    def forward(self, ids, labels):
        dec_in = torch.cat([torch.zeros_like(labels[:, :1]), labels[:, :-1]], 1)  # start id 0
        h = self.decoder(dec_in, self.encoder(ids))
        logits = (h * self.c ** -0.5) @ self.shared.weight.t()  # tied head
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    for k, v in dict(layers=6, d_model=512, d_ff=2048, heads=8, d_kv=64, batch=8, seq=128, target_len=32, steps=5,
                     vocab=32128, threads=int(os.environ.get("OMP_NUM_THREADS", os.cpu_count()))).items():
        ap.add_argument("--" + k, type=int, default=v)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = T5(a.vocab, a.layers, a.d_model, a.d_ff, a.heads, a.d_kv)
    n = a.batch * a.seq
    ids = torch.tensor([5 + (i * 7919) % (a.vocab - 5) for i in range(n)]).view(a.batch, a.seq)
    m = a.batch * a.target_len
    labels = torch.tensor([5 + (i * 104729) % (a.vocab - 5) for i in range(m)]).view(a.batch, a.target_len)
    run_steps(model, lambda: model(ids, labels), a.steps, clip=1.0,
              report={"parameters": sum(p.numel() for p in model.parameters())})


if __name__ == "__main__":
    main()
