// Whitespace control as Hugging Face configures Jinja: trim_blocks, lstrip_blocks,
// keep_trailing_newline=False, and the -/+ modifiers. Expected outputs are worked out by hand.
#include <gtest/gtest.h>

#include "chat_template/render_util.h"

namespace ridge::tokenizer::jinja {
namespace {

using testing::render;

TEST(JinjaWhitespace, TrimBlocksRemovesTheNewlineAfterABlockTag) {
  EXPECT_EQ(render("{% if true %}\nA\n{% endif %}\nB"), "A\nB");
  EXPECT_EQ(render("{% set x = 1 %}\n\nB"), "\nB");  // only the first newline
}

TEST(JinjaWhitespace, TrimBlocksDoesNotApplyToExpressions) {
  EXPECT_EQ(render("{{ 'a' }}\nb"), "a\nb");
}

TEST(JinjaWhitespace, PlusKeepsTheNewlineAfterABlockTag) {
  EXPECT_EQ(render("{% if true +%}\nx{% endif %}"), "\nx");
}

TEST(JinjaWhitespace, LstripBlocksRemovesIndentationBeforeBlockTags) {
  EXPECT_EQ(render("  {% if true %}x{% endif %}"), "x");
  EXPECT_EQ(render("a\n    {% if true %}\n    x\n    {% endif %}\nb"), "a\n    x\nb");
  EXPECT_EQ(render("a\n\t {% if true %}x{% endif %}"), "a\nx");
}

TEST(JinjaWhitespace, LstripOnlyWhenTheTagStartsTheLine) {
  EXPECT_EQ(render("a  {% if true %}x{% endif %}"), "a  x");
}

TEST(JinjaWhitespace, LstripDoesNotApplyToExpressions) {
  EXPECT_EQ(render("  {{ 'x' }}"), "  x");
}

TEST(JinjaWhitespace, PlusDisablesLstrip) {
  EXPECT_EQ(render("  {%+ if true %}x{% endif %}"), "  x");
}

TEST(JinjaWhitespace, MinusStripsAllWhitespaceIncludingNewlines) {
  EXPECT_EQ(render("a \n {{- 'x' -}} \n b"), "axb");
  EXPECT_EQ(render("a\n\n  {%- if true -%}\n\n  x  \n{%- endif %}"), "ax");
}

TEST(JinjaWhitespace, CommentsAreRemovedWithTheirLine) {
  EXPECT_EQ(render("a\n  {# note #}\nb"), "a\nb");
  EXPECT_EQ(render("a {#- note -#} b"), "ab");
}

TEST(JinjaWhitespace, OneTrailingNewlineOfTheTemplateIsDropped) {
  EXPECT_EQ(render("x\n"), "x");
  EXPECT_EQ(render("x\n\n"), "x\n");
}

TEST(JinjaWhitespace, NewlinesAreNormalized) {
  EXPECT_EQ(render("a\r\nb\rc"), "a\nb\nc");
  // but not inside the data the template renders
  EXPECT_EQ(render("{{ s }}", R"({"s": "x\r\ny"})"), "x\r\ny");
}

TEST(JinjaWhitespace, RawBlocksAreLiteral) {
  EXPECT_EQ(render("{% raw %}{{ x }}{% if %}{% endraw %}"), "{{ x }}{% if %}");
  EXPECT_EQ(render("a {%- raw -%}  b  {%- endraw -%} c"), "abc");
}

TEST(JinjaWhitespace, LoopBodyLayoutOfATypicalChatTemplate) {
  const char* vars = R"({"messages": [{"role": "user", "content": "hi"},
                                      {"role": "assistant", "content": "yo"}]})";
  const char* tmpl =
      "{%- for message in messages %}\n"
      "    {{- '<' + message.role + '>' }}\n"
      "    {%- if not loop.last %}\n"
      "        {{- ',' }}\n"
      "    {%- endif %}\n"
      "{%- endfor %}\n";
  EXPECT_EQ(render(tmpl, vars), "<user>,<assistant>");
}

}  // namespace
}  // namespace ridge::tokenizer::jinja
