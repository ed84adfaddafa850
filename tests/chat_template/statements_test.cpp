// Statements: if/elif/else, for (else, filter, loop variables, unpacking, break/continue), set
// (scoping, namespace, blocks), macros, call, filter and with blocks. Expected outputs are
// worked out by hand from Jinja's rules.
#include <gtest/gtest.h>

#include "chat_template/render_util.h"

namespace ridge::tokenizer::jinja {
namespace {

using testing::error_kind;
using testing::render;

TEST(JinjaStatements, IfElifElse) {
  const char* t = "{% if n == 1 %}one{% elif n == 2 %}two{% else %}many{% endif %}";
  EXPECT_EQ(render(t, R"({"n": 1})"), "one");
  EXPECT_EQ(render(t, R"({"n": 2})"), "two");
  EXPECT_EQ(render(t, R"({"n": 3})"), "many");
}

TEST(JinjaStatements, LoopVariables) {
  EXPECT_EQ(render("{% for x in ['a', 'b', 'c'] %}{{ loop.index }}{{ loop.index0 }}"
                   "{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.length }}"
                   "{% if loop.first %}F{% endif %}{% if loop.last %}L{% endif %},{% endfor %}"),
            "10323F,21213,32103L,");
  EXPECT_EQ(
      render("{% for x in [1, 2, 3] %}{{ loop.previtem if loop.previtem is defined else '-' }}"
             "{{ loop.nextitem if loop.nextitem is defined else '-' }}"
             "{{ loop.cycle('o', 'e') }} {% endfor %}"),
      "-2o 13e 2-o ");
}

TEST(JinjaStatements, LoopElseAndFilter) {
  EXPECT_EQ(render("{% for x in [] %}a{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for x in [1, 2, 3, 4] if x is even %}{{ x }}/{{ loop.index }}/"
                   "{{ loop.length }} {% endfor %}"),
            "2/1/2 4/2/2 ");
  EXPECT_EQ(render("{% for x in [1, 3] if x is even %}a{% else %}none even{% endfor %}"),
            "none even");
}

TEST(JinjaStatements, LoopOverSlicesDictsStringsAndPairs) {
  const char* vars = R"({"messages": [{"role": "system"}, {"role": "user"}, {"role": "assistant"}],
                         "d": {"z": 1, "a": 2}})";
  EXPECT_EQ(render("{% for m in messages[1:] %}{{ m.role }} {% endfor %}", vars),
            "user assistant ");
  EXPECT_EQ(render("{% for k in d %}{{ k }}{% endfor %}", vars), "za");  // insertion order
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", vars), "z=1;a=2;");
  EXPECT_EQ(render("{% for k, v in d|items %}{{ k }}{{ v }}{% endfor %}", vars), "z1a2");
  EXPECT_EQ(render("{% for c in 'h\xC3\xA9!' %}[{{ c }}]{% endfor %}"), "[h][\xC3\xA9][!]");
  EXPECT_EQ(render("{% for a, b in [[1, 2], (3, 4)] %}{{ a + b }} {% endfor %}"), "3 7 ");
}

TEST(JinjaStatements, BreakAndContinue) {
  EXPECT_EQ(render("{% for i in range(10) %}{% if i == 1 %}{% continue %}{% endif %}"
                   "{% if i == 4 %}{% break %}{% endif %}{{ i }}{% endfor %}"),
            "023");
  EXPECT_EQ(error_kind("{% break %}"), TemplateError::Kind::syntax);
}

TEST(JinjaStatements, SetInsideALoopDoesNotLeak) {
  // Each iteration starts from the outer value; the outer variable is unchanged afterwards.
  EXPECT_EQ(render("{% set count = 0 %}{% for i in [1, 2] %}{% set count = count + 1 %}"
                   "{{ count }}{% endfor %}{{ count }}"),
            "110");
  // An if block is not a scope.
  EXPECT_EQ(render("{% if true %}{% set z = 3 %}{% endif %}{{ z }}"), "3");
}

TEST(JinjaStatements, NamespaceCarriesValuesOutOfLoops) {
  EXPECT_EQ(render("{% set ns = namespace(total=0, seen=false) %}"
                   "{% for i in [1, 2, 3] %}{% set ns.total = ns.total + i %}"
                   "{% if i == 2 %}{% set ns.seen = true %}{% endif %}{% endfor %}"
                   "{{ ns.total }} {{ ns.seen }}"),
            "6 True");
  EXPECT_EQ(render("{% set ns = namespace() %}{% set ns.x = 'a' %}{{ ns.x }}"), "a");
  EXPECT_EQ(error_kind("{% set x = 1 %}{% set x.y = 2 %}"), TemplateError::Kind::runtime);
}

TEST(JinjaStatements, SetForms) {
  EXPECT_EQ(render("{% set a, b = 1, 2 %}{{ b }}{{ a }}"), "21");
  EXPECT_EQ(render("{% set t = 1, 2 %}{{ t }}"), "(1, 2)");
  EXPECT_EQ(render("{% set s %}x={{ 1 + 1 }}{% endset %}[{{ s }}]"), "[x=2]");
  EXPECT_EQ(render("{% set s | upper %}abc{% endset %}{{ s }}"), "ABC");
  EXPECT_EQ(render("{% set messages = messages[1:] %}{{ messages|length }}",
                   R"({"messages": [1, 2, 3]})"),
            "2");
}

TEST(JinjaStatements, Macros) {
  EXPECT_EQ(render("{% macro m(a, b=2) %}{{ a }}-{{ b }}{% endmacro %}"
                   "{{ m(1) }} {{ m(1, 3) }} {{ m(b=5, a=4) }}"),
            "1-2 1-3 4-5");
  EXPECT_EQ(render("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}"
                   "{{ f(3) }}"),
            "321");
  EXPECT_EQ(render("{% macro m() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, k=2) }}"),
            "(1,){'k': 2}");
  EXPECT_EQ(render("{% macro box() %}[{{ caller() }}]{% endmacro %}"
                   "{% call box() %}inside{% endcall %}"),
            "[inside]");
  EXPECT_EQ(error_kind("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}"),
            TemplateError::Kind::runtime);
}

TEST(JinjaStatements, FilterWithAndGenerationBlocks) {
  EXPECT_EQ(render("{% filter upper %}a{{ 'b' }}{% endfilter %}"), "AB");
  EXPECT_EQ(render("{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]"), "3[]");
  // Hugging Face's {% generation %} marks assistant text; it renders its body.
  EXPECT_EQ(render("{% generation %}text{% endgeneration %}"), "text");
}

}  // namespace
}  // namespace ridge::tokenizer::jinja
