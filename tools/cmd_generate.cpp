// kiln generate --model DIR (--prompt TEXT | --prompts_file FILE) [--max_new_tokens 20] [--do_sample]
//               [--temperature T] [--top_k K] [--top_p P] [--seed S] [--no_cache] [--batch_size N]
// Continues each prompt with a causal LM (GPT-2) or, with an encoder-decoder
// (T5), takes each prompt as the encoder input; prints one line per prompt.
#include <cstdio>
#include <sstream>

#include "command.h"
#include "flags.h"
#include "kiln/core/error.h"
#include "kiln/core/file.h"
#include "kiln/models/generation.h"
#include "lora_flags.h"
#include "train_common.h"

namespace {

using namespace kiln;
constexpr const char* kUsage =
    "usage: kiln generate --model DIR (--prompt TEXT | --prompts_file FILE) [--max_new_tokens 20] [--do_sample]\n"
    "                     [--temperature T] [--top_k K] [--top_p P] [--seed S] [--no_cache] [--batch_size N]\n"
    "                     [--adapter LORA_DIR]  (a PEFT adapter on the base --model)\n"
    "GPT-2 prints prompt + continuation; T5 prints the decoder's output (prompts batched by --batch_size, 8).";

int run_generate(const std::vector<std::string>& args) {
  cli::Flags flags("generate",
                   {{"model", true, true}, {"prompt"}, {"prompts_file"}, {"max_new_tokens"}, {"do_sample", false},
                    {"temperature"}, {"top_k"}, {"top_p"}, {"seed"}, {"no_cache", false}, {"batch_size"}, {"adapter"}},
                   kUsage);
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
  KILN_CHECK(!prompts.empty(), "generate: give --prompt TEXT or --prompts_file FILE\n", kUsage);
  auto model = models::from_pretrained_with_adapter(flags.get("model"), flags.get("adapter"), {});
  auto* causal = dynamic_cast<models::CausalLM*>(model.get());
  auto* t5 = dynamic_cast<models::T5ForTask*>(model.get());
  KILN_CHECK((causal && causal->can_generate()) || (t5 && t5->can_generate()), "generate: ", model->architecture(),
             " cannot generate text; it needs a language-model head (GPT2LMHeadModel, a Llama, Mistral or Qwen2 ",
             "*ForCausalLM, or T5ForConditionalGeneration)");
  cli::TokenizerBundle tok = cli::load_tokenizer(cli::tokenizer_dir_for(flags.get("model"), flags.get("adapter")));
  models::GenerationConfig g;
  // (Ranges the generation checks itself, with HF's messages: max_new_tokens, top_k.)
  g.max_new_tokens = flags.integer("max_new_tokens", 20);
  g.do_sample = flags.has("do_sample");
  g.temperature = flags.number("temperature", 1.0);
  g.top_k = flags.integer("top_k", 0);
  g.top_p = flags.number("top_p", 1.0);
  g.seed = static_cast<uint64_t>(flags.integer("seed", 0, 0));
  g.use_cache = !flags.has("no_cache");
  if (!g.do_sample)  // as HF's generate warns: greedy decoding reads none of them
    for (const char* k : {"temperature", "top_k", "top_p", "seed"})
      if (flags.has(k))
        std::fprintf(stderr, "kiln generate: warning: --%s only applies with --do_sample (greedy decoding ignores it)\n",
                     k);
  const auto batch = static_cast<size_t>(flags.integer("batch_size", 8, 1));
  // A causal LM continues the raw text; T5's encoder input ends with </s>, as HF's tokenizer(text) gives it.
  std::vector<std::vector<int64_t>> ids;
  for (const auto& p : prompts) {
    auto e = tok.tokenizer.encode(p, /*add_special_tokens=*/t5 != nullptr);
    ids.emplace_back(e.ids.begin(), e.ids.end());
  }
  std::vector<std::vector<int64_t>> out;
  if (causal) {
    out = models::generate(*causal, ids, g);
  } else {
    const uint64_t seed = g.seed;
    for (size_t i = 0; i < ids.size(); i += batch) {
      g.seed = seed + i / batch;  // each batch its own sampling stream
      std::vector<std::vector<int64_t>> chunk(ids.begin() + i, ids.begin() + std::min(ids.size(), i + batch));
      for (auto& seq : models::generate(*t5, chunk, g)) out.push_back(std::move(seq));
    }
  }
  for (const auto& seq : out) {
    std::vector<uint32_t> u(seq.begin(), seq.end());
    std::printf("%s\n", tok.tokenizer.decode(u, true).c_str());
  }
  return 0;
}

}  // namespace

KILN_COMMAND(generate, "generate text with GPT-2 (continue prompts) or T5 (prompt = encoder input)", run_generate);
