"""Writes tests/goldens/generation_metrics.json: ROUGE from Google's rouge_score
(RougeScorer(["rouge1", "rouge2", "rougeL", "rougeLsum"]) without and with
use_stemmer, F-measures averaged over the pairs), corpus BLEU and 13a tokens
from sacrebleu's defaults, on fixed strings (sacrebleu's README example among
them), and NLTK's PorterStemmer() (rouge_score's stemmer) on a word list.

    /work/pyref/bin/pip install sacrebleu rouge-score
    /work/pyref/bin/python tests/goldens/gen_generation_metrics.py
"""
import json
import pathlib

import sacrebleu
from rouge_score import rouge_scorer
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a
from nltk.stem.porter import PorterStemmer

CASES = [
    {  # sacrebleu's README: BLEU = 48.53
        "hypotheses": ["The dog bit the man.", "It wasn't surprising.", "The man had just bitten him."],
        "references": [["The dog bit the man.", "It was not unexpected.", "The man bit him first."],
                       ["The dog had bit the man.", "No one was surprised.", "The man had bitten the dog."]],
    },
    {
        "hypotheses": ["The quick brown dog jumps on the log.", "price: 3.50 $ , up 2-3 %", "&quot;hi&quot; &amp; bye",
                       "positive", ""],
        "references": [["The quick brown fox jumps over the lazy dog", "price: 3.5 $, up 2 - 3%", "\"hi\" & bye!",
                        "positive", "negative"]],
    },
    {"hypotheses": ["a b c d e f", "x y"], "references": [["a b c d e f g h", "x y z"]]},
    {  # several lines (rougeLsum's sentences), words the stemmer folds together
        "hypotheses": ["The cats were running quickly.\nThey jumped over fences and walls.",
                       "Generalizations are hopefully conditional\n\nrelational agreement",
                       "the the the cat\ncat sat the"],
        "references": [["A cat runs quick.\nIt jumps over the fence.\nThe walls stood.",
                        "generalization is a hopeful condition, relating agreements",
                        "the cat sat on the mat\nthe the cat"]],
    },
]
STEM_WORDS = ["caresses", "ponies", "ties", "cats", "feed", "agreed", "plastered", "motoring", "sing", "conflated",
              "troubled", "sized", "hopping", "falling", "hissing", "filing", "happy", "sky", "skies", "dying",
              "relational", "conditional", "rational", "valenci", "hesitanci", "digitizer", "conformabli", "radicalli",
              "differentli", "vileli", "analogousli", "vietnamization", "predication", "operator", "feudalism",
              "decisiveness", "hopefulness", "callousness", "formaliti", "sensitiviti", "sensibiliti", "triplicate",
              "formative", "formalize", "electriciti", "electrical", "hopeful", "goodness", "revival", "allowance",
              "inference", "airliner", "gyroscopic", "adjustable", "defensible", "irritant", "replacement",
              "adjustment", "dependent", "adoption", "homologou", "communism", "activate", "angulariti", "homologous",
              "effective", "bowdlerize", "probate", "rate", "cease", "controll", "roll", "generously", "fully",
              "analogi", "archaeology", "news", "innings", "exceed", "proceeding", "yelling", "daily", "syzygy",
              "flies", "died", "tied", "cried", "spied", "agreement", "national", "sensational", "running"]
TOKENIZE = ["Hello, world. It's 3.14 - no: 1,000!", "don't (stop) [me] {now} a/b e-mail 5-6", "end.", "<skipped>x-\ny"]

TYPES = ["rouge1", "rouge2", "rougeL", "rougeLsum"]


def mean_rouge(case, use_stemmer):
    scorer = rouge_scorer.RougeScorer(TYPES, use_stemmer=use_stemmer)
    scores = [scorer.score(r, p) for r, p in zip(case["references"][0], case["hypotheses"])]
    return {k: sum(s[k].fmeasure for s in scores) / len(scores) for k in TYPES}


out = {"cases": [], "tokenize_13a": []}
for case in CASES:
    bleu = sacrebleu.corpus_bleu(case["hypotheses"], case["references"])
    out["cases"].append({**case, "bleu": bleu.score, "rouge": mean_rouge(case, False),
                         "rouge_stemmed": mean_rouge(case, True)})
stemmer = PorterStemmer()
out["porter"] = [{"word": w, "stem": stemmer.stem(w)} for w in STEM_WORDS]
tok = Tokenizer13a()
out["tokenize_13a"] = [{"line": line, "tokens": tok(line)} for line in TOKENIZE]
path = pathlib.Path(__file__).resolve().parents[2] / "tests/goldens/generation_metrics.json"
path.write_text(json.dumps(out, indent=1) + "\n")
print(f"sacrebleu {sacrebleu.__version__}: {len(CASES)} cases -> {path}")
for c in out["cases"]:
    print(round(c["bleu"], 2), {k: round(v, 4) for k, v in c["rouge"].items()})
