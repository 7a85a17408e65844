#!/usr/bin/python3
"""Generate golden learning rates for kiln's LRSchedule (src/kiln/optim/schedule.h).

Rerun from the repository root with Debian's PyTorch (python3-torch, CPU):

    /usr/bin/python3 tests/goldens/gen_schedule_goldens.py

It writes tests/goldens/schedule_goldens.json.  `transformers` is not needed: the
lr lambdas below are Hugging Face's get_scheduler lambdas (transformers 4.40,
optimization.py) restated line for line, and torch.optim.lr_scheduler.LambdaLR
applies them to an SGD optimizer exactly as HF's Trainer does.  For each case,
lrs[k] is optimizer.param_groups[0]["lr"] after k calls of scheduler.step(),
i.e. the rate used by optimizer step k (0-based). plateau_cases are
torch.optim.lr_scheduler.ReduceLROnPlateau (HF's reduce_lr_on_plateau passes
lr_scheduler_kwargs to it unchanged) fed a list of evaluation metrics: lrs[k]
is the rate after the (k+1)-th step(metric), and state what its state_dict
holds at the end (best null while infinite).  Floats are written with
Python's repr (shortest round-trip), so the C++ test compares them exactly.
"""

import json
import math
import os
from functools import partial

import torch
from torch.optim.lr_scheduler import LambdaLR

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT_PATH = os.path.join(REPO_ROOT, "tests", "goldens", "schedule_goldens.json")


def linear(current_step, *, num_warmup_steps, num_training_steps):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1, num_warmup_steps))
    return max(0.0, float(num_training_steps - current_step) / float(max(1, num_training_steps - num_warmup_steps)))


def cosine(current_step, *, num_warmup_steps, num_training_steps, num_cycles=0.5):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1, num_warmup_steps))
    progress = float(current_step - num_warmup_steps) / float(max(1, num_training_steps - num_warmup_steps))
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * float(num_cycles) * 2.0 * progress)))


def cosine_with_restarts(current_step, *, num_warmup_steps, num_training_steps, num_cycles=1):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1, num_warmup_steps))
    progress = float(current_step - num_warmup_steps) / float(max(1, num_training_steps - num_warmup_steps))
    if progress >= 1.0:
        return 0.0
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * ((float(num_cycles) * progress) % 1.0))))


def cosine_with_min_lr(current_step, *, num_warmup_steps, num_training_steps, num_cycles=0.5, min_lr_rate=0.0):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1, num_warmup_steps))
    progress = float(current_step - num_warmup_steps) / float(max(1, num_training_steps - num_warmup_steps))
    factor = 0.5 * (1.0 + math.cos(math.pi * float(num_cycles) * 2.0 * progress))
    factor = factor * (1 - min_lr_rate) + min_lr_rate
    return max(0, factor)


def inverse_sqrt(current_step, *, num_warmup_steps, timescale):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1, num_warmup_steps))
    shift = timescale - num_warmup_steps
    decay = 1.0 / math.sqrt((current_step + shift) / timescale)
    return decay


def constant(_):
    return 1


def constant_with_warmup(current_step, *, num_warmup_steps):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1.0, num_warmup_steps))
    return 1.0


def polynomial(current_step, *, num_warmup_steps, num_training_steps, lr_end=1e-7, power=1.0, lr_init):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1, num_warmup_steps))
    elif current_step > num_training_steps:
        return lr_end / lr_init  # as LambdaLR multiplies by lr_init
    else:
        lr_range = lr_init - lr_end
        decay_steps = num_training_steps - num_warmup_steps
        pct_remaining = 1 - (current_step - num_warmup_steps) / decay_steps
        decay = lr_range * pct_remaining**power + lr_end
        return decay / lr_init  # as LambdaLR multiplies by lr_init


def get_scheduler(name, optimizer, num_warmup_steps, num_training_steps, scheduler_specific_kwargs):
    """HF's get_scheduler for the types kiln implements.  As in HF 4.40, constant, constant_with_warmup and
    inverse_sqrt are built without scheduler_specific_kwargs (lr_scheduler_kwargs); the others get them."""
    if name == "constant":
        return LambdaLR(optimizer, constant)
    if name == "constant_with_warmup":
        return LambdaLR(optimizer, partial(constant_with_warmup, num_warmup_steps=num_warmup_steps))
    if name == "inverse_sqrt":  # HF passes no total; timescale defaults to the warmup, or 10000 without one
        timescale = num_warmup_steps or 10_000
        return LambdaLR(optimizer, partial(inverse_sqrt, num_warmup_steps=num_warmup_steps, timescale=timescale))
    kw = dict(num_warmup_steps=num_warmup_steps, num_training_steps=num_training_steps, **scheduler_specific_kwargs)
    if name == "cosine_with_restarts":
        return LambdaLR(optimizer, partial(cosine_with_restarts, **kw))
    if name == "linear":
        return LambdaLR(optimizer, partial(linear, **kw))
    if name == "cosine":
        return LambdaLR(optimizer, partial(cosine, **kw))
    if name == "polynomial":
        lr_init = optimizer.defaults["lr"]
        assert lr_init > kw.get("lr_end", 1e-7)
        return LambdaLR(optimizer, partial(polynomial, lr_init=lr_init, **kw))
    if name == "cosine_with_min_lr":  # HF's get_cosine_with_min_lr_schedule_with_warmup
        min_lr = kw.pop("min_lr", None)
        min_lr_rate = kw.pop("min_lr_rate", None)
        assert (min_lr is None) != (min_lr_rate is None)
        if min_lr is not None:
            min_lr_rate = min_lr / optimizer.defaults["lr"]
        return LambdaLR(optimizer, partial(cosine_with_min_lr, min_lr_rate=min_lr_rate, **kw))
    raise ValueError(name)


# (type, base_lr, warmup_steps, total_steps[, lr_scheduler_kwargs]): warmup
# boundaries, no warmup, warmup == total, warmup > total, odd totals.
CASES = [
    ("linear", 5e-5, 10, 100),
    ("linear", 5e-5, 0, 7),
    ("linear", 2e-3, 3, 3),
    ("linear", 1e-4, 5, 2),
    ("cosine", 5e-5, 10, 100),
    ("cosine", 3e-4, 0, 9),
    ("cosine", 1e-3, 4, 4),
    ("constant", 5e-5, 10, 20),
    ("constant_with_warmup", 5e-5, 4, 20),
    ("constant_with_warmup", 1e-2, 0, 5),
    ("polynomial", 1e-3, 5, 30),
    ("polynomial", 5e-5, 0, 10),
    ("polynomial", 3e-4, 6, 2),
    ("polynomial", 2e-7, 2, 11),
    ("cosine_with_restarts", 5e-5, 10, 100),
    ("cosine_with_restarts", 3e-4, 0, 9),
    ("cosine_with_restarts", 1e-3, 4, 4),
    ("inverse_sqrt", 5e-5, 10, 100),
    ("inverse_sqrt", 3e-4, 0, 9),
    ("inverse_sqrt", 1e-3, 7, 3),
    ("cosine", 5e-5, 10, 100, {"num_cycles": 2.0}),
    ("cosine", 3e-4, 3, 17, {"num_cycles": 0.25}),
    ("cosine_with_restarts", 5e-5, 10, 100, {"num_cycles": 3}),
    ("cosine_with_restarts", 3e-4, 0, 13, {"num_cycles": 2.5}),
    ("polynomial", 1e-3, 5, 30, {"lr_end": 1e-5, "power": 2.0}),
    ("polynomial", 5e-5, 0, 10, {"power": 0.5}),
    ("cosine_with_min_lr", 5e-5, 10, 100, {"min_lr_rate": 0.1}),
    ("cosine_with_min_lr", 3e-4, 0, 9, {"min_lr": 1e-5}),
    ("cosine_with_min_lr", 1e-3, 4, 21, {"min_lr_rate": 0.05, "num_cycles": 1.5}),
    ("inverse_sqrt", 5e-5, 10, 100, {"timescale": 50}),  # ignored, as in HF 4.40
    ("constant_with_warmup", 5e-5, 4, 20, {"num_cycles": 3}),  # ignored
]
EXTRA_STEPS = 4  # evaluate past total_steps too

# reduce_lr_on_plateau: (base_lr, ReduceLROnPlateau kwargs as HF passes lr_scheduler_kwargs, metrics fed to
# step() one evaluation at a time). Improvements, plateaus, thresholds at the boundary, cooldown, the min_lr
# floor and eps (a reduction too small to apply).
PLATEAU_CASES = [
    (5e-5, {}, [1.0, 0.9, 0.8] + [0.8] * 12 + [0.7, 0.7, 0.6] + [0.6] * 13),
    (1e-3, {"patience": 2, "factor": 0.5}, [2.0, 1.5, 1.6, 1.55, 1.499, 1.4999, 1.2, 1.3, 1.3, 1.3, 1.1, 1.1, 1.1]),
    (1e-3, {"mode": "max", "patience": 1, "threshold": 0.01, "threshold_mode": "abs", "cooldown": 2,
            "min_lr": 2e-5}, [0.5, 0.505, 0.52, 0.52, 0.52, 0.51, 0.53, 0.535, 0.54, 0.5, 0.5, 0.5, 0.5, 0.5,
                              0.5, 0.5, 0.5, 0.5, 0.5, 0.5]),
    (1e-3, {"mode": "max", "patience": 0, "factor": 0.2}, [0.1, 0.1, 0.2, 0.2 * 1.0001, 0.2 * 1.0002, 0.3, 0.3]),
    (1e-3, {"patience": 0, "threshold": 0.1, "cooldown": 1}, [1.0, 0.95, 0.9, 0.85, 0.8, 0.5, 0.46, 0.4]),
    (1e-6, {"patience": 0, "factor": 0.5, "min_lr": 0.0, "eps": 4e-7}, [1.0, 2.0, 3.0, 4.0, 5.0]),
    (1e-3, {"patience": 1, "threshold": 0.0, "threshold_mode": "abs"}, [-1.0, -1.0, -1.0, -2.0, -2.0, -2.0]),
]


def plateau_case(base_lr, kwargs, metrics):
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([param], lr=base_lr)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, **kwargs)  # HF's get_reduce_on_plateau_schedule
    lrs = []
    for m in metrics:
        sched.step(m)
        lrs.append(opt.param_groups[0]["lr"])
    state = sched.state_dict()
    best = state["best"]
    return {"base_lr": base_lr, "lr_scheduler_kwargs": kwargs, "metrics": metrics, "lrs": lrs,
            "state": {"best": best if math.isfinite(best) else None, "num_bad_epochs": state["num_bad_epochs"],
                      "cooldown_counter": state["cooldown_counter"], "last_epoch": state["last_epoch"]}}


def main():
    cases = []
    for name, base_lr, warmup, total, *rest in CASES:
        kwargs = rest[0] if rest else {}
        param = torch.nn.Parameter(torch.zeros(1))
        opt = torch.optim.SGD([param], lr=base_lr)
        sched = get_scheduler(name, opt, warmup, total, kwargs)
        lrs = []
        for step in range(max(total, warmup) + EXTRA_STEPS):
            lr = opt.param_groups[0]["lr"]
            assert lr == sched.get_last_lr()[0]
            lrs.append(lr)
            opt.step()
            sched.step()
        case = {"type": name, "base_lr": base_lr, "warmup_steps": warmup, "total_steps": total}
        if kwargs:
            case["lr_scheduler_kwargs"] = kwargs
        cases.append(dict(case, lrs=lrs))
    # Self-checks against hand-derived values.
    by = {(c["type"], c["warmup_steps"], c["total_steps"]): c["lrs"] for c in cases if "lr_scheduler_kwargs" not in c}
    kw = {(c["type"], c["warmup_steps"], c["total_steps"]): c["lrs"] for c in cases if "lr_scheduler_kwargs" in c}
    lin = by[("linear", 10, 100)]
    assert lin[0] == 0.0 and abs(lin[5] - 2.5e-5) < 1e-18 and lin[10] == 5e-5 and lin[100] == 0.0
    cos = by[("cosine", 10, 100)]
    assert abs(cos[55] - 2.5e-5) < 1e-18 and abs(cos[100]) < 1e-20
    poly = by[("polynomial", 5, 30)]
    assert poly[5] == 1e-3 and abs(poly[30] - 1e-7) < 1e-20 and abs(poly[33] - 1e-7) < 1e-20
    restarts = by[("cosine_with_restarts", 10, 100)]
    assert restarts[10] == 5e-5 and abs(restarts[55] - 2.5e-5) < 1e-18 and restarts[100] == 0.0
    inv = by[("inverse_sqrt", 10, 100)]
    assert inv[10] == 5e-5 and abs(inv[40] - 2.5e-5) < 1e-18
    two = kw[("cosine", 10, 100)]  # two full cycles: back to the top halfway
    assert abs(two[55] - 5e-5) < 1e-18 and abs(two[100] - 5e-5) < 1e-18 and two[32] < 1e-6
    floor = kw[("cosine_with_min_lr", 10, 100)]
    assert abs(floor[100] - 5e-6) < 1e-18 and abs(floor[55] - 2.75e-5) < 1e-18
    assert kw[("inverse_sqrt", 10, 100)] == by[("inverse_sqrt", 10, 100)]
    plateau = [plateau_case(*c) for c in PLATEAU_CASES]
    assert plateau[0]["lrs"][12] == 5e-5 and plateau[0]["lrs"][13] == 5e-6  # the 11th evaluation without gain
    assert plateau[5]["lrs"] == [1e-6, 5e-7, 5e-7, 5e-7, 5e-7]  # then 2.5e-7 less is within eps: no change
    with open(OUT_PATH, "w") as f:
        json.dump({"generator": "tests/goldens/gen_schedule_goldens.py", "torch": torch.__version__, "cases": cases,
                   "plateau_cases": plateau},
                  f, indent=1)
        f.write("\n")
    print(f"wrote {len(cases)} cases, {sum(len(c['lrs']) for c in cases)} learning rates to {OUT_PATH}")


if __name__ == "__main__":
    main()
