#!/usr/bin/env python3
"""Golden forward/backward values for DeBERTa-v2/v3 (model_type "deberta-v2"),
made by Hugging Face `transformers` itself (modeling_deberta_v2.py).

Made with transformers 5.25.0 and torch 2.15.0 (CPU). Rerun from the
repository root with a Python that has both:

    /work/pyref/bin/python tests/goldens/gen_deberta_goldens.py

For every case it builds a tiny random model with transformers' AutoModel*
classes, draws float32 weights from a per-case seeded torch.Generator
(matrices N(0, 0.2), biases N(0, 0.1), LayerNorm weights 1 + N(0, 0.1)), and
writes under tests/goldens/deberta/<case>/:

  config.json         what transformers' save_pretrained writes.
  model.safetensors   what save_pretrained writes (float32).
  golden.safetensors  inputs, outputs (logits, or last_hidden_state for
                      DebertaV2Model), loss [] and grad.<name> = d loss / d <name>
                      for every tensor in model.safetensors.

The forward and backward run in float64 (model.double() after saving the
float32 weights). DebertaV2Model cases use loss = sum(last_hidden_state *
loss_weight_hidden).

The cases cover DeBERTa-v3's layout (relative attention with log position
buckets, shared attention keys, LayerNorm'd relative embeddings, no absolute
positions, no token types) and DeBERTa-v2's (separate pos_key_proj /
pos_query_proj, absolute positions and token types, relative distances
clamped at max_relative_positions without buckets), each with padded rows.

relative_positions.json holds HF's position bucket of every distance in
-1100..1100 at deberta-v3-base's position_buckets 256 / max_relative_positions 512.

Checks before writing: the float64 run agrees with a float32 run (relative
1e-4), every parameter gets a gradient, and the files read back.
"""

import collections
import json
import os
import sys
import tempfile

import torch
import transformers
from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification, AutoModelForTokenClassification

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_io import (ATTN_MASK, check_float32_run, pretrained_case_files, saved_pretrained,  # noqa: E402
                       setup_torch, write_files)

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(REPO_ROOT, "tests", "goldens")

setup_torch()
transformers.logging.set_verbosity_error()

# DeBERTa-v3's config.json fields (microsoft/deberta-v3-base) at a tiny size. position_buckets 8 with
# max_relative_positions 16: distances past 4 fall in logarithmic buckets (5 to 7 for 12-token rows).
V3 = dict(vocab_size=99, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
          max_position_embeddings=64, relative_attention=True, position_buckets=8, max_relative_positions=16,
          pos_att_type=["p2c", "c2p"], share_att_key=True, norm_rel_ebd="layer_norm", position_biased_input=False,
          type_vocab_size=0, layer_norm_eps=1e-7, hidden_act="gelu", pad_token_id=0)
# DeBERTa-v2's other layout: separate position projections, absolute positions and token types, no buckets
# (distances clamp at +-4), the pos_att_type string form, a tanh pooler.
V2 = dict(V3, share_att_key=False, position_biased_input=True, type_vocab_size=2, position_buckets=-1,
          max_relative_positions=4, norm_rel_ebd="none", pos_att_type="p2c|c2p", pooler_hidden_act="tanh")

# case, architecture, num_labels, batch, seq, use attention_mask, config, seed
CASES = [
    ("deberta_v3_seqcls", "DebertaV2ForSequenceClassification", 3, 3, 7, True, V3, 5001),
    ("deberta_v3_tokcls", "DebertaV2ForTokenClassification", 5, 3, 7, True, V3, 5002),
    ("deberta_v3_model", "DebertaV2Model", None, 2, 12, False, V3, 5003),
    ("deberta_v2_seqcls", "DebertaV2ForSequenceClassification", 3, 3, 7, True, V2, 5004),
    ("deberta_v3_c2p_only", "DebertaV2ForSequenceClassification", 2, 3, 7, True,
     dict(V3, pos_att_type=["c2p"], share_att_key=False), 5005),
    # No problem_type: HF's own rules. Integer labels drop the rows labelled < 0; [batch, labels] float
    # labels are soft targets.
    ("deberta_v3_negative_label", "DebertaV2ForSequenceClassification", 3, 3, 7, True,
     dict(V3, problem_type=None, labels="negative"), 5006),
    ("deberta_v3_soft_labels", "DebertaV2ForSequenceClassification", 3, 3, 7, True,
     dict(V3, problem_type=None, labels="soft"), 5007),
]


def build_model(arch, num_labels, changes):
    kw = dict(changes)
    kw.pop("labels", None)
    if num_labels is not None:
        kw["num_labels"] = num_labels
        kw.setdefault("problem_type", "single_label_classification")
    config = AutoConfig.for_model("deberta-v2", **kw)
    config.architectures = [arch]
    auto = AutoModel if arch.endswith("Model") else (
        AutoModelForTokenClassification if arch.endswith("ForTokenClassification") else AutoModelForSequenceClassification)
    model = auto.from_config(config, attn_implementation="eager", dtype=torch.float32)
    assert type(model).__name__ == arch, type(model).__name__
    return model


def init_params(model, gen):
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if "LayerNorm" in name and name.endswith(".weight"):
                p.copy_(1.0 + r * 0.1)
            else:
                p.copy_(r * (0.1 if name.endswith(".bias") else 0.2))


def make_inputs(arch, cfg, batch, seq, use_mask, gen, label_kind=None):
    V = cfg.vocab_size
    inputs = collections.OrderedDict()
    mask = torch.tensor(ATTN_MASK, dtype=torch.int64) if use_mask else torch.ones(batch, seq, dtype=torch.int64)
    ids = torch.randint(3, V, (batch, seq), generator=gen, dtype=torch.int64)
    ids = torch.where(mask == 1, ids, torch.full_like(ids, cfg.pad_token_id))
    inputs["input_ids"] = ids
    if use_mask:
        inputs["attention_mask"] = mask
    if cfg.type_vocab_size > 0:
        types = torch.zeros(batch, seq, dtype=torch.int64)
        types[:, seq // 2:] = 1
        inputs["token_type_ids"] = types * mask
    if arch.endswith("ForTokenClassification"):
        lab = torch.randint(0, cfg.num_labels, (batch, seq), generator=gen, dtype=torch.int64)
        inputs["labels"] = torch.where(mask == 1, lab, torch.full_like(lab, -100))
    elif arch.endswith("ForSequenceClassification"):
        inputs["labels"] = torch.randint(0, cfg.num_labels, (batch,), generator=gen, dtype=torch.int64)
        if label_kind == "negative":
            inputs["labels"][1] = -1
        elif label_kind == "soft":
            inputs["labels"] = torch.softmax(torch.randn(batch, cfg.num_labels, generator=gen), -1)
    else:
        inputs["loss_weight_hidden"] = torch.randn(batch, seq, cfg.hidden_size, generator=gen, dtype=torch.float32)
    return inputs


def run(model, arch, inputs, dtype):
    """(outputs, loss, {name: grad}) of the model in `dtype`."""
    model = model.to(dtype)
    model.zero_grad(set_to_none=True)
    kwargs = {k: v for k, v in inputs.items() if k != "loss_weight_hidden"}
    out = model(**kwargs)
    outs = collections.OrderedDict()
    if arch.endswith("Model"):
        outs["last_hidden_state"] = out.last_hidden_state
        loss = (out.last_hidden_state * inputs["loss_weight_hidden"].to(dtype)).sum()
    else:
        outs["logits"] = out.logits
        loss = out.loss
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    return {k: v.detach() for k, v in outs.items()}, loss.detach(), grads


def build_case(name, arch, num_labels, batch, seq, use_mask, changes, seed):
    gen = torch.Generator().manual_seed(seed)
    model = build_model(arch, num_labels, changes)
    model.eval()
    init_params(model, gen)
    inputs = make_inputs(arch, model.config, batch, seq, use_mask, gen, changes.get("labels"))
    out_dir = os.path.join(DATA, "deberta", name)
    saved = saved_pretrained(model)
    run32 = run(model, arch, inputs, torch.float32)
    outs, loss, grads = run(model, arch, inputs, torch.float64)
    check_float32_run(name, run32, (outs, loss, grads))
    files = pretrained_case_files(name, model, saved, inputs, outs, loss, grads)
    write_files(out_dir, files)
    print("%-22s loss=%-12.6g bytes=%s" % (name, float(loss), [len(files[f]) for f in sorted(files)]))


def write_relative_positions():
    """HF's bucket of every distance -1100..1100 under microsoft/deberta-v3-base's position_buckets 256 and
    max_relative_positions 512 (relative_positions.json): make_log_bucket_position's float32 ceil, checked
    element by element."""
    from transformers.models.deberta_v2.modeling_deberta_v2 import make_log_bucket_position
    distances = torch.arange(-1100, 1101, dtype=torch.long)
    buckets = make_log_bucket_position(distances, 256, 512).to(torch.long)
    path = os.path.join(DATA, "deberta", "relative_positions.json")
    with open(path, "w") as f:
        json.dump({"bucket_size": 256, "max_position": 512, "first_distance": -1100,
                   "buckets": buckets.tolist()}, f, separators=(",", ":"))
        f.write("\n")
    print("relative_positions.json: %d distances" % len(buckets))


def write_tokenizer():
    """A DeBERTa-v3-style tokenizer (tokenizer/): a 600-piece SentencePiece Unigram model trained on
    tests/goldens/tokenizers/corpus.txt with deberta-v3's special pieces ([PAD] 0, [CLS] 1, [SEP] 2, [UNK] 3,
    [MASK]), turned into tokenizer.json by transformers' DebertaV2Tokenizer (its precompiled nmt_nfkc
    charsmap normalizer, Metaspace, the [CLS] A [SEP] B [SEP] template). tokenizer_ids.json holds its ids and
    pair ids of every corpus line."""
    import sentencepiece as spm
    from transformers import DebertaV2Tokenizer
    corpus = os.path.join(DATA, "tokenizers", "corpus.txt")
    out = os.path.join(DATA, "deberta", "tokenizer")
    with tempfile.TemporaryDirectory() as tmp:
        spm.SentencePieceTrainer.train(
            input=corpus, model_prefix=os.path.join(tmp, "spm"), vocab_size=600, model_type="unigram",
            pad_id=0, bos_id=1, eos_id=2, unk_id=3, pad_piece="[PAD]", bos_piece="[CLS]", eos_piece="[SEP]",
            unk_piece="[UNK]", user_defined_symbols=["[MASK]"], num_threads=1, minloglevel=2)
        tok = DebertaV2Tokenizer.from_pretrained(tmp)
        tok.save_pretrained(out)
    with open(corpus, encoding="utf-8") as f:
        lines = f.read().split("\n")
    lines = [l for l in lines if l] + ["a [MASK] here", "  two  spaces \u00e9\u00e8 \uff21\uff22 \u2014 end"]
    golden = {"lines": lines, "ids": [tok(l)["input_ids"] for l in lines],
              "pair_ids": [tok(a, b)["input_ids"] for a, b in zip(lines, lines[1:])]}
    with open(os.path.join(DATA, "deberta", "tokenizer_ids.json"), "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print("tokenizer: %d lines" % len(lines))


def main():
    assert transformers.__version__ == "5.25.0", transformers.__version__
    for case in CASES:
        build_case(*case)
    write_relative_positions()
    write_tokenizer()


if __name__ == "__main__":
    main()
