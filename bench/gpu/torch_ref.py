#!/usr/bin/env python3
"""PyTorch 2 reference for kiln's GPU benchmarks (bench/gpu_check.sh): training
steps of Hugging Face's own GPT2LMHeadModel / BertForSequenceClassification,
built from a default config (fresh weights, nothing downloaded), AdamW
(lr 5e-5, weight decay 0.01) and gradient clipping at 1.0 -- what `kiln bench`
runs. Modes: fp32 eager (no TF32), tf32 (fp32 with TF32 matrix products),
bf16 autocast eager, bf16 autocast under torch.compile.

usage: torch_ref.py --model gpt2|bert-base --batch B --seq T [--steps 10] [--modes fp32,tf32,bf16,bf16-compile]
Prints one JSON line per mode: median step seconds, tokens/s, model FLOP/s
(6 x parameters in matrix products x tokens/s, as kiln bench counts them),
peak device memory.
"""
import argparse, json, statistics, sys, time

import torch


def build(name):
    import transformers as tf
    if name == "gpt2":
        cfg = tf.GPT2Config()
        model = tf.GPT2LMHeadModel(cfg)
        vocab = cfg.vocab_size
    elif name == "bert-base":
        cfg = tf.BertConfig(num_labels=2)
        model = tf.BertForSequenceClassification(cfg)
        vocab = cfg.vocab_size
    else:
        sys.exit(f"torch_ref.py: --model must be gpt2 or bert-base, got '{name}'")
    # Parameters in matrix products: not embedding tables; a tied LM head once.
    tables = ("embeddings", "wte", "wpe")
    flop_params = sum(p.numel() for n, p in model.named_parameters() if not any(t in n for t in tables))
    if name == "gpt2":
        flop_params += model.transformer.wte.weight.numel()
    return model, vocab, flop_params


def run(args, mode):
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
    model, vocab, flop_params = build(args.model)
    model = model.cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.01)
    B, T = args.batch, args.seq
    ids = (5 + (torch.arange(B * T) * 7919) % (vocab - 5)).view(B, T).cuda()
    mask = torch.ones_like(ids)
    labels = ids if args.model == "gpt2" else (torch.arange(B) % 2).cuda()
    fwd = model
    if mode.endswith("compile"):
        fwd = torch.compile(model)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=mode.startswith("bf16")):
            loss = fwd(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    t0 = time.perf_counter()
    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    warm_s = time.perf_counter() - t0
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(args.steps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        loss = step()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    med = statistics.median(times)
    tokens = B * T
    print(json.dumps({"impl": f"pytorch {torch.__version__} {mode}", "model": args.model, "batch": B, "seq": T,
                      "median_step_s": round(med, 6), "tokens_per_s": round(tokens / med, 1),
                      "samples_per_s": round(B / med, 2),
                      "model_tflops": round(6 * flop_params * tokens / med / 1e12, 2),
                      "warmup_s": round(warm_s, 2), "loss": round(loss.item(), 4),
                      "peak_device_mb": round(torch.cuda.max_memory_allocated() / 2**20)}), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--modes", default="fp32,bf16,bf16-compile")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("torch_ref.py: PyTorch sees no CUDA device")
    torch.backends.cudnn.allow_tf32 = False
    for mode in args.modes.split(","):
        if mode not in ("fp32", "tf32", "bf16", "bf16-compile", "fp32-compile"):
            sys.exit(f"torch_ref.py: unknown mode '{mode}'")
        run(args, mode)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
