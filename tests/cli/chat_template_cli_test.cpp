// kiln chat-template end to end: the rendering a tokenizer directory's
// template gives (byte for byte, no newline added), --add_generation_prompt,
// --tokenize, and one-line errors naming the file and key for bad input.
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kiln/tokenizers/tokenizer.h"
#include "support/temp_dir.h"
#include "support/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

// Runs `kiln args...` with stdout into `out` and stderr into `err`; returns the exit status.
int kiln(const std::string& args, const fs::path& out, const fs::path& err) {
  std::string cmd = KILN_BIN " " + args + " > " + out.string() + " 2> " + err.string();
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// A Zephyr-style template in tokenizer_config.json, as model repositories ship it.
const char* kConfig = R"({
  "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": false},
  "eos_token": "</s>",
  "chat_template": "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\\n' + message['content'] + eos_token }}\n{% else %}\n{{ raise_exception('Unknown role: ' + message['role']) }}\n{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}"
})";

const char* kMessages = R"([{"role": "system", "content": "Be kind."},
  {"role": "user", "content": "Hi 👋"}, {"role": "assistant", "content": "Hello!"}])";

TEST(ChatTemplateCli, RendersAsApplyChatTemplate) {
  testing::TempDir w;
  fs::path dir = w.path() / "tok";
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer_config.json") << kConfig;
  fs::path chat = w.write("chat.json", kMessages);
  const std::string base = "chat-template --tokenizer " + dir.string() + " --messages " + chat.string();
  ASSERT_EQ(kiln(base, w.path() / "out", w.path() / "err"), 0) << slurp(w.path() / "err");
  EXPECT_EQ(slurp(w.path() / "out"), "<|system|>\nBe kind.</s>\n<|user|>\nHi 👋</s>\n<|assistant|>\nHello!</s>\n");
  ASSERT_EQ(kiln(base + " --add_generation_prompt", w.path() / "out", w.path() / "err"), 0) << slurp(w.path() / "err");
  EXPECT_EQ(slurp(w.path() / "out"),
            "<|system|>\nBe kind.</s>\n<|user|>\nHi 👋</s>\n<|assistant|>\nHello!</s>\n<|assistant|>\n");

  // The template's own raise_exception message, as one line.
  fs::path bad_role = w.write("bad_role.json", R"([{"role": "narrator", "content": "x"}])");
  EXPECT_EQ(kiln("chat-template --tokenizer " + dir.string() + " --messages " + bad_role.string(), w.path() / "out",
                 w.path() / "err"),
            1);
  EXPECT_CONTAINS(slurp(w.path() / "err"), "Unknown role: narrator");
}

TEST(ChatTemplateCli, TokenizeEncodesTheRenderingWithoutSpecialTokens) {
  testing::TempDir w;
  fs::path data = w.path() / "data";
  ASSERT_EQ(kiln("demo-data --output_dir " + data.string(), w.path() / "out", w.path() / "err"), 0)
      << slurp(w.path() / "err");
  std::ofstream(data / "chat_template.jinja") << "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}";
  fs::path chat = w.write("chat.json", R"([{"role": "user", "content": "the battery is great"}])");
  ASSERT_EQ(kiln("chat-template --tokenize --tokenizer " + data.string() + " --messages " + chat.string(),
                 w.path() / "out", w.path() / "err"),
            0)
      << slurp(w.path() / "err");
  auto ids = tokenizers::Tokenizer::from_pretrained(data.string()).encode("user: the battery is great\n", false).ids;
  std::string expected = "[";
  for (size_t i = 0; i < ids.size(); ++i) expected += (i ? ", " : "") + std::to_string(ids[i]);
  EXPECT_EQ(slurp(w.path() / "out"), expected + "]\n");
}

TEST(ChatTemplateCli, BadInputIsOneLineNamingTheFileAndKey) {
  testing::TempDir w;
  fs::path dir = w.path() / "tok";
  fs::create_directories(dir);
  fs::path chat = w.write("chat.json", kMessages);
  auto error_for = [&](const std::string& args, bool one_line = true) {
    EXPECT_EQ(kiln("chat-template " + args, w.path() / "out", w.path() / "err"), 1) << args;
    std::string err = slurp(w.path() / "err");
    if (one_line) {
      EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
    }
    return err;
  };
  // No template in the directory.
  EXPECT_CONTAINS(error_for("--tokenizer " + dir.string() + " --messages " + chat.string()),
                  dir.string() + ": no chat template");
  std::ofstream(dir / "tokenizer_config.json") << kConfig;
  // Messages that are not a list, a message without a role, malformed JSON, a missing file.
  fs::path not_list = w.write("not_list.json", R"({"messages": []})");
  EXPECT_CONTAINS(error_for("--tokenizer " + dir.string() + " --messages " + not_list.string()),
                  not_list.string() + ": expected a JSON list of messages");
  fs::path no_role = w.write("no_role.json", R"([{"role": "user", "content": "a"}, {"content": "b"}])");
  EXPECT_CONTAINS(error_for("--tokenizer " + dir.string() + " --messages " + no_role.string()),
                  no_role.string() + ": messages[1]: missing key 'role'");
  fs::path broken = w.write("broken.json", R"([{"role": "user",)");
  EXPECT_CONTAINS(error_for("--tokenizer " + dir.string() + " --messages " + broken.string()), broken.string());
  EXPECT_CONTAINS(error_for("--tokenizer " + dir.string() + " --messages " + (w.path() / "none.json").string()),
                  "none.json");
  // A template error names its position.
  std::ofstream(dir / "chat_template.jinja") << "{% for m in messages %}\n{{ m.content | shout }}{% endfor %}";
  EXPECT_CONTAINS(error_for("--tokenizer " + dir.string() + " --messages " + chat.string()),
                  "chat_template.jinja:2:16: unknown filter 'shout'");
  // A required flag left out (the usage follows the error).
  EXPECT_CONTAINS(error_for("--messages " + chat.string(), false), "missing --tokenizer");
}

}  // namespace
}  // namespace kiln
