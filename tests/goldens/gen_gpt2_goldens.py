#!/usr/bin/python3
"""Generate golden forward/backward values for kiln's GPT-2 models.

Rerun from the repository root with Debian's PyTorch (python3-torch, CPU):

    /usr/bin/python3 tests/goldens/gen_gpt2_goldens.py

`transformers` is not needed (and not used): the forward pass of Hugging Face's
GPT2Model / GPT2LMHeadModel / GPT2ForSequenceClassification (transformers 4.40
semantics, eval mode, "eager" attention, reorder_and_upcast_attn false,
scale_attn_by_inverse_layer_idx false) is re-implemented below from HF's
modelling code.  For every case it writes, under tests/goldens/gpt2/<case>/:

  config.json         the config as HF's save_pretrained writes it (indent 2,
                      sorted keys), plus n_ctx, and id2label/label2id/pad_token_id/
                      problem_type for the sequence-classification head.
  model.safetensors   the float32 weights under HF's state_dict names, the key set
                      save_pretrained(safe_serialization=True) writes: no
                      lm_head.weight (tied to transformer.wte.weight, matches
                      GPT2LMHeadModel._tied_weights_keys), no attn.bias /
                      attn.masked_bias (non-persistent buffers).  Conv1D weights
                      are stored [in, out] (y = x @ W + b).
  golden.safetensors  inputs (I64 input_ids / attention_mask / labels, F32 loss
                      weights), outputs (logits and/or last_hidden_state, loss [])
                      and grad.<name> = d loss / d <name> for every tensor in
                      model.safetensors.

Numerics: weights are drawn in float32 from a per-case seeded torch.Generator
(weights N(0, 0.2), biases N(0, 0.1), LayerNorm weight 1 + N(0, 0.1), LayerNorm
bias N(0, 0.1)); those float32 values are written, then cast to float64 and the
forward and backward are computed in float64; results are stored rounded to
float32.  The output is byte-identical on rerun (fixed seeds, one thread,
deterministic algorithms).

Self-checks (the script asserts them before writing anything):
  * a second, independent implementation built from torch.nn modules
    (nn.Embedding, nn.TransformerEncoderLayer(norm_first=True) with a boolean
    causal src_mask and key_padding_mask, nn.LayerNorm, F.linear with the tied
    embedding, F.cross_entropy) must agree on every output, the loss and every
    gradient (relative 1e-9);
  * central finite differences (float64) on 4 parameter entries per case;
  * causality (changing the last token leaves every earlier output unchanged),
    the sequence-classification pooling index, the LM loss recomputed token by
    token, shapes of every tensor and a read-back of every file.
"""

import collections
import json
import math
import os
import sys

import torch

import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_io import (ATTN_MASK, F32_MIN, assert_agree, backward, case_files, ce_loss,  # noqa: E402
                       finite_difference_check, init_params, read_safetensors, setup_torch, write_cases)

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT_DIR = os.path.join(REPO_ROOT, "tests", "goldens", "gpt2")

setup_torch()

F64 = torch.float64
# HF GPT2Attention._attn: causal positions -> torch.finfo(attn_weights.dtype).min (torch.where);
# GPT2Model.forward: attention_mask -> (1 - mask) * torch.finfo(self.dtype).min, added.
# An HF model runs in float32, so the goldens use the float32 minimum (F32_MIN) for both.

# --------------------------------------------------------------------------
# Configs
# --------------------------------------------------------------------------

GPT2_BASE_CONFIG = {
    "activation_function": "gelu_new",
    "attn_pdrop": 0.1,
    "bos_token_id": 98,
    "embd_pdrop": 0.1,
    "eos_token_id": 98,
    "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05,
    "model_type": "gpt2",
    "n_ctx": 32,
    "n_embd": 32,
    "n_head": 4,
    "n_inner": None,
    "n_layer": 2,
    "n_positions": 32,
    "reorder_and_upcast_attn": False,
    "resid_pdrop": 0.1,
    "scale_attn_by_inverse_layer_idx": False,
    "scale_attn_weights": True,
    "summary_activation": None,
    "summary_first_dropout": 0.1,
    "summary_proj_to_labels": True,
    "summary_type": "cls_index",
    "summary_use_proj": True,
    "torch_dtype": "float32",
    "transformers_version": "4.40.0",
    "use_cache": True,
    "vocab_size": 99,
}

# name, architecture, num_labels, batch, seq, use attention_mask, seed
CASES = [
    ("gpt2_lm", "GPT2LMHeadModel", None, 3, 7, True, 2001),
    ("gpt2_lm_nomask", "GPT2LMHeadModel", None, 2, 9, False, 2002),
    ("gpt2_seqcls", "GPT2ForSequenceClassification", 3, 3, 7, True, 2003),
    ("gpt2_model", "GPT2Model", None, 3, 7, True, 2004),
]

PAD_LM = 98  # GPT-2 has no pad token; padded positions of the LM / base cases hold eos (98)
PAD_SEQCLS = 0  # config pad_token_id of the sequence-classification case


def make_config(arch, num_labels):
    cfg = dict(GPT2_BASE_CONFIG)
    cfg["architectures"] = [arch]
    if num_labels is not None:
        cfg["id2label"] = {str(i): "LABEL_%d" % i for i in range(num_labels)}
        cfg["label2id"] = {"LABEL_%d" % i: i for i in range(num_labels)}
        cfg["pad_token_id"] = PAD_SEQCLS
        cfg["problem_type"] = "single_label_classification"
    return cfg


def config_json(cfg):
    # PretrainedConfig.to_json_string: json.dumps(d, indent=2, sort_keys=True) + "\n"
    return json.dumps(cfg, indent=2, sort_keys=True) + "\n"


def num_labels_of(cfg):
    return len(cfg["id2label"]) if "id2label" in cfg else 2


def inner_dim(cfg):
    return cfg["n_inner"] if cfg["n_inner"] is not None else 4 * cfg["n_embd"]


# --------------------------------------------------------------------------
# Parameters (HF state_dict names, registration order; kinds drive the init)
# --------------------------------------------------------------------------


def body_params(prefix, cfg):
    H, V, P, I = cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"], inner_dim(cfg)
    out = []

    def conv1d(name, n_in, n_out):  # Conv1D(nf=n_out, nx=n_in): weight [n_in, n_out], bias [n_out]
        out.append((prefix + name + ".weight", [n_in, n_out], "w"))
        out.append((prefix + name + ".bias", [n_out], "b"))

    def ln(name):
        out.append((prefix + name + ".weight", [H], "lnw"))
        out.append((prefix + name + ".bias", [H], "lnb"))

    out.append((prefix + "wte.weight", [V, H], "w"))
    out.append((prefix + "wpe.weight", [P, H], "w"))
    for i in range(cfg["n_layer"]):
        L = "h.%d." % i
        ln(L + "ln_1")
        # attn.bias (causal tril) and attn.masked_bias are non-persistent buffers: not saved
        conv1d(L + "attn.c_attn", H, 3 * H)
        conv1d(L + "attn.c_proj", H, H)
        ln(L + "ln_2")
        conv1d(L + "mlp.c_fc", H, I)
        conv1d(L + "mlp.c_proj", I, H)
    ln("ln_f")
    return out


def body_prefix(arch):
    return "" if arch == "GPT2Model" else "transformer."


def model_params(arch, cfg):
    """The tensors save_pretrained writes, in HF registration order."""
    H = cfg["n_embd"]
    if arch == "GPT2Model":
        return body_params("", cfg)
    if arch == "GPT2LMHeadModel":
        # lm_head.weight (nn.Linear(n_embd, vocab, bias=False)) is tied to transformer.wte.weight
        # and dropped by save_pretrained (_tied_weights_keys = ["lm_head.weight"]).
        return body_params("transformer.", cfg)
    if arch == "GPT2ForSequenceClassification":
        return body_params("transformer.", cfg) + [("score.weight", [num_labels_of(cfg), H], "w")]
    raise ValueError(arch)


# --------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------


def make_inputs(arch, cfg, batch, seq, use_mask, gen):
    V, H = cfg["vocab_size"], cfg["n_embd"]
    inputs = collections.OrderedDict()
    if use_mask:
        assert batch == 3 and seq == 7
        mask = torch.tensor(ATTN_MASK, dtype=torch.int64)
    else:
        mask = torch.ones(batch, seq, dtype=torch.int64)
    if arch == "GPT2ForSequenceClassification":
        pad = cfg["pad_token_id"]
        ids = torch.randint(1, V - 1, (batch, seq), generator=gen, dtype=torch.int64)  # never the pad id 0
    else:
        pad = PAD_LM
        ids = torch.randint(0, V - 1, (batch, seq), generator=gen, dtype=torch.int64)  # never 98
    ids = torch.where(mask == 1, ids, torch.full_like(ids, pad))
    inputs["input_ids"] = ids
    if use_mask:
        inputs["attention_mask"] = mask
    if arch == "GPT2LMHeadModel":
        lab = ids.clone()
        if use_mask:
            # Row 1: pads at 5, 6; label 5 ignored, label 6 (= 98) kept, so the loss also
            # depends on logits[1, 5], a padded query position.  Row 2: all pad labels ignored.
            lab[1, 5] = -100
            lab[2, 3:] = -100
        inputs["labels"] = lab
    elif arch == "GPT2ForSequenceClassification":
        inputs["labels"] = torch.randint(0, num_labels_of(cfg), (batch,), generator=gen, dtype=torch.int64)
    elif arch == "GPT2Model":
        inputs["loss_weight_hidden"] = torch.randn(batch, seq, H, generator=gen, dtype=torch.float32)
    else:
        raise ValueError(arch)
    return inputs


# --------------------------------------------------------------------------
# Implementation 1: HF's forward, written out (float64)
# --------------------------------------------------------------------------


def gelu_new(x):  # ACT2FN["gelu_new"]: NewGELUActivation (tanh approximation)
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


ACT = {"gelu_new": gelu_new}


def conv1d(x, p, name):  # transformers.pytorch_utils.Conv1D: addmm(bias, x, weight)
    return torch.matmul(x, p[name + ".weight"]) + p[name + ".bias"]


def layer_norm(x, p, name, eps):
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)  # biased variance
    return (x - mean) / torch.sqrt(var + eps) * p[name + ".weight"] + p[name + ".bias"]


def gpt2_body(p, pre, cfg, ids, mask):
    """GPT2Model.forward (no past, position_ids = arange(T)) -> ln_f output [B, T, H]."""
    B, T = ids.shape
    H, nh = cfg["n_embd"], cfg["n_head"]
    hd = H // nh
    eps = cfg["layer_norm_epsilon"]
    act = ACT[cfg["activation_function"]]
    # position_ids default: arange(past_length, past_length + T), whatever the attention_mask
    pos = torch.arange(T).unsqueeze(0).expand(B, T)
    # wte / wpe are plain nn.Embedding (no padding_idx): every row read gets a gradient.
    x = F.embedding(ids, p[pre + "wte.weight"]) + F.embedding(pos, p[pre + "wpe.weight"])
    if mask is not None:
        ext = (1.0 - mask[:, None, None, :].to(F64)) * F32_MIN  # [B,1,1,T]
    else:
        ext = None
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool)).view(1, 1, T, T)
    mask_value = torch.full([], F32_MIN, dtype=F64)

    def heads(t):
        return t.view(B, T, nh, hd).permute(0, 2, 1, 3)

    for i in range(cfg["n_layer"]):
        L = pre + "h.%d." % i
        residual = x
        h = layer_norm(x, p, L + "ln_1", eps)
        q, k, v = conv1d(h, p, L + "attn.c_attn").split(H, dim=2)
        q, k, v = heads(q), heads(k), heads(v)
        w = torch.matmul(q, k.transpose(-1, -2))
        w = w / torch.full([], v.size(-1) ** 0.5, dtype=w.dtype)  # scale_attn_weights
        w = torch.where(causal, w, mask_value)
        if ext is not None:
            w = w + ext
        w = torch.softmax(w, dim=-1)
        a = torch.matmul(w, v).permute(0, 2, 1, 3).contiguous().view(B, T, H)
        x = conv1d(a, p, L + "attn.c_proj") + residual
        residual = x
        h = layer_norm(x, p, L + "ln_2", eps)
        h = conv1d(act(conv1d(h, p, L + "mlp.c_fc")), p, L + "mlp.c_proj")
        x = residual + h
    return layer_norm(x, p, pre + "ln_f", eps)


def seqcls_index(cfg, ids):
    """GPT2ForSequenceClassification (4.40): the token before the first pad, modulo T."""
    pad = cfg.get("pad_token_id")
    if pad is None:
        assert ids.shape[0] == 1  # HF raises "Cannot handle batch sizes > 1 if no padding token is defined."
        return torch.full((ids.shape[0],), -1, dtype=torch.int64) % ids.shape[-1]
    seq_len = torch.eq(ids, pad).int().argmax(-1) - 1
    return seq_len % ids.shape[-1]


def forward1(arch, cfg, p, inputs):
    """Returns (outputs dict, loss).  p: name -> float64 tensor (saved names)."""
    pre = body_prefix(arch)
    ids = inputs["input_ids"]
    x = gpt2_body(p, pre, cfg, ids, inputs.get("attention_mask"))
    out = collections.OrderedDict()
    out["last_hidden_state"] = x
    V = cfg["vocab_size"]
    if arch == "GPT2Model":
        loss = (x * inputs["loss_weight_hidden"].to(F64)).sum()
    elif arch == "GPT2LMHeadModel":
        logits = torch.matmul(x, p["transformer.wte.weight"].t())  # lm_head tied to wte, no bias
        out["logits"] = logits
        shift_logits = logits[..., :-1, :].contiguous()
        shift_labels = inputs["labels"][..., 1:].contiguous()
        loss = ce_loss(shift_logits.view(-1, V), shift_labels.view(-1))
    elif arch == "GPT2ForSequenceClassification":
        nl = num_labels_of(cfg)
        token_logits = torch.matmul(x, p["score.weight"].t())  # score: Linear(bias=False)
        idx = seqcls_index(cfg, ids)
        pooled = token_logits[torch.arange(ids.shape[0]), idx]
        out["logits"] = pooled
        loss = ce_loss(pooled.view(-1, nl), inputs["labels"].view(-1))
    else:
        raise ValueError(arch)
    return out, loss


# --------------------------------------------------------------------------
# Implementation 2: torch.nn modules (self-check only)
# --------------------------------------------------------------------------


def forward2(arch, cfg, p64, inputs):
    """Same model built from torch.nn modules.  Returns (outputs, loss, grads by saved name)."""
    pre = body_prefix(arch)
    H, nh, I = cfg["n_embd"], cfg["n_head"], inner_dim(cfg)
    eps, V = cfg["layer_norm_epsilon"], cfg["vocab_size"]
    # Conv1D weights [in, out] become nn.Linear weights [out, in]: the leaves are the
    # transposes, and their gradients are transposed back below.
    conv_names = set()
    for n in p64:
        if n.endswith(".weight") and any(s in n for s in ("c_attn", "c_proj", "c_fc")):
            conv_names.add(n)
    leaves = {n: nn.Parameter((t.t() if n in conv_names else t).clone().contiguous()) for n, t in p64.items()}

    def set_mod(mod, name, wname="weight", bname="bias"):
        setattr(mod, wname, leaves[name + ".weight"])
        setattr(mod, bname, leaves[name + ".bias"])

    ids = inputs["input_ids"]
    mask = inputs.get("attention_mask")
    B, T = ids.shape
    wte = nn.Embedding(V, H, dtype=F64)
    wte.weight = leaves[pre + "wte.weight"]
    wpe = nn.Embedding(cfg["n_positions"], H, dtype=F64)
    wpe.weight = leaves[pre + "wpe.weight"]
    pos = torch.arange(T).repeat(B, 1)
    x = wte(ids) + wpe(pos)
    src_mask = torch.ones(T, T, dtype=torch.bool).triu(1)  # True = not allowed (future keys)
    kpm = (mask == 0) if mask is not None else None
    for i in range(cfg["n_layer"]):
        L = pre + "h.%d." % i
        layer = nn.TransformerEncoderLayer(H, nh, dim_feedforward=I, dropout=0.0,
                                           activation=lambda z: F.gelu(z, approximate="tanh"),
                                           layer_norm_eps=eps, batch_first=True, norm_first=True, dtype=F64)
        set_mod(layer.self_attn, L + "attn.c_attn", "in_proj_weight", "in_proj_bias")
        set_mod(layer.self_attn.out_proj, L + "attn.c_proj")
        set_mod(layer.norm1, L + "ln_1")
        set_mod(layer.linear1, L + "mlp.c_fc")
        set_mod(layer.linear2, L + "mlp.c_proj")
        set_mod(layer.norm2, L + "ln_2")
        layer.eval()
        x = layer(x, src_mask=src_mask, src_key_padding_mask=kpm)
    lnf = nn.LayerNorm(H, eps=eps, dtype=F64)
    set_mod(lnf, pre + "ln_f")
    x = lnf(x)
    out = {"last_hidden_state": x}
    if arch == "GPT2Model":
        loss = (x * inputs["loss_weight_hidden"].to(F64)).sum()
    elif arch == "GPT2LMHeadModel":
        out["logits"] = logits = F.linear(x, wte.weight)  # the tie
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, V), inputs["labels"][:, 1:].reshape(-1),
                               ignore_index=-100)
    elif arch == "GPT2ForSequenceClassification":
        pad = cfg["pad_token_id"]
        # last non-pad token, found by a Python loop (no pad: the last token)
        idx = []
        for b in range(B):
            row = [int(v) for v in ids[b]]
            idx.append((row.index(pad) if pad in row else T) - 1)
        score = nn.Linear(H, num_labels_of(cfg), bias=False, dtype=F64)
        score.weight = leaves["score.weight"]
        out["logits"] = logits = score(x[torch.arange(B), torch.tensor(idx)])
        loss = F.cross_entropy(logits, inputs["labels"])
    else:
        raise ValueError(arch)
    loss.backward()
    grads = {}
    for n, t in leaves.items():
        g = t.grad if t.grad is not None else torch.zeros_like(t)
        grads[n] = g.t() if n in conv_names else g
    return {k: v.detach() for k, v in out.items()}, loss.detach(), grads


# --------------------------------------------------------------------------
# safetensors
# --------------------------------------------------------------------------



def expected_output_shapes(arch, cfg, B, T):
    H, V = cfg["n_embd"], cfg["vocab_size"]
    s = {"last_hidden_state": [B, T, H]}
    if arch == "GPT2LMHeadModel":
        s["logits"] = [B, T, V]
    elif arch == "GPT2ForSequenceClassification":
        s["logits"] = [B, num_labels_of(cfg)]
    return s


def semantic_checks(arch, cfg, plain, inputs, outs, loss):
    ids = inputs["input_ids"]
    B, T = ids.shape
    # Causality: changing the last token must not change any earlier position.
    alt = dict(inputs)
    ids2 = ids.clone()
    ids2[:, -1] = (ids2[:, -1] + 7) % (cfg["vocab_size"] - 1) + (1 if arch == "GPT2ForSequenceClassification" else 0)
    alt["input_ids"] = ids2
    with torch.no_grad():
        o2, _ = forward1(arch, cfg, plain, alt)
    hs, hs2 = outs["last_hidden_state"], o2["last_hidden_state"]
    assert torch.equal(hs[:, :-1], hs2[:, :-1])
    assert float((hs[:, -1] - hs2[:, -1]).abs().max()) > 0
    if arch == "GPT2LMHeadModel":
        # loss = mean over kept (t, t+1) pairs of -log softmax(logits[b, t])[labels[b, t+1]]
        lab = inputs["labels"]
        logits = outs["logits"]
        terms = []
        for b in range(B):
            for t in range(T - 1):
                y = int(lab[b, t + 1])
                if y != -100:
                    terms.append(float(torch.logsumexp(logits[b, t], 0) - logits[b, t, y]))
        assert abs(sum(terms) / len(terms) - float(loss)) <= 1e-12 * max(1.0, abs(float(loss)))
    if arch == "GPT2ForSequenceClassification":
        idx = seqcls_index(cfg, ids)
        mask = inputs["attention_mask"]
        assert idx.tolist() == (mask.sum(-1) - 1).tolist(), idx  # right padding: last real token
        full = torch.matmul(outs["last_hidden_state"], plain["score.weight"].t())
        assert torch.equal(full[torch.arange(B), idx], outs["logits"])
    if "attention_mask" in inputs:
        # Right padding: real queries never see padded keys (causal), so changing the ids
        # at padded positions leaves the real positions unchanged.
        mask = inputs["attention_mask"]
        alt = dict(inputs)
        alt["input_ids"] = torch.where(mask == 1, ids, (ids + 3) % (cfg["vocab_size"] - 1) + 1)
        with torch.no_grad():
            o3, _ = forward1(arch, cfg, plain, alt)
        real = (mask == 1).unsqueeze(-1)
        assert torch.equal(torch.where(real, hs, torch.zeros_like(hs)),
                           torch.where(real, o3["last_hidden_state"], torch.zeros_like(hs)))
        # ... while the mask does matter at padded query positions.
        alt = dict(inputs)
        del alt["attention_mask"]
        with torch.no_grad():
            o4, _ = forward1(arch, cfg, plain, alt)
        assert torch.equal(torch.where(real, hs, torch.zeros_like(hs)),
                           torch.where(real, o4["last_hidden_state"], torch.zeros_like(hs)))
        assert float((hs - o4["last_hidden_state"]).abs().max()) > 1e-3


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------


def build_case(name, arch, num_labels, batch, seq, use_mask, seed):
    gen = torch.Generator().manual_seed(seed)
    cfg = make_config(arch, num_labels)
    specs = model_params(arch, cfg)
    params = init_params(specs, gen)
    inputs = make_inputs(arch, cfg, batch, seq, use_mask, gen)

    p64 = collections.OrderedDict((n, t.to(F64).requires_grad_(True)) for n, t in params.items())
    outs, loss, grads = backward(*forward1(arch, cfg, p64, inputs), p64)

    # --- checks ---
    for n, shape, _ in specs:
        assert list(params[n].shape) == shape and list(grads[n].shape) == shape, n
    exp_shapes = expected_output_shapes(arch, cfg, batch, seq)
    assert sorted(exp_shapes) == sorted(outs), (sorted(exp_shapes), sorted(outs))
    for k, s in exp_shapes.items():
        assert list(outs[k].shape) == s, (k, outs[k].shape, s)
    assert loss.dim() == 0 and math.isfinite(float(loss))
    plain = {n: t.detach() for n, t in p64.items()}
    assert_agree(name, (outs, loss, grads), forward2(arch, cfg, plain, inputs))
    for n in grads:
        assert float(grads[n].abs().max()) > 0, (name, n)  # every tensor influences the loss
    pre = body_prefix(arch)
    # wpe rows >= T are never read: exactly zero gradient.  wte has no padding_idx: the pad
    # id's row does get a gradient wherever it is read.
    assert float(grads[pre + "wpe.weight"][seq:].abs().max()) == 0.0
    pad_id = cfg.get("pad_token_id", PAD_LM)
    if arch == "GPT2ForSequenceClassification":
        # Right padding + causal attention: the padded positions feed nothing that reaches
        # the pooled (last real) token, so the pad id's row gets exactly zero gradient.
        assert float(grads[pre + "wte.weight"][pad_id].abs().max()) == 0.0
    elif use_mask:
        assert float(grads[pre + "wte.weight"][pad_id].abs().max()) > 0.0
    semantic_checks(arch, cfg, plain, inputs, outs, loss)
    finite_difference_check(lambda q: forward1(arch, cfg, q, inputs)[1], plain, grads, gen, 3, 1)

    files = case_files(config_json(cfg), cfg, params, inputs, outs, loss, grads)
    rb = read_safetensors(files["model.safetensors"])
    assert "lm_head.weight" not in rb and not any(k.endswith(".attn.bias") or "masked_bias" in k for k in rb)
    return files, float(loss)


def main():
    write_cases(OUT_DIR, CASES, build_case, 16)


if __name__ == "__main__":
    main()
