// Generation: the key/value cache gives exactly the tokens of recomputing the
// whole sequence each step, and decoding compiles once per cache bucket (and
// the prompt's step once per prompt length). GPT-2
// and T5 (both variants: relu with tied embeddings, gated-gelu with lm_head).
#include <algorithm>
#include <limits>
#include <set>

#include "kiln/models/generation.h"
#include "kiln/models/llama.h"
#include "kiln/runtime/context.h"
#include "support/test_util.h"

namespace kiln {
namespace {

std::unique_ptr<models::PreTrainedModel> tiny_gpt2() {
  return models::from_pretrained(std::string(KILN_TEST_DATA_DIR) + "/gpt2/gpt2_lm");
}

TEST(Generation, CachedGreedyEqualsStepByStepArgmax) {
  auto model = tiny_gpt2();
  auto& gpt2 = dynamic_cast<models::GPT2ForTask&>(*model);
  std::vector<std::vector<int64_t>> prompts{{5, 17, 42, 8, 61}, {3}};
  models::GenerationConfig g;
  g.max_new_tokens = 10;
  g.eos_token_ids = {-1};  // never stop early
  g.use_cache = false;
  auto reference = models::generate(gpt2, prompts, g);
  g.use_cache = true;
  runtime::DeviceContext::get(Device::cpu()).clear_cache();  // compiles counted as in a fresh process
  metrics::reset();
  auto cached = models::generate(gpt2, prompts, g);
  EXPECT_EQ(cached, reference);
  ASSERT_EQ(cached[0].size(), 15u);
  EXPECT_EQ(std::vector<int64_t>(cached[0].begin(), cached[0].begin() + 5), prompts[0]);
  // Two graphs (the position and the cache are inputs): the 5-token prompt's
  // step and the one-token step, which also reads the 1-token prompt. A step
  // for each prompt and each new token but the last, which no step reads:
  // (1 + 10 - 1) + (1 + 10 - 1).
  EXPECT_EQ(metrics::snapshot().compiles, 2) << metrics::report();
  EXPECT_EQ(metrics::snapshot().executions, 20) << metrics::report();
}

// HF's max_length counts the prompt (the longest of the call, as in a padded
// batch) for a decoder-only model and the start token for T5; max_new_tokens
// is what it leaves, and a prompt that fills it is an error, as in transformers.
TEST(Generation, MaxLengthCountsThePrompt) {
  auto model = tiny_gpt2();
  models::GenerationConfig g;
  g.eos_token_ids = {-1};
  g.max_length = 8;
  auto out = models::generate(*model, {{5, 17, 42, 8, 61}, {3}}, g);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].size(), 8u);
  EXPECT_EQ(out[1].size(), 4u);  // 3 new tokens, as the longest prompt left
  g.max_length = 3;
  EXPECT_CONTAINS(testing::error_of([&] { models::generate(*model, {{5, 17, 42}}, g); }),
                  "the prompt (3 tokens) already fills max_length (3)");
  auto t5 = models::from_pretrained(std::string(KILN_TEST_DATA_DIR) + "/t5/t5_relu_tied");
  g.max_length = 4;
  EXPECT_EQ(models::generate(*t5, {{3, 7, 1}}, g)[0].size(), 3u);
  g.max_length = 1;
  EXPECT_CONTAINS(testing::error_of([&] { models::generate(*t5, {{3, 7, 1}}, g); }),
                  "the decoder's start token (1 token) already fills max_length (1)");
}

TEST(Generation, SamplingIsSeededAndStopsAtEos) {
  auto model = tiny_gpt2();
  auto& gpt2 = dynamic_cast<models::GPT2ForTask&>(*model);
  models::GenerationConfig g;
  g.max_new_tokens = 12;
  g.do_sample = true;
  g.temperature = 0.8;
  g.top_k = 20;
  g.top_p = 0.9;
  g.seed = 5;
  g.eos_token_ids = {-1};
  auto a = models::generate(gpt2, {{1, 2, 3}}, g);
  auto b = models::generate(gpt2, {{1, 2, 3}}, g);
  EXPECT_EQ(a, b);
  g.seed = 6;
  auto c = models::generate(gpt2, {{1, 2, 3}}, g);
  EXPECT_NE(a, c);
  // Stop at the first EOS.
  g.do_sample = false;
  models::GenerationConfig plain;
  plain.max_new_tokens = 12;
  plain.eos_token_ids = {-1};
  auto greedy = models::generate(gpt2, {{1, 2, 3}}, plain);
  g.eos_token_ids = {greedy[0][5]};
  auto stopped = models::generate(gpt2, {{1, 2, 3}}, g);
  EXPECT_EQ(stopped[0].back(), greedy[0][5]);
  EXPECT_LE(stopped[0].size(), 6u);
}

TEST(Generation, TooLongIsAClearError) {
  auto model = tiny_gpt2();
  auto& gpt2 = dynamic_cast<models::GPT2ForTask&>(*model);
  models::GenerationConfig g;
  g.max_new_tokens = 40;  // 3 + 40 > n_positions 32
  EXPECT_THROW(models::generate(gpt2, {{1, 2, 3}}, g), Error);
}

// ---- Llama ----

// Grouped-query caches (two key/value heads for four query heads), keys
// stored rotated: the cache gives the tokens of recomputing everything, with
// two compiled steps (the 5-token prompt's and the one-token one); tied and
// untied heads.
// Also the families on Llama's layers: llama3 and yarn rope scaling, Qwen3's per-head
// norms, sliding windows shorter than the 15 positions (Mistral on every
// layer, Qwen3 and Gemma 2 on some), Gemma's scaled embeddings and Gemma 2's
// capped scores and logits, Phi-3's fused projections.
TEST(Generation, LlamaCachedGreedyEqualsStepByStepArgmax) {
  for (const char* name : {"llama/llama_lm", "llama/llama_lm_tied_bias", "llama/qwen2_lm_tied", "llama3/llama3_lm_tied",
                           "llama3/llama_linear_rope", "llama3/llama_yarn_rope", "qwen3/qwen3_lm", "qwen3/qwen3_lm_window",
                           "mistral/mistral_lm_window", "gemma/gemma_lm", "gemma/gemma2_lm", "phi3/phi3_lm"}) {
    SCOPED_TRACE(name);
    auto model = models::from_pretrained(std::string(KILN_TEST_DATA_DIR) + "/" + name);
    auto& llama = dynamic_cast<models::CausalLM&>(*model);
    std::vector<std::vector<int64_t>> prompts{{5, 17, 42, 8, 61}, {3}};
    models::GenerationConfig g;
    g.max_new_tokens = 10;
    g.eos_token_ids = {-1};
    g.use_cache = false;
    auto reference = models::generate(llama, prompts, g);
    g.use_cache = true;
    runtime::DeviceContext::get(Device::cpu()).clear_cache();  // other tests may have compiled the same graphs
    metrics::reset();
    auto cached = models::generate(llama, prompts, g);
    EXPECT_EQ(cached, reference);
    ASSERT_EQ(cached[0].size(), 15u);
    EXPECT_EQ(metrics::snapshot().compiles, 2) << metrics::report();
  }
}

// A prompt read in one step (T tokens from position 0) gives the last
// token's logits and the caches that one-token steps give (within f32
// summation error: its products take T rows at once), and so does the
// prompt padded to the length decode_prompt reads it at (the caches' slots
// up to the prompt's end); then a one-token step continues from any of them
// alike: GPT-2, grouped-query Llama, windows shorter than the prompt
// (Mistral), Gemma 2's capping, Phi-3's fused projections.
TEST(Generation, APromptInOneStepGivesTheLogitsAndCachesOfOneTokenSteps) {
  const std::vector<int64_t> prompt{5, 17, 42, 8, 61, 9, 23}, next{30};
  const auto P = static_cast<int64_t>(prompt.size());
  for (const char* name : {"gpt2/gpt2_lm", "llama/llama_lm", "mistral/mistral_lm_window", "gemma/gemma2_lm",
                           "phi3/phi3_lm"}) {
    SCOPED_TRACE(name);
    auto model = models::from_pretrained(std::string(KILN_TEST_DATA_DIR) + "/" + name);
    model->eval();
    auto& lm = dynamic_cast<models::CausalLM&>(*model);
    const auto cs = lm.cache_shape();
    auto zeros = [&] {
      std::vector<Tensor> c;
      for (int64_t l = 0; l < cs.layers; ++l)
        c.push_back(models::zero_kv_cache({1, cs.kv_heads, 16, cs.head_dim}, Device::cpu(), "cache"));
      return c;
    };
    auto at = [](int64_t t) { return Tensor::from_vector(std::vector<int64_t>{t}, {}); };
    NoGradGuard no_grad;
    std::vector<Tensor> k1 = zeros(), v1 = zeros(), kp = zeros(), vp = zeros(), kq = zeros(), vq = zeros();
    Tensor one;
    for (int64_t t = 0; t < P; ++t)
      one = lm.decode_step(Tensor::from_vector(std::vector<int64_t>{prompt[t]}, {1, 1}), at(t), k1, v1, P, Tensor());
    Tensor all = lm.decode_step(Tensor::from_vector(prompt, {1, P}), at(0), kp, vp, P, Tensor());
    Tensor padded = models::decode_prompt(lm, prompt, 1, P, kq, vq);  // 8 tokens
    mark_step();
    auto as_double = [](const Tensor& x) {
      const std::vector<float> v = x.to_vector<float>();
      return std::vector<double>(v.begin(), v.end());
    };
    ASSERT_EQ(all.shape(), (Shape{1, 1, lm.vocab_size()}));
    EXPECT_TRUE(testing::all_close(as_double(all), as_double(one), 1e-4, 1e-5));
    EXPECT_TRUE(testing::all_close(as_double(padded), as_double(one), 1e-4, 1e-5)) << "padded";
    auto prompt_slots = [&](const Tensor& cache) { return as_double(slice(cache, 2, 0, P)); };
    for (int64_t l = 0; l < cs.layers; ++l) {
      EXPECT_TRUE(testing::all_close(as_double(kp[l]), as_double(k1[l]), 1e-4, 1e-5)) << "keys, layer " << l;
      EXPECT_TRUE(testing::all_close(as_double(vp[l]), as_double(v1[l]), 1e-4, 1e-5)) << "values, layer " << l;
      EXPECT_TRUE(testing::all_close(prompt_slots(kq[l]), prompt_slots(k1[l]), 1e-4, 1e-5)) << "padded keys " << l;
      EXPECT_TRUE(testing::all_close(prompt_slots(vq[l]), prompt_slots(v1[l]), 1e-4, 1e-5)) << "padded values " << l;
    }
    const Tensor token = Tensor::from_vector(next, {1, 1});
    const Tensor a = lm.decode_step(token, at(P), kp, vp, std::nullopt, Tensor());
    const Tensor b = lm.decode_step(token, at(P), k1, v1, std::nullopt, Tensor());
    const Tensor c = lm.decode_step(token, at(P), kq, vq, std::nullopt, Tensor());
    mark_step();
    EXPECT_TRUE(testing::all_close(as_double(a), as_double(b), 1e-4, 1e-5)) << "the next step";
    EXPECT_TRUE(testing::all_close(as_double(c), as_double(b), 1e-4, 1e-5)) << "the next step, padded prompt";
  }
}

// Prompts are read at a few lengths (powers of two up to 64, then multiples
// of 64, at most the capacity), so prompts of many lengths share compiled
// steps: four prompts of 5-8 tokens compile the 8-token step and the
// one-token step only.
TEST(Generation, PromptsOfNearbyLengthsShareTheirStep) {
  EXPECT_EQ(models::prompt_step_length(1, 64), 1);
  EXPECT_EQ(models::prompt_step_length(5, 64), 8);
  EXPECT_EQ(models::prompt_step_length(64, 128), 64);
  EXPECT_EQ(models::prompt_step_length(65, 192), 128);
  EXPECT_EQ(models::prompt_step_length(65, 100), 100);  // the capacity
  EXPECT_EQ(models::prompt_step_length(401, 448), 448);
  auto model = tiny_gpt2();
  {
    auto& lm = dynamic_cast<models::CausalLM&>(*model);
    const auto cs = lm.cache_shape();
    std::vector<Tensor> k, v;
    for (int64_t l = 0; l < cs.layers; ++l) {
      k.push_back(models::zero_kv_cache({1, cs.kv_heads, 4, cs.head_dim}, Device::cpu(), "k_cache"));
      v.push_back(models::zero_kv_cache({1, cs.kv_heads, 4, cs.head_dim}, Device::cpu(), "v_cache"));
    }
    NoGradGuard no_grad;
    EXPECT_CONTAINS(testing::error_of([&] { models::decode_prompt(lm, {1, 2, 3, 4, 5}, 1, 5, k, v); }),
                    "decode_prompt: a prompt of 5 tokens does not fit a cache of 4 slots");
    EXPECT_CONTAINS(testing::error_of([&] { models::decode_prompt(lm, {1, 2, 3}, 2, 2, k, v); }),
                    "decode_prompt: 3 ids are not 2 rows of 2");
  }
  models::GenerationConfig g;
  g.max_new_tokens = 4;
  g.eos_token_ids = {-1};
  runtime::DeviceContext::get(Device::cpu()).clear_cache();
  metrics::reset();
  const std::vector<std::vector<int64_t>> prompts{{5, 17, 42, 8, 61}, {3, 9, 4, 1, 7, 2}, {8, 8, 8, 8, 8, 8, 8},
                                                  {1, 2, 3, 4, 5, 6, 7, 8}};
  const auto together = models::generate(*model, prompts, g);
  EXPECT_EQ(metrics::snapshot().compiles, 2) << metrics::report();
  g.use_cache = false;
  EXPECT_EQ(models::generate(*model, prompts, g), together);
}

TEST(Generation, LlamaStopsAtAnyOfItsEosIds) {
  auto model = models::from_pretrained(std::string(KILN_TEST_DATA_DIR) + "/llama/llama_lm");
  auto& llama = dynamic_cast<models::LlamaForTask&>(*model);
  models::GenerationConfig g;
  g.max_new_tokens = 10;
  g.eos_token_ids = {-1};
  auto greedy = models::generate(llama, {{5, 17, 42}}, g);
  // Llama 3 configs list several end ids: the first of them generated ends the sequence.
  auto& config = const_cast<models::LlamaConfig&>(llama.llama_config());
  config.eos_token_id = {97, greedy[0][6], 98};
  models::GenerationConfig own;
  own.max_new_tokens = 10;
  auto stopped = models::generate(llama, {{5, 17, 42}}, own);
  size_t end = 3;  // after the first generated token that is one of the three
  while (end < greedy[0].size() && !std::set<int64_t>{97, greedy[0][6], 98}.count(greedy[0][end])) ++end;
  ASSERT_LE(end, 6u);
  EXPECT_EQ(stopped[0], std::vector<int64_t>(greedy[0].begin(), greedy[0].begin() + end + 1));
}

// ---- T5 ----

using Prompts = std::vector<std::vector<int64_t>>;

std::unique_ptr<models::PreTrainedModel> tiny_t5(const std::string& name) {
  return models::from_pretrained(std::string(KILN_TEST_DATA_DIR) + "/t5/" + name);
}

// Prompts of different lengths (ids < 99, the test models' vocabulary), each
// ending with </s> (1) as the tokenizer makes them.
const Prompts kPrompts{{5, 17, 42, 8, 61, 23, 9, 1}, {3, 1}, {70, 2, 33, 11, 1}};

// Greedy decoding the slow way: the whole model (encoder included) through
// forward() for decoder inputs grown one token at a time; argmax of the last row.
std::vector<int64_t> forward_argmax(models::T5ForTask& model, const std::vector<int64_t>& prompt, int64_t n) {
  model.eval();
  NoGradGuard no_grad;
  const int64_t V = model.t5_config().vocab_size;
  std::vector<int64_t> dec{model.t5_config().decoder_start_token_id};
  for (int64_t t = 0; t < n; ++t) {
    models::ModelInputs in;
    in.input_ids = Tensor::from_vector(prompt, {1, static_cast<int64_t>(prompt.size())});
    in.decoder_input_ids = Tensor::from_vector(dec, {1, t + 1});
    auto logits = model.forward(in).logits.to_vector<float>();
    EXPECT_EQ(logits.size(), static_cast<size_t>((t + 1) * V));
    dec.push_back(std::max_element(logits.end() - V, logits.end()) - (logits.end() - V));
  }
  return std::vector<int64_t>(dec.begin() + 1, dec.end());
}

class T5Generation : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    model_ = tiny_t5(GetParam());
    t5_ = &dynamic_cast<models::T5ForTask&>(*model_);
  }
  std::unique_ptr<models::PreTrainedModel> model_;
  models::T5ForTask* t5_ = nullptr;
};

TEST_P(T5Generation, CachedEqualsUncachedEqualsForwardArgmax) {
  models::GenerationConfig g;
  g.max_new_tokens = 26;  // past relative_attention_max_distance (20): every decoder bucket in use
  g.eos_token_ids = {-1};    // never stop early
  g.bucket = 16;          // capacity 32: slots past the end stay masked
  g.use_cache = false;
  auto uncached = models::generate(*t5_, kPrompts, g);
  g.use_cache = true;
  auto cached = models::generate(*t5_, kPrompts, g);
  ASSERT_EQ(cached.size(), kPrompts.size());
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    auto reference = forward_argmax(*t5_, kPrompts[i], g.max_new_tokens);
    EXPECT_EQ(cached[i], reference) << "prompt " << i;
    EXPECT_EQ(uncached[i], reference) << "prompt " << i;
  }
  // Not one token repeated: the test would be weak if it were.
  EXPECT_GT(std::set<int64_t>(cached[0].begin(), cached[0].end()).size(), 1u);
}

TEST_P(T5Generation, DecodeStepLogitsAreRowsOfTheFullDecoder) {
  // Teacher forcing: decode_step at position t gives row t of decode() over the whole decoder input.
  t5_->eval();
  NoGradGuard no_grad;
  const int64_t B = 2, S = 6, T = 24, V = t5_->t5_config().vocab_size;
  std::vector<int64_t> src{4, 8, 15, 16, 23, 1, 42, 1, 0, 0, 0, 0}, mask{1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0};
  std::vector<int64_t> dec(B * T);
  for (int64_t i = 0; i < B * T; ++i) dec[i] = (i * 37 + 11) % V;
  Tensor ids = Tensor::from_vector(src, {B, S}), am = Tensor::from_vector(mask, {B, S});
  Tensor enc = t5_->encode(ids, am);
  auto full = t5_->decode(Tensor::from_vector(dec, {B, T}), {}, enc, am).to_vector<float>();  // [B,T,V]
  models::T5DecoderCache cache = t5_->start_decoding(enc, am, 32);
  mark_step();
  for (int64_t t = 0; t < T; ++t) {
    Tensor token = Tensor::from_vector(std::vector<int64_t>{dec[t], dec[T + t]}, {B, 1});
    Tensor logits = t5_->decode_step(token, Tensor::from_vector(std::vector<int64_t>{t}, {}), cache);
    mark_step();
    auto step = logits.to_vector<float>();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t v = 0; v < V; ++v)
        ASSERT_NEAR(step[b * V + v], full[(b * T + t) * V + v], 2e-5) << "row " << b << " position " << t << " id " << v;
  }
}

TEST_P(T5Generation, BatchedPromptsGiveWhatEachGivesAlone) {
  models::GenerationConfig g;
  g.max_new_tokens = 12;
  g.eos_token_ids = {-1};
  auto batched = models::generate(*t5_, kPrompts, g);
  for (size_t i = 0; i < kPrompts.size(); ++i) EXPECT_EQ(models::generate(*t5_, {kPrompts[i]}, g)[0], batched[i]) << i;
}

TEST_P(T5Generation, CachedDecodeCompilesOncePerBucket) {
  runtime::DeviceContext::get(Device::cpu()).clear_cache();
  metrics::reset();
  models::GenerationConfig g;
  g.eos_token_ids = {-1};
  g.bucket = 8;
  g.max_new_tokens = 10;  // capacity 16
  auto ten = models::generate(*t5_, kPrompts, g);
  ASSERT_EQ(ten[0].size(), 10u);
  // The encoder with the cross-attention keys/values, and one decode step for all 10 tokens.
  EXPECT_EQ(metrics::snapshot().compiles, 2) << metrics::report();
  g.max_new_tokens = 14;  // capacity 16 again: nothing new
  auto fourteen = models::generate(*t5_, kPrompts, g);
  EXPECT_EQ(metrics::snapshot().compiles, 2) << metrics::report();
  EXPECT_EQ(std::vector<int64_t>(fourteen[1].begin(), fourteen[1].begin() + 10), ten[1]);
  g.max_new_tokens = 20;  // capacity 24: the decode step once more
  models::generate(*t5_, kPrompts, g);
  EXPECT_EQ(metrics::snapshot().compiles, 3) << metrics::report();
}

TEST_P(T5Generation, EosStopsEachSequence) {
  models::GenerationConfig g;
  g.max_new_tokens = 16;
  g.eos_token_ids = {-1};
  auto free_run = models::generate(*t5_, kPrompts, g);
  // EOS := the 4th token of row 0 (the first time it appears there).
  const int64_t eos = free_run[0][3];
  auto until_eos = [&](const std::vector<int64_t>& seq) {
    auto it = std::find(seq.begin(), seq.end(), eos);
    return std::vector<int64_t>(seq.begin(), it == seq.end() ? seq.end() : it + 1);
  };
  ASSERT_LE(until_eos(free_run[0]).size(), 4u);
  g.eos_token_ids = {eos};
  for (bool cache : {true, false}) {
    g.use_cache = cache;
    auto stopped = models::generate(*t5_, kPrompts, g);
    ASSERT_EQ(stopped.size(), kPrompts.size());
    EXPECT_EQ(stopped[0].back(), eos);
    // Every row is its free run cut at its own first EOS; rows finished early do not disturb the others.
    for (size_t i = 0; i < kPrompts.size(); ++i) EXPECT_EQ(stopped[i], until_eos(free_run[i])) << "row " << i;
  }
  // The config's eos_token_id (1) is the default.
  models::GenerationConfig d;
  d.max_new_tokens = 16;
  for (const auto& seq : models::generate(*t5_, kPrompts, d)) {
    auto first = std::find(seq.begin(), seq.end(), int64_t{1});
    EXPECT_TRUE(first == seq.end() || first + 1 == seq.end());
  }
}

TEST_P(T5Generation, SamplingIsSeeded) {
  models::GenerationConfig g;
  g.max_new_tokens = 12;
  g.eos_token_ids = {-1};
  g.do_sample = true;
  g.temperature = 1.5;
  g.seed = 5;
  auto a = models::generate(*t5_, kPrompts, g);
  EXPECT_EQ(models::generate(*t5_, kPrompts, g), a);
  g.seed = 6;
  EXPECT_NE(models::generate(*t5_, kPrompts, g), a);
  // top_k = 1 leaves only the argmax: greedy.
  g.top_k = 1;
  models::GenerationConfig greedy;
  greedy.max_new_tokens = 12;
  greedy.eos_token_ids = {-1};
  EXPECT_EQ(models::generate(*t5_, kPrompts, g), models::generate(*t5_, kPrompts, greedy));
}

INSTANTIATE_TEST_SUITE_P(T5, T5Generation, ::testing::Values("t5_relu_tied", "t5_gated_untied"));

TEST(Generation, BadT5InputIsAClearError) {
  auto model = tiny_t5("t5_relu_tied");
  auto& t5 = dynamic_cast<models::T5ForTask&>(*model);
  models::GenerationConfig g;
  auto message = [&](const Prompts& p, const models::GenerationConfig& cfg) -> std::string {
    try {
      models::generate(t5, p, cfg);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(message({{3, 1}, {}}, g).find("prompt 1 is empty"), std::string::npos) << message({{3, 1}, {}}, g);
  EXPECT_NE(message({{3, 99}}, g).find("id 99, outside the vocabulary [0, 99)"), std::string::npos);
  models::GenerationConfig neg = g;
  neg.max_new_tokens = -1;
  EXPECT_NE(message({{3}}, neg).find("max_new_tokens"), std::string::npos);
  models::GenerationConfig hot = g;
  hot.do_sample = true;
  hot.top_p = 1.5;  // 0 is valid (transformers' TopPLogitsWarper: only the most likely id stays)
  EXPECT_NE(message({{3}}, hot).find("top_p"), std::string::npos);
  EXPECT_TRUE(models::generate(t5, {}, g).empty());

  // Models that cannot generate, through the generic entry.
  auto encoder = tiny_t5("t5_encoder");
  try {
    models::generate(*encoder, {{3, 1}}, g);
    ADD_FAILURE() << "T5EncoderModel generated";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("T5EncoderModel cannot generate"), std::string::npos) << e.what();
  }
  auto bert = models::from_pretrained(std::string(KILN_TEST_DATA_DIR) + "/bert/bert_seqcls");
  EXPECT_THROW(models::generate(*bert, {{3, 1}}, g), Error);
  // The generic entry reaches both kinds of model.
  auto gpt2 = tiny_gpt2();
  g.max_new_tokens = 3;
  EXPECT_EQ(models::generate(*gpt2, {{1, 2}}, g), models::generate(dynamic_cast<models::GPT2ForTask&>(*gpt2), {{1, 2}}, g));
  EXPECT_EQ(models::generate(*model, {{3, 1}}, g), models::generate(t5, {{3, 1}}, g));
}

// num_beams 1 with do_sample is sampling proper (models::next_token: transformers' warpers, then one draw from
// kiln's generator), not beam sampling: its draws for a seed are pinned here. A change to the warpers or the draw
// changes them and must be deliberate.
TEST(Generation, OneBeamSamplingDrawsArePinned) {
  auto model = tiny_gpt2();
  models::GenerationConfig g;
  g.do_sample = true;
  g.temperature = 0.9;
  g.top_k = 10;
  g.max_new_tokens = 6;
  g.eos_token_ids = {-1};
  g.seed = 21;
  EXPECT_EQ(models::generate(*model, {{5, 17, 42, 8}}, g),
            (std::vector<std::vector<int64_t>>{{5, 17, 42, 8, 26, 58, 56, 56, 58, 58}}));
}

}  // namespace
}  // namespace kiln

// HF's RepetitionPenaltyLogitsProcessor(1.5) then NoRepeatNGramLogitsProcessor(2) / (3) on one row, as
// transformers computes them for ids [0, 3, 1, 4, 0, 3].
TEST(LogitsProcessors, RepetitionPenaltyAndNoRepeatNgramAsTransformers) {
  const std::vector<int64_t> ids = {0, 3, 1, 4, 0, 3};
  const float inf = std::numeric_limits<float>::infinity();
  kiln::models::GenerationConfig g;
  g.repetition_penalty = 1.5;
  g.no_repeat_ngram_size = 2;
  std::vector<float> logits = {1.0f, -2.0f, 0.5f, 3.0f, -0.5f, 2.0f};
  kiln::models::process_logits(logits, ids, g);
  EXPECT_EQ(logits, (std::vector<float>{1.0f / 1.5f, -inf, 0.5f, 2.0f, -0.75f, 2.0f}));
  kiln::models::GenerationConfig three;
  three.no_repeat_ngram_size = 3;
  logits = {1.0f, -2.0f, 0.5f, 3.0f, -0.5f, 2.0f};
  kiln::models::process_logits(logits, ids, three);
  EXPECT_EQ(logits, (std::vector<float>{1.0f, -inf, 0.5f, 3.0f, -0.5f, 2.0f}));
  // Fewer ids than an n-gram needs: nothing is banned.
  three.no_repeat_ngram_size = 8;
  logits = {1.0f, -2.0f, 0.5f, 3.0f, -0.5f, 2.0f};
  kiln::models::process_logits(logits, ids, three);
  EXPECT_EQ(logits, (std::vector<float>{1.0f, -2.0f, 0.5f, 3.0f, -0.5f, 2.0f}));
}

