"""Writes tests/goldens/qa/: run_qa.py (transformers' question-answering
example: prepare_train_features, prepare_validation_features, utils_qa's
postprocess_qa_predictions, evaluate's squad / squad_v2) on a tiny random
BertForQuestionAnswering, which `kiln train --task question-answering` must
reproduce (tests/cli/qa_golden_test.cpp) and whose windows and answer
positions tokenize_qa must equal (tests/data/qa_golden_test.cpp).

    /work/pyref/bin/python tests/goldens/gen_qa_goldens.py

Made with torch 2.15 (CPU), transformers 5.25 and tokenizers 0.23.

- bert/: BertForQuestionAnswering (hidden 16, dropout 0) with a WordPiece
  tokenizer (tokenizer_class BertTokenizer, so pairs get token_type_ids) whose
  vocabulary lacks the names and most question words, which split into pieces.
- bert_short/: the same with model_max_length 28 in tokenizer_config.json,
  below the --max_seq_length 32 asked: run_qa takes the smaller.
- data/: SQuAD rows (JSON lines) with contexts of up to 30 words, so that
  max_seq_length 32 and doc_stride 8 cut most into several windows; a few
  questions with leading spaces (run_qa strips them), rows with a second
  gold answer (the first one's first word), and in the *_v2 files unanswerable questions.

One departure from run_qa is written into the goldens on purpose: when an
answer starts at a window's last context token, run_qa's loop
`while offsets[token_start_index][0] <= start_char` walks on into [SEP]
(whose offsets are (0, 0)) and labels the start past the context, after the
end. kiln labels that token itself; `fixed` below does the same and
cases.json counts the windows it changed (run_qa_walks_past_context).

cases.json, per case (v1: squad; v2: squad_v2 with --version_2_with_negative;
v1_tokenizer_max_length: v1 with bert_short):
kiln's flags ("{dir}" is this folder), each training window's input_ids and
start / end positions, the loss and gradient norm of five AdamW steps on one
batch of every window, then on the dev set the metrics, predictions.json, and
per question the n-best texts and probabilities (the logits themselves drift
apart in the QA head's bias, whose exact gradient is zero: Adam turns float
noise into steps of the learning rate, the same shift for every position)
and, for v2, null_odds.json.
"""
import collections
import json
import pathlib
import random
import re
import shutil
import string
import sys

# This folder's datasets/ would shadow the datasets package transformers imports.
sys.path = [p for p in sys.path if pathlib.Path(p or ".").resolve() != pathlib.Path(__file__).resolve().parent]

import numpy as np  # noqa: E402
import torch  # noqa: E402
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors  # noqa: E402
from transformers import (AutoModelForQuestionAnswering, AutoTokenizer, BertConfig,  # noqa: E402
                          BertForQuestionAnswering, DataCollatorWithPadding, PreTrainedTokenizerFast, Trainer,
                          TrainingArguments)

OUT = pathlib.Path(__file__).resolve().parent / "qa"
WORDS = "the a cat dog sat ran on mat big small red blue fast slow good bad very not it was".split()
NAMES = ["Paris", "Berlin", "Obama", "Merkel", "Google", "Acme", "Zurich", "Xavier"]
MAX_LEN, STRIDE, N_BEST, MAX_ANSWER, STEPS = 32, 8, 5, 6, 5


def make_bert(d):
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS + ["paris", "obama", "google", "?"]
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
                     attention_probs_dropout_prob=0.0, pad_token_id=0)
    torch.manual_seed(5)
    d.mkdir(parents=True)
    BertForQuestionAnswering(cfg).save_pretrained(d)
    t.save_pretrained(d)
    (d / "special_tokens_map.json").unlink(missing_ok=True)
    tc = json.loads((d / "tokenizer_config.json").read_text())
    tc["tokenizer_class"] = "BertTokenizer"
    (d / "tokenizer_config.json").write_text(json.dumps(tc, indent=2) + "\n")


def rows(n, seed, v2=False):
    r = random.Random(seed)
    out = []
    for i in range(n):
        words = [r.choice(WORDS + NAMES) for _ in range(r.randint(4, 30))]
        k, length = r.randrange(len(words)), r.randint(1, 3)
        start = len(" ".join(words[:k])) + (1 if k else 0)
        text = " ".join(words[k:k + length])
        answers = {"text": [text], "answer_start": [start]}
        if v2 and i % 4 == 1:
            answers = {"text": [], "answer_start": []}
        elif i % 5 == 2:
            answers = {"text": [text, words[k]], "answer_start": [start, start]}
        question = ("  " if i % 3 == 0 else "") + "where is " + r.choice(NAMES) + " " + r.choice(WORDS) + "?"
        out.append({"id": f"q{seed}-{i}", "question": question, "context": " ".join(words), "answers": answers})
    return out


def encode(tok, examples):
    return tok([e["question"].lstrip() for e in examples], [e["context"] for e in examples],
               truncation="only_second", max_length=MAX_LEN, stride=STRIDE, return_overflowing_tokens=True,
               return_offsets_mapping=True)


def train_features(tok, examples):
    """prepare_train_features; `fixed` stops the start's walk at the context's end (see the docstring)."""
    t = encode(tok, examples)
    features, walks = [], 0
    for i, offsets in enumerate(t["offset_mapping"]):
        ids, seq = t["input_ids"][i], t.sequence_ids(i)
        cls = ids.index(tok.cls_token_id)
        answers = examples[t["overflow_to_sample_mapping"][i]]["answers"]
        start = end = cls
        if answers["answer_start"]:
            start_char = answers["answer_start"][0]
            end_char = start_char + len(answers["text"][0])
            first = 0
            while seq[first] != 1:
                first += 1
            last = len(ids) - 1
            while seq[last] != 1:
                last -= 1
            if offsets[first][0] <= start_char and offsets[last][1] >= end_char:
                s = first
                while s < len(offsets) and offsets[s][0] <= start_char:
                    s += 1
                fixed = first
                while fixed <= last and offsets[fixed][0] <= start_char:
                    fixed += 1
                walks += s != fixed
                start = fixed - 1
                e = last
                while offsets[e][1] >= end_char:
                    e -= 1
                end = e + 1
        features.append({"input_ids": ids, "token_type_ids": t["token_type_ids"][i],
                         "attention_mask": t["attention_mask"][i], "start_positions": start, "end_positions": end})
    return features, walks


def validation_features(tok, examples):
    t = encode(tok, examples)
    out = []
    for i in range(len(t["input_ids"])):
        seq = t.sequence_ids(i)
        out.append({"input_ids": t["input_ids"][i], "token_type_ids": t["token_type_ids"][i],
                    "attention_mask": t["attention_mask"][i],
                    "example_id": examples[t["overflow_to_sample_mapping"][i]]["id"],
                    "offset_mapping": [o if seq[k] == 1 else None for k, o in enumerate(t["offset_mapping"][i])]})
    return out


def postprocess(examples, features, starts, ends, v2):
    """utils_qa.postprocess_qa_predictions (null_score_diff_threshold 0)."""
    index = {e["id"]: i for i, e in enumerate(examples)}
    per_example = collections.defaultdict(list)
    for i, f in enumerate(features):
        per_example[index[f["example_id"]]].append(i)
    answers, nbest, odds = {}, {}, {}
    for ei, example in enumerate(examples):
        null, prelim = None, []
        for fi in per_example[ei]:
            sl, el, om = starts[fi], ends[fi], features[fi]["offset_mapping"]
            score = sl[0] + el[0]
            if null is None or null["score"] > score:
                null = {"offsets": (0, 0), "score": score, "start_logit": sl[0], "end_logit": el[0]}
            for s in np.argsort(sl)[-1:-N_BEST - 1:-1].tolist():
                for e in np.argsort(el)[-1:-N_BEST - 1:-1].tolist():
                    if s >= len(om) or e >= len(om) or om[s] is None or om[e] is None:
                        continue
                    if e < s or e - s + 1 > MAX_ANSWER:
                        continue
                    prelim.append({"offsets": (om[s][0], om[e][1]), "score": sl[s] + el[e], "start_logit": sl[s],
                                   "end_logit": el[e]})
        if v2:
            prelim.append(null)
            null_score = null["score"]
        best = sorted(prelim, key=lambda x: x["score"], reverse=True)[:N_BEST]
        if v2 and not any(p["offsets"] == (0, 0) for p in best):
            best.append(null)
        for p in best:
            o = p.pop("offsets")
            p["text"] = example["context"][o[0]:o[1]]
        if not best or (len(best) == 1 and best[0]["text"] == ""):
            best.insert(0, {"text": "empty", "start_logit": 0.0, "end_logit": 0.0, "score": 0.0})
        scores = np.array([p.pop("score") for p in best])
        probs = np.exp(scores - np.max(scores))
        probs /= probs.sum()
        if not v2:
            answers[example["id"]] = best[0]["text"]
        else:
            i = 0
            while best[i]["text"] == "":
                i += 1
            diff = null_score - best[i]["start_logit"] - best[i]["end_logit"]
            odds[example["id"]] = float(diff)
            answers[example["id"]] = "" if diff > 0.0 else best[i]["text"]
        nbest[example["id"]] = [{"text": p["text"], "probability": float(q)} for p, q in zip(best, probs)]
    return answers, nbest, odds


def normalize(s):
    s = "".join(ch for ch in s.lower() if ch not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", s).split())


def token_f1(prediction, truth, empty_matches):
    p, t = normalize(prediction).split(), normalize(truth).split()
    if empty_matches and (not p or not t):  # squad_v2's rule; SQuAD 1.1's scores two empty answers 0
        return float(p == t)
    same = sum((collections.Counter(p) & collections.Counter(t)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(t)
    return 2 * precision * recall / (precision + recall)


def squad(answers, examples):
    em = sum(max(float(normalize(answers[e["id"]]) == normalize(g)) for g in e["answers"]["text"]) for e in examples)
    f1 = sum(max(token_f1(answers[e["id"]], g, False) for g in e["answers"]["text"]) for e in examples)
    return {"exact_match": 100 * em / len(examples), "f1": 100 * f1 / len(examples)}


def squad_v2(answers, examples):
    """The official SQuAD 2.0 script as evaluate's squad_v2 runs it (no-answer probability 0 everywhere)."""
    exact, f1, has = {}, {}, {}
    for e in examples:
        golds = [a for a in e["answers"]["text"] if normalize(a)] or [""]
        p = answers[e["id"]]
        exact[e["id"]] = max(float(normalize(p) == normalize(g)) for g in golds)
        f1[e["id"]] = max(token_f1(p, g, True) for g in golds)
        has[e["id"]] = any(normalize(a) for a in e["answers"]["text"])
    n = len(examples)
    m = {"exact": 100 * sum(exact.values()) / n, "f1": 100 * sum(f1.values()) / n, "total": n}
    for label, ids in (("HasAns", [i for i in has if has[i]]), ("NoAns", [i for i in has if not has[i]])):
        if ids:
            m.update({f"{label}_exact": 100 * sum(exact[i] for i in ids) / len(ids),
                      f"{label}_f1": 100 * sum(f1[i] for i in ids) / len(ids), f"{label}_total": len(ids)})

    def best(scores):  # find_best_thresh with every no-answer probability 0
        current = best_score = sum(1 for i in has if not has[i])
        for i in has:
            current += scores[i] if has[i] else (-1 if answers[i] else 0)
            best_score = max(best_score, current)
        return 100.0 * best_score / n, 0.0

    m["best_exact"], m["best_exact_thresh"] = best(exact)
    m["best_f1"], m["best_f1_thresh"] = best(f1)
    return m


def run_qa(train, dev, v2, model_dir="bert"):
    tok = AutoTokenizer.from_pretrained(OUT / model_dir)
    model = AutoModelForQuestionAnswering.from_pretrained(OUT / model_dir)
    global MAX_LEN
    asked, MAX_LEN = MAX_LEN, min(MAX_LEN, tok.model_max_length)  # run_qa's max_seq_length
    features, walks = train_features(tok, train)
    val = validation_features(tok, dev)
    MAX_LEN = asked
    args = TrainingArguments(output_dir="/tmp/gen_qa_run", report_to="none", save_strategy="no",
                             per_device_train_batch_size=len(features), per_device_eval_batch_size=4,
                             max_steps=STEPS, learning_rate=0.02, logging_steps=1, seed=42)
    trainer = Trainer(model=model, args=args, train_dataset=features, data_collator=DataCollatorWithPadding(tok))
    trainer.train()
    out = trainer.predict([{k: v for k, v in f.items() if k not in ("example_id", "offset_mapping")} for f in val])
    starts = [out.predictions[0][i][:len(f["input_ids"])] for i, f in enumerate(val)]
    ends = [out.predictions[1][i][:len(f["input_ids"])] for i, f in enumerate(val)]
    answers, nbest, odds = postprocess(dev, val, starts, ends, v2)
    return {
        "run_qa_walks_past_context": walks,
        "train_features": [{k: f[k] for k in ("input_ids", "start_positions", "end_positions")} for f in features],
        "steps": [{"loss": e["loss"], "grad_norm": e["grad_norm"]} for e in trainer.state.log_history if "loss" in e],
        "metrics": squad_v2(answers, dev) if v2 else squad(answers, dev),
        "predictions": answers, "nbest": nbest, "null_odds": odds,
    }


def main():
    if OUT.exists():
        shutil.rmtree(OUT)
    make_bert(OUT / "bert")
    (OUT / "data").mkdir()
    cases = {}
    shutil.copytree(OUT / "bert", OUT / "bert_short")
    tc_path = OUT / "bert_short" / "tokenizer_config.json"
    tc = json.loads(tc_path.read_text())
    tc["model_max_length"] = 28
    tc_path.write_text(json.dumps(tc, indent=2) + "\n")
    for name, data_name, model_dir, train, dev, v2 in (
            ("v1", "v1", "bert", rows(6, 1), rows(10, 2), False),
            ("v2", "v2", "bert", rows(6, 4, True), rows(10, 3, True), True),
            ("v1_tokenizer_max_length", "v1", "bert_short", rows(6, 1), rows(10, 2), False)):
        for split, data in (("train", train), ("dev", dev)):
            (OUT / "data" / f"{split}_{data_name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in data))
        case = run_qa(train, dev, v2, model_dir)
        flags = ["--task", "question-answering", "--model_name_or_path", "{dir}/" + model_dir,
                 "--train_file", f"{{dir}}/data/train_{data_name}.jsonl",
                 "--validation_file", f"{{dir}}/data/dev_{data_name}.jsonl",
                 "--per_device_train_batch_size", str(len(case["train_features"])), "--per_device_eval_batch_size", "4",
                 "--max_steps", str(STEPS), "--learning_rate", "0.02", "--logging_steps", "1", "--seed", "42",
                 "--report_to", "none", "--save_strategy", "no", "--disable_tqdm", "true", "--do_eval",
                 "--max_seq_length", str(MAX_LEN), "--doc_stride", str(STRIDE), "--n_best_size", str(N_BEST),
                 "--max_answer_length", str(MAX_ANSWER)] + (["--version_2_with_negative"] if v2 else [])
        cases[name] = {"flags": flags, **case}
    (OUT / "cases.json").write_text(json.dumps(cases, indent=1) + "\n")


if __name__ == "__main__":
    main()
