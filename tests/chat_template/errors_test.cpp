// Errors and limits: syntax errors carry line and column, template-raised errors carry the
// template's message, and hostile templates end in an error, never a crash or a hang.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "chat_template/render_util.h"

namespace ridge::tokenizer::jinja {
namespace {

using testing::catch_error;
using testing::error_kind;
using testing::render;

TEST(JinjaErrors, SyntaxErrorsHaveLineAndColumn) {
  const TemplateError e = catch_error("line one\n{{ 1 + }}");
  EXPECT_EQ(e.kind(), TemplateError::Kind::syntax);
  EXPECT_EQ(e.line(), 2);
  EXPECT_EQ(e.column(), 8);  // the "}}" where an operand was expected
  EXPECT_NE(std::string(e.what()).find("line 2, column 8"), std::string::npos) << e.what();
}

TEST(JinjaErrors, ColumnsCountCharactersNotBytes) {
  const TemplateError e = catch_error("\xC3\xA9\xC3\xA9{{ ) }}");
  EXPECT_EQ(e.line(), 1);
  EXPECT_EQ(e.column(), 6);
}

TEST(JinjaErrors, SyntaxErrorKinds) {
  EXPECT_EQ(error_kind("{% if x %}never closed"), TemplateError::Kind::syntax);
  EXPECT_EQ(error_kind("{% endif %}"), TemplateError::Kind::syntax);
  EXPECT_EQ(error_kind("{% for x in %}{% endfor %}"), TemplateError::Kind::syntax);
  EXPECT_EQ(error_kind("{{ 'unterminated }}"), TemplateError::Kind::syntax);
  EXPECT_EQ(error_kind("{# unterminated comment"), TemplateError::Kind::syntax);
  EXPECT_EQ(error_kind("{{ x "), TemplateError::Kind::syntax);
  EXPECT_EQ(error_kind("{{ (1 }}"), TemplateError::Kind::syntax);
  EXPECT_EQ(error_kind("{{ x|no_such_filter }}"), TemplateError::Kind::syntax);
  EXPECT_EQ(error_kind("{{ x is no_such_test }}"), TemplateError::Kind::syntax);
  EXPECT_EQ(error_kind("{% no_such_tag %}"), TemplateError::Kind::syntax);
  EXPECT_EQ(error_kind("{% include 'other.jinja' %}"), TemplateError::Kind::syntax);
  EXPECT_EQ(error_kind("{{ 1 ! 2 }}"), TemplateError::Kind::syntax);
  EXPECT_EQ(error_kind("{% set 1 = 2 %}"), TemplateError::Kind::syntax);
}

TEST(JinjaErrors, UnknownFiltersInsideIfFailOnlyWhenReached) {
  // As Jinja: names are checked when compiling, except inside an if statement or a conditional
  // expression, so a template can guard a filter ridge lacks.
  EXPECT_EQ(render("{% if false %}{{ x|no_such_filter }}{% endif %}ok"), "ok");
  EXPECT_EQ(render("{{ x|no_such_filter if false else 'y' }}"), "y");
  EXPECT_EQ(
      render("{% if 'no_such_filter' is filter %}{{ x|no_such_filter }}{% else %}n{% endif %}"),
      "n");
  EXPECT_EQ(error_kind("{% if true %}{{ x|no_such_filter }}{% endif %}"),
            TemplateError::Kind::runtime);
  EXPECT_EQ(
      error_kind("{% if true %}{% for i in [1] %}{{ i is no_such_test }}{% endfor %}{% endif %}"),
      TemplateError::Kind::syntax);
}

TEST(JinjaErrors, UnclosedBlockNamesWhatItExpects) {
  const TemplateError e = catch_error("{% for x in y %}\n{% if x %}\n");
  EXPECT_NE(e.message().find("endif"), std::string::npos) << e.message();
}

TEST(JinjaErrors, RaiseExceptionCarriesTheTemplatesMessage) {
  const TemplateError e = catch_error("a\n{{ raise_exception('Roles must alternate!') }}");
  EXPECT_EQ(e.kind(), TemplateError::Kind::raised);
  EXPECT_STREQ(e.what(), "Roles must alternate!");
  EXPECT_EQ(e.line(), 2);
  // It is a ridge::Error like every other error of the library.
  EXPECT_THROW(render("{{ raise_exception('x') }}"), ridge::Error);
}

TEST(JinjaErrors, RuntimeErrorsHaveTheLine) {
  const TemplateError e = catch_error("ok\nok\n{{ undefined_thing.attr }}");
  EXPECT_EQ(e.kind(), TemplateError::Kind::runtime);
  EXPECT_EQ(e.line(), 3);
  EXPECT_NE(e.message().find("'undefined_thing' is undefined"), std::string::npos) << e.message();
}

TEST(JinjaErrors, RuntimeErrorKinds) {
  EXPECT_EQ(error_kind("{{ 1 / 0 }}"), TemplateError::Kind::runtime);
  EXPECT_EQ(error_kind("{{ 1 // 0 }}"), TemplateError::Kind::runtime);
  EXPECT_EQ(error_kind("{% for x in 5 %}{% endfor %}"), TemplateError::Kind::runtime);
  EXPECT_EQ(error_kind("{{ 'x'() }}"), TemplateError::Kind::runtime);
  EXPECT_EQ(error_kind("{% set a, b = [1, 2, 3] %}"), TemplateError::Kind::runtime);
  EXPECT_EQ(error_kind("{{ 9223372036854775807 + 1 }}"), TemplateError::Kind::runtime);
  EXPECT_EQ(error_kind("{{ range(100001)|length }}"), TemplateError::Kind::runtime);
  EXPECT_EQ(error_kind("{{ {[1]: 2} }}"), TemplateError::Kind::runtime);
}

// ---- hostile templates ----

TEST(JinjaLimits, DeepExpressionNestingIsASyntaxError) {
  const std::string deep = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_EQ(error_kind(deep), TemplateError::Kind::syntax);
  std::string nots = "{{ ";
  for (int i = 0; i < 5000; ++i) nots += "not ";
  EXPECT_EQ(error_kind(nots + "1 }}"), TemplateError::Kind::syntax);
  EXPECT_EQ(error_kind("{{ " + std::string(5000, '-') + "1 }}"), TemplateError::Kind::syntax);
  EXPECT_EQ(error_kind("{{ " + std::string(5000, '[') + std::string(5000, ']') + " }}"),
            TemplateError::Kind::syntax);
}

TEST(JinjaLimits, DeepBlockNestingIsASyntaxError) {
  std::string t;
  for (int i = 0; i < 3000; ++i) t += "{% if true %}";
  for (int i = 0; i < 3000; ++i) t += "{% endif %}";
  EXPECT_EQ(error_kind(t), TemplateError::Kind::syntax);
}

TEST(JinjaLimits, ModerateNestingIsFine) {
  std::string t;
  for (int i = 0; i < 40; ++i) t += "{% if true %}";
  t += "x";
  for (int i = 0; i < 40; ++i) t += "{% endif %}";
  EXPECT_EQ(render(t), "x");
}

TEST(JinjaLimits, OutputSize) {
  Options o;
  o.limits.max_output_bytes = 1000;
  EXPECT_EQ(error_kind("{% for i in range(100) %}{{ 'x' * 50 }}{% endfor %}", "{}", o),
            TemplateError::Kind::runtime);
  EXPECT_EQ(render("{% for i in range(10) %}{{ 'x' * 50 }}{% endfor %}", "{}", o).size(), 500u);
  // Huge repetition fails before allocating.
  EXPECT_EQ(error_kind("{{ 'x' * 1000000000000 }}"), TemplateError::Kind::runtime);
  EXPECT_EQ(error_kind("{{ [1] * 1000000000000 }}"), TemplateError::Kind::runtime);
}

TEST(JinjaLimits, Steps) {
  Options o;
  o.limits.max_steps = 10000;
  EXPECT_EQ(
      error_kind("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}",
                 "{}", o),
      TemplateError::Kind::runtime);
}

TEST(JinjaLimits, RunawayMacroRecursion) {
  EXPECT_EQ(error_kind("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"),
            TemplateError::Kind::runtime);
}

TEST(JinjaLimits, WorkBudgetBoundsQuadraticConcatenation) {
  Options o;
  o.limits.max_work_bytes = 1 << 20;
  EXPECT_EQ(error_kind("{% set ns = namespace(s='') %}{% for i in range(5000) %}"
                       "{% set ns.s = ns.s ~ 'xxxxxxxxxx' %}{% endfor %}",
                       "{}", o),
            TemplateError::Kind::runtime);
}

TEST(JinjaLimits, DeeplyNestedValues) {
  EXPECT_EQ(error_kind("{% set ns = namespace(x=[]) %}{% for i in range(1000) %}"
                       "{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}"),
            TemplateError::Kind::runtime);
  std::string deep_json = "{\"v\": " + std::string(1000, '[') + std::string(1000, ']') + "}";
  EXPECT_THROW(render("{{ v }}", deep_json.c_str()), TemplateError);
}

// Work that grows faster than the template or its data must stay bounded: these finish quickly (or
// fail with a limit error) instead of running for minutes.
class JinjaScaling : public ::testing::Test {
 protected:
  void SetUp() override { start_ = std::chrono::steady_clock::now(); }
  void TearDown() override {
    const auto seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    EXPECT_LT(seconds, 20.0);  // generous for sanitizer builds; each is ~0.1 s in release
  }
  std::chrono::steady_clock::time_point start_;
};

TEST_F(JinjaScaling, OneLongLineOfTokens) {
  std::string t;
  for (int i = 0; i < 100000; ++i) t += "{{ x }}";
  EXPECT_EQ(render(t, R"({"x": "a"})").size(), 100000u);
  EXPECT_EQ(catch_error(t + "{{ ) }}").column(), 700004);
}

TEST_F(JinjaScaling, UniqueOverManyItems) {
  EXPECT_EQ(render("{{ range(100000)|unique|list|length }}"), "100000");
}

TEST_F(JinjaScaling, ManyVariablesInOneScope) {
  std::string t;
  for (int i = 0; i < 20000; ++i)
    t += "{% set v" + std::to_string(i) + " = " + std::to_string(i) + " %}";
  EXPECT_EQ(render(t + "{{ v19999 }}"), "19999");
}

TEST_F(JinjaScaling, NestedMembershipTestsHitTheWorkBudget) {
  EXPECT_EQ(error_kind("{% set big = range(100000)|list %}{% for i in big %}"
                       "{% if -1 in big %}x{% endif %}{% endfor %}"),
            TemplateError::Kind::runtime);
}

TEST(JinjaLimits, InvalidUtf8IsCarriedThrough) {
  // Bytes that are not UTF-8 neither crash the lexer nor get lost.
  EXPECT_EQ(render("a\xFF{{ 'b\xC3' }}c"),
            "a\xFF"
            "b\xC3"
            "c");
  EXPECT_EQ(render("{{ '\xFF\xFE'|length }}{{ '\xFFx'|upper }}"), "2\xFFX");
}

}  // namespace
}  // namespace ridge::tokenizer::jinja
