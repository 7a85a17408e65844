#!/usr/bin/python3
"""Generate golden forward/backward values for kiln's Llama models (and Mistral and
Qwen2, which HF builds the same way: modeling_mistral.py without biases, modeling_qwen2.py
with biases on the query, key and value projections).

Rerun from the repository root with Debian's PyTorch (python3-torch, CPU):

    /usr/bin/python3 tests/goldens/gen_llama_goldens.py

`transformers` is not used: the forward pass of Hugging Face's LlamaModel /
LlamaForCausalLM / LlamaForSequenceClassification (modeling_llama.py,
transformers 4.40-4.44 semantics, eval mode, "eager" attention,
pretraining_tp 1, rope_scaling null) is re-implemented below from HF's
modelling code. For every case it writes, under tests/goldens/llama/<case>/:

  config.json         the config as save_pretrained writes it (indent 2, sorted keys).
  model.safetensors   the float32 weights under HF's state_dict names; no
                      lm_head.weight when tie_word_embeddings is true (save_pretrained
                      drops the tied copy); no rotary inv_freq (a non-persistent buffer).
  golden.safetensors  inputs, outputs (logits and/or last_hidden_state, loss []) and
                      grad.<name> = d loss / d <name> for every tensor in model.safetensors.

Numerics: weights drawn in float32 from a per-case seeded torch.Generator
(weights N(0, 0.2), biases N(0, 0.1), RMSNorm weight 1 + N(0, 0.1)), written as
float32, then cast to float64 for the forward and backward; results are stored
rounded to float32. The rotary tables follow HF: inv_freq, the angles and their
cos / sin in float32, then widened. The output is byte-identical on rerun.

Self-checks (asserted before anything is written):
  * a second implementation from torch.nn modules (nn.Embedding, nn.Linear,
    F.silu) with the rotation done as complex multiplication (the halves of
    each head as real and imaginary parts) and grouped-query heads
    repeated with repeat_interleave, must agree on every output, the loss and
    every gradient (relative 1e-9);
  * central finite differences (float64) on 4 parameter entries per case;
  * causality, the relative-position property of the rotation (shifting every
    position by the same amount leaves the attention scores unchanged), the
    sequence-classification pooling index, shapes, and a read-back of every file.
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
import golden_io  # noqa: E402
from golden_io import (ATTN_MASK, F32_MIN, assert_agree, backward, case_files, ce_loss,  # noqa: E402
                       finite_difference_check, read_safetensors, setup_torch, write_cases)

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT_DIR = os.path.join(REPO_ROOT, "tests", "goldens", "llama")

setup_torch()

F64 = torch.float64  # LlamaModel._update_causal_mask: future and padded keys get F32_MIN

LLAMA_BASE_CONFIG = {
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": 32,
    "initializer_range": 0.02,
    "intermediate_size": 48,
    "max_position_embeddings": 64,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "num_key_value_heads": 2,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
    "transformers_version": "4.44.0",
    "use_cache": True,
    "vocab_size": 99,
}

# name, architecture, num_labels, batch, seq, use attention_mask, config changes, seed
CASES = [
    # pad_token_id 0 at the padded positions, which the loss reads (row 1): the pad row gets no gradient.
    ("llama_lm", "LlamaForCausalLM", None, 3, 7, True, {"pad_token_id": 0}, 3001),
    # Llama 3's rope_theta, tied embeddings, biases everywhere, one key/value head per query head.
    ("llama_lm_tied_bias", "LlamaForCausalLM", None, 2, 9, False,
     {"tie_word_embeddings": True, "attention_bias": True, "mlp_bias": True, "num_key_value_heads": 4,
      "rope_theta": 500000.0}, 3002),
    ("llama_seqcls", "LlamaForSequenceClassification", 3, 3, 7, True, {"pad_token_id": 0}, 3003),
    # Multi-query attention: one key/value head for all four query heads.
    ("llama_model", "LlamaModel", None, 3, 7, True, {"num_key_value_heads": 1}, 3004),
    # MistralConfig: no biases, a sliding window longer than the sequence (so it changes nothing).
    ("mistral_lm", "MistralForCausalLM", None, 3, 7, True, {"model_type": "mistral", "sliding_window": 16}, 3005),
    # Qwen2Config: biases on q, k and v (not o), tied embeddings as the small Qwen2s have.
    ("qwen2_lm_tied", "Qwen2ForCausalLM", None, 2, 9, False,
     {"model_type": "qwen2", "tie_word_embeddings": True, "rope_theta": 1000000.0}, 3006),
]

# Keys of LlamaConfig that MistralConfig and Qwen2Config do not have, and theirs.
LLAMA_ONLY = ("attention_bias", "mlp_bias", "pretraining_tp")
OWN_KEYS = {"mistral": {"sliding_window": 4096},
            "qwen2": {"sliding_window": 4096, "use_sliding_window": False, "max_window_layers": 28}}


def make_config(arch, num_labels, changes):
    cfg = dict(LLAMA_BASE_CONFIG)
    model_type = changes.get("model_type", "llama")
    if model_type != "llama":
        for k in LLAMA_ONLY:
            del cfg[k]
        cfg.update(OWN_KEYS[model_type])
    cfg.update(changes)
    cfg["architectures"] = [arch]
    if num_labels is not None:
        cfg["id2label"] = {str(i): "LABEL_%d" % i for i in range(num_labels)}
        cfg["label2id"] = {"LABEL_%d" % i: i for i in range(num_labels)}
        cfg["problem_type"] = "single_label_classification"
    return cfg


def config_json(cfg):
    return json.dumps(cfg, indent=2, sort_keys=True) + "\n"


def head_dim(cfg):
    return cfg["hidden_size"] // cfg["num_attention_heads"]


def body_prefix(arch):
    return "" if arch.endswith("Model") else "model."


def model_params(arch, cfg):
    """The tensors save_pretrained writes, in HF registration order."""
    pre = body_prefix(arch)
    H, I, V, D = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], head_dim(cfg)
    NH, KVH = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    out = []

    def lin(name, n_out, n_in, bias):
        out.append((pre + name + ".weight", [n_out, n_in], "w"))
        if bias:
            out.append((pre + name + ".bias", [n_out], "b"))

    out.append((pre + "embed_tokens.weight", [V, H], "w"))
    for i in range(cfg["num_hidden_layers"]):
        L = "layers.%d." % i
        ob, mb = cfg.get("attention_bias", False), cfg.get("mlp_bias", False)
        qkv = ob or cfg["model_type"] == "qwen2"  # Qwen2Attention: bias on q, k, v; none on o
        lin(L + "self_attn.q_proj", NH * D, H, qkv)
        lin(L + "self_attn.k_proj", KVH * D, H, qkv)
        lin(L + "self_attn.v_proj", KVH * D, H, qkv)
        lin(L + "self_attn.o_proj", H, NH * D, ob)
        lin(L + "mlp.gate_proj", I, H, mb)
        lin(L + "mlp.up_proj", I, H, mb)
        lin(L + "mlp.down_proj", H, I, mb)
        out.append((pre + L + "input_layernorm.weight", [H], "norm"))
        out.append((pre + L + "post_attention_layernorm.weight", [H], "norm"))
    out.append((pre + "norm.weight", [H], "norm"))
    if arch.endswith("ForCausalLM") and not cfg["tie_word_embeddings"]:
        out.append(("lm_head.weight", [V, H], "w"))
    if arch.endswith("ForSequenceClassification"):
        out.append(("score.weight", [len(cfg["id2label"]), H], "w"))
    return out


def init_params(specs, gen):
    return golden_io.init_params(specs, gen, {"w": (0.2, 0.0), "b": (0.1, 0.0), "norm": (0.1, 1.0)})


def make_inputs(arch, cfg, batch, seq, use_mask, gen):
    V = cfg["vocab_size"]
    inputs = collections.OrderedDict()
    mask = torch.tensor(ATTN_MASK, dtype=torch.int64) if use_mask else torch.ones(batch, seq, dtype=torch.int64)
    assert not use_mask or (batch, seq) == (3, 7)
    pad = cfg.get("pad_token_id")
    ids = torch.randint(3, V, (batch, seq), generator=gen, dtype=torch.int64)  # never pad 0, bos 1 or eos 2
    ids = torch.where(mask == 1, ids, torch.full_like(ids, 0 if pad is None else pad))
    inputs["input_ids"] = ids
    if use_mask:
        inputs["attention_mask"] = mask
    if arch.endswith("ForCausalLM"):
        lab = ids.clone()
        if use_mask:
            lab[1, 5] = -100  # row 1: label 6 kept, so the loss reads logits[1, 5], a padded query
            lab[2, 3:] = -100
        inputs["labels"] = lab
    elif arch.endswith("ForSequenceClassification"):
        inputs["labels"] = torch.randint(0, len(cfg["id2label"]), (batch,), generator=gen, dtype=torch.int64)
    elif arch.endswith("Model"):
        inputs["loss_weight_hidden"] = torch.randn(batch, seq, cfg["hidden_size"], generator=gen, dtype=torch.float32)
    return inputs


# --------------------------------------------------------------------------
# Implementation 1: HF's forward, written out (float64)
# --------------------------------------------------------------------------


def rotary_tables(cfg, positions):
    """LlamaRotaryEmbedding: inv_freq = 1 / theta^(2i / D) and the angles in float32,
    emb = cat(freqs, freqs); cos / sin [B, T, D]."""
    D = head_dim(cfg)
    inv_freq = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, D, 2, dtype=torch.int64).float() / D))
    freqs = (inv_freq[None, :, None] @ positions[:, None, :].float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(F64), emb.sin().to(F64)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def linear(x, p, name):
    y = torch.matmul(x, p[name + ".weight"].t())
    return y + p[name + ".bias"] if name + ".bias" in p else y


def rms_norm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def causal_mask(mask, B, T):
    """[B, 1, T, T] additive: f32 min at future keys and at padded keys."""
    m = torch.full((T, T), F32_MIN, dtype=F64).triu(1)[None, None].expand(B, 1, T, T).clone()
    if mask is not None:
        m = m.masked_fill(mask[:, None, None, :] == 0, F32_MIN)
    return m


def llama_body(p, pre, cfg, ids, mask):
    B, T = ids.shape
    H, D = cfg["hidden_size"], head_dim(cfg)
    NH, KVH = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    eps = cfg["rms_norm_eps"]
    # nn.Embedding(vocab, hidden, padding_idx=pad_token_id): the pad row gets no gradient.
    x = F.embedding(ids, p[pre + "embed_tokens.weight"], padding_idx=cfg.get("pad_token_id"))
    cos, sin = rotary_tables(cfg, torch.arange(T)[None].expand(B, T))
    cos, sin = cos[:, None], sin[:, None]  # [B, 1, T, D]
    am = causal_mask(mask, B, T)
    for i in range(cfg["num_hidden_layers"]):
        L = pre + "layers.%d." % i
        h = rms_norm(x, p[L + "input_layernorm.weight"], eps)
        q = linear(h, p, L + "self_attn.q_proj").view(B, T, NH, D).transpose(1, 2)
        k = linear(h, p, L + "self_attn.k_proj").view(B, T, KVH, D).transpose(1, 2)
        v = linear(h, p, L + "self_attn.v_proj").view(B, T, KVH, D).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = NH // KVH  # repeat_kv
        k = k[:, :, None].expand(B, KVH, rep, T, D).reshape(B, NH, T, D)
        v = v[:, :, None].expand(B, KVH, rep, T, D).reshape(B, NH, T, D)
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(D) + am
        attn = torch.matmul(torch.softmax(scores, dim=-1), v)
        x = x + linear(attn.transpose(1, 2).reshape(B, T, H), p, L + "self_attn.o_proj")
        h = rms_norm(x, p[L + "post_attention_layernorm.weight"], eps)
        g = linear(h, p, L + "mlp.gate_proj")
        x = x + linear(g * torch.sigmoid(g) * linear(h, p, L + "mlp.up_proj"), p, L + "mlp.down_proj")
    return rms_norm(x, p[pre + "norm.weight"], eps)


def seqcls_index(cfg, ids):
    """LlamaForSequenceClassification: the token before the first pad, modulo T."""
    return (torch.eq(ids, cfg["pad_token_id"]).int().argmax(-1) - 1) % ids.shape[-1]


def lm_weight(cfg, p):
    return p["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else p["lm_head.weight"]


def heads(arch, cfg, p, x, inputs, out):
    """The head on the final hidden states x; fills out and returns the loss."""
    out["last_hidden_state"] = x
    if arch.endswith("Model"):
        return (x * inputs["loss_weight_hidden"].to(F64)).sum()
    if arch.endswith("ForCausalLM"):
        out["logits"] = logits = torch.matmul(x, lm_weight(cfg, p).t())
        V = cfg["vocab_size"]
        return ce_loss(logits[..., :-1, :].reshape(-1, V), inputs["labels"][..., 1:].reshape(-1))
    ids = inputs["input_ids"]
    token_logits = torch.matmul(x, p["score.weight"].t())
    out["logits"] = pooled = token_logits[torch.arange(ids.shape[0]), seqcls_index(cfg, ids)]
    return ce_loss(pooled, inputs["labels"])


def forward1(arch, cfg, p, inputs):
    x = llama_body(p, body_prefix(arch), cfg, inputs["input_ids"], inputs.get("attention_mask"))
    out = collections.OrderedDict()
    loss = heads(arch, cfg, p, x, inputs, out)
    return out, loss


# --------------------------------------------------------------------------
# Implementation 2: torch.nn modules, complex rotation (self-check only)
# --------------------------------------------------------------------------


def forward2(arch, cfg, p64, inputs):
    leaves = {n: nn.Parameter(t.clone()) for n, t in p64.items()}
    pre = body_prefix(arch)
    ids, mask = inputs["input_ids"], inputs.get("attention_mask")
    B, T = ids.shape
    H, D, V = cfg["hidden_size"], head_dim(cfg), cfg["vocab_size"]
    NH, KVH = cfg["num_attention_heads"], cfg["num_key_value_heads"]

    def module_linear(name, n_in, n_out):
        m = nn.Linear(n_in, n_out, bias=name + ".bias" in leaves, dtype=F64)
        m.weight = leaves[name + ".weight"]
        if m.bias is not None:
            m.bias = leaves[name + ".bias"]
        return m

    def norm(x, name):
        return leaves[name] * x / torch.sqrt((x * x).mean(-1, keepdim=True) + cfg["rms_norm_eps"])

    # The rotation as complex multiplication: (x1 + i x2) * e^{i θ}, θ = position * inv_freq (float32).
    inv_freq = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, D, 2, dtype=torch.int64).float() / D))
    angles = torch.outer(torch.arange(T).float(), inv_freq)
    rot = torch.complex(angles.cos().to(F64), angles.sin().to(F64))  # cos / sin in float32, as HF

    def rotate(x):  # [B, heads, T, D]
        z = torch.complex(x[..., :D // 2], x[..., D // 2:]) * rot
        return torch.cat((z.real, z.imag), dim=-1)

    emb = nn.Embedding(V, H, padding_idx=cfg.get("pad_token_id"), dtype=F64)
    emb.weight = leaves[pre + "embed_tokens.weight"]
    x = emb(ids)
    allowed = torch.ones(T, T, dtype=torch.bool).tril()[None, None].expand(B, 1, T, T)
    if mask is not None:
        allowed = allowed & (mask[:, None, None, :] == 1)
    for i in range(cfg["num_hidden_layers"]):
        L = pre + "layers.%d." % i
        h = norm(x, L + "input_layernorm.weight")
        q = rotate(module_linear(L + "self_attn.q_proj", H, NH * D)(h).view(B, T, NH, D).transpose(1, 2))
        k = rotate(module_linear(L + "self_attn.k_proj", H, KVH * D)(h).view(B, T, KVH, D).transpose(1, 2))
        v = module_linear(L + "self_attn.v_proj", H, KVH * D)(h).view(B, T, KVH, D).transpose(1, 2)
        k = k.repeat_interleave(NH // KVH, dim=1)
        v = v.repeat_interleave(NH // KVH, dim=1)
        scores = (q @ k.transpose(-1, -2)) * (D ** -0.5)
        probs = F.softmax(scores.masked_fill(~allowed, F32_MIN), dim=-1)
        x = x + module_linear(L + "self_attn.o_proj", NH * D, H)((probs @ v).transpose(1, 2).reshape(B, T, H))
        h = norm(x, L + "post_attention_layernorm.weight")
        gate = F.silu(module_linear(L + "mlp.gate_proj", H, cfg["intermediate_size"])(h))
        up = module_linear(L + "mlp.up_proj", H, cfg["intermediate_size"])(h)
        x = x + module_linear(L + "mlp.down_proj", cfg["intermediate_size"], H)(gate * up)
    x = norm(x, pre + "norm.weight")
    out = collections.OrderedDict()
    out["last_hidden_state"] = x
    if arch.endswith("Model"):
        loss = (x * inputs["loss_weight_hidden"].to(F64)).sum()
    elif arch.endswith("ForCausalLM"):
        w = leaves["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else leaves["lm_head.weight"]
        out["logits"] = logits = F.linear(x, w)
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, V), inputs["labels"][:, 1:].reshape(-1))
    else:
        last = (mask.sum(-1) - 1) if mask is not None else torch.full((B,), T - 1)
        out["logits"] = logits = F.linear(x, leaves["score.weight"])[torch.arange(B), last]
        loss = F.cross_entropy(logits, inputs["labels"])
    return backward(out, loss, leaves)


# --------------------------------------------------------------------------
# Checks
# --------------------------------------------------------------------------


def semantic_checks(arch, cfg, plain, inputs, outs):
    ids = inputs["input_ids"]
    B, T = ids.shape
    # Causality: changing the last token leaves every earlier position unchanged.
    alt = dict(inputs)
    ids2 = ids.clone()
    ids2[:, -1] = (ids2[:, -1] - 3 + 7) % (cfg["vocab_size"] - 3) + 3
    alt["input_ids"] = ids2
    with torch.no_grad():
        o2, _ = forward1(arch, cfg, plain, alt)
    hs = outs["last_hidden_state"]
    assert torch.equal(hs[:, :-1], o2["last_hidden_state"][:, :-1])
    assert float((hs[:, -1] - o2["last_hidden_state"][:, -1]).abs().max()) > 0
    # The rotation encodes relative positions: q·k at positions (s + t0, s + t1) is the same for any s.
    D = head_dim(cfg)
    gq = torch.Generator().manual_seed(5)
    qv, kv = torch.randn(D, generator=gq, dtype=F64), torch.randn(D, generator=gq, dtype=F64)
    dots = []
    for s in (0, 5, 20):
        cos, sin = rotary_tables(cfg, torch.tensor([[s + 1, s + 4]]))
        rq = qv * cos[0, 0] + rotate_half(qv) * sin[0, 0]
        rk = kv * cos[0, 1] + rotate_half(kv) * sin[0, 1]
        dots.append(float(rq @ rk))
    assert max(dots) - min(dots) < 1e-4 * max(1.0, abs(dots[0])), dots
    if cfg.get("pad_token_id") is not None and arch.endswith("ForCausalLM"):
        # The padding_idx row: read (row 1's padded position feeds a kept label) yet never updated.
        assert (ids == cfg["pad_token_id"]).any()
    if arch.endswith("ForSequenceClassification"):
        assert seqcls_index(cfg, ids).tolist() == (inputs["attention_mask"].sum(-1) - 1).tolist()


def build_case(name, arch, num_labels, batch, seq, use_mask, changes, seed):
    gen = torch.Generator().manual_seed(seed)
    cfg = make_config(arch, num_labels, changes)
    specs = model_params(arch, cfg)
    params = init_params(specs, gen)
    inputs = make_inputs(arch, cfg, batch, seq, use_mask, gen)

    p64 = collections.OrderedDict((n, t.to(F64).requires_grad_(True)) for n, t in params.items())
    outs, loss, grads = backward(*forward1(arch, cfg, p64, inputs), p64)

    for n, shape, _ in specs:
        assert list(params[n].shape) == shape and list(grads[n].shape) == shape, n
    H, V = cfg["hidden_size"], cfg["vocab_size"]
    want = {"last_hidden_state": [batch, seq, H]}
    if arch.endswith("ForCausalLM"):
        want["logits"] = [batch, seq, V]
    elif arch.endswith("ForSequenceClassification"):
        want["logits"] = [batch, num_labels]
    assert {k: list(v.shape) for k, v in outs.items()} == want, outs.keys()
    assert loss.dim() == 0 and math.isfinite(float(loss))
    plain = {n: t.detach() for n, t in p64.items()}
    assert_agree(name, (outs, loss, grads), forward2(arch, cfg, plain, inputs))
    for n in grads:
        # Every tensor influences the loss; even the key bias, which the rotation turns per position
        # (in BERT it adds one constant to a query's scores and gets no gradient).
        assert float(grads[n].abs().max()) > 1e-9, (name, n)
    semantic_checks(arch, cfg, plain, inputs, outs)
    finite_difference_check(lambda q: forward1(arch, cfg, q, inputs)[1], plain, grads, gen, 4)

    files = case_files(config_json(cfg), cfg, params, inputs, outs, loss, grads)
    rb = read_safetensors(files["model.safetensors"])
    assert ("lm_head.weight" in rb) == (arch.endswith("ForCausalLM") and not cfg["tie_word_embeddings"])
    assert not any("rotary" in k for k in rb)
    return files, float(loss)


def main():
    write_cases(OUT_DIR, CASES, build_case, 20)


if __name__ == "__main__":
    main()
