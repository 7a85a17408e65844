#pragma once
// The Porter stemmer as NLTK's PorterStemmer() runs it (its default
// NLTK_EXTENSIONS mode), which rouge_score applies under use_stemmer=True.
#include <string>

namespace kiln::train {

// The stem of a lower-case ASCII word ("running" -> "run", "flies" -> "fli").
std::string porter_stem(const std::string& word);

}  // namespace kiln::train
