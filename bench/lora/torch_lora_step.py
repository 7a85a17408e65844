#!/usr/bin/python3
"""PyTorch reference for bench/lora: one LoRA training step of a Llama causal
LM (bench/llama's model, HF's LlamaForCausalLM), as PEFT builds it: every
linear layer of the decoder layers frozen with a branch scaling · B(A(x))
beside it (A Kaiming-uniform, B zero, alpha = 2r, no dropout), the
embeddings, norms and head frozen; AdamW on the adapters only, gradient
clipping at 1.0, each decoder layer under torch.utils.checkpoint, and with
--bf16 the step under torch.autocast(bfloat16) and the frozen linear weights
bf16 (a base loaded from a bf16 checkpoint, as kiln's side loads one). The batch is `kiln bench
--task causal-lm`'s. Run with Debian's PyTorch 1.13 (python3-torch, CPU):

    /usr/bin/python3 bench/lora/torch_lora_step.py --config bench/lora/tinyllama.json [--bf16]

Prints one JSON line: median step seconds, peak RSS (bench/torch_step.py).
"""
import argparse, json, math, os, sys

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "llama"))
from torch_step import run_steps  # noqa: E402
from llama_train_step import Llama  # noqa: E402


class LoraLinear(nn.Module):
    def __init__(self, base, r):
        super().__init__()
        self.base, self.scaling = base, 2.0  # alpha / r with alpha = 2r
        self.lora_A = nn.Linear(base.in_features, r, bias=False)
        self.lora_B = nn.Linear(r, base.out_features, bias=False)
        nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
        nn.init.zeros_(self.lora_B.weight)

    def forward(self, x):
        return self.base(x) + self.lora_B(self.lora_A(x)) * self.scaling


class Checkpointed(nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, *args):
        return checkpoint(self.layer, *args, use_reentrant=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    for k, v in dict(batch=4, seq=256, steps=2, warmup=1, lora_r=16,
                     threads=int(os.environ.get("OMP_NUM_THREADS", os.cpu_count()))).items():
        ap.add_argument("--" + k, type=int, default=v)
    ap.add_argument("--bf16", action="store_true")
    a = ap.parse_args()
    with open(a.config) as f:
        cfg = json.load(f)
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = Llama(cfg)
    model.requires_grad_(False)
    if a.bf16:  # the frozen base as loaded from a bf16 checkpoint: its products read bf16 directly
        for m in model.modules():
            if isinstance(m, nn.Linear):
                m.to(torch.bfloat16)
    for layer in model.layers:
        for name, child in list(layer.named_children()):
            if isinstance(child, nn.Linear):
                setattr(layer, name, LoraLinear(child, a.lora_r))
    model.layers = nn.ModuleList(Checkpointed(layer) for layer in model.layers)
    vocab, n = cfg["vocab_size"], a.batch * a.seq
    ids = torch.tensor([5 + (i * 7919) % (vocab - 5) for i in range(n)]).view(a.batch, a.seq)

    def loss_of():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
            return model(ids).float()

    run_steps(model, loss_of, a.steps, clip=1.0, warmup=a.warmup,
              report={"parameters": sum(p.numel() for p in model.parameters()),
                      "trained": sum(p.numel() for p in model.parameters() if p.requires_grad),
                      "bf16": a.bf16, "lora_r": a.lora_r})


if __name__ == "__main__":
    main()
