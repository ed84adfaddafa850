// Expressions with Python's semantics: literals, operators, attribute/item access, slicing,
// undefined values, tests. Expected outputs are worked out by hand from Jinja/Python rules.
#include <gtest/gtest.h>

#include "chat_template/render_util.h"

namespace ridge::tokenizer::jinja {
namespace {

using testing::error_kind;
using testing::render;

constexpr const char* kMessages = R"({"messages": [
  {"role": "system", "content": "S"},
  {"role": "user", "content": "U1"},
  {"role": "assistant", "content": "A1"},
  {"role": "user", "content": "U2"}],
  "d": {"b": 1, "a": {"x": 2}}})";

TEST(JinjaExpressions, Literals) {
  EXPECT_EQ(render("{{ 'single' }} {{ \"double\" }} {{ 'a' 'b' }}"), "single double ab");
  EXPECT_EQ(render(R"({{ 'tab\tnl\nq\'bs\\ \x41\u00e9' }})"), "tab\tnl\nq'bs\\ A\xC3\xA9");
  EXPECT_EQ(render("{{ 42 }} {{ -7 }} {{ 1_000 }} {{ 0x1F }} {{ 2.5 }} {{ 1e3 }}"),
            "42 -7 1000 31 2.5 1000.0");
  EXPECT_EQ(render("{{ true }} {{ False }} {{ none }} {{ None }}"), "True False None None");
  EXPECT_EQ(render("{{ [1, 'a', none, true, 1.5] }}"), "[1, 'a', None, True, 1.5]");
  EXPECT_EQ(render("{{ {'k': 'v', 'n': [1]} }}"), "{'k': 'v', 'n': [1]}");
  EXPECT_EQ(render("{{ (1, 2) }} {{ (1,) }} {{ () }}"), "(1, 2) (1,) ()");
  EXPECT_EQ(render("{{ [\"it's\", 'say \"hi\"'] }}"), "[\"it's\", 'say \"hi\"']");
}

TEST(JinjaExpressions, FloatsPrintLikePython) {
  EXPECT_EQ(render("{{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1e-5 }} {{ 0.0001 }}"),
            "1.0 0.30000000000000004 1e+20 1e-05 0.0001");
  EXPECT_EQ(render("{{ 1 / 3 }} {{ 1e16 }} {{ 1e15 }} {{ -0.0 }}"),
            "0.3333333333333333 1e+16 1000000000000000.0 -0.0");
}

TEST(JinjaExpressions, Arithmetic) {
  EXPECT_EQ(render("{{ 1 + 2 * 3 }},{{ (1 + 2) * 3 }},{{ 7 / 2 }},{{ 4 / 2 }}"), "7,9,3.5,2.0");
  EXPECT_EQ(render("{{ 7 // 2 }},{{ -7 // 2 }},{{ 7 % 3 }},{{ -7 % 3 }},{{ 7 % -3 }}"),
            "3,-4,1,2,-2");
  EXPECT_EQ(render("{{ 2 ** 10 }},{{ 2 ** -1 }},{{ 7.5 // 2 }},{{ 7.5 % 2 }}"), "1024,0.5,3.0,1.5");
  // Unary minus binds tighter than ** in Jinja (unlike Python): (-2) ** 2.
  EXPECT_EQ(render("{{ true + 1 }},{{ -(3) }},{{ - 2 ** 2 }},{{ -3|abs }}"), "2,-3,4,3");
}

TEST(JinjaExpressions, StringsAndLists) {
  EXPECT_EQ(render("{{ 'a' + 'b' }}{{ 'a' ~ 1 ~ none ~ 2.0 }}{{ 'ab' * 2 }}{{ 2 * 'c' }}"),
            "aba1None2.0ababcc");
  EXPECT_EQ(render("{{ [1] + [2, 3] }} {{ [0] * 3 }}"), "[1, 2, 3] [0, 0, 0]");
  EXPECT_EQ(error_kind("{{ 'a' + 1 }}"), TemplateError::Kind::runtime);
}

TEST(JinjaExpressions, Comparisons) {
  EXPECT_EQ(render("{{ 1 < 2 }}{{ 1 < 2 < 2 }}{{ 1 == 1.0 }}{{ 'a' != 'b' }}{{ 'ab' < 'b' }}"),
            "TrueFalseTrueTrueTrue");
  EXPECT_EQ(render("{{ [1, 2] == [1, 2] }}{{ {'a': 1} == {'a': 1} }}{{ none == none }}"),
            "TrueTrueTrue");
  EXPECT_EQ(render("{{ 'a' in 'cat' }}{{ 2 in [1, 2] }}{{ 'k' in {'k': 1} }}{{ 3 not in [3] }}"),
            "TrueTrueTrueFalse");
  EXPECT_EQ(error_kind("{{ none < 1 }}"), TemplateError::Kind::runtime);
}

TEST(JinjaExpressions, LogicReturnsOperandsLikePython) {
  EXPECT_EQ(render("{{ [] or 'empty' }}|{{ 'x' and 'y' }}|{{ 0 and 1 }}|{{ not '' }}"),
            "empty|y|0|True");
  EXPECT_EQ(render("{{ 'yes' if 1 > 2 else 'no' }}|{{ 'a' if false else 'b' if true else 'c' }}"),
            "no|b");
  EXPECT_EQ(render("[{{ 'x' if false }}]"), "[]");
}

TEST(JinjaExpressions, AttributeAndItemAccess) {
  EXPECT_EQ(render("{{ messages[0]['role'] }}{{ messages[1].content }}{{ messages[-1].content }}",
                   kMessages),
            "systemU1U2");
  EXPECT_EQ(render("{{ d.a.x }}{{ d['a']['x'] }}", kMessages), "22");
}

TEST(JinjaExpressions, Slicing) {
  EXPECT_EQ(render("{{ messages[1:]|length }}{{ messages[:-1]|length }}{{ messages[::2]|length }}",
                   kMessages),
            "332");
  EXPECT_EQ(
      render("{{ 'hello'[1:3] }}|{{ 'hello'[::-1] }}|{{ 'hello'[-2:] }}|{{ 'h\xC3\xA9llo'[1] }}"),
      "el|olleh|lo|\xC3\xA9");
  EXPECT_EQ(render("{{ [1, 2, 3][5:] }}"), "[]");
}

TEST(JinjaExpressions, UndefinedFollowsJinjasDefaultUndefined) {
  EXPECT_EQ(render("[{{ nope }}]"), "[]");
  EXPECT_EQ(render("{{ nope is defined }}{{ nope is undefined }}{{ not nope }}"), "FalseTrueTrue");
  EXPECT_EQ(render("{% for x in nope %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{{ nope|length }}{{ nope|default('z') }}{{ nope ~ 'a' }}"), "0za");
  // A missing key or index is undefined, not an error...
  EXPECT_EQ(render("[{{ d.missing }}][{{ messages[9] }}]{{ d.missing is defined }}", kMessages),
            "[][]False");
  // ...but using an undefined value is.
  EXPECT_EQ(error_kind("{{ nope.attr }}"), TemplateError::Kind::runtime);
  EXPECT_EQ(error_kind("{{ nope[0] }}"), TemplateError::Kind::runtime);
  EXPECT_EQ(error_kind("{{ nope + 1 }}"), TemplateError::Kind::runtime);
  EXPECT_EQ(error_kind("{{ nope() }}"), TemplateError::Kind::runtime);
  EXPECT_EQ(error_kind("{{ messages[9].content }}", kMessages), TemplateError::Kind::runtime);
  // Attributes of none are undefined (Python's AttributeError becomes Undefined).
  EXPECT_EQ(render("[{{ none.x }}]"), "[]");
}

TEST(JinjaExpressions, Tests) {
  EXPECT_EQ(render("{{ 'a' is string }}{{ 1 is number }}{{ 1.5 is float }}{{ 1 is integer }}"
                   "{{ true is integer }}{{ true is boolean }}{{ none is none }}"),
            "TrueTrueTrueTrueFalseTrueTrue");
  EXPECT_EQ(render("{{ d is mapping }}{{ messages is sequence }}{{ 'x' is iterable }}"
                   "{{ 1 is iterable }}{{ nope is iterable }}",
                   kMessages),
            "TrueTrueTrueFalseTrue");
  EXPECT_EQ(
      render("{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 'a' is eq 'a' }}"
             "{{ 'a' is equalto 'b' }}{{ 3 is gt 2 }}{{ 'x' is in 'xy' }}{{ 1 is not none }}"),
      "TrueTrueTrueTrueFalseTrueTrueTrue");
  EXPECT_EQ(render("{{ true is true }}{{ 1 is true }}{{ 'abc' is lower }}{{ 'AB' is upper }}"),
            "TrueFalseTrueTrue");
}

TEST(JinjaExpressions, GlobalFunctions) {
  EXPECT_EQ(render("{{ range(3)|list }}{{ range(1, 7, 2)|list }}{{ range(3, 0, -1)|list }}"),
            "[0, 1, 2][1, 3, 5][3, 2, 1]");
  EXPECT_EQ(render("{{ dict(a=1, b='x') }} {{ namespace(n=2).n }}"), "{'a': 1, 'b': 'x'} 2");
  EXPECT_EQ(render("{{ strftime_now('%Y')|length }}"), "4");
  // A variable shadows a global of the same name.
  EXPECT_EQ(render("{{ range }}", R"({"range": "mine"})"), "mine");
}

}  // namespace
}  // namespace ridge::tokenizer::jinja
