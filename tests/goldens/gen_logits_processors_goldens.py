"""Writes tests/goldens/logits_processors.json: what transformers' own logits
processors and warpers do to crafted rows of scores, and the token ids its
generate() returns with them on the tiny golden models.

    /work/pyref/bin/python tests/goldens/gen_logits_processors_goldens.py

"rows": one row of scores each, with the ids so far (`ids`, the row's
input_ids), `input_length` (generate()'s input_ids_seq_length: the prompt, or
an encoder-decoder's decoder start), `max_length`, the EOS ids, `num_beams`
(beam methods keep 1 + #eos tokens in the warpers) and the GenerationConfig
settings; `scores` is the row after the LogitsProcessorList transformers'
`_get_logits_processor` builds for them (its order: sequence_bias, repetition
penalty, no-repeat n-grams, bad_words_ids, min lengths, forced BOS/EOS,
remove_invalid_values, exponential decay, suppress_tokens,
begin_suppress_tokens; with do_sample the warpers temperature, top_k, top_p,
min_p, typical_p, epsilon_cutoff, eta_cutoff; renormalize_logits last), with
`processors` naming them. Non-finite values are written as the strings
"inf", "-inf" and "nan". The rows sit on the boundaries: ties, a mass exactly
at the cut, all -inf but one, prefixes longer than the ids, EOS among the bad
words.

"cases": token ids generate() returns (greedy and num_beams 3) for
`gpt2/gpt2_lm`, `llama/llama_lm` and `t5/t5_relu_tied` with one or more of
suppress_tokens, begin_suppress_tokens, bad_words_ids, forced_bos_token_id,
forced_eos_token_id, sequence_bias, exponential_decay_length_penalty,
renormalize_logits and remove_invalid_values, their ids taken from the
model's plain greedy output so that each setting changes it; `baseline` is
that greedy output. Sequences are cut after the first EOS, and T5's lack the
decoder start token, as kiln returns them.

Made with transformers 5.25.0 and torch 2.15.0 (CPU).
"""
import json
import math
import pathlib

import torch
from transformers import AutoModelForCausalLM, GenerationConfig, T5ForConditionalGeneration

ROOT = pathlib.Path(__file__).resolve().parent
LN2 = math.log(2.0)
INF = float("inf")
NAN = float("nan")
# Probabilities 1/2, 1/4, 1/8, 1/8.
HALVES = [3 * LN2, 2 * LN2, LN2, LN2]
GENERAL = [0.3, -1.2, 2.2, 0.9, 1.7, -0.4, 1.1, 0.0, 2.0, -2.5]

ROWS = [
    # TypicalLogitsWarper: every shifted score tied (a uniform row keeps all).
    dict(logits=[0, 0, 0, 0], typical_p=0.5),
    dict(logits=[2, 1, 0, -1, -3], typical_p=0.9),
    dict(logits=[2, 1, 0, -1, -3], typical_p=0.5),
    dict(logits=[2, 1, 0, -1, -3], typical_p=0.2),
    dict(logits=GENERAL, typical_p=0.7, temperature=0.8),
    # A cumulative mass exactly typical_p: the sorted order 1/4, 1/2, 1/8, 1/8 reaches 0.75 at the second.
    dict(logits=HALVES, typical_p=0.75),
    dict(logits=HALVES, typical_p=0.25),
    # All -inf but one (the entropy's nansum skips 0 * -inf).
    dict(logits=[0, -INF, -INF, -INF], typical_p=0.5),
    dict(logits=[1.5, -INF, 0.5, -INF, 0.5], typical_p=0.4),
    # A tiny mass keeps only the scores closest to the entropy (ties with it stay).
    dict(logits=[2, 1, 1, 0, -1], typical_p=1e-6),
    # Beam sampling keeps 1 + #eos: with one EOS, two.
    dict(logits=[5, 1, 0, 0, -2], typical_p=0.2, num_beams=2),
    dict(logits=[5, 1, 0, 0, -2], typical_p=0.2, num_beams=2, eos=[3, 4]),
    # EpsilonLogitsWarper: a probability exactly epsilon stays (only < epsilon goes).
    dict(logits=HALVES, epsilon_cutoff=0.125),
    dict(logits=HALVES, epsilon_cutoff=0.2),
    dict(logits=HALVES, epsilon_cutoff=0.9),
    # Nothing above epsilon: the largest (and those tied with it) stay.
    dict(logits=[1, 1, 0, 0], epsilon_cutoff=0.9),
    dict(logits=GENERAL, epsilon_cutoff=0.05, temperature=1.3),
    dict(logits=GENERAL, epsilon_cutoff=0.5, num_beams=3),
    dict(logits=[0, -INF, -INF], epsilon_cutoff=0.3),
    # EtaLogitsWarper: eta = min(epsilon, sqrt(epsilon) * exp(-entropy)).
    dict(logits=GENERAL, eta_cutoff=0.05),
    dict(logits=GENERAL, eta_cutoff=0.5),
    dict(logits=[0] * 8, eta_cutoff=0.9),
    dict(logits=HALVES, eta_cutoff=0.3),
    dict(logits=[3, 0, -INF, 0, -1], eta_cutoff=0.2, num_beams=2),
    dict(logits=[0, -INF, -INF], eta_cutoff=0.6),
    # The warpers together, in transformers' order (after top_k, top_p and min_p).
    dict(logits=GENERAL, top_k=6, top_p=0.95, min_p=0.05, typical_p=0.9, epsilon_cutoff=0.02, eta_cutoff=0.01,
         temperature=1.2),
    dict(logits=GENERAL, typical_p=0.8, epsilon_cutoff=0.1, renormalize_logits=True),
    # SuppressTokensLogitsProcessor: ids outside the vocabulary match nothing.
    dict(logits=GENERAL, do_sample=False, suppress_tokens=[2, 8, 100]),
    # SuppressTokensAtBeginLogitsProcessor: only when the ids are exactly input_length long...
    dict(logits=GENERAL, do_sample=False, ids=[4, 5, 6], input_length=3, begin_suppress_tokens=[2, 8]),
    dict(logits=GENERAL, do_sample=False, ids=[4, 5, 6], input_length=2, begin_suppress_tokens=[2, 8]),
    # ... one more with a forced BOS after a one-token input (an encoder-decoder's start token).
    dict(logits=GENERAL, do_sample=False, ids=[0, 5], input_length=1, begin_suppress_tokens=[2, 8],
         forced_bos_token_id=4),
    dict(logits=GENERAL, do_sample=False, ids=[0], input_length=1, begin_suppress_tokens=[2, 8]),
    # NoBadWordsLogitsProcessor: single ids always, longer sequences when their prefix ends the ids; a single EOS
    # is dropped from the list (a longer sequence holding it is not); a prefix longer than the ids never matches.
    dict(logits=GENERAL, do_sample=False, ids=[1, 7, 4], eos=[6],
         bad_words_ids=[[2], [4, 5], [7, 4, 3], [6], [6, 9], [1, 1, 7, 4, 0], [3, 3]]),
    dict(logits=GENERAL, do_sample=False, ids=[4], eos=[6], bad_words_ids=[[9, 4, 8], [4, 0], [0, 4, 1]]),
    # SequenceBiasLogitsProcessor: biases of the sequences that end here add up; a repeated sequence's last bias
    # wins; then the repetition penalty (after it) divides or multiplies the biased scores.
    dict(logits=GENERAL, do_sample=False, ids=[3, 4],
         sequence_bias=[[[2], -1.5], [[4, 5], 2.0], [[9, 5], 0.5], [[5], 1.0], [[3, 4, 6], -3.0], [[8], 4.0],
                        [[8], -0.25], [[1, 2, 3, 4, 7], 9.0]]),
    dict(logits=GENERAL, do_sample=False, ids=[3, 4], repetition_penalty=1.3,
         sequence_bias=[[[3], 1.0], [[4], -2.0], [[3, 4], 0.5]]),
    # ForcedBOSTokenLogitsProcessor: at length 1 only.
    dict(logits=GENERAL, do_sample=False, ids=[0], forced_bos_token_id=7),
    dict(logits=GENERAL, do_sample=False, ids=[0, 7], forced_bos_token_id=7),
    # ForcedEOSTokenLogitsProcessor: at max_length - 1, every forced EOS id at 0.
    dict(logits=GENERAL, do_sample=False, ids=[1, 2, 3], max_length=4, forced_eos_token_id=[5, 9]),
    dict(logits=GENERAL, do_sample=False, ids=[1, 2, 3], max_length=5, forced_eos_token_id=5),
    # InfNanRemoveLogitsProcessor: NaN to 0, +-inf to float32's largest and lowest; after the forcing.
    dict(logits=[NAN, INF, -INF, 1.0, -2.0], do_sample=False, remove_invalid_values=True),
    dict(logits=GENERAL, do_sample=False, ids=[0], forced_bos_token_id=7, remove_invalid_values=True),
    # ExponentialDecayLengthPenalty: after start_index new ids, |eos score| * (factor ** n - 1) is added.
    dict(logits=GENERAL, do_sample=False, ids=[1, 2, 3, 4, 5, 6], input_length=3, eos=[1, 5, 9],
         exponential_decay_length_penalty=[1, 1.5]),
    dict(logits=GENERAL, do_sample=False, ids=[1, 2, 3, 4, 5, 6], input_length=3, eos=[1],
         exponential_decay_length_penalty=[3, 1.5]),
    dict(logits=[0.5, -INF, 2.0], do_sample=False, ids=[1, 2, 3, 4], input_length=1, eos=[1, 0],
         exponential_decay_length_penalty=[0, 0.5]),
    # LogitNormalization last (beam search's rows are log-probabilities the processors change).
    dict(logits=GENERAL, do_sample=False, ids=[3, 4], suppress_tokens=[2], sequence_bias=[[[8], 1.0]],
         renormalize_logits=True),
    # Everything at once, sampling with beams.
    dict(logits=GENERAL, ids=[2, 5, 6, 2], input_length=3, max_length=9, eos=[9], num_beams=2, temperature=0.9,
         top_k=8, typical_p=0.95, eta_cutoff=0.001, sequence_bias=[[[2, 5], 1.0]], repetition_penalty=1.2,
         no_repeat_ngram_size=2, bad_words_ids=[[1]], min_new_tokens=1, suppress_tokens=[7],
         exponential_decay_length_penalty=[0, 1.1], renormalize_logits=True),
]

ROW_KEYS = ("logits", "ids", "input_length", "max_length", "eos", "num_beams")


def finite_or_text(values):
    return [x if math.isfinite(x) else ("nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")) for x in values]


def row_settings(row):
    settings = {"do_sample": True, "top_k": 0}
    settings.update({k: v for k, v in row.items() if k not in ROW_KEYS})
    return settings


def processed_row(model, row):
    ids = row.get("ids", [0])
    eos = row.get("eos", [98])
    gc = GenerationConfig(num_beams=row.get("num_beams", 1), max_length=row.get("max_length", 20),
                          eos_token_id=eos, **row_settings(row))
    gc._eos_token_tensor = torch.tensor(eos)
    procs = model._get_logits_processor(generation_config=gc, input_ids_seq_length=row.get("input_length", len(ids)),
                                        encoder_input_ids=torch.tensor([ids]), device="cpu", model_kwargs={})
    scores = procs(torch.tensor([ids]), torch.tensor([row["logits"]], dtype=torch.float32))
    return [float(x) for x in scores[0]], [type(p).__name__ for p in procs]


def rows_json(model):
    out = []
    for row in ROWS:
        scores, procs = processed_row(model, row)
        ids = row.get("ids", [0])
        out.append({"logits": finite_or_text(row["logits"]), "ids": ids,
                    "input_length": row.get("input_length", len(ids)), "max_length": row.get("max_length", 20),
                    "eos": row.get("eos", [98]), "num_beams": row.get("num_beams", 1),
                    "settings": row_settings(row), "processors": procs, "scores": finite_or_text(scores)})
        print(procs, [round(x, 3) for x in scores])
    return out


MODELS = [("gpt2/gpt2_lm", False), ("llama/llama_lm", False), ("t5/t5_relu_tied", True)]
PROMPTS = {False: [[5, 17, 42, 8], [23]], True: [[7, 70, 2, 33, 45, 1]]}
MAX_NEW = 8


def settings_for(greedy, eos, enc_dec, prompt):
    """Settings whose ids come from the plain greedy continuation `greedy` (new ids only)."""
    a, b = greedy[0], greedy[1]
    c = next((t for t in greedy[2:] if t not in (a, b)), greedy[2])
    late = next((t for t in greedy[4:] if t not in greedy[:4]), greedy[5])
    other = next(t for t in range(3, 99) if t not in greedy and t != eos)
    s = [
        {"suppress_tokens": [a, c]},
        {"begin_suppress_tokens": [a, other]},
        {"bad_words_ids": [[b], [eos]]},
        {"bad_words_ids": [[a, b], [greedy[3], greedy[4]], [99 - 1 - other]]},
        {"forced_eos_token_id": [other, eos]},
        {"sequence_bias": [[[a], -4.0], [[b, c], -6.0], [[other], 2.5]]},
        {"sequence_bias": [[[c], 3.0]], "renormalize_logits": True},
        {"exponential_decay_length_penalty": [1, 4.0], "_eos": late},
        {"suppress_tokens": [b], "begin_suppress_tokens": [a], "remove_invalid_values": True, "renormalize_logits": True},
        {"forced_bos_token_id": other},
        {"forced_bos_token_id": other, "begin_suppress_tokens": [a, b], "remove_invalid_values": True},
    ]
    if enc_dec or len(prompt) == 1:
        s.append({"forced_bos_token_id": other, "forced_eos_token_id": eos, "sequence_bias": [[[other, a], -9.0]]})
    return s


def cases_json():
    cases = []
    for model_dir, enc_dec in MODELS:
        cls = T5ForConditionalGeneration if enc_dec else AutoModelForCausalLM
        model = cls.from_pretrained(ROOT / model_dir).float().eval()
        default_eos = model.config.eos_token_id
        for prompt in PROMPTS[enc_dec]:
            ids = torch.tensor([prompt])
            start = 1 if enc_dec else len(prompt)
            with torch.no_grad():
                plain = model.generate(ids, max_new_tokens=MAX_NEW, do_sample=False, num_beams=1,
                                       eos_token_id=default_eos)[0].tolist()
                greedy = plain[start:]
                for settings in settings_for(greedy, default_eos, enc_dec, prompt):
                    kw = {k: v for k, v in settings.items() if not k.startswith("_")}
                    eos = settings.get("_eos", default_eos)
                    for beams in (1, 3):
                        out = model.generate(ids, do_sample=False, num_beams=beams, max_new_tokens=MAX_NEW,
                                             eos_token_id=eos, pad_token_id=None if enc_dec else eos, **kw)
                        seq = out[0].tolist()
                        if enc_dec:
                            seq = seq[1:]
                        first = 0 if enc_dec else len(prompt)
                        if eos in seq[first:]:
                            seq = seq[:first + seq[first:].index(eos) + 1]
                        cases.append({"model": model_dir, "prompt": prompt, "eos_token_id": eos, "num_beams": beams,
                                      "max_new_tokens": MAX_NEW, "settings": kw, "baseline": greedy,
                                      "sequence": seq})
                        changed = seq[0 if enc_dec else len(prompt):] != greedy
                        print(model_dir, len(prompt), beams, kw, "changed" if changed else "SAME", seq)
    return cases


def main():
    gpt2 = AutoModelForCausalLM.from_pretrained(ROOT / "gpt2/gpt2_lm").eval()
    out = {"generator": "gen_logits_processors_goldens.py", "rows": rows_json(gpt2), "cases": cases_json()}
    (ROOT / "logits_processors.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
