#!/usr/bin/python3
"""Generate golden forward/backward values for kiln's BERT / RoBERTa / DistilBERT models.

Rerun from the repository root with Debian's PyTorch (python3-torch, CPU):

    /usr/bin/python3 tests/goldens/gen_bert_goldens.py

`transformers` is not needed (and not used): the forward pass of Hugging Face's
BertModel / BertFor{SequenceClassification,TokenClassification,QuestionAnswering,
MaskedLM,MultipleChoice}, RobertaFor{SequenceClassification,MaskedLM,
MultipleChoice} and DistilBertModel / DistilBertFor{SequenceClassification,
TokenClassification,QuestionAnswering,MaskedLM,MultipleChoice} (transformers 4.40
semantics, eval mode, "eager" attention) is re-implemented below from HF's
modelling code.  For every case it writes, under tests/goldens/bert/<case>/:

  config.json         the config as HF's save_pretrained writes it (indent 2,
                      sorted keys), plus id2label/label2id for heads that use
                      num_labels.
  model.safetensors   the float32 weights, HF parameter names, the key set that
                      save_pretrained(safe_serialization=True) writes (tied decoder
                      weight/bias dropped, no position_ids buffer).
  golden.safetensors  inputs (I64 ids/masks/labels, F32 float labels and loss
                      weights), outputs (logits ..., last_hidden_state, loss []) and
                      grad.<name> = d loss / d <name> for every tensor in
                      model.safetensors.

Numerics: weights are drawn in float32 from a per-case seeded torch.Generator
(weights N(0, 0.2), biases N(0, 0.1), LayerNorm weight 1 + N(0, 0.1), LayerNorm
bias N(0, 0.1)); those float32 values are written, then cast to float64 and the
forward and backward are computed in float64; results are stored rounded to
float32.  The output is byte-identical on rerun (fixed seeds, one thread,
deterministic algorithms).

Self-checks (the script asserts them before writing anything):
  * a second, independent implementation built from torch.nn modules
    (nn.Embedding, nn.LayerNorm, nn.TransformerEncoderLayer with
    key_padding_mask, nn.Linear, F.cross_entropy / mse_loss /
    binary_cross_entropy_with_logits) must agree on every output, the loss and
    every gradient (relative 1e-9);
  * central finite differences (float64) on 3 random parameter entries per case;
  * shapes of every tensor, the gradient of padding_idx embedding rows (zero
    unless the row also feeds a tied decoder), and a read-back of every file.
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
from golden_io import (assert_agree, backward, case_files, check_entry, init_params, setup_torch,  # noqa: E402
                       write_cases)

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT_DIR = os.path.join(REPO_ROOT, "tests", "goldens", "bert")

setup_torch()

F64 = torch.float64
F32_MIN = torch.finfo(torch.float32).min  # HF: (1 - mask) * torch.finfo(dtype).min
BATCH, SEQ = 3, 7
ATTN_MASK = [[1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0, 0], [1, 1, 1, 0, 0, 0, 0]]
TOKEN_TYPES = [[0, 0, 0, 1, 1, 1, 1], [0, 0, 0, 1, 1, 0, 0], [0, 0, 1, 0, 0, 0, 0]]
# Multiple choice: MC_BATCH questions of NUM_CHOICES choices each, [MC_BATCH, NUM_CHOICES, SEQ]; the
# model reads them as MC_BATCH * NUM_CHOICES rows (the masks above, then rotated by one).
MC_BATCH, NUM_CHOICES = 2, 3

# --------------------------------------------------------------------------
# Configs
# --------------------------------------------------------------------------

BERT_BASE_CONFIG = {
    "attention_probs_dropout_prob": 0.1,
    "classifier_dropout": None,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "hidden_size": 32,
    "initializer_range": 0.02,
    "intermediate_size": 37,
    "layer_norm_eps": 1e-12,
    "max_position_embeddings": 64,
    "model_type": "bert",
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "pad_token_id": 0,
    "position_embedding_type": "absolute",
    "torch_dtype": "float32",
    "transformers_version": "4.40.0",
    "type_vocab_size": 2,
    "use_cache": True,
    "vocab_size": 99,
}

ROBERTA_BASE_CONFIG = dict(BERT_BASE_CONFIG)
ROBERTA_BASE_CONFIG.update({
    "model_type": "roberta",
    "bos_token_id": 0,
    "eos_token_id": 2,
    "pad_token_id": 1,
    "type_vocab_size": 1,
    "layer_norm_eps": 1e-05,
    "max_position_embeddings": 66,
})

# DistilBertConfig.to_dict: its own names (dim, n_layers, ...), no token types.
DISTILBERT_BASE_CONFIG = {
    "activation": "gelu",
    "attention_dropout": 0.1,
    "dim": 32,
    "dropout": 0.1,
    "hidden_dim": 37,
    "initializer_range": 0.02,
    "max_position_embeddings": 64,
    "model_type": "distilbert",
    "n_heads": 4,
    "n_layers": 2,
    "pad_token_id": 0,
    "qa_dropout": 0.1,
    "seq_classif_dropout": 0.2,
    "sinusoidal_pos_embds": False,
    "torch_dtype": "float32",
    "transformers_version": "4.40.0",
    "vocab_size": 99,
}


def distil(arch):
    return arch.startswith("DistilBert")


def dims(cfg):
    """The sizes under BERT's names, whichever family the config is."""
    if cfg["model_type"] != "distilbert":
        return cfg
    return {"hidden_size": cfg["dim"], "intermediate_size": cfg["hidden_dim"], "num_attention_heads": cfg["n_heads"],
            "num_hidden_layers": cfg["n_layers"], "layer_norm_eps": 1e-12, "hidden_act": cfg["activation"],
            "vocab_size": cfg["vocab_size"], "max_position_embeddings": cfg["max_position_embeddings"],
            "pad_token_id": cfg["pad_token_id"], "model_type": "distilbert"}


# name, architecture, num_labels (None: head without num_labels), problem_type,
# hidden_act, seed
CASES = [
    ("bert_model", "BertModel", None, None, "gelu", 1001),
    ("bert_seqcls", "BertForSequenceClassification", 3, "single_label_classification", "gelu", 1002),
    ("bert_regression", "BertForSequenceClassification", 1, "regression", "gelu", 1003),
    ("bert_multilabel", "BertForSequenceClassification", 4, "multi_label_classification", "gelu", 1004),
    ("bert_tokcls", "BertForTokenClassification", 5, None, "gelu", 1005),
    ("bert_qa", "BertForQuestionAnswering", 2, None, "gelu", 1006),
    ("bert_mlm", "BertForMaskedLM", None, None, "gelu", 1007),
    ("roberta_seqcls", "RobertaForSequenceClassification", 2, "single_label_classification", "gelu", 1008),
    ("roberta_mlm", "RobertaForMaskedLM", None, None, "gelu", 1009),
    ("bert_seqcls_gelu_new", "BertForSequenceClassification", 3, "single_label_classification", "gelu_new", 1010),
    ("bert_mc", "BertForMultipleChoice", None, None, "gelu", 1011),
    ("roberta_mc", "RobertaForMultipleChoice", None, None, "gelu", 1012),
    ("distilbert_model", "DistilBertModel", None, None, "gelu", 1013),
    ("distilbert_seqcls", "DistilBertForSequenceClassification", 3, "single_label_classification", "gelu", 1014),
    ("distilbert_tokcls", "DistilBertForTokenClassification", 5, None, "gelu", 1015),
    ("distilbert_qa", "DistilBertForQuestionAnswering", 2, None, "gelu", 1016),
    ("distilbert_mlm", "DistilBertForMaskedLM", None, None, "gelu", 1017),
    ("distilbert_mc", "DistilBertForMultipleChoice", None, None, "gelu", 1018),
]


def make_config(arch, num_labels, problem_type, hidden_act):
    if distil(arch):
        cfg = dict(DISTILBERT_BASE_CONFIG)
        cfg["activation"] = hidden_act
    else:
        cfg = dict(ROBERTA_BASE_CONFIG if arch.startswith("Roberta") else BERT_BASE_CONFIG)
        cfg["hidden_act"] = hidden_act
    cfg["architectures"] = [arch]
    if num_labels is not None:
        cfg["id2label"] = {str(i): "LABEL_%d" % i for i in range(num_labels)}
        cfg["label2id"] = {"LABEL_%d" % i: i for i in range(num_labels)}
    if problem_type is not None:
        cfg["problem_type"] = problem_type
    return cfg


def config_json(cfg):
    # PretrainedConfig.to_json_string: json.dumps(d, indent=2, sort_keys=True) + "\n"
    return json.dumps(cfg, indent=2, sort_keys=True) + "\n"


def num_labels_of(cfg):
    return len(cfg["id2label"]) if "id2label" in cfg else 2


# --------------------------------------------------------------------------
# Parameters (HF state_dict names, registration order; kinds drive the init)
# --------------------------------------------------------------------------


def body_params(prefix, cfg, pooler, distilbert=False):
    """The backbone's parameters: BERT's / RoBERTa's, or DistilBERT's (no token types, no
    pooler, its own layer names), in the order both register them."""
    d = dims(cfg)
    H, I, V, P = d["hidden_size"], d["intermediate_size"], d["vocab_size"], d["max_position_embeddings"]
    names, layer_fmt = (DISTILBERT_LAYER_NAMES, "transformer.layer.%d.") if distilbert else (
        BERT_LAYER_NAMES, "encoder.layer.%d.")
    out = []

    def lin(name, n_out, n_in):
        out.append((prefix + name + ".weight", [n_out, n_in], "w"))
        out.append((prefix + name + ".bias", [n_out], "b"))

    def ln(name):
        out.append((prefix + name + ".weight", [H], "lnw"))
        out.append((prefix + name + ".bias", [H], "lnb"))

    out.append((prefix + "embeddings.word_embeddings.weight", [V, H], "w"))
    out.append((prefix + "embeddings.position_embeddings.weight", [P, H], "w"))
    if not distilbert:
        out.append((prefix + "embeddings.token_type_embeddings.weight", [cfg["type_vocab_size"], H], "w"))
    ln("embeddings.LayerNorm")
    for i in range(d["num_hidden_layers"]):
        L = layer_fmt % i
        for n in names["qkv"] + (names["out_proj"],):
            lin(L + n, H, H)
        ln(L + names["norm1"])
        lin(L + names["linear1"], I, H)
        lin(L + names["linear2"], H, I)
        ln(L + names["norm2"])
    if pooler:
        lin("pooler.dense", H, H)
    return out


def distilbert_params(arch, cfg):
    d = dims(cfg)
    H, V = d["hidden_size"], d["vocab_size"]
    nl = num_labels_of(cfg)
    body = body_params(body_prefix(arch), cfg, False, distilbert=True)
    if arch == "DistilBertModel":
        return body
    if arch in ("DistilBertForSequenceClassification", "DistilBertForMultipleChoice"):
        n = 1 if arch.endswith("MultipleChoice") else nl
        return body + [("pre_classifier.weight", [H, H], "w"), ("pre_classifier.bias", [H], "b"),
                       ("classifier.weight", [n, H], "w"), ("classifier.bias", [n], "b")]
    if arch == "DistilBertForTokenClassification":
        return body + [("classifier.weight", [nl, H], "w"), ("classifier.bias", [nl], "b")]
    if arch == "DistilBertForQuestionAnswering":
        return body + [("qa_outputs.weight", [2, H], "w"), ("qa_outputs.bias", [2], "b")]
    if arch == "DistilBertForMaskedLM":
        # vocab_projector.weight is tied to the word embeddings and dropped on save.
        return body + [("vocab_transform.weight", [H, H], "w"), ("vocab_transform.bias", [H], "b"),
                       ("vocab_layer_norm.weight", [H], "lnw"), ("vocab_layer_norm.bias", [H], "lnb"),
                       ("vocab_projector.bias", [V], "b")]
    raise ValueError(arch)


def model_params(arch, cfg):
    """The tensors save_pretrained writes, in HF registration order."""
    if distil(arch):
        return distilbert_params(arch, cfg)
    H, V = cfg["hidden_size"], cfg["vocab_size"]
    nl = num_labels_of(cfg)
    if arch == "BertModel":
        return body_params("", cfg, pooler=True)
    if arch == "BertForSequenceClassification":
        return body_params("bert.", cfg, True) + [
            ("classifier.weight", [nl, H], "w"), ("classifier.bias", [nl], "b")]
    if arch == "BertForTokenClassification":  # add_pooling_layer=False
        return body_params("bert.", cfg, False) + [
            ("classifier.weight", [nl, H], "w"), ("classifier.bias", [nl], "b")]
    if arch == "BertForQuestionAnswering":  # add_pooling_layer=False
        return body_params("bert.", cfg, False) + [
            ("qa_outputs.weight", [nl, H], "w"), ("qa_outputs.bias", [nl], "b")]
    if arch == "BertForMaskedLM":  # add_pooling_layer=False
        # cls.predictions.decoder.weight (tied to bert.embeddings.word_embeddings.weight)
        # and cls.predictions.decoder.bias (tied to cls.predictions.bias) are in the
        # state_dict but dropped by save_pretrained (they match _tied_weights_keys).
        return body_params("bert.", cfg, False) + [
            ("cls.predictions.bias", [V], "b"),
            ("cls.predictions.transform.dense.weight", [H, H], "w"),
            ("cls.predictions.transform.dense.bias", [H], "b"),
            ("cls.predictions.transform.LayerNorm.weight", [H], "lnw"),
            ("cls.predictions.transform.LayerNorm.bias", [H], "lnb")]
    if arch == "RobertaForSequenceClassification":  # add_pooling_layer=False
        return body_params("roberta.", cfg, False) + [
            ("classifier.dense.weight", [H, H], "w"), ("classifier.dense.bias", [H], "b"),
            ("classifier.out_proj.weight", [nl, H], "w"), ("classifier.out_proj.bias", [nl], "b")]
    if arch.endswith("ForMultipleChoice"):  # both keep the pooler; one score per choice
        return body_params(body_prefix(arch), cfg, True) + [
            ("classifier.weight", [1, H], "w"), ("classifier.bias", [1], "b")]
    if arch == "RobertaForMaskedLM":  # add_pooling_layer=False
        # lm_head.decoder.weight / lm_head.decoder.bias are tied and dropped on save.
        return body_params("roberta.", cfg, False) + [
            ("lm_head.bias", [V], "b"),
            ("lm_head.dense.weight", [H, H], "w"), ("lm_head.dense.bias", [H], "b"),
            ("lm_head.layer_norm.weight", [H], "lnw"), ("lm_head.layer_norm.bias", [H], "lnb")]
    raise ValueError(arch)


def body_prefix(arch):
    if arch in ("BertModel", "DistilBertModel"):
        return ""
    if distil(arch):
        return "distilbert."
    return "roberta." if arch.startswith("Roberta") else "bert."


# --------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------


def make_inputs(arch, cfg, gen):
    V, pad = cfg["vocab_size"], cfg["pad_token_id"]
    mc = arch.endswith("ForMultipleChoice")
    rows = [0, 1, 2, 1, 2, 0] if mc else [0, 1, 2]
    mask = torch.tensor([ATTN_MASK[r] for r in rows], dtype=torch.int64)
    roberta = arch.startswith("Roberta")
    lo = 3 if roberta else 1  # never draw the pad id (nor bos/eos for RoBERTa)
    ids = torch.randint(lo, V, (len(rows), SEQ), generator=gen, dtype=torch.int64)
    if roberta:
        for b in range(len(rows)):
            n = int(mask[b].sum())
            ids[b, 0] = cfg["bos_token_id"]
            ids[b, n - 1] = cfg["eos_token_id"]
    ids = torch.where(mask == 1, ids, torch.full_like(ids, pad))
    inputs = collections.OrderedDict()
    inputs["input_ids"] = ids
    inputs["attention_mask"] = mask.clone()
    if not roberta and not distil(arch):  # DistilBERT's forward takes no token types
        inputs["token_type_ids"] = torch.tensor([TOKEN_TYPES[r] for r in rows], dtype=torch.int64)
    valid = mask == 1
    if mc:
        for k in inputs:
            inputs[k] = inputs[k].view(MC_BATCH, NUM_CHOICES, SEQ)
        inputs["labels"] = torch.tensor([2, 0], dtype=torch.int64)
        return inputs
    nl = num_labels_of(cfg)
    H = dims(cfg)["hidden_size"]
    if arch == "BertModel":
        inputs["loss_weight_hidden"] = torch.randn(BATCH, SEQ, H, generator=gen, dtype=torch.float32)
        inputs["loss_weight_pooler"] = torch.randn(BATCH, H, generator=gen, dtype=torch.float32)
    elif arch == "DistilBertModel":  # no pooler
        inputs["loss_weight_hidden"] = torch.randn(BATCH, SEQ, H, generator=gen, dtype=torch.float32)
    elif arch.endswith("ForSequenceClassification"):
        pt = cfg["problem_type"]
        if pt == "regression":
            inputs["labels"] = torch.randn(BATCH, generator=gen, dtype=torch.float32)
        elif pt == "multi_label_classification":
            lab = (torch.rand(BATCH, nl, generator=gen) < 0.5).to(torch.float32)
            lab[0, 0], lab[1, :] = 1.0, 0.0  # at least one 1, one all-zero row
            inputs["labels"] = lab
        else:
            inputs["labels"] = torch.randint(0, nl, (BATCH,), generator=gen, dtype=torch.int64)
    elif arch.endswith("ForTokenClassification"):
        lab = torch.randint(0, nl, (BATCH, SEQ), generator=gen, dtype=torch.int64)
        inputs["labels"] = torch.where(valid, lab, torch.full_like(lab, -100))
    elif arch.endswith("ForQuestionAnswering"):
        # 12 is clamped to SEQ=7 and then ignored (ignore_index = SEQ); -1 is clamped to 0.
        inputs["start_positions"] = torch.tensor([2, 1, 12], dtype=torch.int64)
        inputs["end_positions"] = torch.tensor([4, -1, 2], dtype=torch.int64)
    elif arch.endswith("ForMaskedLM"):
        lab = torch.full((BATCH, SEQ), -100, dtype=torch.int64)
        for b, t in [(0, 1), (0, 4), (1, 2), (1, 3), (2, 1)]:
            assert valid[b, t]
            lab[b, t] = int(torch.randint(0, V, (1,), generator=gen))
        inputs["labels"] = lab
    else:
        raise ValueError(arch)
    return inputs


# --------------------------------------------------------------------------
# Implementation 1: HF's forward, written out (float64)
# --------------------------------------------------------------------------


def gelu_erf(x):  # ACT2FN["gelu"]: nn.functional.gelu (exact erf form)
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def gelu_new(x):  # ACT2FN["gelu_new"]: NewGELUActivation (tanh approximation)
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


ACT = {"gelu": gelu_erf, "gelu_new": gelu_new}


def linear(x, p, name):
    return torch.matmul(x, p[name + ".weight"].t()) + p[name + ".bias"]


def layer_norm(x, p, name, eps):
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)  # biased variance
    return (x - mean) / torch.sqrt(var + eps) * p[name + ".weight"] + p[name + ".bias"]


def roberta_position_ids(ids, padding_idx):
    # create_position_ids_from_input_ids: cumsum of the non-pad mask, times the mask, + padding_idx
    m = ids.ne(padding_idx).int()
    return (torch.cumsum(m, dim=1).type_as(m) * m).long() + padding_idx


def encoder_body(p, pre, cfg, roberta, ids, mask, tt):
    B, T = ids.shape
    H, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    hd = H // nh
    eps = cfg["layer_norm_eps"]
    pad = cfg["pad_token_id"]
    act = ACT[cfg["hidden_act"]]
    if roberta:
        pos = roberta_position_ids(ids, pad)
        pos_pad = pad  # RobertaEmbeddings.position_embeddings has padding_idx=pad_token_id
    else:
        pos = torch.arange(T).unsqueeze(0).expand(B, T)
        pos_pad = None
    if tt is None:
        tt = torch.zeros(B, T, dtype=torch.int64)
    # nn.Embedding(padding_idx=pad): forward reads the row, backward gives it no gradient.
    we = F.embedding(ids, p[pre + "embeddings.word_embeddings.weight"], padding_idx=pad)
    te = F.embedding(tt, p[pre + "embeddings.token_type_embeddings.weight"])
    pe = F.embedding(pos, p[pre + "embeddings.position_embeddings.weight"], padding_idx=pos_pad)
    x = we + te
    x = x + pe
    x = layer_norm(x, p, pre + "embeddings.LayerNorm", eps)
    ext = (1.0 - mask[:, None, None, :].to(F64)) * F32_MIN  # [B,1,1,T]

    def heads(t):
        return t.view(B, T, nh, hd).permute(0, 2, 1, 3)

    for i in range(cfg["num_hidden_layers"]):
        L = pre + "encoder.layer.%d." % i
        q = heads(linear(x, p, L + "attention.self.query"))
        k = heads(linear(x, p, L + "attention.self.key"))
        v = heads(linear(x, p, L + "attention.self.value"))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(hd)
        scores = scores + ext
        probs = torch.softmax(scores, dim=-1)
        ctx = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous().view(B, T, H)
        a = layer_norm(linear(ctx, p, L + "attention.output.dense") + x, p, L + "attention.output.LayerNorm", eps)
        h = act(linear(a, p, L + "intermediate.dense"))
        x = layer_norm(linear(h, p, L + "output.dense") + a, p, L + "output.LayerNorm", eps)
    return x


def ce_loss(logits, labels, ignore_index=-100):
    """CrossEntropyLoss(ignore_index) with mean reduction over non-ignored rows."""
    lsm = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
    keep = labels != ignore_index
    picked = lsm[keep].gather(1, labels[keep].unsqueeze(1)).squeeze(1)
    return -picked.sum() / keep.sum()


def mse_loss(a, b):
    return ((a - b) ** 2).mean()


def bce_logits_loss(x, y):
    return (torch.clamp(x, min=0) - x * y + torch.log1p(torch.exp(-x.abs()))).mean()


def flat_choices(inputs):
    """Multiple choice: [B, C, T] ids, masks and types as B * C rows (HF's view(-1, T))."""
    ids = ("input_ids", "attention_mask", "token_type_ids")
    return {k: (v.view(-1, v.size(-1)) if k in ids and v.dim() == 3 else v) for k, v in inputs.items()}


def token_head(arch, x, p, nl, inputs, out):
    """HF's token classification / question answering head on x [B, T, H]: fills out's logits
    and returns the loss (QA positions clamped to T, which is then ignored)."""
    if arch.endswith("ForTokenClassification"):
        out["logits"] = logits = linear(x, p, "classifier")
        return ce_loss(logits.view(-1, nl), inputs["labels"].view(-1))
    logits = linear(x, p, "qa_outputs")
    start_logits, end_logits = logits[..., 0].contiguous(), logits[..., 1].contiguous()
    out["start_logits"], out["end_logits"] = start_logits, end_logits
    ignored = start_logits.size(1)
    sp = inputs["start_positions"].clamp(0, ignored)
    ep = inputs["end_positions"].clamp(0, ignored)
    return (ce_loss(start_logits, sp, ignored) + ce_loss(end_logits, ep, ignored)) / 2


def distilbert_forward1(arch, cfg, p, inputs):
    """HF's DistilBERT (modeling_distilbert.py, 4.40, eager attention) written out."""
    d = dims(cfg)
    pre = body_prefix(arch)
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    B, T = ids.shape
    H, nh = d["hidden_size"], d["num_attention_heads"]
    hd = H // nh
    act = ACT[d["hidden_act"]]
    we = F.embedding(ids, p[pre + "embeddings.word_embeddings.weight"], padding_idx=d["pad_token_id"])
    pe = F.embedding(torch.arange(T).unsqueeze(0).expand(B, T), p[pre + "embeddings.position_embeddings.weight"])
    x = layer_norm(we + pe, p, pre + "embeddings.LayerNorm", 1e-12)
    masked = (mask == 0).view(B, 1, 1, T)

    def heads(t):
        return t.view(B, T, nh, hd).transpose(1, 2)

    for i in range(d["num_hidden_layers"]):
        L = pre + "transformer.layer.%d." % i
        q = heads(linear(x, p, L + "attention.q_lin")) / math.sqrt(hd)  # the query scaled first
        k = heads(linear(x, p, L + "attention.k_lin"))
        v = heads(linear(x, p, L + "attention.v_lin"))
        scores = torch.matmul(q, k.transpose(2, 3)).masked_fill(masked, F32_MIN)  # replaced, not added
        ctx = torch.matmul(torch.softmax(scores, dim=-1), v).transpose(1, 2).contiguous().view(B, T, H)
        sa = layer_norm(linear(ctx, p, L + "attention.out_lin") + x, p, L + "sa_layer_norm", 1e-12)
        ffn = linear(act(linear(sa, p, L + "ffn.lin1")), p, L + "ffn.lin2")
        x = layer_norm(ffn + sa, p, L + "output_layer_norm", 1e-12)
    out = collections.OrderedDict()
    out["last_hidden_state"] = x
    nl = num_labels_of(cfg)
    if arch == "DistilBertModel":
        loss = (x * inputs["loss_weight_hidden"].to(F64)).sum()
    elif arch in ("DistilBertForSequenceClassification", "DistilBertForMultipleChoice"):
        pooled = torch.relu(linear(x[:, 0], p, "pre_classifier"))
        logits = linear(pooled, p, "classifier")
        if arch.endswith("MultipleChoice"):
            out["logits"] = logits = logits.view(-1, NUM_CHOICES)
            loss = ce_loss(logits, inputs["labels"])
        else:
            out["logits"] = logits
            loss = seqcls_loss(cfg, logits, inputs["labels"])
    elif arch.endswith(("ForTokenClassification", "ForQuestionAnswering")):
        loss = token_head(arch, x, p, nl, inputs, out)
    elif arch == "DistilBertForMaskedLM":
        h = act(linear(x, p, "vocab_transform"))
        h = layer_norm(h, p, "vocab_layer_norm", 1e-12)
        # vocab_projector: weight tied to the word embeddings, its own bias
        logits = torch.matmul(h, p["distilbert.embeddings.word_embeddings.weight"].t()) + p["vocab_projector.bias"]
        out["logits"] = logits
        loss = ce_loss(logits.view(-1, d["vocab_size"]), inputs["labels"].view(-1))
    else:
        raise ValueError(arch)
    return out, loss


def forward1(arch, cfg, p, inputs):
    """Returns (outputs dict, loss).  p: name -> float64 tensor (saved names)."""
    inputs = flat_choices(inputs)
    if distil(arch):
        return distilbert_forward1(arch, cfg, p, inputs)
    roberta = arch.startswith("Roberta")
    pre = body_prefix(arch)
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    x = encoder_body(p, pre, cfg, roberta, ids, mask, inputs.get("token_type_ids"))
    out = collections.OrderedDict()
    out["last_hidden_state"] = x
    eps = cfg["layer_norm_eps"]
    V = cfg["vocab_size"]
    nl = num_labels_of(cfg)
    if arch == "BertModel":
        pooled = torch.tanh(linear(x[:, 0], p, "pooler.dense"))
        out["pooler_output"] = pooled
        loss = (x * inputs["loss_weight_hidden"].to(F64)).sum() + (pooled * inputs["loss_weight_pooler"].to(F64)).sum()
    elif arch == "BertForSequenceClassification":
        pooled = torch.tanh(linear(x[:, 0], p, "bert.pooler.dense"))
        logits = linear(pooled, p, "classifier")
        out["pooler_output"] = pooled
        out["logits"] = logits
        loss = seqcls_loss(cfg, logits, inputs["labels"])
    elif arch == "RobertaForSequenceClassification":
        h = torch.tanh(linear(x[:, 0, :], p, "classifier.dense"))
        logits = linear(h, p, "classifier.out_proj")
        out["logits"] = logits
        loss = seqcls_loss(cfg, logits, inputs["labels"])
    elif arch.endswith(("ForTokenClassification", "ForQuestionAnswering")):
        loss = token_head(arch, x, p, nl, inputs, out)
    elif arch == "BertForMaskedLM":
        h = ACT[cfg["hidden_act"]](linear(x, p, "cls.predictions.transform.dense"))
        h = layer_norm(h, p, "cls.predictions.transform.LayerNorm", eps)
        # decoder: weight tied to the word embeddings, bias tied to cls.predictions.bias
        logits = torch.matmul(h, p["bert.embeddings.word_embeddings.weight"].t()) + p["cls.predictions.bias"]
        out["logits"] = logits
        loss = ce_loss(logits.view(-1, V), inputs["labels"].view(-1))
    elif arch.endswith("ForMultipleChoice"):
        pooled = torch.tanh(linear(x[:, 0], p, pre + "pooler.dense"))
        out["pooler_output"] = pooled
        logits = linear(pooled, p, "classifier").view(-1, NUM_CHOICES)
        out["logits"] = logits
        loss = ce_loss(logits, inputs["labels"])
    elif arch == "RobertaForMaskedLM":
        h = gelu_erf(linear(x, p, "lm_head.dense"))  # RobertaLMHead always uses erf gelu
        h = layer_norm(h, p, "lm_head.layer_norm", eps)
        logits = torch.matmul(h, p["roberta.embeddings.word_embeddings.weight"].t()) + p["lm_head.bias"]
        out["logits"] = logits
        loss = ce_loss(logits.view(-1, V), inputs["labels"].view(-1))
    else:
        raise ValueError(arch)
    return out, loss


def seqcls_loss(cfg, logits, labels):
    pt = cfg["problem_type"]
    nl = num_labels_of(cfg)
    if pt == "regression":
        return mse_loss(logits.squeeze(), labels.to(F64).squeeze())
    if pt == "single_label_classification":
        return ce_loss(logits.view(-1, nl), labels.view(-1))
    if pt == "multi_label_classification":
        return bce_logits_loss(logits, labels.to(F64))
    raise ValueError(pt)


# --------------------------------------------------------------------------
# Implementation 2: torch.nn modules (self-check only)
# --------------------------------------------------------------------------


# Parameter names of one encoder block, by role, under the layer's prefix.
BERT_LAYER_NAMES = {"qkv": ("attention.self.query", "attention.self.key", "attention.self.value"),
                    "out_proj": "attention.output.dense", "norm1": "attention.output.LayerNorm",
                    "linear1": "intermediate.dense", "linear2": "output.dense", "norm2": "output.LayerNorm"}
DISTILBERT_LAYER_NAMES = {"qkv": ("attention.q_lin", "attention.k_lin", "attention.v_lin"),
                          "out_proj": "attention.out_lin", "norm1": "sa_layer_norm", "linear1": "ffn.lin1",
                          "linear2": "ffn.lin2", "norm2": "output_layer_norm"}


def torch_act(d):
    return F.gelu if d["hidden_act"] == "gelu" else (lambda z: F.gelu(z, approximate="tanh"))


def torch_encoder(x, mask, d, eps, p64, qkv, set_linear, layer_fmt, names):
    """The encoder stack as nn.TransformerEncoderLayer blocks (post-norm; BERT and DistilBERT
    alike). The fused in-projection of each layer is recorded in qkv, for its gradient to be
    split back into query, key and value."""
    act = torch_act(d)
    for i in range(d["num_hidden_layers"]):
        L = layer_fmt % i
        layer = nn.TransformerEncoderLayer(d["hidden_size"], d["num_attention_heads"],
                                           dim_feedforward=d["intermediate_size"], dropout=0.0, activation=act,
                                           layer_norm_eps=eps, batch_first=True, norm_first=False, dtype=F64)
        qkv_names = [L + n for n in names["qkv"]]
        w = nn.Parameter(torch.cat([p64[n + ".weight"] for n in qkv_names], 0))
        bb = nn.Parameter(torch.cat([p64[n + ".bias"] for n in qkv_names], 0))
        qkv[L] = (qkv_names, w, bb)
        layer.self_attn.in_proj_weight, layer.self_attn.in_proj_bias = w, bb
        set_linear(layer.self_attn.out_proj, L + names["out_proj"])
        for role in ("norm1", "linear1", "linear2", "norm2"):
            set_linear(getattr(layer, role), L + names[role])
        layer.eval()
        x = layer(x, src_key_padding_mask=(mask == 0))
    return x


def torch_token_head(arch, x, nl, set_linear, inputs, out):
    """Token classification or question answering on the last hidden states x [B, T, H], as
    torch.nn modules: fills out's logits and returns the loss."""
    T = x.shape[1]
    if arch.endswith("ForTokenClassification"):
        c = nn.Linear(x.shape[2], nl, dtype=F64)
        set_linear(c, "classifier")
        out["logits"] = logits = c(x)
        return F.cross_entropy(logits.reshape(-1, nl), inputs["labels"].reshape(-1))
    c = nn.Linear(x.shape[2], 2, dtype=F64)
    set_linear(c, "qa_outputs")
    lg = c(x)
    out["start_logits"], out["end_logits"] = lg[:, :, 0], lg[:, :, 1]
    ls = F.cross_entropy(lg[:, :, 0], inputs["start_positions"].clamp(0, T), ignore_index=T)
    le = F.cross_entropy(lg[:, :, 1], inputs["end_positions"].clamp(0, T), ignore_index=T)
    return 0.5 * (ls + le)


def torch_backward(out, loss, leaves, qkv, H):
    """Backward from loss: gradients by saved name, the fused in-projections split back into
    query, key and value. Returns (outputs, loss, grads)."""
    loss.backward()
    grads = {n: (t.grad if t.grad is not None else torch.zeros_like(t)) for n, t in leaves.items()}
    for L, (names, w, bb) in qkv.items():
        for j, n in enumerate(names):
            grads[n + ".weight"] = w.grad[j * H:(j + 1) * H]
            grads[n + ".bias"] = bb.grad[j * H:(j + 1) * H]
    return {k: v.detach() for k, v in out.items()}, loss.detach(), grads


def distilbert_forward2(arch, cfg, p64, inputs):
    """DistilBERT from torch.nn modules: nn.TransformerEncoderLayer is its block (post-norm, the
    attention's output projection without dropout)."""
    d = dims(cfg)
    pre = body_prefix(arch)
    H, V = d["hidden_size"], d["vocab_size"]
    leaves = {n: nn.Parameter(t.clone()) for n, t in p64.items()}
    qkv = {}

    def set_linear(mod, name):
        mod.weight, mod.bias = leaves[name + ".weight"], leaves[name + ".bias"]

    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    B, T = ids.shape
    word = nn.Embedding(V, H, padding_idx=d["pad_token_id"], dtype=F64)
    word.weight = leaves[pre + "embeddings.word_embeddings.weight"]
    posm = nn.Embedding(d["max_position_embeddings"], H, dtype=F64)
    posm.weight = leaves[pre + "embeddings.position_embeddings.weight"]
    eln = nn.LayerNorm(H, eps=1e-12, dtype=F64)
    set_linear(eln, pre + "embeddings.LayerNorm")
    x = eln(word(ids) + posm(torch.arange(T).repeat(B, 1)))
    x = torch_encoder(x, mask, d, 1e-12, p64, qkv, set_linear, pre + "transformer.layer.%d.", DISTILBERT_LAYER_NAMES)
    out = {"last_hidden_state": x}
    nl = num_labels_of(cfg)
    if arch == "DistilBertModel":
        loss = (x * inputs["loss_weight_hidden"].to(F64)).sum()
    elif arch in ("DistilBertForSequenceClassification", "DistilBertForMultipleChoice"):
        mc = arch.endswith("MultipleChoice")
        pc, c = nn.Linear(H, H, dtype=F64), nn.Linear(H, 1 if mc else nl, dtype=F64)
        set_linear(pc, "pre_classifier")
        set_linear(c, "classifier")
        logits = c(nn.ReLU()(pc(x[:, 0])))
        if mc:
            logits = logits.reshape(-1, NUM_CHOICES)
        out["logits"] = logits
        loss = F.cross_entropy(logits, inputs["labels"])
    elif arch.endswith(("ForTokenClassification", "ForQuestionAnswering")):
        loss = torch_token_head(arch, x, nl, set_linear, inputs, out)
    elif arch == "DistilBertForMaskedLM":
        vt = nn.Linear(H, H, dtype=F64)
        set_linear(vt, "vocab_transform")
        vln = nn.LayerNorm(H, eps=1e-12, dtype=F64)
        set_linear(vln, "vocab_layer_norm")
        proj = nn.Linear(H, V, dtype=F64)
        proj.weight = word.weight  # the tie
        proj.bias = leaves["vocab_projector.bias"]
        out["logits"] = logits = proj(vln(torch_act(d)(vt(x))))
        loss = F.cross_entropy(logits.reshape(-1, V), inputs["labels"].reshape(-1))
    else:
        raise ValueError(arch)
    return torch_backward(out, loss, leaves, qkv, H)


def forward2(arch, cfg, p64, inputs):
    """Same model built from torch.nn modules.  Returns (outputs, loss, grads by saved name)."""
    inputs = flat_choices(inputs)
    if distil(arch):
        return distilbert_forward2(arch, cfg, p64, inputs)
    roberta = arch.startswith("Roberta")
    pre = body_prefix(arch)
    H = cfg["hidden_size"]
    eps, pad, V = cfg["layer_norm_eps"], cfg["pad_token_id"], cfg["vocab_size"]
    leaves = {n: nn.Parameter(t.clone()) for n, t in p64.items()}
    qkv = {}

    def set_linear(mod, name):
        mod.weight, mod.bias = leaves[name + ".weight"], leaves[name + ".bias"]

    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    B, T = ids.shape
    word = nn.Embedding(V, H, padding_idx=pad, dtype=F64)
    word.weight = leaves[pre + "embeddings.word_embeddings.weight"]
    posm = nn.Embedding(cfg["max_position_embeddings"], H, padding_idx=pad if roberta else None, dtype=F64)
    posm.weight = leaves[pre + "embeddings.position_embeddings.weight"]
    typ = nn.Embedding(cfg["type_vocab_size"], H, dtype=F64)
    typ.weight = leaves[pre + "embeddings.token_type_embeddings.weight"]
    eln = nn.LayerNorm(H, eps=eps, dtype=F64)
    set_linear(eln, pre + "embeddings.LayerNorm")
    if roberta:  # positions counted by hand
        pos = torch.full((B, T), pad, dtype=torch.int64)
        for b in range(B):
            c = pad
            for t in range(T):
                if int(ids[b, t]) != pad:
                    c += 1
                    pos[b, t] = c
    else:
        pos = torch.arange(T).repeat(B, 1)
    tt = inputs.get("token_type_ids", torch.zeros(B, T, dtype=torch.int64))
    x = eln(word(ids) + posm(pos) + typ(tt))
    x = torch_encoder(x, mask, cfg, eps, p64, qkv, set_linear, pre + "encoder.layer.%d.", BERT_LAYER_NAMES)
    out = {"last_hidden_state": x}
    nl = num_labels_of(cfg)
    if arch in ("BertModel", "BertForSequenceClassification") or arch.endswith("ForMultipleChoice"):
        pooler = nn.Linear(H, H, dtype=F64)
        set_linear(pooler, pre + "pooler.dense")
        out["pooler_output"] = pooled = nn.Tanh()(pooler(x[:, 0]))
    if arch == "BertModel":
        loss = (x * inputs["loss_weight_hidden"].to(F64)).sum() + (pooled * inputs["loss_weight_pooler"].to(F64)).sum()
    elif arch.endswith("ForSequenceClassification"):
        if roberta:
            d, o = nn.Linear(H, H, dtype=F64), nn.Linear(H, nl, dtype=F64)
            set_linear(d, "classifier.dense")
            set_linear(o, "classifier.out_proj")
            logits = o(torch.tanh(d(x[:, 0])))
        else:
            c = nn.Linear(H, nl, dtype=F64)
            set_linear(c, "classifier")
            logits = c(pooled)
        out["logits"] = logits
        lab, pt = inputs["labels"], cfg["problem_type"]
        if pt == "regression":
            loss = F.mse_loss(logits.view(-1), lab.to(F64))
        elif pt == "multi_label_classification":
            loss = F.binary_cross_entropy_with_logits(logits, lab.to(F64))
        else:
            loss = F.cross_entropy(logits, lab)
    elif arch.endswith("ForMultipleChoice"):
        c = nn.Linear(H, 1, dtype=F64)
        set_linear(c, "classifier")
        out["logits"] = logits = c(pooled).reshape(-1, NUM_CHOICES)
        loss = F.cross_entropy(logits, inputs["labels"])
    elif arch.endswith(("ForTokenClassification", "ForQuestionAnswering")):
        loss = torch_token_head(arch, x, nl, set_linear, inputs, out)
    elif arch.endswith("ForMaskedLM"):
        hp = "cls.predictions." if not roberta else "lm_head."
        dn = nn.Linear(H, H, dtype=F64)
        set_linear(dn, hp + ("transform.dense" if not roberta else "dense"))
        lnm = nn.LayerNorm(H, eps=eps, dtype=F64)
        set_linear(lnm, hp + ("transform.LayerNorm" if not roberta else "layer_norm"))
        dec = nn.Linear(H, V, dtype=F64)
        dec.weight = word.weight  # the tie
        dec.bias = leaves[hp + "bias"]
        a = F.gelu if (roberta or cfg["hidden_act"] == "gelu") else (lambda z: F.gelu(z, approximate="tanh"))
        out["logits"] = logits = dec(lnm(a(dn(x))))
        loss = F.cross_entropy(logits.reshape(-1, V), inputs["labels"].reshape(-1))
    else:
        raise ValueError(arch)
    return torch_backward(out, loss, leaves, qkv, H)


# --------------------------------------------------------------------------
# safetensors
# --------------------------------------------------------------------------



def expected_output_shapes(arch, cfg):
    B, T, H, V = BATCH, SEQ, dims(cfg)["hidden_size"], cfg["vocab_size"]
    nl = num_labels_of(cfg)
    if arch.endswith("ForMultipleChoice"):
        rows = MC_BATCH * NUM_CHOICES
        s = {"last_hidden_state": [rows, T, H], "logits": [MC_BATCH, NUM_CHOICES]}
        if not distil(arch):  # DistilBERT has no pooler
            s["pooler_output"] = [rows, H]
        return s
    s = {"last_hidden_state": [B, T, H]}
    if arch in ("BertModel", "BertForSequenceClassification"):
        s["pooler_output"] = [B, H]
    if arch.endswith("ForSequenceClassification"):
        s["logits"] = [B, nl]
    elif arch.endswith("ForTokenClassification"):
        s["logits"] = [B, T, nl]
    elif arch.endswith("ForQuestionAnswering"):
        s["start_logits"] = s["end_logits"] = [B, T]
    elif arch.endswith("ForMaskedLM"):
        s["logits"] = [B, T, V]
    return s


def shift_invariant(arch, cfg, n):
    """Biases whose gradient is zero: a key bias adds the same score to every key of a query;
    a multiple-choice classifier's bias the same logit to every choice; in question answering,
    qa_outputs' bias and the last LayerNorm's bias (qa_outputs is linear) the same logit to every
    position. A softmax over those cancels each of them."""
    last = "layer.%d." % (dims(cfg)["num_hidden_layers"] - 1)
    qa_shift = ("qa_outputs.bias", last + "output.LayerNorm.bias", last + "output_layer_norm.bias")
    return (n.endswith(("attention.self.key.bias", "attention.k_lin.bias"))
            or (arch.endswith("QuestionAnswering") and n.endswith(qa_shift))
            or (arch.endswith("ForMultipleChoice") and n == "classifier.bias"))


def finite_difference_check(arch, cfg, p64, inputs, grads, gen):
    names = list(p64.keys())
    pre = body_prefix(arch)
    pad = cfg["pad_token_id"]
    done = 0
    while done < 3:
        name = names[int(torch.randint(0, len(names), (1,), generator=gen))]
        idx = int(torch.randint(0, p64[name].numel(), (1,), generator=gen))
        row = idx // p64[name].shape[-1] if p64[name].dim() == 2 else None
        # padding_idx rows get no gradient from the lookup (HF semantics), so their
        # autograd "gradient" is not the true derivative: skip them here.
        if name == pre + "embeddings.word_embeddings.weight" and row == pad:
            continue
        if arch.startswith("Roberta") and name == pre + "embeddings.position_embeddings.weight" and row == pad:
            continue
        check_entry(lambda q: forward1(arch, cfg, q, inputs)[1], p64, grads, name, idx)
        done += 1


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------


def build_case(name, arch, num_labels, problem_type, hidden_act, seed):
    gen = torch.Generator().manual_seed(seed)
    cfg = make_config(arch, num_labels, problem_type, hidden_act)
    specs = model_params(arch, cfg)
    params = init_params(specs, gen)
    inputs = make_inputs(arch, cfg, gen)

    p64 = collections.OrderedDict((n, t.to(F64).requires_grad_(True)) for n, t in params.items())
    outs, loss, grads = backward(*forward1(arch, cfg, p64, inputs), p64)

    # --- checks ---
    for n, shape, _ in specs:
        assert list(params[n].shape) == shape and list(grads[n].shape) == shape, n
    exp_shapes = expected_output_shapes(arch, cfg)
    assert sorted(exp_shapes) == sorted(outs), (sorted(exp_shapes), sorted(outs))
    for k, s in exp_shapes.items():
        assert list(outs[k].shape) == s, (k, outs[k].shape, s)
    assert loss.dim() == 0 and math.isfinite(float(loss))
    plain = {n: t.detach() for n, t in p64.items()}
    outs2, loss2, grads2 = forward2(arch, cfg, plain, inputs)
    assert_agree(name, (outs, loss, grads), (outs2, loss2, grads2))
    for n in grads:
        if shift_invariant(arch, cfg, n):  # the math makes this gradient zero; only rounding is left
            assert float(grads[n].abs().max()) < 1e-9, (name, n, float(grads[n].abs().max()))
        else:  # every other tensor influences the loss
            assert float(grads[n].abs().max()) > 1e-9, (name, n)
    pre = body_prefix(arch)
    wname = pre + "embeddings.word_embeddings.weight"
    pad = cfg["pad_token_id"]
    if not arch.endswith("ForMaskedLM"):
        assert float(grads[wname][pad].abs().max()) == 0.0  # padding_idx row: no gradient
    else:
        assert float(grads[wname][pad].abs().max()) > 0.0  # only the tied decoder's part
    if arch.startswith("Roberta"):
        assert float(grads[pre + "embeddings.position_embeddings.weight"][pad].abs().max()) == 0.0
    finite_difference_check(arch, cfg, plain, inputs, grads, gen)

    files = case_files(config_json(cfg), cfg, params, inputs, outs, loss, grads)
    return files, float(loss)


def main():
    write_cases(OUT_DIR, CASES, build_case, 22)


if __name__ == "__main__":
    main()
