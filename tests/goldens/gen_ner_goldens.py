"""Writes tests/goldens/ner/: run_ner.py (transformers' token-classification
example) on tiny random token classifiers, which `kiln train --task
token-classification` must reproduce (tests/cli/ner_golden_test.cpp) and whose
word->token label alignment tokenize_words must equal (tests/data/ner_golden_test.cpp).

    pip install seqeval   # evaluate's "seqeval" metric is this package
    /work/pyref/bin/python tests/goldens/gen_ner_goldens.py

Made with torch 2.15 (CPU), transformers 5.25, tokenizers 0.23 and seqeval 1.2.2
(seqeval imports sklearn only for a warning class; a stub sklearn/exceptions.py
defining UndefinedMetricWarning on PYTHONPATH is enough).

- bert/: BertForTokenClassification (hidden 16, dropout 0) with a WordPiece
  tokenizer whose vocabulary lacks the names, so they split into several
  "##" pieces; config.json's id2label is HF's default (LABEL_0 ...).
- bert_tagged/: the same weights, with id2label naming the tags in an order
  that is not sorted (O first, as conll2003's): run_ner keeps a checkpoint's
  order when its tags are the training set's.
- bert_short/: the same as bert/, with model_max_length 16 in
  tokenizer_config.json: without --max_seq_length run_ner truncates to it.
- roberta/: RobertaForTokenClassification with a byte-level BPE tokenizer
  (tokenizer_class RobertaTokenizer, so add_prefix_space=True takes effect:
  each word is encoded with a leading space).
- data/train.jsonl, dev.jsonl: {"tokens", "ner_tags"} rows, IOB2 tags of
  three types.

cases.json: per case, kiln's flags ("{dir}" is this folder), the features
run_ner's tokenize_and_align_labels makes of train.jsonl (input_ids and
labels), the label list, the training losses and gradient norms of five
AdamW steps on one batch holding every row (so the sampler's order does not
matter), the evaluation and prediction metrics after them (compute_metrics:
evaluate's seqeval, overall scores, or with --return_entity_level_metrics
each entity type's and the overall ones under their keys) and predictions.txt's lines.
"""
import json
import pathlib
import random
import shutil
import string
import sys

# This folder's datasets/ would shadow the datasets package transformers imports.
sys.path = [p for p in sys.path if pathlib.Path(p or ".").resolve() != pathlib.Path(__file__).resolve().parent]

import numpy as np  # noqa: E402
import torch  # noqa: E402
from seqeval.metrics import accuracy_score, classification_report  # noqa: E402
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers  # noqa: E402
from transformers import (AutoConfig, AutoModelForTokenClassification, AutoTokenizer, BertConfig,  # noqa: E402
                          BertForTokenClassification, DataCollatorForTokenClassification, PreTrainedConfig,
                          PreTrainedTokenizerFast, RobertaConfig, RobertaForTokenClassification, Trainer,
                          TrainingArguments)

OUT = pathlib.Path(__file__).resolve().parent / "ner"
WORDS = "the a cat dog sat ran on mat big small red blue fast slow good bad very not it was".split()
TYPES = {"Paris": "LOC", "Berlin": "LOC", "Zurich": "LOC", "Obama": "PER", "Merkel": "PER", "Xavier": "PER",
         "Google": "ORG", "Acme": "ORG"}
TAGGED_ORDER = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC"]


def rows(n, seed):
    r = random.Random(seed)
    out = []
    for _ in range(n):
        toks, tags = [], []
        for _ in range(r.randint(3, 9)):
            if r.random() < 0.35:
                t = TYPES[r.choice(sorted(TYPES))]
                for j in range(r.randint(1, 2)):
                    toks.append(r.choice([w for w in sorted(TYPES) if TYPES[w] == t]))
                    tags.append(("B-" if j == 0 else "I-") + t)
            else:
                toks.append(r.choice(WORDS + ["catdog", "xyzzy", "redblue"]))
                tags.append("O")
        out.append({"tokens": toks, "ner_tags": tags})
    return out


def save(model, tok, d):
    d.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(d)
    tok.save_pretrained(d)
    (d / "special_tokens_map.json").unlink(missing_ok=True)


def make_bert(d, num_labels):
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS + ["paris", "obama", "google"]
    vocab = list(dict.fromkeys(vocab + list(string.ascii_lowercase) + ["##" + c for c in string.ascii_lowercase]))
    v = {t: i for i, t in enumerate(vocab)}
    tok = Tokenizer(models.WordPiece(v, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                       special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tok.decoder = decoders.WordPiece()
    t = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                                sep_token="[SEP]", mask_token="[MASK]")
    cfg = BertConfig(vocab_size=len(v), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=64, hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0, num_labels=num_labels, pad_token_id=0)
    torch.manual_seed(0)
    save(BertForTokenClassification(cfg), t, d)


def make_roberta(d, num_labels):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), min_frequency=1)
    tok.train_from_iterator([" ".join(r["tokens"]) for r in rows(30, 3)], trainer)
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), trim_offsets=True,
                                                      add_prefix_space=False)
    t = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", sep_token="</s>",
                                cls_token="<s>", unk_token="<unk>", pad_token="<pad>", mask_token="<mask>")
    cfg = RobertaConfig(vocab_size=tok.get_vocab_size(), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=66, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0, num_labels=num_labels, pad_token_id=1, type_vocab_size=1)
    torch.manual_seed(0)
    save(RobertaForTokenClassification(cfg), t, d)
    # A RoBERTa checkpoint's class, which honours add_prefix_space=True as run_ner passes it (the generic
    # TokenizersBackend keeps the tokenizer.json's pre-tokenizer as it is).
    cfg_path = d / "tokenizer_config.json"
    tc = json.loads(cfg_path.read_text())
    tc["tokenizer_class"] = "RobertaTokenizer"
    cfg_path.write_text(json.dumps(tc, indent=2) + "\n")


def seqeval_metrics(ref, hyp, entity_level):
    """evaluate's seqeval (default mode, zero_division "warn"), as run_ner's compute_metrics returns it."""
    report = classification_report(y_true=ref, y_pred=hyp, output_dict=True, zero_division="warn")
    report.pop("macro avg")
    report.pop("weighted avg")
    micro = report.pop("micro avg")
    results = {"overall_precision": micro["precision"], "overall_recall": micro["recall"],
               "overall_f1": micro["f1-score"], "overall_accuracy": accuracy_score(ref, hyp)}
    if not entity_level:
        return {k[len("overall_"):]: v for k, v in results.items()}
    for name, score in report.items():
        for key, n in (("precision", "precision"), ("recall", "recall"), ("f1", "f1-score"), ("number", "support")):
            results[f"{name}_{key}"] = score[n]
    return results


def run_ner(model_dir, train, dev, label_all_tokens=False, max_seq_length=None, return_entity_level_metrics=False,
            steps=5):
    """run_ner.py's pipeline from its model loading to predictions.txt (as in transformers' examples)."""
    label_list = sorted({t for r in train for t in r["ner_tags"]})
    num_labels = len(label_list)
    label_to_id = {l: i for i, l in enumerate(label_list)}
    config = AutoConfig.from_pretrained(model_dir, num_labels=num_labels)
    kw = {"add_prefix_space": True} if config.model_type in {"bloom", "gpt2", "roberta", "deberta"} else {}
    tok = AutoTokenizer.from_pretrained(model_dir, use_fast=True, **kw)
    model = AutoModelForTokenClassification.from_pretrained(model_dir, config=config)
    if model.config.label2id != PreTrainedConfig(num_labels=num_labels).label2id:
        if sorted(model.config.label2id.keys()) == sorted(label_list):
            label_list = [model.config.id2label[i] for i in range(num_labels)]
            label_to_id = {l: i for i, l in enumerate(label_list)}
    model.config.label2id = {l: i for i, l in enumerate(label_list)}
    model.config.id2label = dict(enumerate(label_list))
    b_to_i = [label_list.index(l.replace("B-", "I-")) if l.startswith("B-") and l.replace("B-", "I-") in label_list
              else i for i, l in enumerate(label_list)]

    def features(data):
        enc = tok([r["tokens"] for r in data], truncation=True, max_length=max_seq_length, is_split_into_words=True)
        out = []
        for i, r in enumerate(data):
            previous, labels = None, []
            for w in enc.word_ids(batch_index=i):
                if w is None:
                    labels.append(-100)
                elif w != previous:
                    labels.append(label_to_id[r["ner_tags"][w]])
                else:
                    labels.append(b_to_i[label_to_id[r["ner_tags"][w]]] if label_all_tokens else -100)
                previous = w
            f = {k: enc[k][i] for k in enc.keys()}
            f["labels"] = labels
            out.append(f)
        return out

    def kept(predictions, labels):
        return [[label_list[p] for p, l in zip(pr, la) if l != -100] for pr, la in zip(predictions, labels)]

    def compute_metrics(p):
        predictions, labels = p
        predictions = np.argmax(predictions, axis=2)
        return seqeval_metrics(kept(labels, labels), kept(predictions, labels), return_entity_level_metrics)

    tr, ev = features(train), features(dev)
    args = TrainingArguments(output_dir="/tmp/gen_ner_run", report_to="none", save_strategy="no",
                             per_device_train_batch_size=len(tr), per_device_eval_batch_size=3, max_steps=steps,
                             learning_rate=0.02, logging_steps=1, seed=42)
    trainer = Trainer(model=model, args=args, train_dataset=tr, eval_dataset=ev,
                      data_collator=DataCollatorForTokenClassification(tok), compute_metrics=compute_metrics)
    trainer.train()
    quiet = ("runtime", "per_second", "epoch")
    metrics = {k: v for k, v in trainer.evaluate().items() if not any(q in k for q in quiet)}
    predictions, labels, pm = trainer.predict(ev, metric_key_prefix="predict")
    metrics.update({k: v for k, v in pm.items() if not any(q in k for q in quiet)})
    return {
        "labels": label_list,
        "train_features": [{"input_ids": f["input_ids"], "labels": f["labels"]} for f in tr],
        "steps": [{"loss": e["loss"], "grad_norm": e["grad_norm"]} for e in trainer.state.log_history if "loss" in e],
        "metrics": metrics,
        "predictions": [" ".join(p) for p in kept(np.argmax(predictions, axis=2), labels)],
    }


def main():
    if OUT.exists():
        shutil.rmtree(OUT)
    (OUT / "data").mkdir(parents=True)
    train, dev = rows(12, 1), rows(8, 2)
    for name, data in (("train", train), ("dev", dev)):
        (OUT / "data" / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in data))
    num_labels = len({t for r in train for t in r["ner_tags"]})
    make_bert(OUT / "bert", num_labels)
    shutil.copytree(OUT / "bert", OUT / "bert_tagged")
    cfg_path = OUT / "bert_tagged" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["id2label"] = {str(i): l for i, l in enumerate(TAGGED_ORDER)}
    cfg["label2id"] = {l: i for i, l in enumerate(TAGGED_ORDER)}
    cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")
    make_roberta(OUT / "roberta", num_labels)
    shutil.copytree(OUT / "bert", OUT / "bert_short")
    tc_path = OUT / "bert_short" / "tokenizer_config.json"
    tc = json.loads(tc_path.read_text())
    tc["model_max_length"] = 16
    tc_path.write_text(json.dumps(tc, indent=2) + "\n")

    common = ["--task", "token-classification", "--train_file", "{dir}/data/train.jsonl", "--validation_file",
              "{dir}/data/dev.jsonl", "--test_file", "{dir}/data/dev.jsonl", "--do_predict",
              "--per_device_train_batch_size", str(len(train)), "--per_device_eval_batch_size", "3",
              "--max_steps", "5", "--learning_rate", "0.02", "--logging_steps", "1", "--seed", "42",
              "--report_to", "none", "--save_strategy", "no", "--disable_tqdm", "true"]
    cases = {}
    for name, model, opts in (("bert", "bert", {}),
                              ("bert_label_all_tokens", "bert", {"label_all_tokens": True}),
                              ("bert_truncated", "bert", {"max_seq_length": 12}),
                              ("bert_tagged_checkpoint", "bert_tagged", {}),
                              ("bert_tagged_entity_level", "bert_tagged", {"return_entity_level_metrics": True}),
                              ("bert_tokenizer_max_length", "bert_short", {}),
                              ("roberta", "roberta", {}),
                              ("roberta_label_all_tokens_truncated", "roberta",
                               {"label_all_tokens": True, "max_seq_length": 14})):
        flags = common + ["--model_name_or_path", "{dir}/" + model]
        if opts.get("label_all_tokens"):
            flags += ["--label_all_tokens"]
        if opts.get("return_entity_level_metrics"):
            flags += ["--return_entity_level_metrics"]
        if opts.get("max_seq_length"):
            flags += ["--max_seq_length", str(opts["max_seq_length"])]
        case = run_ner(str(OUT / model), train, dev, **opts)
        cases[name] = {"flags": flags, "model": model, **case, **opts}
    (OUT / "cases.json").write_text(json.dumps(cases, indent=1) + "\n")


if __name__ == "__main__":
    main()
