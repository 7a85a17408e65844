"""Goldens for Tokenizer::from_pretrained against transformers 5's AutoTokenizer.

AutoTokenizer picks a class from tokenizer_config.json's tokenizer_class (else
config.json's model_type); the model-specific classes rebuild the normalizer,
pre-tokenizer, decoder and model options from the class and the config's flags
and add the special tokens the file lacks. Each case here is a model directory
as real repos ship it (tokenizer.json, tokenizer_config.json with the class and
flags, config.json), around tiny models trained here, whose tokenizer.json
pipeline differs from what the class rebuilds wherever it can, so the goldens
fail if kiln ran the file as written. Cases where AutoTokenizer does run the
file as written (Llama 3, Mistral, Phi-3, a Llama class over a byte-level file)
are guards.

    /work/pyref/bin/python tests/goldens/gen_autotokenizer_goldens.py

writes tests/goldens/tokenizers/auto/<case>/ (the directory, plus
expected.json: the class, ids with and without special tokens, decodes with
skip_special_tokens true and false, pairs, and the id of each named special
token), and tests/goldens/tokenizers/auto_classes.json: the class AutoTokenizer
picks for each tokenizer_class x model_type x (byte-level file or not). Deterministic: the trainers run single-threaded.
"""
import os

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import json  # noqa: E402
import shutil  # noqa: E402

import transformers  # noqa: E402
from tokenizers import AddedToken, Regex, Tokenizer, models  # noqa: E402
from tokenizers import decoders as D  # noqa: E402
from tokenizers import normalizers as N  # noqa: E402
from tokenizers import pre_tokenizers as P  # noqa: E402
from tokenizers import processors as PP  # noqa: E402
from tokenizers import trainers as T  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

transformers.utils.logging.set_verbosity_error()
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tokenizers", "auto")
CORPUS = [
    "The quick brown fox jumps over the lazy dog. I'm sure we'll see.",
    "Hello world! Hello, World. HELLO 12345 and 42 apples.",
    "café naïve résumé — “quotes” and tabs\tand\nnewlines",
    "日本語 中文 emoji 😀 text here, there and everywhere.",
] * 4
TEXTS = [
    "Hello world", "  leading spaces", "trailing   ", " ", "", "a\tb\t\tc", "cr\r\nlf\nx", "\n\nstart",
    "multiple    spaces", "I'm don't", "e\u0301 café", "日本語 中文", "👨\u200d👩\u200d👧 family", "a\u00a0b",
    "<s>hi</s>", "</s>after", "word<mask>word", " <mask> x", "<pad><unk>", "[CLS] x [SEP]  y", "[MASK]word",
    "<|im_start|>user\nhi<|im_end|>", "<|endoftext|>  next", "HeLLo WoRLD ÀÉÎ", "end.", "<extra_id_0> fill",
    "a<new_tok>b", " <new_tok>  x <b_tok>z",
]
PAIRS = [["Hello", "world"], ["  lead", "trail  "], ["a", ""], ["日本", "x <mask>"]]
SPECIALS = ["bos", "eos", "unk", "sep", "pad", "cls", "mask"]


def train(model, trainer, pre=None, normalizer=None):
    tok = Tokenizer(model)
    if normalizer is not None:
        tok.normalizer = normalizer
    if pre is not None:
        tok.pre_tokenizer = pre
    tok.train_from_iterator(CORPUS, trainer)
    return tok


def byte_level(specials):
    tok = train(models.BPE(), T.BpeTrainer(vocab_size=290, special_tokens=specials, show_progress=False,
                                           initial_alphabet=P.ByteLevel.alphabet()), P.ByteLevel(add_prefix_space=False))
    tok.decoder = D.ByteLevel()
    return tok


def spm_bpe():
    # Llama 2's tokenizer.json: Prepend/Replace normalizer, byte fallback, no
    # pre-tokenizer; the byte pieces <0x00>..<0xFF> follow the three specials.
    tok = train(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True),
                T.BpeTrainer(vocab_size=80, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False),
                normalizer=N.Sequence([N.Prepend("▁"), N.Replace(" ", "▁")]))
    j = json.loads(tok.to_str())
    old = sorted(j["model"]["vocab"].items(), key=lambda kv: kv[1])
    pieces = [k for k, _ in old[:3]] + ["<0x%02X>" % b for b in range(256)] + [k for k, _ in old[3:]]
    j["model"]["vocab"] = {k: i for i, k in enumerate(pieces)}
    tok = Tokenizer.from_str(json.dumps(j))
    tok.decoder = D.Sequence([D.Replace("▁", " "), D.ByteFallback(), D.Fuse(), D.Strip(" ", 1, 0)])
    tok.post_processor = PP.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B:1", special_tokens=[("<s>", 1)])
    return tok


WORDS = sorted({w.strip(".,!?“”—") for line in CORPUS for w in line.split()} - {""})
CHARS = sorted({c for line in CORPUS for c in line if not c.isspace()})


def unigram(specials, unk):
    # A hand-built vocabulary (the Unigram trainer is not deterministic):
    # every character and word of the corpus, longer pieces scored higher.
    pieces = [(s, 0.0) for s in specials] + [("▁", -2.0)]
    pieces += [(c, -8.0) for c in CHARS] + [("▁" + w, round(-10.0 + len(w), 2)) for w in WORDS if len(w) > 1]
    tok = Tokenizer(models.Unigram(pieces, unk_id=specials.index(unk), byte_fallback=False))
    tok.normalizer = N.NFKC()
    tok.pre_tokenizer = P.Metaspace(prepend_scheme="never")
    tok.decoder = D.Metaspace(prepend_scheme="never")
    tok.add_special_tokens([AddedToken(s, special=True) for s in specials])
    return tok


def wordpiece(lowercase):
    # A hand-built vocabulary (the WordPiece trainer is not deterministic).
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = specials + CHARS + ["##" + c for c in CHARS if c.isalnum()] + [w for w in WORDS if len(w) > 1]
    tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(dict.fromkeys(vocab))}, unk_token="[UNK]"))
    tok.normalizer = N.BertNormalizer(lowercase=lowercase, strip_accents=True)
    tok.pre_tokenizer = P.BertPreTokenizer()
    tok.decoder = D.WordPiece()
    tok.post_processor = PP.BertProcessing(("[SEP]", 3), ("[CLS]", 2))
    tok.add_special_tokens([AddedToken(s, special=True) for s in specials])
    return tok


def roberta():
    tok = byte_level(["<s>", "<pad>", "</s>", "<unk>"])
    tok.post_processor = PP.RobertaProcessing(("</s>", 2), ("<s>", 0))
    tok.add_special_tokens([AddedToken("<s>", special=True), AddedToken("<pad>", special=True),
                            AddedToken("</s>", special=True), AddedToken("<unk>", special=True)])
    return tok


def qwen():
    # A plain GPT-2 pipeline in the file; Qwen2Tokenizer rebuilds NFC and its split regex.
    tok = byte_level([])
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False)
                            for s in ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]])
    return tok


def llama3():
    regex = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    tok = byte_level([])
    tok.pre_tokenizer = P.Sequence([P.Split(Regex(regex), "isolated"), P.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in ["<|begin_of_text|>", "<|end_of_text|>"]])
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = PP.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|>:1 $B:1",
                                               special_tokens=[("<|begin_of_text|>", bos)])
    return tok


def unigram_t5():
    tok = unigram(["<pad>", "</s>", "<unk>"], "<unk>")
    tok.post_processor = PP.TemplateProcessing(single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", 1)])
    return tok


def unigram_xlmr():
    tok = unigram(["<s>", "<pad>", "</s>", "<unk>"], "<unk>")
    tok.post_processor = PP.TemplateProcessing(single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
                                               special_tokens=[("<s>", 0), ("</s>", 2)])
    return tok


def unigram_deberta():
    tok = unigram(["[PAD]", "[UNK]", "[CLS]", "[SEP]"], "[UNK]")
    tok.post_processor = PP.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                               special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return tok


def added(content, **flags):
    return dict({"content": content, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                 "special": True}, **flags)


# tokenizer_config.json's added_tokens_decoder: tokens the file lacks, with their flags.
ADDED = {"9000": added("<new_tok>", lstrip=True), "9001": added("<b_tok>", special=False, normalized=True)}
def without_post_processor(build):
    # BERT, DeBERTa-v2, T5, XLM-R and RoBERTa set their own post-processor
    # over the file's; Llama's class keeps the file's, or none.
    def built():
        tok = build()
        tok.post_processor = None
        return tok
    return built


LLAMA = {"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
         "pad_token": None, "clean_up_tokenization_spaces": False, "tokenizer_class": "LlamaTokenizer"}
# name: (builder, tokenizer_config.json or None, config.json model_type or None)
CASES = {
    "llama2_legacy": (spm_bpe, dict(LLAMA, legacy=True), "llama"),
    "llama2": (spm_bpe, dict(LLAMA, legacy=False), "llama"),
    "llama2_no_prefix": (spm_bpe, dict(LLAMA, legacy=False, add_prefix_space=False), "llama"),
    "mistral": (spm_bpe, dict(LLAMA, legacy=True, spaces_between_special_tokens=False), "mistral"),
    "phi3": (spm_bpe, dict(LLAMA, legacy=False, add_bos_token=False, pad_token="<|endoftext|>"), "phi3"),
    "gemma": (spm_bpe, {"add_bos_token": True, "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
                        "pad_token": "<pad>", "tokenizer_class": "GemmaTokenizer"}, "gemma2"),
    "qwen2": (qwen, {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": None,
                     "errors": "replace", "model_max_length": 32768, "tokenizer_class": "Qwen2Tokenizer"}, "qwen2"),
    "qwen2_split_special_tokens": (qwen, {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                                          "split_special_tokens": True, "tokenizer_class": "Qwen2Tokenizer"}, "qwen2"),
    "llama3": (llama3, {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>", "model_max_length": 131072,
                        "clean_up_tokenization_spaces": True, "tokenizer_class": "PreTrainedTokenizerFast"}, "llama"),
    "llama_class_byte_level": (llama3, {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>",
                                        "tokenizer_class": "LlamaTokenizerFast"}, "llama"),
    "gpt2_prefix": (lambda: byte_level([]), {"add_prefix_space": True, "model_max_length": 1024,
                                             "tokenizer_class": "GPT2Tokenizer"}, "gpt2"),
    "roberta_prefix": (roberta, {"add_prefix_space": True}, "roberta"),
    "bert_default_lowercase": (lambda: wordpiece(False), {}, "bert"),
    "bert_flags": (lambda: wordpiece(True), {"do_lower_case": False, "strip_accents": False,
                                             "tokenize_chinese_chars": False}, "bert"),
    "t5": (unigram_t5, {"extra_ids": 3, "model_max_length": 512}, "t5"),
    "xlm_roberta": (unigram_xlmr, None, "xlm-roberta"),
    "llama2_added_tokens_decoder": (spm_bpe, dict(LLAMA, legacy=False, added_tokens_decoder=dict(
        ADDED, **{"0": added("<unk>"), "1": added("<s>"), "2": added("</s>")})), "llama"),
    "llama3_added_tokens_decoder": (llama3, {"tokenizer_class": "PreTrainedTokenizerFast", "added_tokens_decoder": ADDED},
                                    "llama"),
    "convbert": (lambda: wordpiece(False), {"tokenizer_class": "ConvBertTokenizer"}, "convbert"),
    "electra": (lambda: wordpiece(False), {"tokenizer_class": "ElectraTokenizer"}, "electra"),
    "bart_prefix": (roberta, {"tokenizer_class": "BartTokenizer", "add_prefix_space": True}, "bart"),
    "qwen2_additional_special_tokens": (qwen, {"eos_token": "<|im_end|>", "tokenizer_class": "Qwen2Tokenizer",
                                               "additional_special_tokens": ["<|im_start|>", "<new_tok>"]}, "qwen2"),
    "llama3_model_specific_tokens": (llama3, {"tokenizer_class": "PreTrainedTokenizerFast", "image_token": "<b_tok>",
                                              "extra_special_tokens": {"audio_token": "<new_tok>"}}, "llama"),
    "t5_no_post_processor": (without_post_processor(unigram_t5), {"extra_ids": 0}, "t5"),
    "xlm_roberta_no_post_processor": (without_post_processor(unigram_xlmr), None, "xlm-roberta"),
    "bert_no_post_processor": (without_post_processor(lambda: wordpiece(True)), {"do_lower_case": True}, "bert"),
    "roberta_no_post_processor": (without_post_processor(roberta), None, "roberta"),
    "deberta_v2_no_post_processor": (without_post_processor(unigram_deberta), {"vocab_type": "spm"}, "deberta-v2"),
    "llama2_no_post_processor": (without_post_processor(spm_bpe), dict(LLAMA, legacy=False), "llama"),
    "deberta_v2": (unigram_deberta, {"do_lower_case": True, "split_by_punct": True, "vocab_type": "spm"}, "deberta-v2"),
}


def expected(d):
    tok = AutoTokenizer.from_pretrained(d)
    out = {"class": type(tok).__name__, "texts": TEXTS, "encode": [], "pairs": []}
    for t in TEXTS:
        ids = tok(t)["input_ids"]
        out["encode"].append({"ids": ids, "ids_no_special": tok(t, add_special_tokens=False)["input_ids"],
                              "decode_skip": tok.decode(ids, skip_special_tokens=True),
                              "decode_keep": tok.decode(ids, skip_special_tokens=False)})
    for a, b in PAIRS:
        r = tok(a, b)
        out["pairs"].append({"a": a, "b": b, "ids": r["input_ids"]})
    out["special_tokens"] = {k: [getattr(tok, k + "_token"), getattr(tok, k + "_token_id")] for k in SPECIALS
                             if getattr(tok, k + "_token") is not None}
    return out


def class_choices():
    # The llama2 case's tokenizer.json is not byte-level, llama3's is.
    hubs = ["", "LlamaTokenizer", "LlamaTokenizerFast", "PreTrainedTokenizerFast", "Qwen2Tokenizer", "GPT2Tokenizer",
            "TokenizersBackend", "Phi3Tokenizer", "BertTokenizer", "ElectraTokenizer"]
    types = ["", "llama", "mistral", "phi3", "qwen2", "qwen3", "gpt2", "starcoder2", "bert", "gemma3_text"]
    out = []
    d = os.path.join(OUT, "_scratch")
    for source in ["llama2", "llama3"]:
        for hub in hubs:
            for model_type in types:
                shutil.rmtree(d, ignore_errors=True)
                os.makedirs(d)
                shutil.copy(os.path.join(OUT, source, "tokenizer.json"), d)
                if hub:
                    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
                        json.dump({"tokenizer_class": hub}, f)
                if model_type:
                    with open(os.path.join(d, "config.json"), "w") as f:
                        json.dump({"model_type": model_type}, f)
                try:
                    cls = type(AutoTokenizer.from_pretrained(d)).__name__
                except Exception:  # a class over a model it cannot build
                    cls = "error"
                out.append({"tokenizer_json": source, "tokenizer_class": hub, "model_type": model_type, "class": cls})
    shutil.rmtree(d)
    with open(os.path.join(os.path.dirname(OUT), "auto_classes.json"), "w") as f:
        json.dump(out, f, indent=0)


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    for name, (build, cfg, model_type) in CASES.items():
        d = os.path.join(OUT, name)
        os.makedirs(d)
        with open(os.path.join(d, "tokenizer.json"), "w") as f:
            f.write(build().to_str())
        if cfg is not None:
            with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
                json.dump(cfg, f, indent=1)
        if model_type is not None:
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump({"model_type": model_type}, f)
        exp = expected(d)
        exp["generator"] = f"transformers {transformers.__version__}"
        with open(os.path.join(d, "expected.json"), "w") as f:
            json.dump(exp, f, ensure_ascii=False, separators=(",", ":"))
        print(name, exp["class"])
    class_choices()


if __name__ == "__main__":
    main()
