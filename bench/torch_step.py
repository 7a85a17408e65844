"""Shared by the PyTorch references in bench/*/: runs training steps as HF's
Trainer does (forward, backward, optional gradient clipping, AdamW with lr
5e-5 and weight decay 0.01, then zero_grad(set_to_none=True)), times the ones
after the warm-up, and prints the JSON line bench/ratios.py reads."""
import json
import resource
import statistics
import time

import torch


def run_steps(model, loss_of, steps, clip=None, warmup=2, report=None, bf16=False):
    """loss_of() gives one step's loss; prints impl, threads, `report`'s fields,
    the median step seconds, the last loss and the peak RSS. bf16: the forward
    under torch.autocast("cpu", dtype=torch.bfloat16), as HF's Trainer runs
    --bf16 on the CPU (f32 weights, gradients and AdamW state)."""
    opt = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.01)
    times = []
    for step in range(steps + warmup):
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = loss_of()
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        opt.zero_grad(set_to_none=True)  # after the update, as HF's Trainer does
        loss.item()
        if step >= warmup:
            times.append(time.perf_counter() - t0)
    out = {"impl": "pytorch " + torch.__version__ + (" autocast bf16" if bf16 else ""),
           "threads": torch.get_num_threads(), "bf16": bf16}
    out.update(report or {})
    out.update({"median_step_s": statistics.median(times), "loss": loss.item(),
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})
    print(json.dumps(out))
