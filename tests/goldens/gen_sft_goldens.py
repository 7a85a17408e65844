#!/usr/bin/env python3
"""Generate the supervised fine-tuning (SFT) test data and its goldens.

Run from the repository root with the reference venv (transformers and
tokenizers):

    /work/pyref/bin/python tests/goldens/gen_sft_goldens.py

It writes under tests/goldens/sft/:

  tokenizer/        a small byte-level BPE tokenizer (trained here on the
                    conversations below with `tokenizers`, 384 tokens) whose
                    tokenizer_config.json carries a ChatML chat template with
                    {% generation %} blocks, eos_token <|im_end|> and pad_token
                    <|endoftext|>; ByteLevel post-processing with trim_offsets,
                    so a token's offsets leave out its leading space.
  chat.jsonl        conversations, TRL's conversational format ({"messages": [...]}).
  prompt_completion.jsonl       conversational prompt-completion rows.
  prompt_completion_text.jsonl  plain-string prompt-completion rows.
  goldens.json      what transformers gives and what TRL's SFTTrainer builds:
    "masks":  for each template (the tokenizer's, the repository's SmolLM3
              template, and one whose generation block sits in a macro) x each
              conversation: the rendered text, the generation spans
              (transformers' generation_indices), input_ids and assistant_masks
              from apply_chat_template(..., return_dict=True,
              return_assistant_tokens_mask=True).
    "sft":    for each data file and loss setting: each row's input_ids and
              labels as TRL's SFTTrainer._prepare_dataset builds them (tokenize_fn,
              then build_labels), with max_length 1024 and no packing.

TRL itself is not imported (it pulls in accelerate and datasets); tokenize_fn
and build_labels are re-implemented below line by line from TRL's
trl/trainer/sft_trainer.py, calling transformers for every tokenization.
"""

import json
import os
import sys
from datetime import datetime

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast
from transformers.utils import chat_template_utils

# strftime_now() reads this local time (SmolLM3's template prints the date); the C++ test sets the same.
NOW = datetime(2024, 7, 26, 9, 30, 15)


class _FixedClock(datetime):
    @classmethod
    def now(cls, tz=None):
        return NOW


chat_template_utils.datetime = _FixedClock

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(REPO_ROOT, "tests", "goldens", "sft")
TEMPLATES = os.path.join(REPO_ROOT, "tests", "goldens", "chat_templates", "templates")

# ChatML with the assistant's content and end-of-turn inside {% generation %},
# as TRL's training templates mark them.
CHATML = (
    "{%- for message in messages %}"
    "{%- if message['role'] == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- generation %}{{- message['content'] + '<|im_end|>' }}{%- endgeneration %}"
    "{{- '\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# A generation block inside a macro: transformers records the span at the
# length of the output yielded so far, not where the macro's text lands.
IN_MACRO = (
    "{%- macro turn(m) %}<|im_start|>{{ m.role }}\n"
    "{%- if m.role == 'assistant' %}{% generation %}{{ m.content }}<|im_end|>{% endgeneration %}"
    "{%- else %}{{ m.content }}<|im_end|>{% endif %}\n{% endmacro %}"
    "{%- for m in messages %}{{ turn(m) }}{% endfor %}"
)

NAMES = ["Ada", "Bob", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hal"]
COLORS = ["red", "blue", "green", "gold", "gray", "pink"]


def conversations():
    """Short chats in one answering style: the assistant repeats the number asked about, doubled."""
    rows = []
    for i in range(24):
        a = i % 9 + 1
        msgs = []
        if i % 3 == 0:
            msgs.append({"role": "system", "content": "Answer with the double."})
        msgs.append({"role": "user", "content": "Double %d?" % a})
        msgs.append({"role": "assistant", "content": "%d doubled is %d." % (a, 2 * a)})
        if i % 4 == 1:
            b = (i * 7) % 9 + 1
            msgs.append({"role": "user", "content": "And %d?" % b})
            msgs.append({"role": "assistant", "content": "%d doubled is %d." % (b, 2 * b)})
        rows.append({"messages": msgs})
    return rows


def mask_conversations():
    """Conversations for the mask goldens: multi-turn, unicode, whitespace, an empty answer."""
    return {
        "single": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there!"}],
        "system_multi": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Double 3?"},
            {"role": "assistant", "content": "3 doubled is 6."},
            {"role": "user", "content": "And 4?"},
            {"role": "assistant", "content": "4 doubled is 8."},
        ],
        "unicode": [
            {"role": "user", "content": "Grüße 👋 你好"},
            {"role": "assistant", "content": " café — naïve 😀 "},
        ],
        "empty_answer": [{"role": "user", "content": "Say nothing."}, {"role": "assistant", "content": ""}],
        "leading_space": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "  spaced  out\n"}],
        "user_last": [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "b"},
            {"role": "user", "content": "c"},
        ],
    }


def build_tokenizer():
    corpus = []
    for row in conversations():
        corpus += [m["content"] for m in row["messages"]]
    for msgs in mask_conversations().values():
        corpus += [m["content"] for m in msgs]
    corpus += ["system user assistant", "<think>\n\n</think>\n"] * 4
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    trainer = trainers.BpeTrainer(
        vocab_size=384,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer)
    return tok


def write_json(path, obj, indent=None):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=indent)
        f.write("\n")


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def masks_golden(tokenizer, template, messages):
    out = tokenizer.apply_chat_template(
        messages, chat_template=template, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    text = tokenizer.apply_chat_template(messages, chat_template=template, tokenize=False)
    # The spans, as transformers records them (its AssistantTracker, through the internal renderer).
    from transformers.utils.chat_template_utils import render_jinja_template

    rendered, spans = render_jinja_template(
        conversations=[messages], chat_template=template, return_assistant_tokens_mask=True,
        **tokenizer.special_tokens_map,
    )
    assert rendered[0] == text
    return {
        "messages": messages,
        "text": text,
        "generation_spans": [list(s) for s in spans[0]],
        "input_ids": list(out["input_ids"]),
        "assistant_masks": list(out["assistant_masks"]),
    }


# ---- TRL's SFTTrainer._prepare_dataset, as in trl/trainer/sft_trainer.py ----

def is_conversational(example):
    for key in ["prompt", "chosen", "rejected", "completion", "messages"]:
        if key in example:
            v = example[key]
            return isinstance(v, list) and isinstance(v[0], dict) and "role" in v[0]
    return False


def trl_rows(tokenizer, rows, assistant_only_loss, completion_only_loss):
    out = []
    for example in rows:
        example = dict(example)
        if not is_conversational(example):  # add_eos
            eos = tokenizer.eos_token
            if "text" in example and not example["text"].endswith(eos):
                example["text"] += eos
            elif "completion" in example and not example["completion"].endswith(eos):
                example["completion"] += eos
        output = {}
        if "prompt" in example:
            if is_conversational(example):
                prompt_ids = tokenizer.apply_chat_template(
                    example["prompt"], tokenize=True, return_dict=True, add_generation_prompt=True
                )["input_ids"]
                processed = tokenizer.apply_chat_template(
                    example["prompt"] + example["completion"], tokenize=True, return_dict=True,
                    return_assistant_tokens_mask=assistant_only_loss,
                )
                pc_ids = processed["input_ids"]
                if "assistant_masks" in processed:
                    output["assistant_masks"] = processed["assistant_masks"]
            else:
                prompt_ids = tokenizer(text=example["prompt"])["input_ids"]
                pc_ids = tokenizer(text=example["prompt"] + example["completion"])["input_ids"]
            output["input_ids"] = pc_ids
            output["completion_mask"] = [0] * len(prompt_ids) + [1] * (len(pc_ids) - len(prompt_ids))
        else:
            if is_conversational(example):
                processed = tokenizer.apply_chat_template(
                    example["messages"], tokenize=True, return_dict=True,
                    return_assistant_tokens_mask=assistant_only_loss,
                )
                output = {k: processed[k] for k in ("input_ids", "assistant_masks") if k in processed}
            else:
                output = {"input_ids": tokenizer(text=example["text"])["input_ids"]}
        if "assistant_masks" in output and 1 not in output["assistant_masks"]:
            raise RuntimeError("example without assistant tokens")
        masks = []
        if completion_only_loss and "completion_mask" in output:
            masks.append(output["completion_mask"])
        if "assistant_masks" in output:
            masks.append(output["assistant_masks"])
        labels = [t if all(bits) else -100 for t, *bits in zip(output["input_ids"], *masks)]
        out.append({"input_ids": list(output["input_ids"]), "labels": labels})
    return out


def main():
    os.makedirs(os.path.join(OUT, "tokenizer"), exist_ok=True)
    tok = build_tokenizer()
    tok.save(os.path.join(OUT, "tokenizer", "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "model_max_length": 1024,
        "chat_template": CHATML,
    }
    write_json(os.path.join(OUT, "tokenizer", "tokenizer_config.json"), config, indent=2)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(os.path.join(OUT, "tokenizer"))
    assert tokenizer.chat_template == CHATML and tokenizer.eos_token == "<|im_end|>"

    chats = conversations()
    write_jsonl(os.path.join(OUT, "chat.jsonl"), chats)
    pc = [{"prompt": r["messages"][:-1], "completion": r["messages"][-1:]} for r in chats[:12]]
    write_jsonl(os.path.join(OUT, "prompt_completion.jsonl"), pc)
    pct = [{"prompt": "Double %d?" % a, "completion": " %d doubled is %d." % (a, 2 * a)} for a in range(1, 9)]
    pct[3]["completion"] += "<|im_end|>"  # already ends with EOS: TRL adds none
    write_jsonl(os.path.join(OUT, "prompt_completion_text.jsonl"), pct)

    with open(os.path.join(TEMPLATES, "smollm3.jinja"), encoding="utf-8") as f:
        smollm3 = f.read()
    masks = {}
    for name, template in [("chatml", CHATML), ("smollm3", smollm3), ("in_macro", IN_MACRO)]:
        masks[name] = {"template": template, "cases": {}}
        for conv, messages in mask_conversations().items():
            masks[name]["cases"][conv] = masks_golden(tokenizer, template, messages)

    sft = {
        "chat.jsonl": {
            "all_tokens": trl_rows(tokenizer, chats, False, None),
            "assistant_only_loss": trl_rows(tokenizer, chats, True, None),
        },
        "prompt_completion.jsonl": {
            "completion_only_loss": trl_rows(tokenizer, pc, False, True),
            "all_tokens": trl_rows(tokenizer, pc, False, False),
            "assistant_only_loss": trl_rows(tokenizer, pc, True, True),
        },
        "prompt_completion_text.jsonl": {
            "completion_only_loss": trl_rows(tokenizer, pct, False, True),
            "all_tokens": trl_rows(tokenizer, pct, False, False),
        },
    }
    goldens = {"now": NOW.isoformat(), "masks": masks, "sft": sft}
    write_json(os.path.join(OUT, "goldens.json"), goldens, indent=None)
    n = sum(len(m["cases"]) for m in masks.values())
    print("wrote %s: %d mask cases, %d sft sets" % (OUT, n, sum(len(v) for v in sft.values())), file=sys.stderr)


if __name__ == "__main__":
    main()
