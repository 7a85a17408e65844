// Templates that would exhaust memory or time without building much of their own: a value that shares its
// parts ([x, x] nested 40 times) printed, serialized or compared; widths, indents and counts of 10**11;
// lists doubled until their items pass the size limit. Each is a clean error before the work is done.
#include <gtest/gtest.h>

#include <string>

#include "kiln/core/error.h"
#include "kiln/core/json.h"
#include "kiln/tokenizers/jinja.h"
#include "support/test_util.h"

using namespace kiln::tokenizers;
using nlohmann::ordered_json;

namespace {

using kiln::testing::error_of;


std::string render(const std::string& text) {
  jinja::RenderOptions o;
  return jinja::Template(text, "chat_template").render(ordered_json::object(), o);
}

// [1] nested 40 times as [s, s]: 2^40 leaves, 40 lists in memory.
const std::string kShared =
    "{% set ns = namespace(s=[1]) %}{% for i in range(40) %}{% set ns.s = [ns.s, ns.s] %}{% endfor %}";

TEST(JinjaLimits, SharedValuesAreNotWalkedWithoutBound) {
  for (const char* use : {"{{ ns.s }}", "{{ ns.s|string }}", "{{ ns.s|tojson }}", "{{ ns.s|tojson(indent=2) }}"})
    EXPECT_CONTAINS(error_of([&] { render(kShared + use); }), "bytes a template may build") << use;
  for (const char* use : {"{{ ns.s == ns.s }}", "{{ ns.s in [ns.s] }}", "{{ [ns.s, ns.s]|sort }}"})
    EXPECT_CONTAINS(error_of([&] { render(kShared + use); }), "comparison walked more than") << use;
  EXPECT_CONTAINS(error_of([] {
    render("{% set ns = namespace(s=[1]) %}{% for i in range(40) %}{% set ns.s = dict(a=ns.s, b=ns.s) %}"
           "{% endfor %}{{ ns.s|tojson }}");
  }), "tojson of a value too large");
}

TEST(JinjaLimits, HugeWidthsAreRefusedBeforeTheyAreBuilt) {
  for (const char* t : {"{{ 'x'|center(100000000000) }}", "{{ 'a\nb'|indent(100000000000) }}",
                        "{{ [1]|tojson(indent=100000000000) }}", "{{ '%100000000000d'|format(1) }}",
                        "{{ '%.100000000000d'|format(1) }}", "{{ '{:>100000000000}'.format(1) }}",
                        "{{ [1, 2]|slice(100000000000)|list }}", "{{ [1]|batch(100000000000, 0)|list }}"})
    EXPECT_CONTAINS(error_of([&] { render(t); }), "bytes a template may build") << t;
  // Nested indents multiply: each level writes the indent again.
  EXPECT_CONTAINS(error_of([] { render("{{ [[[[[[1]]]]]]|tojson(indent=30000000) }}"); }), "bytes a template may build");
  // Ordinary widths still work.
  EXPECT_EQ(render("{{ 'x'|center(5) }}|{{ '%5d'|format(42) }}|{{ '{:>4}'.format(7) }}"), "  x  |   42|   7");
}

TEST(JinjaLimits, ListItemsCountAtTheirSize) {
  // 2 << 60 items: refused when the list's items pass the limit, not after gigabytes of copies.
  EXPECT_CONTAINS(error_of([] {
    render("{% set ns = namespace(s=[1, 2]) %}{% for i in range(60) %}{% set ns.s = ns.s + ns.s %}{% endfor %}");
  }), "template built a value or output of more than");
  EXPECT_CONTAINS(error_of([] { render("{{ ([1] * 100000000)|length }}"); }), "template built a value or output");
  EXPECT_EQ(render("{{ ([1] * 100000)|length }}"), "100000");
}

}  // namespace
