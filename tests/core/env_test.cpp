// core/env.h: the table of KILN_* variables and its readers.
#include "kiln/core/env.h"

#include <cstdlib>
#include <optional>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "kiln/core/error.h"
#include "support/test_util.h"

namespace kiln {
namespace {

// Sets a variable for one test and restores it after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

using kiln::testing::error_of;

TEST(Env, TableNamesEachVariableOnceWithAMeaning) {
  std::set<std::string_view> names;
  for (const EnvVar& v : env_vars()) {
    EXPECT_TRUE(v.name.starts_with("KILN_")) << v.name;
    EXPECT_FALSE(v.meaning.empty()) << v.name;
    EXPECT_TRUE(names.insert(v.name).second) << v.name << " twice";
  }
  EXPECT_TRUE(names.count("KILN_JIT"));
  EXPECT_TRUE(names.count("KILN_DUMP"));
}

TEST(Env, UnsetOrEmptyGivesTheTableDefault) {
  ScopedEnv unset("KILN_CACHE_SIZE", nullptr);
  EXPECT_EQ(env_integer("KILN_CACHE_SIZE", 1), 1024);
  ScopedEnv empty("KILN_CACHE_SIZE", "");
  EXPECT_EQ(env_value("KILN_CACHE_SIZE"), "1024");
}

TEST(Env, SwitchesTakeZeroOneOnOff) {
  for (auto [text, want] : {std::pair{"1", true}, {"on", true}, {"0", false}, {"off", false}}) {
    ScopedEnv e("KILN_EAGER", text);
    EXPECT_EQ(env_switch("KILN_EAGER"), want) << text;
  }
  ScopedEnv bad("KILN_EAGER", "yes please");
  EXPECT_CONTAINS(error_of([] { env_switch("KILN_EAGER"); }), "KILN_EAGER: expected 0, 1, on or off, found 'yes please'");
}

TEST(Env, NumbersAreWholeAndBounded) {
  {
    ScopedEnv e("KILN_CACHE_SIZE", "12");
    EXPECT_EQ(env_integer("KILN_CACHE_SIZE", 1), 12);
  }
  for (const char* bad : {"0", "-3", "12abc", "99999999999999999999999"}) {
    ScopedEnv e("KILN_CACHE_SIZE", bad);
    EXPECT_CONTAINS(error_of([] { env_integer("KILN_CACHE_SIZE", 1); }), "KILN_CACHE_SIZE: expected a whole number >= 1");
  }
  ScopedEnv ms("KILN_CACHE_MIN_COMPILE_MS", "2.5");
  EXPECT_DOUBLE_EQ(env_number("KILN_CACHE_MIN_COMPILE_MS", 0), 2.5);
  ScopedEnv nan("KILN_CACHE_MIN_COMPILE_MS", "nan");
  EXPECT_CONTAINS(error_of([] { env_number("KILN_CACHE_MIN_COMPILE_MS", 0); }), "found 'nan'");
}

TEST(Env, ChoicesAndListsNameWhatTheyTake) {
  {
    ScopedEnv e("KILN_ATTENTION", "fused");
    EXPECT_EQ(env_choice("KILN_ATTENTION", {"auto", "fused", "composite"}), "fused");
  }
  {
    ScopedEnv e("KILN_ATTENTION", "flash");
    EXPECT_CONTAINS(error_of([] { env_choice("KILN_ATTENTION", {"auto", "fused", "composite"}); }),
                    "KILN_ATTENTION: expected one of 'auto' 'fused' 'composite', found 'flash'");
  }
  {
    ScopedEnv e("KILN_DUMP", "program");
    EXPECT_TRUE(env_lists("KILN_DUMP", "program", {"graph", "program"}));
    EXPECT_FALSE(env_lists("KILN_DUMP", "graph", {"graph", "program"}));
  }
  {
    ScopedEnv e("KILN_DUMP", nullptr);
    EXPECT_FALSE(env_lists("KILN_DUMP", "graph", {"graph", "program"}));
  }
  ScopedEnv e("KILN_DUMP", "graph,,ir");
  EXPECT_CONTAINS(error_of([] { env_lists("KILN_DUMP", "graph", {"graph", "program"}); }),
                  "KILN_DUMP: expected a comma-separated list of 'graph' 'program', found 'graph,,ir'");
}

TEST(Env, AVariableMissingFromTheTableIsAnInternalError) {
  EXPECT_CONTAINS(error_of([] { env_value("KILN_NOT_A_SWITCH"); }), "not in the table");
}

}  // namespace
}  // namespace kiln
