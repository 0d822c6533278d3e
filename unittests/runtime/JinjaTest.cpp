//===- JinjaTest.cpp - The chat-template interpreter ----------------------===//

#include "mfrt/jinja/Template.h"

#include <gtest/gtest.h>

using mfrt::jinja::Template;
using json = nlohmann::ordered_json;

namespace {
std::string render(const std::string &src, const json &ctx = json::object()) {
  std::string error, out;
  auto t = Template::parse(src, &error);
  EXPECT_TRUE(t) << error;
  if (!t)
    return "<parse error>";
  EXPECT_TRUE(t->render(ctx, out, &error)) << error;
  return out;
}

std::string failure(const std::string &src, const json &ctx = json::object()) {
  std::string error, out;
  auto t = Template::parse(src, &error);
  if (t && t->render(ctx, out, &error))
    return "<rendered: " + out + ">";
  return error;
}
} // namespace

TEST(Jinja, Expressions) {
  EXPECT_EQ(render("{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }}"),
            "7 3 2 3.5");
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ none }} {{ 'ab' + 'c' }} {{ 'x' * 3 }}"),
            "a1None abc xxx");
  EXPECT_EQ(render("{{ [1, 'a', none, true] }} {{ {'k': 'v'} }}"),
            "[1, 'a', None, True] {'k': 'v'}");
  EXPECT_EQ(render("{{ 1 if x else 2 }}{{ 'y' if x }}", {{"x", false}}), "2");
  EXPECT_EQ(render("{{ x or 'd' }} {{ x and 'n' }} {{ not x }}", {{"x", ""}}),
            "d  True");
  EXPECT_EQ(render("{{ 'b' in 'abc' }} {{ 2 not in [1, 2] }} {{ 'k' in d }}",
                   {{"d", {{"k", 1}}}}),
            "True False True");
  EXPECT_EQ(render("{{ 1 < 2 <= 2 }} {{ 'a' != 'b' }} {{ 1 == 1.0 }}"),
            "True True True");
}

TEST(Jinja, AccessAndSlices) {
  json ctx = {{"m", json::array({{{"role", "user"}, {"content", "hi there"}},
                                 {{"role", "assistant"}, {"content", "yo"}}})}};
  EXPECT_EQ(
      render("{{ m[0].role }} {{ m[-1]['content'] }} {{ m|length }}", ctx),
      "user yo 2");
  EXPECT_EQ(render("{% for x in m[::-1] %}{{ x.role }} {% endfor %}", ctx),
            "assistant user ");
  EXPECT_EQ(render("{{ 'abcdef'[1:4] }} {{ 'abcdef'[::2] }} {{ [1,2,3][1:] }}"),
            "bcd ace [2, 3]");
  EXPECT_EQ(
      render("{{ m[0].missing is defined }} {{ nothing is undefined }}", ctx),
      "False True");
  EXPECT_EQ(failure("{{ nothing.role }}"),
            "line 1: 'nothing' is undefined (reading .role)");
}

TEST(Jinja, Statements) {
  EXPECT_EQ(render("{% for i in range(5) %}{% if i == 1 %}{% continue %}"
                   "{% elif i == 3 %}{% break %}{% endif %}{{ i }}"
                   "{% endfor %}"),
            "02");
  EXPECT_EQ(render("{% for x in [] %}a{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for x in 'ab' %}{{ loop.index }}{{ loop.first }}"
                   "{{ loop.last }}{{ loop.length }},{% endfor %}"),
            "1TrueFalse2,2FalseTrue2,");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
                   {{"d", {{"a", 1}, {"b", 2}}}}),
            "a=1;b=2;");
  EXPECT_EQ(render("{% for x in [1,2,3,4] if x is even %}{{ x }}{% endfor %}"),
            "24");
  // set in a loop does not leak; a namespace's attribute does.
  EXPECT_EQ(render("{% set a = 1 %}{% set ns = namespace(b=1) %}"
                   "{% for i in [2] %}{% set a = i %}{% set ns.b = i %}"
                   "{% endfor %}{{ a }}{{ ns.b }}"),
            "12");
  EXPECT_EQ(render("{% set t %}x{{ 1 }}{% endset %}[{{ t }}]"), "[x1]");
}

TEST(Jinja, Whitespace) {
  // trim_blocks and lstrip_blocks, as Hugging Face renders templates.
  EXPECT_EQ(render("a\n  {% if true %}\n  b\n  {% endif %}\nc"), "a\n  b\nc");
  EXPECT_EQ(render("a  {%- if true -%}  b  {%- endif %}"), "ab");
  EXPECT_EQ(render("{{- ' x ' -}}  \n"), " x ");
  EXPECT_EQ(render("a {# note #}\nb"), "a b");
}

TEST(Jinja, FiltersTestsMethods) {
  EXPECT_EQ(
      render("{{ ' x '|trim }}|{{ 'Ab'|upper }}|{{ [3,1,2]|sort|join(',') }}"
             "|{{ nothing|default('d') }}|{{ 'ab'|reverse }}"),
      "x|AB|1,2,3|d|ba");
  EXPECT_EQ(render("{{ {'a': [1, 'é', none, 1.5, true]}|tojson }}"),
            "{\"a\": [1, \"é\", null, 1.5, true]}");
  EXPECT_EQ(render("{{ {'a': 1}|tojson(indent=2) }}"), "{\n  \"a\": 1\n}");
  EXPECT_EQ(render("{{ 'a\"\\\\\n'|tojson }}"), "\"a\\\"\\\\\\n\"");
  EXPECT_EQ(render("{{ 'a</think>b'.split('</think>')[-1] }} "
                   "{{ '\\nx\\n'.strip('\\n') }} {{ 'ab'.startswith('a') }} "
                   "{{ 'ab'.endswith(('x', 'b')) }}"),
            "b x True True");
  EXPECT_EQ(
      render("{{ x is string }} {{ x is number }} {{ 3 is divisibleby 3 }}"
             " {{ false is false }}",
             {{"x", "s"}}),
      "True False True True");
  EXPECT_EQ(render("{{ m|selectattr('role', 'equalto', 'user')|map(attribute="
                   "'c')|join }}",
                   {{"m", json::array({{{"role", "user"}, {"c", "1"}},
                                       {{"role", "bot"}, {"c", "2"}}})}}),
            "1");
}

TEST(Jinja, RefusesWhatItCannotRender) {
  EXPECT_EQ(failure("{% macro f() %}{% endmacro %}"),
            "line 1: the statement 'macro' is not supported");
  EXPECT_EQ(failure("\n{{ x|wordwrap }}"),
            "line 2: the filter 'wordwrap' is not supported");
  EXPECT_EQ(failure("{{ x is prime }}"),
            "line 1: the test 'prime' is not supported");
  EXPECT_EQ(failure("{{ 'a'.zfill(2) }}"),
            "line 1: the method str.zfill() is not supported");
  EXPECT_EQ(failure("{{ raise_exception('no') }}"), "the template raised: no");
  EXPECT_EQ(failure("{% for x in y %}"),
            "line 1: this block is never closed ('endfor' is missing)");
  EXPECT_EQ(failure("{{ 'open }}"),
            "line 1: a tag opened with '{{' is never closed");
  EXPECT_EQ(failure("{{ 1 + }}"), "line 1: an expression is missing");
  EXPECT_EQ(failure("{{ 1 / 0 }}"), "line 1: division by zero");
}
