#!/usr/bin/python3
"""Generate golden forward/backward values for kiln's T5 models.

Rerun from the repository root with Debian's PyTorch (python3-torch, CPU):

    /usr/bin/python3 tests/goldens/gen_t5_goldens.py

`transformers` is not needed (and not used): the forward pass of Hugging Face's
T5ForConditionalGeneration and T5EncoderModel (transformers 4.40 semantics, eval
mode, "eager" attention, no cache) is re-implemented below from HF's
modeling_t5.py.  For every case it writes, under tests/goldens/t5/<case>/:

  config.json         the config as HF's save_pretrained writes it (indent 2,
                      sorted keys; T5Config attributes incl. dense_act_fn /
                      is_gated_act, decoder_start_token_id, tie_word_embeddings).
  model.safetensors   the float32 weights under HF's state_dict names, the key set
                      save_pretrained(safe_serialization=True) writes:
                      shared.weight only (encoder.embed_tokens.weight,
                      decoder.embed_tokens.weight and, when tied, lm_head.weight
                      share its storage and match _tied_weights_keys, so they are
                      dropped); lm_head.weight is written when untied.
  golden.safetensors  inputs (I64 input_ids / attention_mask / labels /
                      decoder_input_ids, F32 loss weights), outputs (logits,
                      encoder_last_hidden_state or last_hidden_state, loss []) and
                      grad.<name> = d loss / d <name> for every tensor in
                      model.safetensors.

Numerics: weights are drawn in float32 from a per-case seeded torch.Generator
(weights N(0, 0.2), relative_attention_bias N(0, 0.5), T5LayerNorm weight
1 + N(0, 0.1)); those float32 values are written, then cast to float64 and the
forward and backward are computed in float64; results are stored rounded to
float32.  The output is byte-identical on rerun (fixed seeds, one thread,
deterministic algorithms).

Self-checks (the script asserts them before writing anything):
  * a second, independent implementation (one-hot embedding matmuls with
    separate copies of every tied use, relative buckets from a scalar Python
    function, F.multi_head_attention_forward with the query weight pre-scaled by
    sqrt(d_kv) to undo its 1/sqrt(d) and the position bias + masks as a float
    attn_mask, F.gelu(approximate="tanh"), F.cross_entropy) must agree on every
    output, the loss and every gradient (relative 1e-9);
  * _relative_position_bucket against a hand-computed table (both directions);
  * _shift_right against hand-written decoder_input_ids;
  * central finite differences (float64) on 4 parameter entries per case (one
    always in a relative_attention_bias);
  * causality (changing the last decoder input leaves earlier logits unchanged),
    encoder padding (changing padded source ids changes no logit and no real
    encoder position), the LM loss recomputed token by token, zero gradient for
    relative-bias buckets no query/key pair reaches, shapes, and a read-back of
    every file.
"""

import collections
import json
import math
import os
import sys

import numpy as np
import torch

import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden_io  # noqa: E402
from golden_io import assert_agree, backward, case_files, check_entry, setup_torch, write_cases  # noqa: E402

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT_DIR = os.path.join(REPO_ROOT, "tests", "goldens", "t5")

setup_torch()

F64 = torch.float64
# HF: get_extended_attention_mask / invert_attention_mask -> (1 - mask) * torch.finfo(dtype).min,
# dtype = the model's float32.  The goldens use the float32 minimum although computed in float64.
F32_MIN = torch.finfo(torch.float32).min

# --------------------------------------------------------------------------
# Configs
# --------------------------------------------------------------------------

T5_BASE_CONFIG = {
    "classifier_dropout": 0.0,
    "d_ff": 37,
    "d_kv": 8,
    "d_model": 32,
    "decoder_start_token_id": 0,
    "dropout_rate": 0.1,
    "eos_token_id": 1,
    "initializer_factor": 1.0,
    "is_encoder_decoder": True,
    "layer_norm_epsilon": 1e-06,
    "model_type": "t5",
    "num_decoder_layers": 2,
    "num_heads": 4,
    "num_layers": 2,
    "pad_token_id": 0,
    "relative_attention_max_distance": 20,
    "relative_attention_num_buckets": 8,
    "torch_dtype": "float32",
    "transformers_version": "4.40.0",
    "use_cache": True,
    "vocab_size": 99,
}

# name, architecture, feed_forward_proj, tie_word_embeddings, source mask rows, target length, seed
#   (target length: labels [B, T]; None for the encoder-only model)
CASES = [
    ("t5_relu_tied", "T5ForConditionalGeneration", "relu", True,
     [[1] * 7, [1] * 5 + [0] * 2], 5, 3001),
    ("t5_gated_untied", "T5ForConditionalGeneration", "gated-gelu", False,
     [[1] * 4 + [0] * 3, [1] * 7], 5, 3002),
    # Encoder-only: source length 12 so that |relative position| >= 7 occurs and the
    # logarithmic bucket 3 / 7 (bidirectional, 8 buckets, max_distance 20) is reached.
    ("t5_encoder", "T5EncoderModel", "gated-gelu", False,
     [[1] * 12, [1] * 9 + [0] * 3], None, 3003),
]


def make_config(arch, ffp, tie):
    cfg = dict(T5_BASE_CONFIG)
    cfg["architectures"] = [arch]
    cfg["feed_forward_proj"] = ffp
    act_info = ffp.split("-")
    cfg["dense_act_fn"] = "gelu_new" if ffp == "gated-gelu" else act_info[-1]  # T5Config.__init__
    cfg["is_gated_act"] = act_info[0] == "gated"
    # PretrainedConfig default is True; save_pretrained's diff only writes it when False.
    # Written explicitly in both cases here; a loader must default to True when absent.
    cfg["tie_word_embeddings"] = tie
    return cfg


def config_json(cfg):
    # PretrainedConfig.to_json_string: json.dumps(d, indent=2, sort_keys=True) + "\n"
    return json.dumps(cfg, indent=2, sort_keys=True) + "\n"


# --------------------------------------------------------------------------
# Parameters (HF state_dict names, registration order; kinds drive the init)
# --------------------------------------------------------------------------


def stack_params(prefix, cfg, is_decoder):
    D, I = cfg["d_model"], cfg["d_ff"]
    inner = cfg["num_heads"] * cfg["d_kv"]
    nb, nh = cfg["relative_attention_num_buckets"], cfg["num_heads"]
    n_layers = cfg["num_decoder_layers"] if is_decoder else cfg["num_layers"]
    out = []

    def attn(name, rel):
        out.append((name + ".q.weight", [inner, D], "w"))
        out.append((name + ".k.weight", [inner, D], "w"))
        out.append((name + ".v.weight", [inner, D], "w"))
        out.append((name + ".o.weight", [D, inner], "w"))
        if rel:
            out.append((name + ".relative_attention_bias.weight", [nb, nh], "rel"))

    for i in range(n_layers):
        L = prefix + "block.%d.layer." % i
        attn(L + "0.SelfAttention", i == 0)
        out.append((L + "0.layer_norm.weight", [D], "lnw"))
        f = 1
        if is_decoder:
            attn(L + "1.EncDecAttention", False)  # never has a relative bias
            out.append((L + "1.layer_norm.weight", [D], "lnw"))
            f = 2
        FF = L + "%d.DenseReluDense." % f
        if cfg["is_gated_act"]:
            out.append((FF + "wi_0.weight", [I, D], "w"))
            out.append((FF + "wi_1.weight", [I, D], "w"))
        else:
            out.append((FF + "wi.weight", [I, D], "w"))
        out.append((FF + "wo.weight", [D, I], "w"))
        out.append((L + "%d.layer_norm.weight" % f, [D], "lnw"))
    out.append((prefix + "final_layer_norm.weight", [D], "lnw"))
    return out


def model_params(arch, cfg):
    """The tensors save_pretrained writes, in HF registration order."""
    D, V = cfg["d_model"], cfg["vocab_size"]
    out = [("shared.weight", [V, D], "w")]
    # encoder.embed_tokens.weight / decoder.embed_tokens.weight are the same module as
    # `shared` (state_dict entries sharing storage, matching _tied_weights_keys): dropped.
    out += stack_params("encoder.", cfg, False)
    if arch == "T5EncoderModel":
        return out
    if arch != "T5ForConditionalGeneration":
        raise ValueError(arch)
    out += stack_params("decoder.", cfg, True)
    if not cfg["tie_word_embeddings"]:
        out.append(("lm_head.weight", [V, D], "w"))  # tied: same storage as shared, dropped
    return out


# Weights N(0, 0.2), the relative-attention bias table N(0, 0.5), RMSNorm weights 1 + N(0, 0.1).
T5_KINDS = {"w": (0.2, 0.0), "rel": (0.5, 0.0), "lnw": (0.1, 1.0)}


def init_params(specs, gen):
    return golden_io.init_params(specs, gen, T5_KINDS)


# --------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------


def shift_right(labels, cfg):
    """T5PreTrainedModel._shift_right."""
    shifted = labels.new_zeros(labels.shape)
    shifted[..., 1:] = labels[..., :-1].clone()
    shifted[..., 0] = cfg["decoder_start_token_id"]
    shifted.masked_fill_(shifted == -100, cfg["pad_token_id"])
    return shifted


def make_inputs(arch, cfg, mask_rows, n_labels, gen):
    V, D = cfg["vocab_size"], cfg["d_model"]
    pad, eos = cfg["pad_token_id"], cfg["eos_token_id"]
    mask = torch.tensor(mask_rows, dtype=torch.int64)
    B, S = mask.shape
    ids = torch.randint(2, V, (B, S), generator=gen, dtype=torch.int64)  # never pad (0) / eos (1)
    for b in range(B):
        ids[b, int(mask[b].sum()) - 1] = eos  # "... </s>" then pads
    ids = torch.where(mask == 1, ids, torch.full_like(ids, pad))
    inputs = collections.OrderedDict()
    inputs["input_ids"] = ids
    inputs["attention_mask"] = mask
    if arch == "T5EncoderModel":
        inputs["loss_weight_hidden"] = torch.randn(B, S, D, generator=gen, dtype=torch.float32)
        return inputs
    T = n_labels
    lab = torch.randint(2, V, (B, T), generator=gen, dtype=torch.int64)
    lab[0, T - 1] = eos                  # row 0: 5 real labels, eos last
    lab[1, 2] = eos                      # row 1: 3 real labels, then -100, -100
    lab[1, 3:] = -100
    inputs["labels"] = lab
    inputs["decoder_input_ids"] = shift_right(lab, cfg)
    return inputs


# --------------------------------------------------------------------------
# Implementation 1: HF's forward, written out (float64)
# --------------------------------------------------------------------------


def relative_position_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    """T5Attention._relative_position_bucket, verbatim semantics (float32 log, truncation)."""
    relative_buckets = 0
    if bidirectional:
        num_buckets //= 2
        relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    relative_position_if_large = max_exact + (
        torch.log(relative_position.float() / max_exact)  # float32 on purpose (HF)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).to(torch.long)
    relative_position_if_large = torch.min(
        relative_position_if_large, torch.full_like(relative_position_if_large, num_buckets - 1))
    relative_buckets += torch.where(is_small, relative_position, relative_position_if_large)
    return relative_buckets


def compute_bias(table, cfg, q_len, k_len, is_decoder):
    """T5Attention.compute_bias -> [1, n_heads, q_len, k_len]."""
    context_position = torch.arange(q_len, dtype=torch.long)[:, None]
    memory_position = torch.arange(k_len, dtype=torch.long)[None, :]
    rel = memory_position - context_position  # key - query
    bucket = relative_position_bucket(rel, bidirectional=not is_decoder,
                                      num_buckets=cfg["relative_attention_num_buckets"],
                                      max_distance=cfg["relative_attention_max_distance"])
    values = F.embedding(bucket, table)  # [q, k, heads]
    return values.permute([2, 0, 1]).unsqueeze(0)


def rms_norm(x, w, eps):  # T5LayerNorm: no mean subtraction, no bias
    variance = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(variance + eps))


def gelu_new(x):  # ACT2FN["gelu_new"]: NewGELUActivation (tanh approximation)
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


ACT = {"relu": torch.relu, "gelu_new": gelu_new}


def lin(x, w):  # nn.Linear(bias=False)
    return torch.matmul(x, w.t())


def t5_attention(p, name, cfg, h, kv, position_bias):
    """T5Attention.forward (no cache): no 1/sqrt(d) scaling; scores += position_bias."""
    B, Tq = h.shape[:2]
    nh, dk = cfg["num_heads"], cfg["d_kv"]

    def shape(t):
        return t.view(B, -1, nh, dk).transpose(1, 2)

    q = shape(lin(h, p[name + ".q.weight"]))
    k = shape(lin(kv, p[name + ".k.weight"]))
    v = shape(lin(kv, p[name + ".v.weight"]))
    scores = torch.matmul(q, k.transpose(3, 2))
    scores = scores + position_bias
    w = torch.softmax(scores, dim=-1)
    a = torch.matmul(w, v).transpose(1, 2).contiguous().view(B, -1, nh * dk)
    return lin(a, p[name + ".o.weight"])


def t5_ff(p, FF, cfg, h):
    act = ACT[cfg["dense_act_fn"]]
    if cfg["is_gated_act"]:  # T5DenseGatedActDense
        return lin(act(lin(h, p[FF + "wi_0.weight"])) * lin(h, p[FF + "wi_1.weight"]), p[FF + "wo.weight"])
    return lin(act(lin(h, p[FF + "wi.weight"])), p[FF + "wo.weight"])  # T5DenseActDense


def t5_stack(p, prefix, cfg, ids, mask, enc_h=None, enc_mask=None):
    """T5Stack.forward (eval): returns final_layer_norm output."""
    is_decoder = enc_h is not None
    eps = cfg["layer_norm_epsilon"]
    B, T = ids.shape
    x = F.embedding(ids, p["shared.weight"])  # embed_tokens is `shared` (no padding_idx)
    if is_decoder:
        # get_extended_attention_mask for a decoder: causal * mask, then (1 - m) * min
        causal = (torch.arange(T)[None, :] <= torch.arange(T)[:, None]).to(F64)  # [q, k]
        ext = causal[None, None, :, :] * mask[:, None, None, :].to(F64)
        ext = (1.0 - ext) * F32_MIN
        enc_ext = (1.0 - enc_mask[:, None, None, :].to(F64)) * F32_MIN  # invert_attention_mask
    else:
        ext = (1.0 - mask[:, None, None, :].to(F64)) * F32_MIN
    n_layers = cfg["num_decoder_layers"] if is_decoder else cfg["num_layers"]
    position_bias = None
    ed_bias = None
    for i in range(n_layers):
        L = prefix + "block.%d.layer." % i
        if position_bias is None:  # first layer computes it (incl. the mask); all layers share it
            table = p[L + "0.SelfAttention.relative_attention_bias.weight"]
            position_bias = compute_bias(table, cfg, T, T, is_decoder) + ext
        h = rms_norm(x, p[L + "0.layer_norm.weight"], eps)
        x = x + t5_attention(p, L + "0.SelfAttention", cfg, h, h, position_bias)
        f = 1
        if is_decoder:
            if ed_bias is None:  # no relative bias: zeros + encoder mask
                S = enc_h.shape[1]
                ed_bias = torch.zeros(1, cfg["num_heads"], T, S, dtype=F64) + enc_ext
            h = rms_norm(x, p[L + "1.layer_norm.weight"], eps)
            x = x + t5_attention(p, L + "1.EncDecAttention", cfg, h, enc_h, ed_bias)
            f = 2
        h = rms_norm(x, p[L + "%d.layer_norm.weight" % f], eps)
        x = x + t5_ff(p, L + "%d.DenseReluDense." % f, cfg, h)
    return rms_norm(x, p[prefix + "final_layer_norm.weight"], eps)


def ce_loss(logits, labels, ignore_index=-100):
    """CrossEntropyLoss(ignore_index) with mean reduction over non-ignored rows."""
    lsm = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
    keep = labels != ignore_index
    picked = lsm[keep].gather(1, labels[keep].unsqueeze(1)).squeeze(1)
    return -picked.sum() / keep.sum()


def forward1(arch, cfg, p, inputs):
    """Returns (outputs dict, loss).  p: name -> float64 tensor (saved names)."""
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    enc = t5_stack(p, "encoder.", cfg, ids, mask)
    out = collections.OrderedDict()
    if arch == "T5EncoderModel":
        out["last_hidden_state"] = enc
        return out, (enc * inputs["loss_weight_hidden"].to(F64)).sum()
    labels = inputs["labels"]
    dec_ids = shift_right(labels, cfg)
    dmask = torch.ones(dec_ids.shape, dtype=torch.int64)  # decoder_attention_mask None -> ones
    seq = t5_stack(p, "decoder.", cfg, dec_ids, dmask, enc_h=enc, enc_mask=mask)
    if cfg["tie_word_embeddings"]:
        seq = seq * (cfg["d_model"] ** -0.5)  # rescale before the tied lm_head
        logits = lin(seq, p["shared.weight"])
    else:
        logits = lin(seq, p["lm_head.weight"])
    out["logits"] = logits
    out["encoder_last_hidden_state"] = enc
    V = cfg["vocab_size"]
    return out, ce_loss(logits.view(-1, V), labels.view(-1))


# --------------------------------------------------------------------------
# Implementation 2: independent formulation (self-check only)
# --------------------------------------------------------------------------


def bucket_scalar(rel, bidirectional, num_buckets, max_distance):
    """Relative bucket for one int, written from the Mesh-TF description (float32 log)."""
    b = 0
    n = num_buckets
    if bidirectional:
        n //= 2
        if rel > 0:
            b = n
        d = abs(rel)
    else:
        d = max(-rel, 0)
    me = n // 2
    if d < me:
        return b + d
    lg = float(np.float32(np.log(np.float32(d) / np.float32(me))))  # torch.log on a float32 tensor
    v = np.float32(np.float32(lg / math.log(max_distance / me)) * np.float32(n - me))
    return b + min(me + int(v), n - 1)


def forward2(arch, cfg, p64, inputs):
    """Returns (outputs, loss, grads by saved name)."""
    leaves = {n: t.clone().requires_grad_(True) for n, t in p64.items()}
    V, D, nh, dk = cfg["vocab_size"], cfg["d_model"], cfg["num_heads"], cfg["d_kv"]
    eps = cfg["layer_norm_epsilon"]
    nb, md = cfg["relative_attention_num_buckets"], cfg["relative_attention_max_distance"]
    # every use of `shared` gets its own copy; their gradients are summed at the end
    copies = {k: leaves["shared.weight"].detach().clone().requires_grad_(True)
              for k in ("enc", "dec", "head")}
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    B, S = ids.shape

    def norm(x, w):
        return x / torch.sqrt((x * x).sum(-1, keepdim=True) / x.shape[-1] + eps) * w

    def rel_bias(table, T, bidir):
        idx = torch.tensor([[bucket_scalar(j - i, bidir, nb, md) for j in range(T)] for i in range(T)])
        oh = F.one_hot(idx, nb).to(F64)  # [T, T, nb]
        return torch.einsum("qkb,bh->hqk", oh, table)  # [nh, T, T]

    def mha(name, h, kv, bias):  # bias [B, nh, Tq, Tk] (relative bias + masks)
        Tq, Tk = h.shape[1], kv.shape[1]
        o, _ = F.multi_head_attention_forward(
            h.transpose(0, 1), kv.transpose(0, 1), kv.transpose(0, 1), D, nh,
            None, None, None, None, False, 0.0, leaves[name + ".o.weight"], None,
            training=False, need_weights=False, attn_mask=bias.reshape(B * nh, Tq, Tk),
            use_separate_proj_weight=True,
            q_proj_weight=leaves[name + ".q.weight"] * math.sqrt(dk),  # undo MHA's 1/sqrt(d)
            k_proj_weight=leaves[name + ".k.weight"], v_proj_weight=leaves[name + ".v.weight"])
        return o.transpose(0, 1)

    def ff(FF, h):
        if cfg["is_gated_act"]:
            g = F.gelu(F.linear(h, leaves[FF + "wi_0.weight"]), approximate="tanh")
            return F.linear(g * F.linear(h, leaves[FF + "wi_1.weight"]), leaves[FF + "wo.weight"])
        return F.linear(F.relu(F.linear(h, leaves[FF + "wi.weight"])), leaves[FF + "wo.weight"])

    # encoder
    x = F.one_hot(ids, V).to(F64) @ copies["enc"]
    keymask = torch.where(mask == 1, 0.0, F32_MIN).to(F64)[:, None, None, :]  # [B,1,1,S]
    eb = rel_bias(leaves["encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"], S, True)
    for i in range(cfg["num_layers"]):
        L = "encoder.block.%d.layer." % i
        x = x + mha(L + "0.SelfAttention", norm(x, leaves[L + "0.layer_norm.weight"]),
                    norm(x, leaves[L + "0.layer_norm.weight"]), eb[None] + keymask)
        x = x + ff(L + "1.DenseReluDense.", norm(x, leaves[L + "1.layer_norm.weight"]))
    enc = norm(x, leaves["encoder.final_layer_norm.weight"])
    out = {}
    if arch == "T5EncoderModel":
        out["last_hidden_state"] = enc
        loss = (enc * inputs["loss_weight_hidden"].to(F64)).sum()
    else:
        labels = inputs["labels"]
        T = labels.shape[1]
        dec_ids = torch.zeros_like(labels)
        for b in range(B):
            for t in range(T):
                v = cfg["decoder_start_token_id"] if t == 0 else int(labels[b, t - 1])
                dec_ids[b, t] = cfg["pad_token_id"] if v == -100 else v
        y = F.one_hot(dec_ids, V).to(F64) @ copies["dec"]
        causal = torch.tensor([[0.0 if j <= i else F32_MIN for j in range(T)] for i in range(T)], dtype=F64)
        db = rel_bias(leaves["decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"], T, False)
        for i in range(cfg["num_decoder_layers"]):
            L = "decoder.block.%d.layer." % i
            hn = norm(y, leaves[L + "0.layer_norm.weight"])
            y = y + mha(L + "0.SelfAttention", hn, hn, (db + causal)[None].expand(B, nh, T, T))
            y = y + mha(L + "1.EncDecAttention", norm(y, leaves[L + "1.layer_norm.weight"]), enc,
                        keymask.expand(B, nh, T, S))
            y = y + ff(L + "2.DenseReluDense.", norm(y, leaves[L + "2.layer_norm.weight"]))
        y = norm(y, leaves["decoder.final_layer_norm.weight"])
        if cfg["tie_word_embeddings"]:
            logits = F.linear(y / math.sqrt(D), copies["head"])
        else:
            logits = F.linear(y, leaves["lm_head.weight"])
        out["logits"] = logits
        out["encoder_last_hidden_state"] = enc
        loss = F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), ignore_index=-100)
    loss.backward()
    grads = {}
    for n, t in leaves.items():
        grads[n] = t.grad.clone() if t.grad is not None else torch.zeros_like(t)
    grads["shared.weight"] = sum(c.grad if c.grad is not None else torch.zeros_like(c)
                                 for c in copies.values())
    return {k: v.detach() for k, v in out.items()}, loss.detach(), grads


# --------------------------------------------------------------------------
# safetensors (same writer / reader as gen_bert_goldens.py)
# --------------------------------------------------------------------------



def check_relative_position_bucket():
    """_relative_position_bucket against values worked out by hand for this config.

    Bidirectional (encoder), 8 buckets -> 4 per direction, max_exact 2:
      |n| < 2 exact; else 2 + floor(ln(|n|/2) / ln(20/2) * 2), capped at 3;
      ln(|n|/2)/ln(10)*2 crosses 1 at |n| = 2*sqrt(10) = 6.32, so |n| 2..6 -> 2, >= 7 -> 3;
      keys after the query (n > 0) add 4.
    Causal (decoder), 8 buckets, max_exact 4: d = max(-n, 0); d < 4 exact; else
      4 + floor(ln(d/4) / ln(5) * 4), capped at 7: crosses 1, 2, 3 at d = 4*5**0.25 = 5.98,
      4*5**0.5 = 8.94, 4*5**0.75 = 13.37, so d 4..5 -> 4, 6..8 -> 5, 9..13 -> 6, >= 14 -> 7.
    """
    rel = list(range(-25, 26))
    exp_bi, exp_causal = [], []
    for n in rel:
        d = abs(n)
        b = d if d < 2 else (2 if d <= 6 else 3)
        exp_bi.append(b + (4 if n > 0 else 0))
        d = max(-n, 0)
        exp_causal.append(d if d < 4 else 4 if d <= 5 else 5 if d <= 8 else 6 if d <= 13 else 7)
    t = torch.tensor(rel, dtype=torch.long)
    got_bi = relative_position_bucket(t, True, 8, 20).tolist()
    got_c = relative_position_bucket(t, False, 8, 20).tolist()
    assert got_bi == exp_bi, (got_bi, exp_bi)
    assert got_c == exp_causal, (got_c, exp_causal)
    assert [bucket_scalar(n, True, 8, 20) for n in rel] == exp_bi
    assert [bucket_scalar(n, False, 8, 20) for n in rel] == exp_causal
    # t5-small defaults (32 buckets, max_distance 128), a few hand values:
    # bidirectional 16/direction, max_exact 8: 8 + floor(ln(n/8)/ln(16)*8) -> n=12: 8+1=9 (ln1.5/ln16*8=1.17),
    # n=128: 8+8=16 -> capped 15; n=-20: 8+floor(2.64)=10; causal max_exact 16: d=100 -> 16+floor(ln(6.25)/ln(8)*16)=16+14=30
    t = torch.tensor([12, 128, -20, 0, 3, -3])
    assert relative_position_bucket(t, True, 32, 128).tolist() == [16 + 9, 16 + 15, 10, 0, 16 + 3, 3]
    assert relative_position_bucket(torch.tensor([-100, -15, 5]), False, 32, 128).tolist() == [30, 15, 0]


def finite_difference_check(arch, cfg, p64, inputs, grads, gen):
    names = list(p64.keys())
    rel_names = [n for n in names if n.endswith("relative_attention_bias.weight")]
    picks = []
    # one entry of a relative_attention_bias with a non-zero gradient, then 3 random entries
    rn = rel_names[int(torch.randint(0, len(rel_names), (1,), generator=gen))]
    nz = torch.nonzero(grads[rn].reshape(-1)).reshape(-1)
    picks.append((rn, int(nz[int(torch.randint(0, len(nz), (1,), generator=gen))])))
    while len(picks) < 4:
        name = names[int(torch.randint(0, len(names), (1,), generator=gen))]
        picks.append((name, int(torch.randint(0, p64[name].numel(), (1,), generator=gen))))
    for name, idx in picks:
        check_entry(lambda q: forward1(arch, cfg, q, inputs)[1], p64, grads, name, idx)


def used_buckets(cfg, T, bidirectional):
    rel = torch.arange(T)[None, :] - torch.arange(T)[:, None]
    return set(relative_position_bucket(rel, bidirectional, cfg["relative_attention_num_buckets"],
                                        cfg["relative_attention_max_distance"]).reshape(-1).tolist())


def semantic_checks(arch, cfg, plain, inputs, outs, loss, grads):
    nb = cfg["relative_attention_num_buckets"]
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    S = ids.shape[1]
    # buckets never reached get exactly zero gradient, the others a non-zero one
    stacks = [("encoder.", S, True)]
    if arch != "T5EncoderModel":
        stacks.append(("decoder.", inputs["labels"].shape[1], False))
    for pre, T, bidir in stacks:
        used = used_buckets(cfg, T, bidir)
        g = grads[pre + "block.0.layer.0.SelfAttention.relative_attention_bias.weight"]
        for b in range(nb):
            assert (float(g[b].abs().max()) > 0) == (b in used), (pre, b, used)
    # padded source ids change neither any logit nor any real encoder position
    ids2 = ids.clone()
    ids2[mask == 0] = 57
    assert bool((ids2 != ids).any())
    inp2 = dict(inputs)
    inp2["input_ids"] = ids2
    with torch.no_grad():
        o2, _ = forward1(arch, cfg, plain, inp2)
    key = "last_hidden_state" if arch == "T5EncoderModel" else "encoder_last_hidden_state"
    real = mask == 1
    assert torch.equal(o2[key][real], outs[key][real])
    assert not torch.equal(o2[key][~real], outs[key][~real])  # padded queries still computed
    if arch == "T5EncoderModel":
        return
    labels = inputs["labels"]
    assert torch.equal(shift_right(labels, cfg), inputs["decoder_input_ids"])
    assert torch.equal(o2["logits"], outs["logits"])
    # causality: label t is decoder input t+1, so changing labels[0, 1] leaves logits[:, :2]
    # and the other row unchanged and changes logits[0, 2:]
    lab3 = labels.clone()
    lab3[0, 1] = 77 if int(labels[0, 1]) != 77 else 78
    inp3 = dict(inputs)
    inp3["labels"] = lab3
    with torch.no_grad():
        o3, _ = forward1(arch, cfg, plain, inp3)
    assert torch.equal(o3["logits"][:, :2], outs["logits"][:, :2])
    assert torch.equal(o3["logits"][1], outs["logits"][1])
    assert not torch.equal(o3["logits"][0, 2:], outs["logits"][0, 2:])
    # loss token by token
    tot, cnt = 0.0, 0
    lg = outs["logits"]
    for b in range(labels.shape[0]):
        for t in range(labels.shape[1]):
            y = int(labels[b, t])
            if y == -100:
                continue
            tot += -float(torch.log_softmax(lg[b, t], -1)[y])
            cnt += 1
    assert abs(tot / cnt - float(loss)) <= 1e-12 * max(1.0, abs(float(loss)))


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------


def expected_shapes(arch, cfg, inputs):
    B, S = inputs["input_ids"].shape
    D, V = cfg["d_model"], cfg["vocab_size"]
    if arch == "T5EncoderModel":
        return {"last_hidden_state": [B, S, D]}
    return {"logits": [B, inputs["labels"].shape[1], V], "encoder_last_hidden_state": [B, S, D]}


def build_case(name, arch, ffp, tie, mask_rows, n_labels, seed):
    gen = torch.Generator().manual_seed(seed)
    cfg = make_config(arch, ffp, tie)
    specs = model_params(arch, cfg)
    params = init_params(specs, gen)
    inputs = make_inputs(arch, cfg, mask_rows, n_labels, gen)

    p64 = collections.OrderedDict((n, t.to(F64).requires_grad_(True)) for n, t in params.items())
    outs, loss, grads = backward(*forward1(arch, cfg, p64, inputs), p64)

    # --- checks ---
    for n, shape, _ in specs:
        assert list(params[n].shape) == shape and list(grads[n].shape) == shape, n
    exp = expected_shapes(arch, cfg, inputs)
    assert sorted(exp) == sorted(outs), (sorted(exp), sorted(outs))
    for k, s in exp.items():
        assert list(outs[k].shape) == s, (k, outs[k].shape, s)
    assert loss.dim() == 0 and math.isfinite(float(loss))
    plain = collections.OrderedDict((n, t.detach()) for n, t in p64.items())
    outs2, loss2, grads2 = forward2(arch, cfg, plain, inputs)
    assert_agree(name, (outs, loss, grads), (outs2, loss2, grads2))
    for n in grads:
        assert float(grads[n].abs().max()) > 0, (name, n)  # every tensor influences the loss
    semantic_checks(arch, cfg, plain, inputs, outs, loss, grads)
    finite_difference_check(arch, cfg, plain, inputs, grads, gen)

    files = case_files(config_json(cfg), cfg, params, inputs, outs, loss, grads)
    return files, float(loss)


def main():
    check_relative_position_bucket()
    write_cases(OUT_DIR, CASES, build_case, 18)


if __name__ == "__main__":
    main()
