#!/usr/bin/python3
"""Generate golden optimizer steps for kiln's optimizers (src/kiln/optim/optimizer.h).

Rerun from the repository root with Debian's PyTorch (python3-torch, CPU):

    /usr/bin/python3 tests/goldens/gen_optim_goldens.py

It writes tests/goldens/optim_goldens.json. Each case runs one optimizer over
three parameters for five steps, as Hugging Face's Trainer builds it for
`--optim NAME` (get_optimizer_cls_and_kwargs: only the learning rate is
passed, besides AdamW's betas and epsilon; the weight decay comes with the
parameter groups, none for biases). Between steps the learning rate changes
as a schedule would change it, and the gradients are given (drawn from a
fixed seed, one step ten times larger so that Adafactor's update clipping
acts). The file holds the initial values, every step's learning rate and
gradients, the parameters after every step, and the optimizer state after
the last one under PyTorch's state names.

AdamW, SGD, Adagrad and RMSprop are torch.optim's. `transformers` is not
installed here, so Adafactor is restated below from transformers'
optimization.py (4.40: Adafactor.step with lr given, scale_parameter=False,
relative_step=False, warmup_init=False, beta1=None), one operation per line
of HF's, in float32 as HF runs it. Floats are written with Python's repr.
"""

import json
import math
import os

import torch

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT_PATH = os.path.join(REPO_ROOT, "tests", "goldens", "optim_goldens.json")

# name -> shape; "w" and "t" decay, "b" does not (HF: no decay for biases).
PARAMS = [("w", (5, 7)), ("t", (2, 3, 4)), ("b", (7,))]
DECAYED = {"w", "t"}
WEIGHT_DECAY = 0.1
LRS = [1e-2, 2e-2, 3e-2, 2.5e-2, 1e-2]
GRAD_SCALE = [1.0, 0.5, 10.0, 1.0, 0.2]


class HfAdafactor(torch.optim.Optimizer):
    """transformers.optimization.Adafactor with an external learning rate."""

    def __init__(self, params, lr, eps=(1e-30, 1e-3), clip_threshold=1.0, decay_rate=-0.8, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, eps=eps, clip_threshold=clip_threshold, decay_rate=decay_rate,
                                      weight_decay=weight_decay))
        self.clipped = 0  # updates that the clipping shrank (the goldens must have some)

    @staticmethod
    def _rms(x):
        return x.norm(2) / (x.numel() ** 0.5)

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad
                state = self.state[p]
                factored = grad.dim() >= 2
                if len(state) == 0:
                    state["step"] = 0
                    if factored:
                        state["exp_avg_sq_row"] = torch.zeros(grad.shape[:-1]).to(grad)
                        state["exp_avg_sq_col"] = torch.zeros(grad.shape[:-2] + grad.shape[-1:]).to(grad)
                    else:
                        state["exp_avg_sq"] = torch.zeros_like(grad)
                    state["RMS"] = 0
                state["step"] += 1
                state["RMS"] = self._rms(p)
                lr = group["lr"]  # relative_step and scale_parameter off
                beta2t = 1.0 - math.pow(state["step"], group["decay_rate"])
                update = grad ** 2 + group["eps"][0]
                if factored:
                    row, col = state["exp_avg_sq_row"], state["exp_avg_sq_col"]
                    row.mul_(beta2t).add_(update.mean(dim=-1), alpha=1.0 - beta2t)
                    col.mul_(beta2t).add_(update.mean(dim=-2), alpha=1.0 - beta2t)
                    r_factor = (row / row.mean(dim=-1, keepdim=True)).rsqrt_().unsqueeze(-1)
                    c_factor = col.unsqueeze(-2).rsqrt()
                    update = torch.mul(r_factor, c_factor)
                    update.mul_(grad)
                else:
                    state["exp_avg_sq"].mul_(beta2t).add_(update, alpha=1.0 - beta2t)
                    update = state["exp_avg_sq"].rsqrt().mul_(grad)
                self.clipped += int(float(self._rms(update) / group["clip_threshold"]) > 1.0)
                update.div_((self._rms(update) / group["clip_threshold"]).clamp_(min=1.0))
                update.mul_(lr)
                if group["weight_decay"] != 0:
                    p.add_(p, alpha=-group["weight_decay"] * lr)
                p.add_(-update)


def build(name, groups):
    lr = LRS[0]
    if name == "adamw_torch":
        return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.999), eps=1e-8)
    if name == "adafactor":
        return HfAdafactor(groups, lr=lr)
    if name == "sgd":
        return torch.optim.SGD(groups, lr=lr)
    if name == "sgd_momentum":  # the library's SGD with momentum (not a Trainer choice)
        return torch.optim.SGD(groups, lr=lr, momentum=0.9)
    if name == "adagrad":
        return torch.optim.Adagrad(groups, lr=lr)
    if name == "rmsprop":
        return torch.optim.RMSprop(groups, lr=lr)
    raise ValueError(name)


def flat(t):
    return [float(x) for x in t.detach().reshape(-1).tolist()]


def run_case(name, init, grads):
    params = {n: torch.nn.Parameter(init[n].clone()) for n, _ in PARAMS}
    groups = [{"params": [params[n] for n, _ in PARAMS if n in DECAYED], "weight_decay": WEIGHT_DECAY},
              {"params": [params[n] for n, _ in PARAMS if n not in DECAYED], "weight_decay": 0.0}]
    opt = build(name, groups)
    after = []
    for k, lr in enumerate(LRS):
        for group in opt.param_groups:
            group["lr"] = lr  # what a LambdaLR schedule does between steps
        for n, _ in PARAMS:
            params[n].grad = grads[k][n].clone()
        opt.step()
        after.append({n: flat(params[n]) for n, _ in PARAMS})
    state = {}
    for n, _ in PARAMS:
        st = opt.state[params[n]]
        state[n] = {key: {"shape": list(v.shape), "values": flat(v)}
                    for key, v in st.items() if torch.is_tensor(v) and v.dim() > 0}
    if name == "adafactor":
        assert opt.clipped >= 3, f"the update clipping acted {opt.clipped} times"
    return {"optim": name, "params_after_step": after, "state": state}


def check_adafactor(case, init, grads):
    """Step 1 by hand in float64: v = g² + eps1 exactly, so u = g / |g| per
    element for vectors, and the factored estimate for matrices."""
    g = grads[0]["b"].double()
    u = g / (g * g + 1e-30).sqrt()
    u = u / max(1.0, float(u.norm() / math.sqrt(u.numel())))
    want = init["b"].double() - LRS[0] * u
    got = torch.tensor(case["params_after_step"][0]["b"], dtype=torch.float64)
    assert float((want - got).abs().max()) < 1e-6, "adafactor vector step 1"
    g = grads[0]["w"].double()
    sq = g * g + 1e-30
    row, col = sq.mean(dim=1), sq.mean(dim=0)
    vhat = torch.outer(row, col) / row.mean()
    u = g / vhat.sqrt()
    u = u / max(1.0, float(u.norm() / math.sqrt(u.numel())))
    w0 = init["w"].double()
    want = w0 - WEIGHT_DECAY * LRS[0] * w0 - LRS[0] * u
    got = torch.tensor(case["params_after_step"][0]["w"], dtype=torch.float64).reshape(5, 7)
    assert float((want - got).abs().max()) < 1e-6, "adafactor matrix step 1"


def main():
    gen = torch.Generator().manual_seed(1234)
    init = {n: torch.randn(shape, generator=gen) * 0.5 for n, shape in PARAMS}
    grads = [{n: torch.randn(shape, generator=gen) * GRAD_SCALE[k] for n, shape in PARAMS} for k in range(len(LRS))]
    cases = [run_case(name, init, grads)
             for name in ["adamw_torch", "adafactor", "sgd", "sgd_momentum", "adagrad", "rmsprop"]]
    check_adafactor(cases[1], init, grads)
    out = {
        "generator": "tests/goldens/gen_optim_goldens.py",
        "torch": torch.__version__,
        "weight_decay": WEIGHT_DECAY,
        "decayed": sorted(DECAYED),
        "params": [{"name": n, "shape": list(shape), "init": flat(init[n])} for n, shape in PARAMS],
        "lrs": LRS,
        "grads": [{n: flat(g[n]) for n, _ in PARAMS} for g in grads],
        "cases": cases,
    }
    with open(OUT_PATH, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"wrote {len(cases)} cases of {len(LRS)} steps to {OUT_PATH}")


if __name__ == "__main__":
    main()
