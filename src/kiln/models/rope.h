#pragma once
// Rotary position embeddings' frequencies as transformers' modeling_rope_utils
// defines them: the rope_type ("default", "linear", "dynamic", "llama3",
// "longrope", "yarn") with its parameters, read from either form a config.json has —
// rope_theta and rope_scaling (transformers 4) or rope_parameters
// (transformers 5, rope_theta inside) — and written back in the form read.
// All arithmetic in float32, as HF computes the tables.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiln::models {

struct RopeScaling {
  std::string type = "default";
  double theta = 10000.0;
  double factor = 1.0;                                    // linear, dynamic, llama3, yarn (longrope: optional)
  double low_freq_factor = 1.0, high_freq_factor = 4.0;   // llama3
  std::optional<int64_t> original_max_position_embeddings;  // llama3, longrope, yarn (default: max_position_embeddings)
  std::optional<double> attention_factor;                 // longrope, yarn
  std::optional<double> beta_fast, beta_slow;             // yarn (32 and 1 when absent)
  std::optional<double> mscale, mscale_all_dim;           // yarn
  std::optional<bool> truncate;                           // yarn (true when absent)
  std::vector<double> short_factor, long_factor;          // longrope, head_dim / 2 each
  bool longrope_factor_given = false;                     // longrope: "factor" was in the config
  bool original_given = false;  // original_max_position_embeddings was in the object (Phi-3 keeps it outside)
  bool parameters_form = false;  // read from rope_parameters (written back there)

  // From config.json's rope_theta / rope_scaling / rope_parameters; `theta`
  // is the model type's default rope_theta. Errors name `src` and the key.
  static RopeScaling from_json(const nlohmann::json& config, double theta, const std::string& src);
  // Writes rope_theta and rope_scaling (or rope_parameters) into `config`.
  void write(nlohmann::json& config) const;
  // The checks needing the model's sizes (longrope's factor lists are head_dim / 2 long).
  void validate(int64_t head_dim, const std::string& src) const;

  // Whether the frequencies depend on the sequence's length (dynamic, longrope).
  bool length_dependent() const { return type == "dynamic" || type == "longrope"; }
  // The head_dim / 2 inverse frequencies for a sequence of `seq_len`
  // positions (the largest position + 1), and the factor cos and sin are
  // multiplied by.
  std::vector<float> inv_freq(int64_t head_dim, int64_t max_position_embeddings, int64_t seq_len) const;
  float attention_scaling(int64_t max_position_embeddings) const;

 private:
  std::vector<float> yarn_inv_freq(int64_t head_dim, int64_t max_position_embeddings) const;
};

// cos and sin tables [rows, head_dim] (row t: position t), the angles
// t · inv_freq repeated over both halves, times the attention scaling.
// `seq_len` picks the frequencies of every row; without it (one token at a
// time, as a cache decodes) row t uses those of a sequence of t + 1.
void rotary_tables(const RopeScaling& rope, int64_t head_dim, int64_t max_position_embeddings, int64_t rows,
                   std::optional<int64_t> seq_len, std::vector<float>& cos, std::vector<float>& sin);

}  // namespace kiln::models
