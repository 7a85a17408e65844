"""Writes tests/goldens/swag/: run_swag.py (transformers' multiple-choice
example) on a tiny random BertForMultipleChoice, which `kiln train --task
multiple-choice` must reproduce (tests/cli/swag_golden_test.cpp).

    /work/pyref/bin/python tests/goldens/gen_swag_goldens.py

Made with torch 2.15 (CPU), transformers 5.25 and tokenizers 0.23. Needs
tests/goldens/qa/bert (gen_qa_goldens.py) for its WordPiece tokenizer.

- bert/: BertForMultipleChoice (hidden 16, dropout 0; initializer_range
  0.2, so that the choices score apart from the first step: with alike
  scores most gradients are tiny, and Adam turns their float noise into full
  steps).
- train.csv, val.csv: run_swag's columns (sent1, sent2, ending0..3, label).

cases.json, per case: kiln's flags ("{dir}" is this folder), the loss and
gradient norm of five AdamW steps on one batch of every row, and eval_loss
and eval_accuracy on val.csv (run_swag's compute_metrics). run_swag's
preprocessing: each choice is the pair (sent1, sent2 + " " + ending),
truncated longest-first to max_seq_length; DataCollatorForMultipleChoice pads
to the longest choice of the batch.
"""
import csv
import json
import pathlib
import random
import shutil
import sys

# This folder's datasets/ would shadow the datasets package transformers imports.
sys.path = [p for p in sys.path if pathlib.Path(p or ".").resolve() != pathlib.Path(__file__).resolve().parent]

import numpy as np  # noqa: E402
import torch  # noqa: E402
from transformers import (AutoModelForMultipleChoice, AutoTokenizer, BertConfig, BertForMultipleChoice,  # noqa: E402
                          DataCollatorForMultipleChoice, Trainer, TrainingArguments)

ROOT = pathlib.Path(__file__).resolve().parent
OUT = ROOT / "swag"
WORDS = "the a cat dog sat ran on mat big small red blue fast slow good bad very not it was".split()
ENDINGS = 4


def make_model(d):
    tok = AutoTokenizer.from_pretrained(ROOT / "qa" / "bert")
    cfg = BertConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=64, hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0, pad_token_id=0, initializer_range=0.2)
    torch.manual_seed(3)
    m = BertForMultipleChoice(cfg)
    m.save_pretrained(d)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(ROOT / "qa" / "bert" / f, d / f)


def write_data():
    r = random.Random(1)

    def words(lo, hi):
        return " ".join(r.choice(WORDS) for _ in range(r.randint(lo, hi)))

    for name, n in (("train", 8), ("val", 6)):
        with open(OUT / f"{name}.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["sent1", "sent2"] + [f"ending{i}" for i in range(ENDINGS)] + ["label"])
            for _ in range(n):
                w.writerow([words(3, 12), words(1, 3), words(1, 6), words(1, 6), words(1, 8), words(1, 6),
                            r.randrange(ENDINGS)])


def run_swag(max_seq_length):
    tok = AutoTokenizer.from_pretrained(OUT / "bert")
    model = AutoModelForMultipleChoice.from_pretrained(OUT / "bert")

    def preprocess(path):
        out = []
        for e in csv.DictReader(open(path)):
            enc = tok([e["sent1"]] * ENDINGS, [f"{e['sent2']} {e[f'ending{i}']}" for i in range(ENDINGS)],
                      truncation=True, max_length=max_seq_length)
            out.append({**{k: v for k, v in enc.items()}, "label": int(e["label"])})
        return out

    train, val = preprocess(OUT / "train.csv"), preprocess(OUT / "val.csv")
    args = TrainingArguments(output_dir="/tmp/gen_swag_run", report_to="none", save_strategy="no",
                             per_device_train_batch_size=len(train), per_device_eval_batch_size=4, max_steps=5,
                             learning_rate=0.02, logging_steps=1, seed=42)
    trainer = Trainer(model=model, args=args, train_dataset=train, eval_dataset=val,
                      data_collator=DataCollatorForMultipleChoice(tok),
                      compute_metrics=lambda p: {"accuracy": float((np.argmax(p.predictions, axis=1) ==
                                                                    p.label_ids).mean())})
    trainer.train()
    metrics = trainer.evaluate()
    return {"steps": [{"loss": e["loss"], "grad_norm": e["grad_norm"]} for e in trainer.state.log_history if "loss" in e],
            "metrics": {k: metrics[k] for k in ("eval_loss", "eval_accuracy")}}


def main():
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir()
    make_model(OUT / "bert")
    write_data()
    cases = {}
    for name, length in (("full", 1024), ("truncated", 12)):
        flags = ["--task", "multiple-choice", "--model_name_or_path", "{dir}/bert", "--train_file", "{dir}/train.csv",
                 "--validation_file", "{dir}/val.csv", "--per_device_train_batch_size", "8",
                 "--per_device_eval_batch_size", "4", "--max_steps", "5", "--learning_rate", "0.02",
                 "--logging_steps", "1", "--seed", "42", "--report_to", "none", "--save_strategy", "no",
                 "--disable_tqdm", "true", "--do_eval"] + (["--max_seq_length", str(length)] if length < 1024 else [])
        cases[name] = {"flags": flags, **run_swag(length)}
    (OUT / "cases.json").write_text(json.dumps(cases, indent=1) + "\n")


if __name__ == "__main__":
    main()
