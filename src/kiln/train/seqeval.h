#pragma once
// Entity-level scores of tag sequences, as the `seqeval` package computes
// them for Hugging Face's run_ner (evaluate's "seqeval" metric, default mode):
// chunks are found with conlleval's rules (IOB1/IOB2/IOBES prefixes B-, I-,
// E-, S-, O), an entity counts when its type, start and end all match, and
// precision / recall / F1 are micro-averaged over entity types (0 when a
// denominator is 0, as seqeval's zero_division "warn"). Accuracy is per tag.
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace kiln::train {

// (type, first, last) of each chunk in `tags`, seqeval's get_entities.
std::vector<std::tuple<std::string, int64_t, int64_t>> get_entities(const std::vector<std::string>& tags);

// One entity type's row of seqeval's classification_report: its precision,
// recall and F1 and its number of reference entities (evaluate's "number").
struct EntityScores {
  double precision = 0, recall = 0, f1 = 0;
  int64_t number = 0;
};

struct SeqevalScores {
  double precision = 0, recall = 0, f1 = 0, accuracy = 0;
  // Every type found in the references or the predictions (run_ner's
  // --return_entity_level_metrics).
  std::map<std::string, EntityScores> types;
};

// References and predictions, one tag list per sentence, with equal lengths.
SeqevalScores seqeval(const std::vector<std::vector<std::string>>& references,
                      const std::vector<std::vector<std::string>>& predictions);

}  // namespace kiln::train
