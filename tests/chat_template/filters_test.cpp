// Filters and methods of str/dict/list. Expected outputs are worked out by hand from
// jinja2/filters.py and Python's str/json semantics (tojson is Hugging Face's json.dumps one).
#include <gtest/gtest.h>

#include "chat_template/render_util.h"

namespace ridge::tokenizer::jinja {
namespace {

using testing::error_kind;
using testing::render;

constexpr const char* kPeople = R"({"people": [
  {"name": "bo", "age": 31, "role": "user"},
  {"name": "Al", "age": 25, "role": "assistant"},
  {"name": "cy", "age": 25, "role": "user"}]})";

TEST(JinjaFilters, Strings) {
  EXPECT_EQ(render("[{{ '  a b \n'|trim }}][{{ 'xxaxx'|trim('x') }}]"), "[a b][a]");
  EXPECT_EQ(render("{{ 'MiXed'|upper }} {{ 'MiXed'|lower }}"), "MIXED mixed");
  EXPECT_EQ(render("{{ 'hELLO wORLD'|capitalize }}|{{ 'hello wORLD-x (y'|title }}"),
            "Hello world|Hello World-X (Y");
  EXPECT_EQ(render("{{ 'a-b-a'|replace('a', 'o') }} {{ 'aaa'|replace('a', 'b', 2) }}"),
            "o-b-o bba");
  EXPECT_EQ(render("{{ 42|string ~ '!' }} {{ [1]|string }}"), "42! [1]");
  EXPECT_EQ(render("{{ '<a href=\"x\">&</a>'|escape }}|{{ 'x'|safe }}"),
            "&lt;a href=&#34;x&#34;&gt;&amp;&lt;/a&gt;|x");
  EXPECT_EQ(render("{{ 'a\nb\n\nc'|indent(2) }}|{{ 'a\nb'|indent(2, true) }}"),
            "a\n  b\n\n  c|  a\n  b");
  EXPECT_EQ(render("{{ 'one two three four'|truncate(12) }}"), "one two...");
  EXPECT_EQ(render("{{ ['a', 'b']|truncate(5) }}"), "['a', 'b']");  // short: unchanged
  EXPECT_EQ(render("{{ 'caf\xC3\xA9'|upper }} {{ '\xC3\x80' 'B'|lower }}"),
            "CAF\xC3\x89 \xC3\xa0"
            "b");
}

TEST(JinjaFilters, Sequences) {
  EXPECT_EQ(render("{{ [3, 1, 2]|length }} {{ 'h\xC3\xA9'|length }} {{ {'a': 1}|count }}"),
            "3 2 1");
  EXPECT_EQ(render("{{ [1, 2, 3]|join }} {{ [1, 2, 3]|join(', ') }}"), "123 1, 2, 3");
  EXPECT_EQ(render("{{ [1, 2, 3]|first }}{{ [1, 2, 3]|last }}{{ 'abc'|first }}"), "13a");
  EXPECT_EQ(render("{{ 'ab'|list }} {{ (1, 2)|list }}"), "['a', 'b'] [1, 2]");
  EXPECT_EQ(render("{{ ['b', 'A', 'c']|sort }} {{ [2, 3, 1]|sort(reverse=true) }}"),
            "['A', 'b', 'c'] [3, 2, 1]");
  EXPECT_EQ(render("{{ [1, 2, 1, 3]|unique|list }} {{ [4, 9, 2]|max }} {{ [4, 9, 2]|min }}"),
            "[1, 2, 3] 9 2");
  EXPECT_EQ(render("{{ [1, 2, 3]|sum }} {{ [1, 2, 3]|reverse|list }} {{ 'abc'|reverse }}"),
            "6 [3, 2, 1] cba");
  EXPECT_EQ(render("{{ [1, 2, 3, 4, 5]|batch(2)|list }}"), "[[1, 2], [3, 4], [5]]");
}

TEST(JinjaFilters, LazyFiltersReturnGenerators) {
  // select, map, unique, ... return Python generators: always true, no len(), not indexable.
  EXPECT_EQ(render("{% if []|select %}true{% endif %}"), "true");
  EXPECT_EQ(render("{{ [1, 2]|map('string')|list }} {{ [1, 2]|select|first }}"), "['1', '2'] 1");
  EXPECT_EQ(error_kind("{{ [1, 2]|select|length }}"), TemplateError::Kind::runtime);
  EXPECT_EQ(render("[{{ ([1, 2]|select)[0] }}]"), "[]");
  EXPECT_EQ(render("{{ ([1, 2]|select) is sequence }}{{ ([1, 2]|select) is iterable }}"),
            "FalseTrue");
}

TEST(JinjaFilters, StringsAreIterableByCharacter) {
  EXPECT_EQ(render("[{{ ' Mi'|join }}][{{ ' M'|join('-') }}][{{ 'h\xC3\xA9'|list|join(',') }}]"),
            "[ Mi][ -M][h,\xC3\xA9]");
  EXPECT_EQ(render("{{ {'a': 1, 'b': 2}|join('+') }}"), "a+b");
}

TEST(JinjaFilters, AttributeFilters) {
  EXPECT_EQ(render("{{ people|map(attribute='name')|join(',') }}", kPeople), "bo,Al,cy");
  EXPECT_EQ(render("{{ people|selectattr('role', 'equalto', 'user')|map(attribute='name')|list }}",
                   kPeople),
            "['bo', 'cy']");
  EXPECT_EQ(render("{{ people|rejectattr('age', 'lt', 30)|map(attribute='name')|first }}", kPeople),
            "bo");
  EXPECT_EQ(render("{{ people|sort(attribute='name')|map(attribute='name')|join }}", kPeople),
            "Albocy");
  EXPECT_EQ(render("{{ people|sum(attribute='age') }}", kPeople), "81");
  EXPECT_EQ(render("{{ people|map(attribute='nope', default='-')|join }}", kPeople), "---");
  EXPECT_EQ(render("{{ ['a', 'b']|map('upper')|join }}"), "AB");
  EXPECT_EQ(render("{{ [1, 2, 3, 4]|select('odd')|list }}{{ [0, 1, '', 'x']|select|list }}"
                   "{{ [1, 2, 3]|reject('gt', 1)|list }}"),
            "[1, 3][1, 'x'][1]");
}

TEST(JinjaFilters, Conversions) {
  EXPECT_EQ(render("{{ '42'|int }} {{ '3.7'|int }} {{ 'x'|int }} {{ 'x'|int(-1) }} {{ 3.9|int }}"),
            "42 3 0 -1 3");
  EXPECT_EQ(render("{{ '1.5'|float }} {{ 2|float }} {{ 'no'|float }}"), "1.5 2.0 0.0");
  EXPECT_EQ(
      render("{{ 2.5|round }} {{ 3.5|round }} {{ 3.14159|round(2) }} {{ 2.1|round(0, 'ceil') }}"),
      "2.0 4.0 3.14 3.0");
  EXPECT_EQ(render("{{ -3|abs }} {{ {'b': 1, 'a': 2}|dictsort }}"), "3 [('a', 2), ('b', 1)]");
  EXPECT_EQ(render("{{ {'a': 1}|items|list }}"), "[('a', 1)]");
}

TEST(JinjaFilters, DefaultFilter) {
  EXPECT_EQ(render("{{ nope|default('d') }} {{ ''|default('d') }} [{{ ''|d('d', true) }}]"),
            "d  [d]");
  EXPECT_EQ(render("{{ none|default('d') }}"), "None");
}

TEST(JinjaFilters, ToJsonMatchesPythonsJsonDumps) {
  EXPECT_EQ(render("{{ {'a': 1, 'b': [true, none, 'x\"y', 1.5]}|tojson }}"),
            R"({"a": 1, "b": [true, null, "x\"y", 1.5]})");
  EXPECT_EQ(render("{{ {'b': 1, 'a': [1, {}]}|tojson(indent=2) }}"),
            "{\n  \"b\": 1,\n  \"a\": [\n    1,\n    {}\n  ]\n}");
  EXPECT_EQ(render("{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}"), R"({"a": 2, "b": 1})");
  EXPECT_EQ(render("{{ [1, 2]|tojson(separators=(',', ':')) }}"), "[1,2]");
  // Not HTML-safe escaped (Jinja's own tojson would write \u003c), and non-ASCII kept.
  EXPECT_EQ(render("{{ '<\xC3\xA9>\n\t\x01'|tojson }}"), "\"<\xC3\xA9>\\n\\t\\u0001\"");
  EXPECT_EQ(render("{{ '\xC3\xA9\xF0\x9F\x98\x80'|tojson(ensure_ascii=true) }}"),
            R"("\u00e9\ud83d\ude00")");
  EXPECT_EQ(render("{{ (1, 'a')|tojson }} {{ 1e100|tojson }} {{ 2.0|tojson }}"),
            R"([1, "a"] 1e+100 2.0)");
  // Key order of the input is kept.
  EXPECT_EQ(render("{{ tool|tojson }}", R"({"tool": {"name": "f", "description": "d", "a": 1}})"),
            R"({"name": "f", "description": "d", "a": 1})");
  EXPECT_EQ(error_kind("{{ nope|tojson }}"), TemplateError::Kind::runtime);
}

TEST(JinjaMethods, StringMethods) {
  EXPECT_EQ(render("[{{ ' x '.strip() }}][{{ 'xax'.lstrip('x') }}][{{ 'xax'.rstrip('x') }}]"),
            "[x][ax][xa]");
  EXPECT_EQ(render("{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith('bc') }}"
                   "{{ 'abc'.startswith(('x', 'a')) }}{{ 'abc'.endswith('x') }}"),
            "TrueTrueTrueFalse");
  EXPECT_EQ(render("{{ 'a,b,,c'.split(',') }} {{ '  a  b '.split() }} {{ 'a b c'.split(' ', 1) }}"),
            "['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b c']");
  EXPECT_EQ(render("{{ 'a-b-c'.rsplit('-', 1) }} {{ 'x\ny\r\nz'.splitlines() }}"),
            "['a-b', 'c'] ['x', 'y', 'z']");
  EXPECT_EQ(render("{{ 'Ab'.upper() }}{{ 'Ab'.lower() }}{{ 'they are'.title() }}"
                   "{{ 'aXa'.replace('a', 'b') }}"),
            "ABabThey ArebXb");
  EXPECT_EQ(render("{{ 'hello'.find('l') }} {{ 'hello'.count('l') }} {{ '-'.join(['a', 'b']) }}"
                   " {{ '{} {x}'.format(1, x=2) }}"),
            "2 2 a-b 1 2");
}

TEST(JinjaMethods, DictAndListMethods) {
  const char* vars = R"({"d": {"b": 1, "a": 2}})";
  EXPECT_EQ(render("{{ d.items()|list }} {{ d.keys()|list }} {{ d.values()|list }}", vars),
            "[('b', 1), ('a', 2)] ['b', 'a'] [1, 2]");
  EXPECT_EQ(render("{{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 0) }}", vars), "2 None 0");
  EXPECT_EQ(render("{{ [1, 2, 1].count(1) }} {{ ['a', 'b'].index('b') }}"), "2 1");
  // The sandbox is immutable: lists and dicts cannot be modified.
  EXPECT_EQ(error_kind("{{ [1].append(2) }}"), TemplateError::Kind::runtime);
  EXPECT_EQ(error_kind("{{ d.update({'c': 3}) }}", vars), TemplateError::Kind::runtime);
}

}  // namespace
}  // namespace ridge::tokenizer::jinja
