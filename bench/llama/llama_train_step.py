#!/usr/bin/env python3
"""PyTorch reference for bench/llama: one Llama causal-LM training step
(forward, backward, gradient clipping at 1.0, AdamW), written like Hugging
Face's LlamaForCausalLM: RMSNorm before attention and MLP, rotary position
embeddings (rotate_half form), grouped-query attention (key/value heads
expanded to the query heads), SwiGLU MLP, untied or tied head, no dropout
(attention_dropout 0). fp32, CPU. The batch is `kiln bench --task
causal-lm`'s: fixed ids, labels = ids, shifted inside the loss.

usage: llama_train_step.py --config llama-160m.json [--batch 4] [--seq 256] [--steps 5]
Prints one JSON line: median step seconds, peak RSS.
"""
import argparse, json, os, sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from torch_step import run_steps  # noqa: E402


class RMSNorm(nn.Module):
    def __init__(self, c, eps):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(c)), eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Layer(nn.Module):
    def __init__(self, c, ff, nh, kvh, eps):
        super().__init__()
        self.nh, self.kvh, self.d = nh, kvh, c // nh
        self.q_proj = nn.Linear(c, nh * self.d, bias=False)
        self.k_proj = nn.Linear(c, kvh * self.d, bias=False)
        self.v_proj = nn.Linear(c, kvh * self.d, bias=False)
        self.o_proj = nn.Linear(nh * self.d, c, bias=False)
        self.gate_proj, self.up_proj = nn.Linear(c, ff, bias=False), nn.Linear(c, ff, bias=False)
        self.down_proj = nn.Linear(ff, c, bias=False)
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(c, eps), RMSNorm(c, eps)

    def forward(self, x, cos, sin, causal):
        b, t, _ = x.shape
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(b, t, self.nh, self.d).transpose(1, 2)
        k = self.k_proj(h).view(b, t, self.kvh, self.d).transpose(1, 2)
        v = self.v_proj(h).view(b, t, self.kvh, self.d).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        rep = self.nh // self.kvh  # repeat_kv
        k = k[:, :, None].expand(b, self.kvh, rep, t, self.d).reshape(b, self.nh, t, self.d)
        v = v[:, :, None].expand(b, self.kvh, rep, t, self.d).reshape(b, self.nh, t, self.d)
        w = (q @ k.transpose(-1, -2)) / self.d ** 0.5 + causal
        a = w.softmax(-1) @ v
        x = x + self.o_proj(a.transpose(1, 2).reshape(b, t, -1))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        c, nh = cfg["hidden_size"], cfg["num_attention_heads"]
        eps = cfg.get("rms_norm_eps", 1e-6)
        self.theta, self.d = cfg.get("rope_theta", 10000.0), c // nh
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], c)
        self.layers = nn.ModuleList(
            Layer(c, cfg["intermediate_size"], nh, cfg.get("num_key_value_heads", nh), eps)
            for _ in range(cfg["num_hidden_layers"]))
        self.norm = RMSNorm(c, eps)
        self.tied = cfg.get("tie_word_embeddings", False)
        self.lm_head = None if self.tied else nn.Linear(c, cfg["vocab_size"], bias=False)
        for m in self.modules():  # HF's _init_weights: normal(0, initializer_range)
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=cfg.get("initializer_range", 0.02))

    def forward(self, ids):
        t = ids.shape[1]
        inv_freq = 1.0 / (self.theta ** (torch.arange(0, self.d, 2).float() / self.d))
        freqs = torch.outer(torch.arange(t).float(), inv_freq)
        emb = torch.cat((freqs, freqs), -1)
        cos, sin = emb.cos()[None, None], emb.sin()[None, None]
        causal = torch.triu(torch.full((t, t), torch.finfo(torch.float32).min), 1)
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x, cos, sin, causal)
        x = self.norm(x)
        logits = x @ (self.embed_tokens.weight if self.tied else self.lm_head.weight).t()
        return F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    for k, v in dict(batch=4, seq=256, steps=5,
                     threads=int(os.environ.get("OMP_NUM_THREADS", os.cpu_count()))).items():
        ap.add_argument("--" + k, type=int, default=v)
    a = ap.parse_args()
    with open(a.config) as f:
        cfg = json.load(f)
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = Llama(cfg)
    vocab, n = cfg["vocab_size"], a.batch * a.seq
    ids = torch.tensor([5 + (i * 7919) % (vocab - 5) for i in range(n)]).view(a.batch, a.seq)
    run_steps(model, lambda: model(ids), a.steps, clip=1.0,
              report={"parameters": sum(p.numel() for p in model.parameters())})


if __name__ == "__main__":
    main()
