#include "kiln/models/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "kiln/core/error.h"
#include "kiln/core/json.h"

namespace kiln::models {

using nlohmann::json;

namespace {

// The keys each rope_type takes besides rope_type / type, rope_theta and partial_rotary_factor.
std::vector<std::string> keys_of(const std::string& type) {
  if (type == "default") return {};
  if (type == "linear" || type == "dynamic") return {"factor"};
  if (type == "llama3") return {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"};
  if (type == "yarn")
    return {"factor", "original_max_position_embeddings", "attention_factor", "beta_fast", "beta_slow", "mscale",
            "mscale_all_dim", "truncate"};
  return {"short_factor", "long_factor", "original_max_position_embeddings", "factor", "attention_factor"};  // longrope
}

std::vector<double> factor_list(const json& obj, const char* key, const std::string& where) {
  const json& v = obj.at(key);
  KILN_CHECK(v.is_array(), where, ": '", key, "' must be a list of numbers, got ", json_found(v));
  std::vector<double> out;
  for (const json& x : v) {
    KILN_CHECK(x.is_number(), where, ": '", key, "' must be a list of numbers, got ", json_found(v));
    out.push_back(x.get<double>());
    KILN_CHECK(out.back() > 0, where, ": '", key, "' entries must be positive, got ", out.back());
  }
  return out;
}

// The scaling object's own fields into r; `where` names the key it came from.
void read_scaling(const json& obj, RopeScaling& r, const std::string& where) {
  KILN_CHECK(obj.is_object(), where, " must be an object, got ", json_found(obj));
  r.type = json_value<std::string>(obj, "rope_type", json_value<std::string>(obj, "type", "default", where), where);
  if (r.type == "su") r.type = "longrope";  // Phi-3's first name for it, which HF maps to longrope
  KILN_CHECK(r.type == "default" || r.type == "linear" || r.type == "dynamic" || r.type == "llama3" ||
                 r.type == "longrope" || r.type == "yarn",
             where, ": rope_type '", r.type,
             "' is not supported (kiln builds default, linear, dynamic, llama3, longrope, yarn)");
  const std::vector<std::string> own = keys_of(r.type);
  for (const auto& [k, v] : obj.items()) {
    const bool known = k == "rope_type" || k == "type" || k == "rope_theta" || k == "partial_rotary_factor" ||
                       std::find(own.begin(), own.end(), k) != own.end();
    KILN_CHECK(known, where, ": '", k, "' is not a parameter of rope_type '", r.type, "'");
  }
  auto required = [&](const char* k) {
    KILN_CHECK(obj.contains(k) && !obj.at(k).is_null(), where, ": rope_type '", r.type, "' needs '", k, "'");
  };
  if (r.type != "default" && r.type != "longrope") required("factor");
  r.factor = json_value<double>(obj, "factor", r.factor, where);
  r.theta = json_value<double>(obj, "rope_theta", r.theta, where);
  const double partial = json_value<double>(obj, "partial_rotary_factor", 1.0, where);
  KILN_CHECK(partial == 1.0, where, ": partial_rotary_factor ", partial, " is not supported (kiln rotates whole heads)");
  if (r.type == "llama3") {
    for (const char* k : {"low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) required(k);
    r.low_freq_factor = json_value<double>(obj, "low_freq_factor", 1.0, where);
    r.high_freq_factor = json_value<double>(obj, "high_freq_factor", 4.0, where);
  }
  if (r.type == "llama3" || r.type == "longrope" || r.type == "yarn")
    if (auto o = detail::json_field<int64_t>(obj, "original_max_position_embeddings", where))
      r.original_max_position_embeddings = *o, r.original_given = true;
  if (r.type == "longrope") {
    required("short_factor");
    required("long_factor");
    r.short_factor = factor_list(obj, "short_factor", where);
    r.long_factor = factor_list(obj, "long_factor", where);
    r.longrope_factor_given = obj.contains("factor") && !obj.at("factor").is_null();
    r.attention_factor = detail::json_field<double>(obj, "attention_factor", where);
  }
  if (r.type == "yarn") {
    r.attention_factor = detail::json_field<double>(obj, "attention_factor", where);
    r.beta_fast = detail::json_field<double>(obj, "beta_fast", where);
    r.beta_slow = detail::json_field<double>(obj, "beta_slow", where);
    r.mscale = detail::json_field<double>(obj, "mscale", where);
    r.mscale_all_dim = detail::json_field<double>(obj, "mscale_all_dim", where);
    r.truncate = detail::json_field<bool>(obj, "truncate", where);
  }
}

// YaRN's mscale (the paper's Eq. 21): 0.1 · mscale · ln(scale) + 1, and 1 for scale <= 1.
double yarn_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

// Python's `x or default` for an optional number: absent, null and 0 all take the default.
double or_default(const std::optional<double>& x, double fallback) { return x && *x != 0 ? *x : fallback; }

}  // namespace

RopeScaling RopeScaling::from_json(const json& j, double theta, const std::string& src) {
  RopeScaling r;
  r.theta = json_value<double>(j, "rope_theta", theta, src);
  if (auto it = j.find("rope_parameters"); it != j.end() && !it->is_null()) {
    KILN_CHECK(!it->is_object() || !it->contains("full_attention"), src,
               ": 'rope_parameters' per layer type is not supported (one set for every layer)");
    r.parameters_form = true;
    read_scaling(*it, r, src + ": 'rope_parameters'");
  } else if (auto s = j.find("rope_scaling"); s != j.end() && !s->is_null()) {
    read_scaling(*s, r, src + ": 'rope_scaling'");
  }
  KILN_CHECK(std::isfinite(r.theta) && r.theta > 0, src, ": 'rope_theta' must be positive, got ", r.theta);
  // transformers moves a top-level partial_rotary_factor into the rope parameters (Phi-4-mini's 0.75).
  const double partial = json_value<double>(j, "partial_rotary_factor", 1.0, src);
  KILN_CHECK(partial == 1.0, src, ": partial_rotary_factor ", partial, " is not supported (kiln rotates whole heads)");
  return r;
}

void RopeScaling::write(json& j) const {
  json params = {{"rope_type", type}};
  if (type != "default" && (type != "longrope" || longrope_factor_given)) params["factor"] = factor;
  if (type == "llama3") {
    params["low_freq_factor"] = low_freq_factor;
    params["high_freq_factor"] = high_freq_factor;
  }
  if (original_max_position_embeddings && original_given)
    params["original_max_position_embeddings"] = *original_max_position_embeddings;
  if (type == "longrope") {
    params["short_factor"] = short_factor;
    params["long_factor"] = long_factor;
    if (attention_factor) params["attention_factor"] = *attention_factor;
  }
  if (type == "yarn") {
    if (attention_factor) params["attention_factor"] = *attention_factor;
    if (beta_fast) params["beta_fast"] = *beta_fast;
    if (beta_slow) params["beta_slow"] = *beta_slow;
    if (mscale) params["mscale"] = *mscale;
    if (mscale_all_dim) params["mscale_all_dim"] = *mscale_all_dim;
    if (truncate) params["truncate"] = *truncate;
  }
  if (parameters_form) {
    params["rope_theta"] = theta;
    j["rope_parameters"] = params;
    return;
  }
  j["rope_theta"] = theta;
  j["rope_scaling"] = type == "default" ? json(nullptr) : params;
}

void RopeScaling::validate(int64_t head_dim, const std::string& src) const {
  const std::string where = src + (parameters_form ? ": 'rope_parameters'" : ": 'rope_scaling'");
  KILN_CHECK(std::isfinite(factor) && factor > 0, where, ": 'factor' must be positive, got ", factor);
  if (type == "llama3") {
    KILN_CHECK(low_freq_factor > 0 && high_freq_factor > low_freq_factor, where,
               ": llama3 needs 0 < low_freq_factor < high_freq_factor, got ", low_freq_factor, " and ",
               high_freq_factor);
  }
  if (type == "llama3" || type == "longrope") {
    KILN_CHECK(original_max_position_embeddings && *original_max_position_embeddings > 0, where,
               ": 'original_max_position_embeddings' must be a positive integer (in rope_scaling or the config)");
  }
  if (type == "yarn") {
    if (original_max_position_embeddings)
      KILN_CHECK(*original_max_position_embeddings > 0, where,
                 ": 'original_max_position_embeddings' must be a positive integer");
    if (attention_factor) KILN_CHECK(*attention_factor > 0, where, ": 'attention_factor' must be positive");
    KILN_CHECK(or_default(beta_fast, 32) > or_default(beta_slow, 1), where,
               ": yarn needs beta_fast > beta_slow, got ", or_default(beta_fast, 32), " and ", or_default(beta_slow, 1));
  }
  if (type == "dynamic")  // (its exponent divides by head_dim - 2)
    KILN_CHECK(head_dim > 2, where, ": rope_type 'dynamic' needs head_dim > 2, got ", head_dim);
  if (type == "longrope") {
    const size_t half = static_cast<size_t>(head_dim / 2);
    KILN_CHECK(short_factor.size() == half && long_factor.size() == half, where,
               ": short_factor and long_factor must have head_dim / 2 = ", half, " entries, got ",
               short_factor.size(), " and ", long_factor.size());
    if (attention_factor) KILN_CHECK(*attention_factor > 0, where, ": 'attention_factor' must be positive");
  }
}

// YaRN (transformers' _compute_yarn_parameters): each frequency blends the
// interpolated one (divided by factor) and the original, by a ramp over the
// dimensions between the correction range [low, high] that beta_fast and
// beta_slow (rotations within the original context) pick; float32 tensors,
// double scalars, as torch computes them.
std::vector<float> RopeScaling::yarn_inv_freq(int64_t D, int64_t mpe) const {
  const double base = theta;
  const double original = static_cast<double>(original_max_position_embeddings.value_or(mpe));
  auto correction_dim = [&](double rotations) {
    return static_cast<double>(D) * std::log(original / (rotations * 2 * std::numbers::pi)) / (2 * std::log(base));
  };
  double low = correction_dim(or_default(beta_fast, 32)), high = correction_dim(or_default(beta_slow, 1));
  if (truncate.value_or(true)) low = std::floor(low), high = std::ceil(high);
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(D - 1));
  if (low == high) high += 0.001;  // as HF avoids the ramp's singularity
  const float f = static_cast<float>(factor), lo = static_cast<float>(low), span = static_cast<float>(high - low);
  std::vector<float> inv(static_cast<size_t>(D / 2));
  for (int64_t i = 0; i < D / 2; ++i) {
    const float pos = std::pow(static_cast<float>(base), static_cast<float>(2 * i) / static_cast<float>(D));
    const float extrapolation = 1.0f / pos, interpolation = 1.0f / (f * pos);
    const float ramp = std::clamp((static_cast<float>(i) - lo) / span, 0.0f, 1.0f);
    const float keep = 1.0f - ramp;  // the share of the original frequency
    inv[i] = interpolation * (1.0f - keep) + extrapolation * keep;
  }
  return inv;
}

std::vector<float> RopeScaling::inv_freq(int64_t D, int64_t mpe, int64_t seq_len) const {
  if (type == "yarn") return yarn_inv_freq(D, mpe);
  const int64_t half = D / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  auto exponent = [&](int64_t i) { return static_cast<float>(2 * i) / static_cast<float>(D); };
  float base = static_cast<float>(theta);
  if (type == "dynamic" && seq_len > mpe) {  // computed from the length as a float32 tensor, as HF's forward does
    const float f = static_cast<float>(factor);
    const float grown = f * static_cast<float>(seq_len) / static_cast<float>(mpe) - (f - 1.0f);
    base = base * std::pow(grown, static_cast<float>(D) / static_cast<float>(D - 2));
  }
  for (int64_t i = 0; i < half; ++i) {
    float p = std::pow(base, exponent(i));
    if (type == "longrope") {
      const bool long_seq = seq_len > *original_max_position_embeddings;
      p = static_cast<float>((long_seq ? long_factor : short_factor)[i]) * p;
    }
    inv[i] = 1.0f / p;
  }
  if (type == "linear")
    for (float& x : inv) x /= static_cast<float>(factor);
  if (type == "llama3") {
    const float f = static_cast<float>(factor), lo = static_cast<float>(low_freq_factor);
    const float old = static_cast<float>(*original_max_position_embeddings);
    const float low_wavelen = static_cast<float>(static_cast<double>(*original_max_position_embeddings) / low_freq_factor);
    const float high_wavelen =
        static_cast<float>(static_cast<double>(*original_max_position_embeddings) / high_freq_factor);
    const float two_pi = static_cast<float>(2 * std::numbers::pi);
    for (float& x : inv) {
      const float wavelen = (1.0f / x) * two_pi;  // torch's scalar / tensor: reciprocal, then the product
      const float scaled = wavelen > low_wavelen ? x / f : x;
      if (wavelen < high_wavelen || wavelen > low_wavelen) {
        x = scaled;
        continue;
      }
      const float smooth = ((1.0f / wavelen) * old - lo) / static_cast<float>(high_freq_factor - low_freq_factor);
      x = (1.0f - smooth) * scaled / f + smooth * scaled;
    }
  }
  return inv;
}

float RopeScaling::attention_scaling(int64_t mpe) const {
  if (type == "yarn") {
    if (attention_factor) return static_cast<float>(*attention_factor);
    if (or_default(mscale, 0) != 0 && or_default(mscale_all_dim, 0) != 0)
      return static_cast<float>(yarn_mscale(factor, *mscale) / yarn_mscale(factor, *mscale_all_dim));
    return static_cast<float>(yarn_mscale(factor, 1.0));
  }
  if (type != "longrope") return 1.0f;
  if (attention_factor) return static_cast<float>(*attention_factor);
  const double orig = static_cast<double>(*original_max_position_embeddings);
  const double f = longrope_factor_given ? factor : static_cast<double>(mpe) / orig;
  return static_cast<float>(f <= 1.0 ? 1.0 : std::sqrt(1 + std::log(f) / std::log(orig)));
}

void rotary_tables(const RopeScaling& rope, int64_t D, int64_t mpe, int64_t rows, std::optional<int64_t> seq_len,
                   std::vector<float>& cos, std::vector<float>& sin) {
  cos.assign(static_cast<size_t>(rows * D), 0.0f);
  sin.assign(cos.size(), 0.0f);
  const float scaling = rope.attention_scaling(mpe);
  std::vector<float> inv = rope.inv_freq(D, mpe, seq_len.value_or(1));
  for (int64_t t = 0; t < rows; ++t) {
    if (!seq_len && rope.length_dependent()) inv = rope.inv_freq(D, mpe, t + 1);
    for (int64_t i = 0; i < D; ++i) {
      const float angle = static_cast<float>(t) * inv[i % (D / 2)];
      cos[t * D + i] = std::cos(angle) * scaling;
      sin[t * D + i] = std::sin(angle) * scaling;
    }
  }
}

}  // namespace kiln::models
