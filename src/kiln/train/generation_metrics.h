#pragma once
// The scores HF's run_summarization and run_translation report for generated
// text: ROUGE-1/2/L/Lsum as Google's rouge_score package computes them (its
// tokenizer, optionally its Porter stemmer), averaged over the pairs, and corpus BLEU as
// sacrebleu's defaults compute it (the 13a tokenizer, exponential smoothing,
// up to 4-grams, the brevity penalty).
#include <string>
#include <vector>

namespace kiln::train {

// rouge_score's tokens: lower case, every run of characters outside [a-z0-9]
// a separator; with use_stemmer, tokens longer than 3 characters replaced by
// their Porter stem (NLTK's PorterStemmer, as rouge_score uses it).
std::vector<std::string> rouge_tokens(const std::string& text, bool use_stemmer = false);

struct RougeScores {
  double rouge1 = 0, rouge2 = 0, rougeL = 0;  // mean F-measures, in [0, 1]
  // rouge_score's summary-level LCS: the texts split into sentences at
  // newlines, each reference sentence's union LCS with the prediction's
  // sentences, tokens counted once.
  double rougeLsum = 0;
};
// predictions[i] scored against references[i] (the same count), as
// RougeScorer(["rouge1", "rouge2", "rougeL", "rougeLsum"], use_stemmer) and
// averaged over the pairs (HF's run_summarization passes use_stemmer=True).
RougeScores rouge(const std::vector<std::string>& predictions, const std::vector<std::string>& references,
                  bool use_stemmer = false);

// sacrebleu's tokenizer_13a (mteval-v13a.pl): punctuation split off, periods
// and commas except inside numbers, dashes after digits.
std::string tokenize_13a(const std::string& line);

// sacrebleu.corpus_bleu(hypotheses, references).score, in [0, 100]:
// references[k] is the k-th reference of every hypothesis.
double corpus_bleu(const std::vector<std::string>& hypotheses,
                   const std::vector<std::vector<std::string>>& references);

}  // namespace kiln::train
