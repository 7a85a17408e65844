"""Shared by the PyTorch references in bench/*/: runs training steps as HF's
Trainer does (forward, backward, optional gradient clipping, AdamW with lr
5e-5 and weight decay 0.01, then zero_grad(set_to_none=True)), times the ones
after the warm-up, and prints the JSON line bench/ratios.py reads."""
import json
import resource
import statistics
import time

import torch


def run_steps(model, loss_of, steps, clip=None, warmup=2, report=None):
    """loss_of() gives one step's loss; prints impl, threads, `report`'s fields,
    the median step seconds, the last loss and the peak RSS."""
    opt = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.01)
    times = []
    for step in range(steps + warmup):
        t0 = time.perf_counter()
        loss = loss_of()
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        opt.zero_grad(set_to_none=True)  # after the update, as HF's Trainer does
        loss.item()
        if step >= warmup:
            times.append(time.perf_counter() - t0)
    out = {"impl": "pytorch " + torch.__version__, "threads": torch.get_num_threads()}
    out.update(report or {})
    out.update({"median_step_s": statistics.median(times), "loss": loss.item(),
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})
    print(json.dumps(out))
