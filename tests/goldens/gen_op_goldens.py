#!/usr/bin/python3
"""Generate golden forward/backward values for every kiln tensor op.

Rerun from the repository root with PyTorch (CPU), e.g. the reference venv:

    /work/pyref/bin/python tests/goldens/gen_op_goldens.py

It writes tests/goldens/op_goldens.json.  The output is deterministic (fixed seed).
The C++ tests only read the JSON; they never run Python.

Conventions (see tests/goldens/README.md):
  * Inputs are drawn in float32 from a seeded torch.Generator.  Outputs and
    gradients are computed in float64 (f32 inputs cast to f64, backward with the
    f32 grad_output cast to f64) and stored rounded to float32.
  * Floats are written with the shortest decimal string that round-trips to the
    same float32 (so parsing as double and casting to float gives the exact
    stored float32 value).
  * grads[i] = d(sum(output * grad_output)) / d(inputs[i]), reduced to the input's
    shape; null for non-float inputs, for inputs the spec declares
    non-differentiable, and whenever grad_output is null (bool/int outputs, cast).
  * Scalars have shape [].  Bools are written as true/false.
"""

import json
import math
import os

import numpy as np
import torch
import torch.nn.functional as F

SEED = 20240607
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT_PATH = os.path.join(REPO_ROOT, "tests", "goldens", "op_goldens.json")
GENERATOR_NAME = "tests/goldens/gen_op_goldens.py"

OPS = {
    "neg", "exp", "log", "tanh", "erf", "sqrt", "rsqrt", "abs", "sigmoid", "relu",
    "gelu", "silu",
    "add", "sub", "mul", "div", "pow", "maximum", "minimum",
    "pow_scalar",
    "eq", "ne", "lt", "le", "gt", "ge",
    "where", "cast",
    "sum", "mean", "max", "argmax",
    "reshape", "permute", "transpose", "broadcast_to", "slice", "concat",
    "index_select", "gather", "scatter_add", "index_copy",
    "matmul",
    "softmax", "log_softmax", "layer_norm", "cross_entropy", "mse_loss",
    "binary_cross_entropy_with_logits",
    "rope", "rope_rows",
}

torch.set_grad_enabled(True)
torch.use_deterministic_algorithms(True)
GEN = torch.Generator().manual_seed(SEED)

# --------------------------------------------------------------------------
# Input generators (all float32 / int64 / bool, deterministic via GEN)
# --------------------------------------------------------------------------


def randn(*shape):
    return torch.randn(shape, generator=GEN, dtype=torch.float32)


def uniform(shape, lo, hi):
    return (torch.rand(shape, generator=GEN, dtype=torch.float32) * (hi - lo) + lo).to(torch.float32)


def away_from_zero(shape, lo=0.2, hi=2.0):
    """Values with |v| in [lo, hi], random sign."""
    mag = uniform(shape, lo, hi)
    sign = torch.where(torch.rand(shape, generator=GEN) < 0.5, -1.0, 1.0).to(torch.float32)
    return mag * sign


def randint(shape, lo, hi):
    return torch.randint(lo, hi, shape, generator=GEN, dtype=torch.int64)


def randbool(shape):
    return torch.rand(shape, generator=GEN) < 0.5


def apart_pair(shape_a, shape_b, gap=0.1):
    """Two randn tensors whose broadcast pairs differ by at least `gap`."""
    while True:
        a, b = randn(*shape_a), randn(*shape_b)
        if (a.double() - b.double()).abs().min().item() > gap:
            return a, b


def no_tie_along(shape, dims, gap=0.05):
    """randn tensor whose max along `dims` beats the runner-up by `gap`."""
    while True:
        x = randn(*shape)
        xd = x.double()
        keep = [d for d in range(len(shape)) if d not in dims]
        flat = xd.permute(keep + list(dims)).reshape(
            [shape[d] for d in keep] + [-1])
        top2 = flat.topk(2, dim=-1).values
        if (top2[..., 0] - top2[..., 1]).min().item() > gap:
            return x


# --------------------------------------------------------------------------
# Serialisation helpers
# --------------------------------------------------------------------------

DTYPE_NAMES = {torch.float32: "f32", torch.int64: "i64", torch.bool: "bool"}


def f32_value(v):
    """Python float whose repr is the shortest string round-tripping to float32."""
    f = np.float32(v)
    assert np.isfinite(f), v
    s = str(f)  # shortest decimal that round-trips to this float32
    out = float(s)
    # parse-as-double then cast-to-float must reproduce the exact float32
    assert np.float32(out) == f, (v, s)
    return out


def tensor_json(t):
    t = t.detach().cpu()
    if t.dtype.is_floating_point:
        data = [f32_value(v) for v in t.to(torch.float64).reshape(-1).tolist()]
        dtype = "f32"
    elif t.dtype == torch.int64:
        data = [int(v) for v in t.reshape(-1).tolist()]
        dtype = "i64"
    elif t.dtype == torch.bool:
        data = [bool(v) for v in t.reshape(-1).tolist()]
        dtype = "bool"
    else:
        raise TypeError(t.dtype)
    return {"shape": list(t.shape), "dtype": dtype, "data": data}


# --------------------------------------------------------------------------
# Case construction
# --------------------------------------------------------------------------

CASES = []
GRADCHECK_FNS = []  # (name, fn, f64 inputs, diff flags) checked in self_test


def add_case(name, op, attrs, inputs, fn, differentiable=True, no_grad_inputs=()):
    """Record one golden case.

    inputs: list of torch tensors (f32 / i64 / bool) exactly as stored.
    fn:     callable taking the inputs (f32 ones converted to f64 leaves) and
            returning the op's output computed in float64 (or int/bool).
    differentiable: False for ops whose golden has no gradients (cast).
    no_grad_inputs: indices of float inputs whose gradient is reported as null.
    """
    assert op in OPS, op
    for t in inputs:
        assert t.dtype in DTYPE_NAMES, (name, t.dtype)
    leaves = []
    diff = []
    for i, t in enumerate(inputs):
        if t.dtype == torch.float32:
            wants = differentiable and i not in no_grad_inputs
            leaf = t.to(torch.float64).detach().requires_grad_(wants)
            diff.append(wants)
        else:
            leaf = t.clone()
            diff.append(False)
        leaves.append(leaf)
    out = fn(*leaves)
    out_float = out.dtype.is_floating_point
    grad_output = None
    grads = [None] * len(inputs)
    if out_float:
        out_store = out.detach().to(torch.float32)
    else:
        out_store = out.detach()
    if out_float and differentiable and any(diff):
        grad_output = randn(*out.shape) if out.dim() > 0 else torch.randn(
            (), generator=GEN, dtype=torch.float32)
        (out * grad_output.to(torch.float64)).sum().backward()
        for i, leaf in enumerate(leaves):
            if diff[i]:
                assert leaf.grad is not None, (name, i)
                grads[i] = leaf.grad.detach()
        GRADCHECK_FNS.append((name, fn, inputs, diff))
    CASES.append({
        "name": name,
        "op": op,
        "attrs": attrs,
        "inputs": [tensor_json(t) for t in inputs],
        "output": tensor_json(out_store),
        "grad_output": None if grad_output is None else tensor_json(grad_output),
        "grads": [None if g is None else tensor_json(g) for g in grads],
    })


# --------------------------------------------------------------------------
# Case definitions
# --------------------------------------------------------------------------


def unary_cases():
    # op -> (torch fn, input generator)
    pos = lambda s: uniform(s, 0.2, 3.0)
    spec = {
        "neg": (torch.neg, lambda s: randn(*s)),
        "exp": (torch.exp, lambda s: randn(*s)),
        "log": (torch.log, pos),
        "tanh": (torch.tanh, lambda s: randn(*s)),
        "erf": (torch.erf, lambda s: randn(*s)),
        "sqrt": (torch.sqrt, pos),
        "rsqrt": (torch.rsqrt, pos),
        "abs": (torch.abs, lambda s: away_from_zero(s)),
        "sigmoid": (torch.sigmoid, lambda s: randn(*s) * 2),
        "relu": (torch.relu, lambda s: away_from_zero(s)),
    }
    for op, (fn, gen) in spec.items():
        for shape in ([2, 3], [4]):
            x = gen(shape)
            add_case(f"{op}_{'x'.join(map(str, shape))}", op, {}, [x], fn)
    for approx in ("none", "tanh"):
        for shape in ([2, 3], [4]):
            x = randn(*shape) * 2
            add_case(f"gelu_{approx}_{'x'.join(map(str, shape))}", "gelu",
                     {"approximate": approx}, [x],
                     lambda t, a=approx: F.gelu(t, approximate=a))
    for e, name, gen in ((2.0, "sq", lambda: randn(2, 3)),
                         (-0.5, "rsqrt", lambda: uniform([2, 3], 0.2, 3.0)),
                         (0.5, "sqrt", lambda: uniform([4], 0.2, 3.0))):
        x = gen()
        add_case(f"pow_scalar_{name}", "pow_scalar", {"exponent": e}, [x],
                 lambda t, e=e: t ** e)


def silu_cases():
    """SiLU (x·sigmoid(x)), drawn after every other case so that their inputs
    stay what they were before it was added; the wide case also crosses the
    8- and 16-lane forms of the CPU's float groups and their tails."""
    for name, shape, scale in (("2x3", [2, 3], 2.0), ("4", [4], 2.0), ("3x37", [3, 37], 6.0)):
        x = randn(*shape) * scale
        add_case(f"silu_{name}", "silu", {}, [x], F.silu)


def rope_cases():
    """Rotary position embedding as transformers' apply_rotary_pos_emb computes
    it (its rotate_half), drawn after every other case. Tables built as Llama
    builds them (angles repeated over both halves), per batch row
    (position_ids), arbitrary ones (halves that differ: the transposed
    rotation reads the other half's sin), a head size that crosses the CPU's
    vector widths and their tails, and an x [T, D] whose tables broadcast."""
    from transformers.models.llama.modeling_llama import rotate_half

    def rope(x, cos, sin):
        return x * cos + rotate_half(x) * sin

    def tables(batch, positions, d):
        inv = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        angles = positions.to(torch.float32)[..., None] * inv  # [batch, T, d/2]
        emb = torch.cat((angles, angles), dim=-1)[:, None]
        return emb.cos(), emb.sin()

    x = randn(1, 2, 3, 4)
    cos, sin = tables(1, torch.arange(3)[None], 4)
    add_case("rope_1x2x3x4", "rope", {}, [x, cos, sin], rope)
    x = randn(2, 3, 5, 8)
    cos, sin = tables(2, randint([2, 5], 0, 40), 8)
    add_case("rope_per_batch_2x3x5x8", "rope", {}, [x, cos, sin], rope)
    x, cos, sin = randn(2, 2, 3, 6), randn(1, 1, 3, 6), randn(1, 1, 3, 6)
    add_case("rope_any_tables_2x2x3x6", "rope", {}, [x, cos, sin], rope)
    x, cos, sin = randn(1, 2, 3, 38), randn(1, 1, 3, 38), randn(1, 1, 3, 38)
    add_case("rope_wide_1x2x3x38", "rope", {}, [x, cos, sin], rope)
    # kiln::rope (the tensor function) on an x the op does not take: rows of
    # D, the tables broadcast to them.
    x, cos, sin = randn(3, 6), randn(3, 6), randn(1, 6)
    add_case("rope_rows_3x6", "rope_rows", {}, [x, cos, sin], rope)


def binary_cases():
    shapes = {
        "same": ([2, 3], [2, 3]),
        "bcast_both": ([2, 1, 4], [3, 1]),
        "scalar_rhs": ([2, 3], []),
    }
    fns = {
        "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
        "pow": torch.pow, "maximum": torch.maximum, "minimum": torch.minimum,
    }
    for op, fn in fns.items():
        for tag, (sa, sb) in shapes.items():
            if op == "div":
                a = randn(*sa)
                b = away_from_zero(sb, 0.5, 2.0)
            elif op == "pow":
                a = uniform(sa, 0.3, 2.5)
                b = uniform(sb, -2.0, 2.0)
            elif op in ("maximum", "minimum"):
                a, b = apart_pair(sa, sb)
            else:
                a, b = randn(*sa), randn(*sb)
            add_case(f"{op}_{tag}", op, {}, [a, b], fn)
    # one case with the broadcast on the left-hand side
    for op in ("sub", "div"):
        a = randn(3, 1)
        b = away_from_zero([2, 1, 4], 0.5, 2.0) if op == "div" else randn(2, 1, 4)
        add_case(f"{op}_bcast_lhs_small", op, {}, [a, b], fns[op])


def compare_cases():
    fns = {"eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le,
           "gt": torch.gt, "ge": torch.ge}
    # same shape: a few equal elements
    a1 = randn(2, 3)
    b1 = randn(2, 3)
    b1.view(-1)[[0, 4]] = a1.view(-1)[[0, 4]]
    # broadcast [2,3] vs [3]: b equals some of a's elements
    a2 = randn(2, 3)
    b2 = randn(3)
    b2[1] = a2[0, 1]
    b2[2] = a2[1, 2]
    for op, fn in fns.items():
        add_case(f"{op}_same", op, {}, [a1, b1], fn)
        add_case(f"{op}_bcast", op, {}, [a2, b2], fn)


def where_cases():
    cond = torch.tensor([[True, False, True], [False, False, True]])
    add_case("where_b_row", "where", {}, [cond, randn(2, 3), randn(3)], torch.where)
    cond = torch.tensor([[False, True, True], [True, False, False]])
    add_case("where_b_scalar1", "where", {}, [cond, randn(2, 3), randn(1)], torch.where)
    cond = randbool([2, 3])
    add_case("where_a_col_b_row", "where", {}, [cond, randn(2, 1), randn(3)], torch.where)


def cast_cases():
    x = torch.tensor([[-2.7, -0.4, 0.6], [1.5, 3.99, -7.2]], dtype=torch.float32)
    add_case("cast_f32_to_i64", "cast", {"dtype": "i64"}, [x],
             lambda t: t.to(torch.int64), differentiable=False)
    x = randn(4) * 5
    add_case("cast_f32_to_i64_1d", "cast", {"dtype": "i64"}, [x],
             lambda t: t.to(torch.int64), differentiable=False)
    i = torch.tensor([[-3, 0, 7], [12, -1, 100000]], dtype=torch.int64)
    add_case("cast_i64_to_f32", "cast", {"dtype": "f32"}, [i],
             lambda t: t.to(torch.float32), differentiable=False)
    x = torch.tensor([[0.0, -1.5, 0.25], [0.0, -0.0, 3.0]], dtype=torch.float32)
    add_case("cast_f32_to_bool", "cast", {"dtype": "bool"}, [x],
             lambda t: t != 0, differentiable=False)


def reduction_cases():
    for op, fn in (("sum", torch.sum), ("mean", torch.mean)):
        for axes in ([2], [0], [0, 2], []):
            for keepdim in (False, True):
                x = randn(2, 3, 4)
                dims = tuple(axes) if axes else (0, 1, 2)
                tag = "all" if not axes else "".join(map(str, axes))
                add_case(f"{op}_axes{tag}_{'keep' if keepdim else 'nokeep'}", op,
                         {"axes": list(axes), "keepdim": keepdim}, [x],
                         lambda t, d=dims, k=keepdim, f=fn: f(t, dim=d, keepdim=k))
    for axes, keepdim in (([1], False), ([1], True), ([2], False)):
        x = no_tie_along([2, 3, 4], axes)
        add_case(f"max_axes{''.join(map(str, axes))}_{'keep' if keepdim else 'nokeep'}",
                 "max", {"axes": axes, "keepdim": keepdim}, [x],
                 lambda t, d=tuple(axes), k=keepdim: torch.amax(t, dim=d, keepdim=k))
    for axis, keepdim in ((1, False), (2, True)):
        x = no_tie_along([2, 3, 4], [axis])
        add_case(f"argmax_axis{axis}_{'keep' if keepdim else 'nokeep'}", "argmax",
                 {"axis": axis, "keepdim": keepdim}, [x],
                 lambda t, a=axis, k=keepdim: torch.argmax(t, dim=a, keepdim=k))


def movement_cases():
    add_case("reshape_3d_to_2d", "reshape", {"shape": [6, 4]}, [randn(2, 3, 4)],
             lambda t: t.reshape(6, 4))
    add_case("reshape_2d_to_3d", "reshape", {"shape": [2, 2, 3]}, [randn(3, 4)],
             lambda t: t.reshape(2, 2, 3))
    add_case("reshape_to_1d", "reshape", {"shape": [6]}, [randn(2, 3)],
             lambda t: t.reshape(6))

    add_case("permute_2d", "permute", {"perm": [1, 0]}, [randn(2, 3)],
             lambda t: t.permute(1, 0))
    add_case("permute_3d", "permute", {"perm": [2, 0, 1]}, [randn(2, 3, 4)],
             lambda t: t.permute(2, 0, 1))
    add_case("permute_4d_heads", "permute", {"perm": [0, 2, 1, 3]}, [randn(2, 3, 2, 2)],
             lambda t: t.permute(0, 2, 1, 3))

    add_case("transpose_2d", "transpose", {"dim0": 0, "dim1": 1}, [randn(2, 3)],
             lambda t: t.transpose(0, 1))
    add_case("transpose_3d_12", "transpose", {"dim0": 1, "dim1": 2}, [randn(2, 3, 4)],
             lambda t: t.transpose(1, 2))
    add_case("transpose_3d_20", "transpose", {"dim0": 2, "dim1": 0}, [randn(2, 3, 4)],
             lambda t: t.transpose(2, 0))

    add_case("broadcast_to_col", "broadcast_to", {"shape": [2, 3, 4]}, [randn(3, 1)],
             lambda t: t.broadcast_to(2, 3, 4))
    add_case("broadcast_to_row", "broadcast_to", {"shape": [3, 4]}, [randn(4)],
             lambda t: t.broadcast_to(3, 4))
    add_case("broadcast_to_mid", "broadcast_to", {"shape": [2, 3, 4]}, [randn(2, 1, 4)],
             lambda t: t.broadcast_to(2, 3, 4))

    def slc(dim, start, end, step):
        def f(t):
            idx = [slice(None)] * t.dim()
            idx[dim] = slice(start, end, step)
            return t[tuple(idx)]
        return f
    for name, shape, (dim, start, end, step) in (
            ("slice_dim1_prefix", [2, 3, 4], (1, 0, 2, 1)),
            ("slice_dim2_mid", [2, 3, 4], (2, 1, 3, 1)),
            ("slice_dim0_step2", [6, 4], (0, 1, 6, 2)),
            ("slice_dim2_step2_odd", [2, 3, 5], (2, 0, 5, 2)),
            ("slice_dim1_step3", [2, 7], (1, 1, 6, 3))):
        add_case(name, "slice", {"dim": dim, "start": start, "end": end, "step": step},
                 [randn(*shape)], slc(dim, start, end, step))

    add_case("concat_dim0", "concat", {"dim": 0},
             [randn(1, 3), randn(2, 3), randn(3, 3)], lambda a, b, c: torch.cat([a, b, c], 0))
    add_case("concat_dim1", "concat", {"dim": 1},
             [randn(2, 1, 4), randn(2, 2, 4), randn(2, 3, 4)],
             lambda a, b, c: torch.cat([a, b, c], 1))
    add_case("concat_dim2", "concat", {"dim": 2},
             [randn(2, 3, 1), randn(2, 3, 2), randn(2, 3, 3)],
             lambda a, b, c: torch.cat([a, b, c], 2))

    ids = torch.tensor([[1, 4, 1], [0, 4, 1]], dtype=torch.int64)
    add_case("index_select_embedding", "index_select", {"dim": 0}, [randn(5, 3), ids],
             lambda tab, i: F.embedding(i, tab))
    ids = torch.tensor([[5, 2], [2, 2], [0, 3]], dtype=torch.int64)
    add_case("index_select_embedding_b", "index_select", {"dim": 0}, [randn(6, 4), ids],
             lambda tab, i: F.embedding(i, tab))

    idx = torch.tensor([[0, 2, 1, 2], [2, 2, 0, 1]], dtype=torch.int64)
    add_case("gather_dim0", "gather", {"dim": 0}, [randn(3, 4), idx],
             lambda x, i: torch.gather(x, 0, i))
    idx = torch.tensor([[3, 3, 0], [1, 0, 1], [2, 2, 2]], dtype=torch.int64)
    add_case("gather_dim1", "gather", {"dim": 1}, [randn(3, 4), idx],
             lambda x, i: torch.gather(x, 1, i))

    idx = torch.tensor([[0, 2, 1, 2], [0, 1, 1, 0]], dtype=torch.int64)
    add_case("scatter_add_dim0", "scatter_add", {"dim": 0}, [randn(3, 4), idx, randn(2, 4)],
             lambda base, i, src: base.scatter_add(0, i, src))
    idx = torch.tensor([[3, 0, 3, 1], [2, 2, 0, 2]], dtype=torch.int64)
    add_case("scatter_add_dim1", "scatter_add", {"dim": 1}, [randn(3, 4), idx, randn(2, 4)],
             lambda base, i, src: base.scatter_add(1, i, src))


def index_copy_cases():
    # Drawn after every other case, so that adding them left the others' values as they were.
    idx = torch.tensor([3, 0], dtype=torch.int64)
    add_case("index_copy_dim1", "index_copy", {"dim": 1}, [randn(2, 4, 3), idx, randn(2, 2, 3)],
             lambda x, i, src: x.index_copy(1, i, src))
    idx = torch.tensor([1], dtype=torch.int64)
    add_case("index_copy_dim0", "index_copy", {"dim": 0}, [randn(3, 4), idx, randn(1, 4)],
             lambda x, i, src: x.index_copy(0, i, src))


def matmul_fn(ta, tb):
    def f(a, b):
        a = a.transpose(-1, -2) if ta else a
        b = b.transpose(-1, -2) if tb else b
        return torch.matmul(a, b)
    return f


def matmul_cases():
    def case(name, sa, sb, ta=False, tb=False):
        add_case(name, "matmul", {"transpose_a": ta, "transpose_b": tb},
                 [randn(*sa), randn(*sb)], matmul_fn(ta, tb))
    case("matmul_2d", [3, 4], [4, 5])
    case("matmul_batched", [2, 3, 4], [2, 4, 5])
    case("matmul_bcast_rhs_2d", [2, 3, 4], [4, 5])
    case("matmul_bcast_leading_4d", [2, 2, 3, 4], [2, 4, 5])
    # logical op is [2,3,4] @ [2,4,5]; stored shapes depend on the flags
    case("matmul_batched_nn", [2, 3, 4], [2, 4, 5], False, False)
    case("matmul_batched_tn", [2, 4, 3], [2, 4, 5], True, False)
    case("matmul_batched_nt", [2, 3, 4], [2, 5, 4], False, True)
    case("matmul_batched_tt", [2, 4, 3], [2, 5, 4], True, True)
    case("matmul_linear_weight_nt", [2, 3, 4], [5, 4], False, True)
    case("matmul_2d_tt", [4, 3], [5, 4], True, True)


def composite_cases():
    # softmax / log_softmax
    for op, fn in (("softmax", F.softmax), ("log_softmax", F.log_softmax)):
        add_case(f"{op}_last_2d", op, {"dim": -1}, [randn(2, 3) * 2],
                 lambda x, f=fn: f(x, dim=-1))
        add_case(f"{op}_dim1_3d", op, {"dim": 1}, [randn(2, 3, 4) * 2],
                 lambda x, f=fn: f(x, dim=1))
        mask = torch.tensor([0.0, 0.0, 0.0, -10000.0, 0.0, 0.0, -10000.0, -10000.0],
                            dtype=torch.float32).reshape(2, 1, 1, 4)
        add_case(f"{op}_last_masked", op, {"dim": -1}, [randn(2, 2, 3, 4), mask],
                 lambda x, m, f=fn: f(x + m, dim=-1))
    # causal-style mask [1,1,3,4] broadcast over batch and heads
    causal = torch.tensor([[0, 0, -10000, -10000], [0, 0, 0, -10000], [0, 0, 0, 0]],
                          dtype=torch.float32).reshape(1, 1, 3, 4)
    add_case("softmax_last_causal_mask", "softmax", {"dim": -1}, [randn(2, 2, 3, 4), causal],
             lambda x, m: F.softmax(x + m, dim=-1))

    # layer_norm over the last dim
    for eps, tag in ((1e-5, "eps1e-5"), (1e-12, "eps1e-12")):
        x = randn(2, 3, 8) * 1.5 + 0.3
        w = 1.0 + 0.2 * randn(8)
        b = 0.1 * randn(8)
        add_case(f"layer_norm_{tag}", "layer_norm", {"eps": eps}, [x, w, b],
                 lambda x, w, b, e=eps: F.layer_norm(x, (x.shape[-1],), w, b, e))

    # cross_entropy (mean over non-ignored)
    def ce(ls):
        def f(logits, labels):
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                   ignore_index=-100, reduction="mean", label_smoothing=ls)
        return f
    labels = torch.tensor([2, -100, 0, 4, -100, 1], dtype=torch.int64)
    for ls, tag in ((0.0, ""), (0.1, "_ls0.1")):
        add_case(f"cross_entropy{tag}", "cross_entropy",
                 {"ignore_index": -100, "label_smoothing": ls},
                 [randn(6, 5) * 2, labels], ce(ls))
    labels3 = torch.tensor([[3, 0, -100], [1, -100, 3]], dtype=torch.int64)
    for ls, tag in ((0.0, ""), (0.1, "_ls0.1")):
        add_case(f"cross_entropy_3d{tag}", "cross_entropy",
                 {"ignore_index": -100, "label_smoothing": ls},
                 [randn(2, 3, 5) * 2, labels3], ce(ls))

    # mse_loss (mean)
    add_case("mse_loss_2d", "mse_loss", {}, [randn(2, 3), randn(2, 3)],
             lambda a, b: F.mse_loss(a, b, reduction="mean"))
    add_case("mse_loss_1d", "mse_loss", {}, [randn(5), randn(5)],
             lambda a, b: F.mse_loss(a, b, reduction="mean"))

    # binary_cross_entropy_with_logits (mean); gradient for logits only
    for shape in ([2, 3], [5]):
        add_case(f"binary_cross_entropy_with_logits_{'x'.join(map(str, shape))}",
                 "binary_cross_entropy_with_logits", {},
                 [randn(*shape) * 2, uniform(shape, 0.0, 1.0)],
                 lambda x, t: F.binary_cross_entropy_with_logits(x, t, reduction="mean"),
                 no_grad_inputs=(1,))


# --------------------------------------------------------------------------
# Self test
# --------------------------------------------------------------------------


def independent_checks():
    """Spot-check a few torch semantics against hand-written float64 formulas."""
    by_name = {c["name"]: c for c in CASES}

    def arr(t):
        return np.array(t["data"], dtype=np.float64).reshape(t["shape"])

    # cross_entropy with label smoothing: mean over non-ignored rows
    for name in ("cross_entropy", "cross_entropy_ls0.1", "cross_entropy_3d_ls0.1"):
        c = by_name[name]
        ls = c["attrs"]["label_smoothing"]
        logits = arr(c["inputs"][0])
        logits = logits.reshape(-1, logits.shape[-1])
        labels = np.array(c["inputs"][1]["data"], dtype=np.int64)
        logp = logits - logits.max(-1, keepdims=True)
        logp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))
        keep = labels != -100
        per = [(1 - ls) * -logp[i, labels[i]] + ls * -logp[i].mean()
               for i in range(len(labels)) if keep[i]]
        ref = float(np.mean(per))
        got = c["output"]["data"][0]
        assert abs(ref - got) <= 1e-6 * max(1.0, abs(ref)), (name, ref, got)

    # softmax with mask: masked positions ~0
    c = by_name["softmax_last_masked"]
    out = arr(c["output"])
    assert np.all(out[0, ..., 3] < 1e-3) and np.all(out[1, ..., 2:] < 1e-3)
    assert np.allclose(out.sum(-1), 1.0, atol=1e-6)

    # cast truncation toward zero
    assert by_name["cast_f32_to_i64"]["output"]["data"] == [-2, 0, 0, 1, 3, -7]

    # comparisons: eq has both true and false
    for n in ("eq_same", "eq_bcast"):
        d = by_name[n]["output"]["data"]
        assert any(d) and not all(d), n

    # embedding gradient accumulates for repeated ids
    c = by_name["index_select_embedding"]
    go = arr(c["grad_output"])
    g = arr(c["grads"][0])
    assert np.allclose(g[1], go[0, 0] + go[0, 2] + go[1, 2], atol=1e-6)
    assert np.allclose(g[2], 0.0) and np.allclose(g[3], 0.0)


def self_test(doc):
    names = [c["name"] for c in doc["cases"]]
    assert len(names) == len(set(names)), "duplicate case names"
    covered = {c["op"] for c in doc["cases"]}
    assert covered == OPS, ("ops without cases", OPS - covered)
    for c in doc["cases"]:
        assert set(c) == {"name", "op", "attrs", "inputs", "output", "grad_output", "grads"}
        assert len(c["grads"]) == len(c["inputs"]), c["name"]
        for t in c["inputs"] + [c["output"], c["grad_output"]] + c["grads"]:
            if t is None:
                continue
            assert t["dtype"] in ("f32", "i64", "bool"), c["name"]
            assert len(t["data"]) == math.prod(t["shape"]), c["name"]
            for v in t["data"]:
                if t["dtype"] == "f32":
                    assert isinstance(v, float) and math.isfinite(v), c["name"]
                elif t["dtype"] == "i64":
                    assert isinstance(v, int) and not isinstance(v, bool), c["name"]
                else:
                    assert isinstance(v, bool), c["name"]
        if c["grad_output"] is None:
            assert all(g is None for g in c["grads"]), c["name"]
            assert c["output"]["dtype"] != "f32" or c["op"] == "cast", c["name"]
        else:
            assert c["output"]["dtype"] == "f32", c["name"]
            assert c["grad_output"]["shape"] == c["output"]["shape"], c["name"]
            assert c["grad_output"]["dtype"] == "f32"
            assert any(g is not None for g in c["grads"]), c["name"]
            for inp, g in zip(c["inputs"], c["grads"]):
                if inp["dtype"] != "f32":
                    assert g is None, c["name"]
                if g is not None:
                    assert g["shape"] == inp["shape"] and g["dtype"] == "f32", c["name"]

    # Finite-difference check of every differentiable case in float64: this also
    # confirms the inputs are away from kinks and ties.
    for name, fn, inputs, diff in GRADCHECK_FNS:
        leaves = [t.to(torch.float64).detach().requires_grad_(d) if t.dtype == torch.float32
                  else t.clone() for t, d in zip(inputs, diff)]
        ok = torch.autograd.gradcheck(lambda *a: fn(*a), leaves, eps=1e-6, atol=1e-5,
                                      rtol=1e-4, raise_exception=False)
        assert ok, f"gradcheck failed for {name}"

    independent_checks()


# --------------------------------------------------------------------------


def main():
    unary_cases()
    binary_cases()
    compare_cases()
    where_cases()
    cast_cases()
    reduction_cases()
    movement_cases()
    matmul_cases()
    composite_cases()
    silu_cases()
    rope_cases()
    index_copy_cases()

    doc = {"generator": GENERATOR_NAME, "torch_version": torch.__version__, "cases": CASES}
    self_test(doc)

    # One case per line keeps diffs readable and the file compact.
    head = json.dumps({"generator": doc["generator"], "torch_version": doc["torch_version"]})
    lines = [head[:-1] + ',\n "cases": [\n']
    lines.append(",\n".join("  " + json.dumps(c, separators=(",", ":"), allow_nan=False)
                            for c in CASES))
    lines.append("\n]}\n")
    text = "".join(lines)
    assert json.loads(text) == json.loads(json.dumps(doc)), "serialisation mismatch"
    os.makedirs(os.path.dirname(OUT_PATH), exist_ok=True)
    with open(OUT_PATH, "w") as f:
        f.write(text)

    counts = {}
    for c in CASES:
        counts[c["op"]] = counts.get(c["op"], 0) + 1
    print(f"wrote {len(CASES)} cases ({len(text)} bytes) to "
          f"{os.path.relpath(OUT_PATH, REPO_ROOT)}")
    for op in sorted(counts):
        print(f"  {op}: {counts[op]}")


if __name__ == "__main__":
    main()
