// kiln generate --model_name_or_path DIR (--prompt TEXT | --prompts_file FILE) [--max_new_tokens 20 | --max_length L]
//               [--do_sample] [--temperature T] [--top_k K] [--top_p P] [--min_p P] [--typical_p P] [--epsilon_cutoff E]
//               [--eta_cutoff E] [--seed S] [--no_cache] [--per_device_eval_batch_size N] [logits-processor flags, generation_flags.h]
//               [--num_beams N] [--length_penalty L] [--early_stopping true|false|never] [--num_return_sequences R]
//               [--chat [--messages FILE.json]] [--bf16]
// Continues each prompt with a causal LM (GPT-2) or, with an encoder-decoder
// (T5), takes each prompt as the encoder input; prints one line per prompt.
// --num_beams N > 1 is beam search, with --do_sample beam sampling (beam_search.h).
// The model's generation_config.json gives the defaults (do_sample,
// temperature, eos ids, ...), as model.generate() starts from it.
// --chat renders each prompt as a user turn (or --messages as a conversation)
// with the model's chat template and the generation prompt, stops at the
// template's end of turn (the tokenizer's eos_token) and prints the reply.
// --bf16: products in bf16 (an Autocast around generation), and a bf16
// checkpoint's weights stay bf16 in memory (decoding reads half the bytes);
// an f32 checkpoint's are cast to bf16 copies once (keep_bf16_copy).
#include <cstdio>
#include <sstream>

#include "command.h"
#include "flags.h"
#include "generation_flags.h"
#include "kiln/core/error.h"
#include "kiln/core/file.h"
#include "kiln/core/json.h"
#include "kiln/models/generation.h"
#include "kiln/models/generation_config.h"
#include "kiln/runtime/autocast.h"
#include "kiln/tokenizers/chat_template.h"
#include "lora_flags.h"
#include "train_common.h"

namespace {

using namespace kiln;
constexpr const char* kUsage =
    "usage: kiln generate --model_name_or_path DIR (--prompt TEXT | --prompts_file FILE) [--max_new_tokens 20 | --max_length L]\n"
    "                     [--do_sample [true|false]] [--temperature T] [--top_k 50] [--top_p P] [--min_p P] [--seed S]\n"
    "                     [--no_cache]\n"
    "                     [--per_device_eval_batch_size N] [--repetition_penalty P] [--no_repeat_ngram_size N]\n"
    "                     [--min_new_tokens N | --min_length L] [--typical_p P] [--top_h H] [--epsilon_cutoff E] [--eta_cutoff E]\n"
    "                     [--suppress_tokens IDS] [--begin_suppress_tokens IDS] [--bad_words_ids JSON] [--sequence_bias JSON]\n"
    "                     [--forced_bos_token_id ID] [--forced_eos_token_id IDS] [--exponential_decay_length_penalty START,FACTOR]\n"
    "                     [--renormalize_logits] [--remove_invalid_values]\n"
    "                     [--stop_strings JSON|TEXT] [--max_time SECONDS]\n"
    "                     [--encoder_repetition_penalty P] [--encoder_no_repeat_ngram_size N] [--guidance_scale S]\n"
    "                     [--num_beams N [--length_penalty L] [--early_stopping true|false|never]] [--num_return_sequences R]\n"
    "                     [--chat [--messages FILE.json]] [--adapter LORA_DIR] [--bf16] (--model, --batch_size: the short names)\n"
    "GPT-2 prints prompt + continuation; T5 prints the decoder's output (prompts batched by --per_device_eval_batch_size, 8)\n"
    "Defaults come from the model's generation_config.json (as model.generate() reads it), the flags over them.\n"
    "--num_beams: beam search; R lines per prompt, best first (with --do_sample and one beam: R draws per prompt).\n"
    "with the source prefix it was trained with (--source_prefix P to give another, \"\" for none) before each prompt.\n"
    "--chat: each prompt is a user turn (--messages: a JSON list of {\"role\", \"content\"}) rendered with the\n"
    "model's chat template and its generation prompt; prints the reply, stopping at the end of turn.\n"
    "--adapter: a PEFT adapter on the base model (or give the adapter directory as the model).\n"
    "--bf16: matrix products in bf16 (as torch.autocast); a bf16 checkpoint's weights stay bf16 in memory.";

// --chat: the conversations to continue, each rendered with the generation prompt and tokenized as
// transformers' apply_chat_template(tokenize=True) does (the template writes the special tokens).
std::vector<std::vector<int64_t>> chat_prompts(const kiln::cli::Flags& flags, const std::vector<std::string>& prompts,
                                               const kiln::cli::TokenizerBundle& tok,
                                               const kiln::tokenizers::ChatTemplate& chat) {
  std::vector<nlohmann::ordered_json> conversations;
  for (const auto& p : prompts) conversations.push_back({{{"role", "user"}, {"content", p}}});
  if (flags.has("messages")) {
    const std::string path = flags.get("messages");
    nlohmann::ordered_json messages = kiln::read_ordered_json_file(path);
    kiln::tokenizers::check_messages(messages, path);
    conversations.push_back(std::move(messages));
  }
  std::vector<std::vector<int64_t>> ids;
  kiln::tokenizers::ChatTemplateOptions o;
  o.add_generation_prompt = true;
  for (const auto& c : conversations) {
    const auto e = tok.tokenizer.encode(chat.apply(c, o), false);
    ids.emplace_back(e.ids.begin(), e.ids.end());
  }
  return ids;
}

int run_generate(const std::vector<std::string>& args) {
  std::vector<cli::FlagSpec> specs = {
      {"model_name_or_path", true, true}, {"prompt"}, {"prompts_file"}, {"max_new_tokens"}, {"max_length"}, {"do_sample", false},
      {"temperature"}, {"top_k"}, {"top_p"}, {"min_p"}, {"typical_p"}, {"top_h"}, {"epsilon_cutoff"}, {"eta_cutoff"}, {"seed"}, {"no_cache", false}, {"per_device_eval_batch_size"},
      {"source_prefix"}, {"chat", false}, {"messages"}, {"adapter"}, {"bf16", false}};
  for (auto& s : cli::beam_flag_specs()) specs.push_back(std::move(s));
  cli::Flags flags("generate", std::move(specs), kUsage);
  flags.parse(args);
  if (flags.help()) {
    std::printf("%s\n", kUsage);
    return 0;
  }
  std::vector<std::string> prompts;
  if (flags.has("prompt")) prompts.push_back(flags.get("prompt"));
  if (flags.has("prompts_file")) {
    std::istringstream f(read_file(flags.get("prompts_file")));
    for (std::string line; std::getline(f, line);)
      if (!line.empty()) prompts.push_back(line);
  }
  const bool chat = flags.has("chat");
  KILN_CHECK(chat || !flags.has("messages"), "generate: --messages is read with --chat\n", kUsage);
  KILN_CHECK(!prompts.empty() || (chat && flags.has("messages")),
             "generate: give --prompt TEXT or --prompts_file FILE", chat ? " or --messages FILE.json" : "", "\n", kUsage);
  models::LoadOptions load;
  load.keep_bf16 = flags.has("bf16");  // a bf16 checkpoint's matrices stay bf16, products read them directly
  auto model = models::from_pretrained_with_adapter(flags.get("model"), flags.get("adapter"), load);
  Autocast bf16(flags.has("bf16"));
  // An f32 checkpoint's matrices: cast to bf16 once, by the first step, not by every decode step.
  if (flags.has("bf16"))
    for (const Tensor& p : model->parameters()) keep_bf16_copy(p);
  // An encoder-decoder (T5) reads a prompt as its encoder's input; a causal LM continues it.
  const bool seq2seq = model->config().is_encoder_decoder();
  KILN_CHECK(model->can_generate(), "generate: ", model->architecture(),
             " cannot generate text; it needs a language-model head (GPT2LMHeadModel, a Llama, Mistral or Qwen2 ",
             "*ForCausalLM, or T5ForConditionalGeneration)");
  cli::TokenizerBundle tok = cli::load_tokenizer(cli::tokenizer_dir_for(flags.get("model"), flags.get("adapter")));
  models::GenerationConfig g;
  // The model's generation_config.json first (as generate() reads model.generation_config), the flags over it.
  models::apply_generation_config(flags.get("model"), g);
  cli::read_beam_flags(flags, g, "generate");
  // (Ranges the generation checks itself, with HF's messages: max_new_tokens, top_k.)
  KILN_CHECK(!flags.has("max_new_tokens") || !flags.has("max_length"),
             "generate: give --max_new_tokens or --max_length, not both");
  if (flags.has("max_new_tokens") || flags.has("max_length")) g.max_length.reset();
  if (flags.has("max_length")) g.max_length = flags.integer("max_length", 0, 1);
  g.max_new_tokens = flags.integer("max_new_tokens", g.max_new_tokens, 1);  // GenerationConfig.validate: > 0
  g.do_sample = flags.switch_or("do_sample", g.do_sample);
  g.temperature = flags.number("temperature", g.temperature);
  g.top_k = flags.integer("top_k", g.top_k);
  g.top_p = flags.number("top_p", g.top_p);
  g.min_p = flags.number("min_p", g.min_p);
  g.typical_p = flags.number("typical_p", g.typical_p);
  if (flags.has("top_h")) g.top_h = flags.number("top_h", 0);
  g.epsilon_cutoff = flags.number("epsilon_cutoff", g.epsilon_cutoff);
  g.eta_cutoff = flags.number("eta_cutoff", g.eta_cutoff);
  g.seed = static_cast<uint64_t>(flags.integer("seed", 0, 0));
  g.use_cache = !flags.has("no_cache");
  if (!g.do_sample)  // as HF's generate warns: greedy decoding reads none of them
    for (const char* k : {"temperature", "top_k", "top_p", "min_p", "top_h", "typical_p", "epsilon_cutoff",
                          "eta_cutoff", "seed"})
      if (flags.has(k))
        std::fprintf(stderr, "kiln generate: warning: --%s only applies with --do_sample (greedy decoding ignores it)\n",
                     k);
  cli::attach_stop_strings(g, tok);
  const auto batch = static_cast<size_t>(flags.integer("batch_size", 8, 1));
  std::optional<tokenizers::ChatTemplate> templ;
  if (chat) {
    KILN_CHECK(!seq2seq, "generate: --chat needs a decoder-only model (a chat template's prompt is continued)");
    templ = tokenizers::ChatTemplate::from_pretrained(flags.get("model"));
    const auto& special = templ->special_tokens();
    const std::string eot = special.contains("eos_token") ? special["eos_token"].get<std::string>() : "";
    const auto eot_id = tok.tokenizer.token_to_id(eot);
    KILN_CHECK(!eot.empty() && eot_id, "generate: --chat stops at the end of turn, the eos_token of ",
               flags.get("model"), "/tokenizer_config.json, which ", eot.empty() ? "names none" : "is not a token");
    g.eos_token_ids = {*eot_id};
  }
  // A causal LM continues the raw text; T5's encoder input ends with </s>, as HF's tokenizer(text) gives it.
  std::vector<std::vector<int64_t>> ids;
  const std::string prefix = !seq2seq ? "" : flags.has("source_prefix") ? flags.get("source_prefix")
                                                                    : cli::saved_source_prefix(model->config());
  if (!seq2seq && flags.has("source_prefix"))
    std::fprintf(stderr, "kiln generate: warning: --source_prefix is for encoder-decoder models (T5); ignored\n");
  if (templ) {
    ids = chat_prompts(flags, prompts, tok, *templ);
  } else {
    for (const auto& p : prompts) {
      auto e = tok.tokenizer.encode(prefix + p, /*add_special_tokens=*/seq2seq);
      ids.emplace_back(e.ids.begin(), e.ids.end());
    }
  }
  std::vector<std::vector<int64_t>> out;
  if (!seq2seq) {
    out = models::generate(*model, ids, g);
  } else {
    const uint64_t seed = g.seed;
    for (size_t i = 0; i < ids.size(); i += batch) {
      g.seed = seed + i / batch;  // each batch its own sampling stream
      std::vector<std::vector<int64_t>> chunk(ids.begin() + i, ids.begin() + std::min(ids.size(), i + batch));
      for (auto& seq : models::generate(*model, chunk, g)) out.push_back(std::move(seq));
    }
  }
  for (size_t i = 0; i < out.size(); ++i) {
    const auto& seq = out[i];
    // A chat prints the reply alone: the tokens after the rendered conversation.
    const size_t from = templ ? std::min(ids[i / static_cast<size_t>(g.num_return_sequences)].size(), seq.size()) : 0;
    std::vector<uint32_t> u(seq.begin() + static_cast<std::ptrdiff_t>(from), seq.end());
    std::printf("%s\n", tok.tokenizer.decode(u, true).c_str());
  }
  return 0;  // (main waits for the last step's queued cache update before the process exits)
}

}  // namespace

KILN_COMMAND(generate, "generate text with GPT-2 (continue prompts) or T5 (prompt = encoder input)", run_generate);
