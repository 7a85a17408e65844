#!/usr/bin/python3
"""Generate golden renderings of chat templates for kiln's Jinja interpreter
(src/kiln/tokenizers/jinja*.h, chat_template.h).

Rerun from the repository root with Debian's jinja2 (apt-get install
python3-jinja2; use the system interpreter):

    /usr/bin/python3 tests/goldens/gen_chat_template_goldens.py

`transformers` is not needed: render() below builds the environment exactly as
transformers' chat_template_utils._compile_jinja_template does
(ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and the
loopcontrols extension; HF's `tojson` override, json.dumps with
ensure_ascii=False; `raise_exception`; `strftime_now`; the `{% generation %}`
tag, which renders its body) and passes the variables apply_chat_template
passes: messages, tools (None unless given), documents (None),
add_generation_prompt, then the tokenizer's special tokens and any extra
keyword arguments. strftime_now() reads a fixed local time, NOW, so the files
do not change from run to run.

It writes two files under tests/goldens/chat_templates/:

  goldens.json      each template of templates/ (written for these tests in the
                    form of a model family's template) x each conversation below
                    x add_generation_prompt false / true: the rendered text, or
                    the message of the template's raise_exception, or, for any
                    other jinja2 error, its type and message (the C++ test only
                    checks that rendering fails).
  jinja_cases.json  small templates over one set of variables, each exercising
                    a piece of the language (scoping, filters, tests, str
                    methods, whitespace control, Python formatting of values).

The conversations are importable (CONVERSATIONS, render) so that the same
checks can be run against other templates outside the repository.
"""

import json
import os
import sys
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA_DIR = os.path.join(REPO_ROOT, "tests", "goldens", "chat_templates")

# The local time strftime_now() reports (naive: the C++ test builds the same
# local time with mktime).
NOW = datetime(2024, 7, 26, 9, 30, 15)


class Raised(TemplateError):
    """What raise_exception() throws, told apart from jinja2's own errors."""


class GenerationTag(jinja2.ext.Extension):
    """{% generation %}...{% endgeneration %}: renders the body (HF marks
    assistant tokens with it; without return_assistant_tokens_mask it is
    transparent)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_environment():
    def raise_exception(message):
        raise Raised(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return NOW.strftime(format)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


ENV = make_environment()


def render(template, variables):
    """{"output": text}, {"raised": message} or {"error": "Type: message"}."""
    try:
        return {"output": ENV.from_string(template).render(**variables)}
    except Raised as e:
        return {"raised": str(e)}
    except Exception as e:  # noqa: BLE001 - any jinja2 / Python error is a golden failure
        return {"error": "%s: %s" % (type(e).__name__, e)}


def chat_variables(messages, add_generation_prompt, special_tokens, tools=None, extra=None):
    """The variables apply_chat_template(messages, tokenize=False, ...) renders with."""
    variables = {"messages": messages, "tools": tools, "documents": None, "add_generation_prompt": add_generation_prompt}
    variables.update(special_tokens)
    variables.update(extra or {})
    return variables


# ---- conversations ----

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.\nReturns degrees.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "array", "items": {"type": "integer"}},
            },
            "required": ["city"],
        },
    },
}
TIME_TOOL = {
    "type": "function",
    "function": {"name": "now", "description": "The time in a zone.", "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}},
}

CONVERSATIONS = {
    "single_user": {"messages": [{"role": "user", "content": "Hello!"}]},
    "system_user": {
        "messages": [
            {"role": "system", "content": "You are a terse assistant."},
            {"role": "user", "content": "What is 2 + 2?"},
        ]
    },
    "multi_turn": {
        "messages": [
            {"role": "user", "content": "Name a prime."},
            {"role": "assistant", "content": "7"},
            {"role": "user", "content": "Another one?"},
        ]
    },
    "system_multi_turn": {
        "messages": [
            {"role": "system", "content": "Answer in French."},
            {"role": "user", "content": "Good morning"},
            {"role": "assistant", "content": "Bonjour"},
            {"role": "user", "content": "Thank you"},
            {"role": "assistant", "content": "Merci à vous"},
        ]
    },
    "long": {
        "messages": [
            {"role": "system", "content": "Count."},
            {"role": "user", "content": "1"},
            {"role": "assistant", "content": "2"},
            {"role": "user", "content": "3"},
            {"role": "assistant", "content": "4"},
            {"role": "user", "content": "5"},
            {"role": "assistant", "content": "6"},
            {"role": "user", "content": "7"},
        ]
    },
    "unicode": {
        "messages": [
            {"role": "system", "content": "Réponds en 中文 — ‘quoted’ \"double\" \\ back\tslash"},
            {"role": "user", "content": "Привет 👋 مرحبا ß ǅ İ ﬁ"},
            {"role": "assistant", "content": "你好！😀 café naïve"},
            {"role": "user", "content": "e\u0301 \u00a0nbsp\u2028line-sep"},
        ]
    },
    "whitespace": {
        "messages": [
            {"role": "system", "content": "  padded system  \n"},
            {"role": "user", "content": "\n\n  leading and trailing\n\n"},
            {"role": "assistant", "content": " \t answer with tabs\t \n"},
            {"role": "user", "content": "line one\nline two\r\nline three"},
        ]
    },
    "template_syntax_in_content": {
        "messages": [
            {"role": "user", "content": "Render {{ name }} and {% if x %}y{% endif %} {# c #} literally"},
            {"role": "assistant", "content": "{{ '{{' }} is printed as-is"},
            {"role": "user", "content": "%s %d {} {0}"},
        ]
    },
    "empty_content": {
        "messages": [
            {"role": "user", "content": ""},
            {"role": "assistant", "content": ""},
            {"role": "user", "content": " "},
        ]
    },
    "two_users": {
        "messages": [
            {"role": "user", "content": "First"},
            {"role": "user", "content": "Second"},
        ]
    },
    "assistant_first": {
        "messages": [
            {"role": "assistant", "content": "I speak first."},
            {"role": "user", "content": "Fine."},
        ]
    },
    "unknown_role": {
        "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "narrator", "content": "Meanwhile..."},
        ]
    },
    "thinking": {
        "messages": [
            {"role": "user", "content": "Is 91 prime?"},
            {"role": "assistant", "content": "<think>\n91 = 7 * 13\n</think>\n\nNo, 91 = 7 × 13."},
            {"role": "user", "content": "And 97?"},
        ]
    },
    "no_think_system": {
        "messages": [
            {"role": "system", "content": "Be quick. /no_think"},
            {"role": "user", "content": "Capital of Peru?"},
            {"role": "assistant", "content": "Lima"},
        ],
        "extra": {"enable_thinking": False},
    },
    "content_parts": {
        "messages": [
            {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": " Describe this. "}]},
            {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]},
        ]
    },
    "tool_use": {
        "messages": [
            {"role": "system", "content": "Use tools when needed."},
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": [1, 2]}}}],
            },
            {"role": "tool", "name": "get_weather", "content": "{\"temp\": 21.5}"},
            {"role": "assistant", "content": "It is 21.5 °C in Paris."},
        ],
        "tools": [WEATHER_TOOL, TIME_TOOL],
    },
    "tool_calls_parallel": {
        "messages": [
            {"role": "user", "content": "Weather in Oslo and the time in Tokyo."},
            {
                "role": "assistant",
                "content": "Checking both.",
                "tool_calls": [
                    {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}},
                    {"type": "function", "function": {"name": "now", "arguments": {"tz": "Asia/Tokyo"}}},
                ],
            },
            {"role": "tool", "content": "-3"},
            {"role": "tool", "content": "18:00"},
        ],
        "tools": [WEATHER_TOOL, TIME_TOOL],
    },
    "tools_no_calls": {
        "messages": [{"role": "user", "content": "Just chat, no tools needed."}],
        "tools": [TIME_TOOL],
        "extra": {"date_string": "03 Mar 2025"},
    },
}

# The templates of templates/ and the special tokens their tokenizers define.
TEMPLATES = {
    "llama3": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "qwen2": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "qwen3": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "mistral": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    "gemma": {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>"},
    "phi3": {"bos_token": "<s>", "eos_token": "<|endoftext|>", "unk_token": "<unk>"},
    "zephyr": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    "smollm3": {"eos_token": "<|im_end|>", "pad_token": "<|im_end|>"},
    "deepseek": {"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"},
    "hermes": {"bos_token": "<|begin_of_text|>", "eos_token": "<|im_end|>", "additional_special_tokens": ["<tool_call>", "</tool_call>"]},
}


def chat_cases(template_text, special_tokens):
    cases = []
    for name, conv in CONVERSATIONS.items():
        for gen in (False, True):
            variables = chat_variables(conv["messages"], gen, special_tokens, conv.get("tools"), conv.get("extra"))
            case = {"conversation": name, "add_generation_prompt": gen}
            case.update(render(template_text, variables))
            cases.append(case)
    return cases


# ---- language cases ----

CASE_VARIABLES = {
    "messages": [
        {"role": "system", "content": " You are helpful. "},
        {"role": "user", "content": "Hi ✓"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Bye"},
    ],
    "d": {"b": 2, "a": 1, "C": 3},
    "users": [{"name": "a", "city": "Paris"}, {"name": "b", "city": "berlin"}, {"name": "c", "city": "paris"}],
    "n": 7,
    "f": 2.5,
    "s": "Hello, World",
    "nested": {"list": [1, [2, 3], {"k": None}], "flag": True},
}

LANGUAGE_CASES = [
    # scoping
    "{% set x = 1 %}{% for i in range(3) %}[{{ x }}{% set x = x + 10 %}{{ x }}]{% endfor %}{{ x }}",
    "{% for i in range(3) %}{% if i == 0 %}{% set y = 5 %}{% endif %}[{{ y }}]{% endfor %}",
    "{% macro m() %}{{ z }}{% endmacro %}{% set z = 3 %}{{ m() }}",
    "{% for i in range(2) %}{% macro m() %}{{ i }}{% endmacro %}{{ m() }}{% endfor %}",
    "{% if true %}{% set leak = 'if blocks share the scope' %}{% endif %}{{ leak }}",
    "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]",
    "{% set ns = namespace(found=false, n=0) %}{% for m in messages %}{% if m.role == 'user' %}{% set ns.found = true %}{% set ns.n = ns.n + 1 %}{% endif %}{% endfor %}{{ ns.found }}{{ ns.n }}",
    "{% set ns = namespace(d) %}{{ ns.a }}{{ ns.C }}{% set ns.a = 10 %}{{ ns.a }}{{ d.a }}",
    "{% set x = 5 %}{% set x %}block {{ x }}{% endset %}[{{ x }}]",
    "{% filter upper %}{% set y = 1 %}{% endfilter %}[{{ y }}]|{% set b %}{% set z = 2 %}x{% endset %}[{{ z }}]|{% with %}{% set w = 3 %}{% endwith %}[{{ w }}]",
    "{% macro m() %}{% set q = 1 %}{% endmacro %}{{ m() }}[{{ q }}]|{% for i in [1] %}{% set t = 1 %}{% endfor %}[{{ t }}]|{% for i in [1,2] %}{% for j in [1] %}{% set i = 9 %}{% endfor %}{{ i }}{% endfor %}",
    "{% set x = 1 %}{% macro m() %}{{ x }}{% set x = 2 %}{{ x }}{% endmacro %}{{ m() }}{{ x }}",
    "{% set ns = namespace(a=1) %}{% set ns.b = 2 %}{{ ns.a }}{{ ns.b }}{{ ns.c }}|{{ ns['a'] }}|{% set x = namespace(a=[]) %}{% set x.a = x.a + [1] %}{% set x.a = x.a + [2] %}{{ x.a }}",
    "{% set a, b = 'xy' %}{{ b }}{{ a }}|{% for k, v in [(1, 2), [3, 4]] %}{{ k }}{{ v }}{% endfor %}",
    # undefined and none
    "{{ x }}|{{ x is defined }}{{ x is undefined }}{{ x is none }}{{ none is none }}{{ x == x }}{{ 'a' in x }}",
    "{{ x ~ 'a' }}|{{ x|length }}|{{ x|trim }}|{{ x|default('d') }}|{{ x|list }}|{% for a in x %}1{% else %}empty{% endfor %}",
    "{{ x.y }}",
    "{{ x + 'a' }}",
    "{{ x|tojson }}",
    "{{ [1,2][5] }}|{{ {'a':1}['b'] }}|{{ d.missing }}|{{ d.missing is defined }}|{{ none.x }}",
    "{{ {}.x.y }}",
    "{{ 'x' if false }}|{{ none }}|{{ true }}|{{ false }}",
    # numbers and Python formatting of values
    "{{ 1/2 }} {{ 4/2 }} {{ 7//2 }} {{ -7//2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2**10 }} {{ 2**-1 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }}",
    "{{ 1e20 }} {{ 1.5e-7 }} {{ 0.1+0.2 }} {{ 1e16 }} {{ 1e15 }} {{ 123456789012345678.0 }} {{ 0.0001 }} {{ 0.00001 }} {{ -0.0 }} {{ 100.0 }} {{ 3 / 1.5 }}",
    "{{ 7.0 // 2 }} {{ -7.5 % 2 }} {{ 1e300 * 1e10 }} {{ -(1e300 * 1e10) }} {{ 1_000_000 }} {{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 1.5e3 }}",
    "{{ n + f }} {{ n * 2 }} {{ n / 2 }} {{ n // 2 }} {{ n % 4 }} {{ -n }} {{ +n }} {{ n - f }} {{ n > f }} {{ n == 7.0 }}",
    "{{ [1,'a',none,true,1.5,('x',),(1,2),(),{'k':\"it's\"}, 'a\"b', \"a'b\\\"c\", 'tab\\there', 'nl\\n'] }}",
    "{{ d }}|{{ nested }}|{{ messages[0] }}|{{ (1, 'a') }}",
    "{{ '\\n\\t\\x41\\u00e9\\\\' }}|{{ 'adjacent' ' strings' }}|{{ \"\\'\" }}",
    # strings
    "{{ 'abc'[::-1] }}{{ 'abc'[1:] }}{{ 'abc'[-1] }}{{ 'héllo'|length }}{{ 'héllo'[1] }}{{ 'héllo'[1:3] }}{{ [1,2,3][-2:] }}{{ [1,2,3,4][::2] }}{{ [1,2,3][5:] }}",
    "{{ 'a' * 3 }}{{ [1] * 2 }}{{ 3 * 'b' }}{{ 'ab' * 0 }}|{{ 'abc' ~ 1 ~ none ~ true ~ 1.0 }}|{{ 'a' + 'b' }}|{{ [1] + [2] }}",
    "{{ messages[0]['content'].strip() }}|{{ ' a b  c '.split() }}|{{ 'a,b,,c'.split(',') }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a b c'.rsplit(' ', 1) }}|{{ 'a\\nb\\r\\nc'.splitlines() }}",
    "{{ 'hello world'.title() }}|{{ 'hello wORLD'|title }}|{{ \"they're bill's\".title() }}|{{ \"they're bill's\"|title }}|{{ 'aBc'|capitalize }}|{{ 'aBc'.capitalize() }}|{{ 'x-y(z'|title }}",
    "{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x','c')) }}{{ 'a-b'.replace('-', '+') }}{{ 'abcabc'.find('c') }}{{ 'abcabc'.rfind('c') }}{{ 'abcabc'.count('bc') }}{{ 'abc'.upper() }}{{ 'ABC'.lower() }}",
    "{{ 'xxaxx'.strip('x') }}|{{ '  y '.lstrip() }}|{{ '  y '.rstrip() }}|{{ '<a>'.removeprefix('<').removesuffix('>') }}|{{ 'k=v=w'.partition('=') }}|{{ 'k=v=w'.rpartition('=') }}|{{ '7'.zfill(3) }}|{{ 'ab'.center(6, '*') }}",
    "{{ '12'.isdigit() }}{{ 'ab'.isalpha() }}{{ 'a1'.isalnum() }}{{ ' '.isspace() }}{{ 'ab'.islower() }}{{ 'AB'.isupper() }}{{ ''.isdigit() }}{{ 'Ab Cd'.istitle() }}",
    "{{ '-'.join(['a', 'b']) }}{{ ', '.join(d) }}{{ 'x'.join('abc') }}",
    "{{ 'ß'.upper() }}{{ 'İ'.lower()|length }}{{ 'ǅ'.lower() }}{{ 'ΣΑΣ'.lower() }}{{ 'ﬁ'.upper() }}{{ 'straße'|title }}{{ 'ǆemal'.title() }}",
    "{{ 'a\u00a0b'.split() }}{{ ' \u3000x\u2028 '.strip()|length }}{{ 'x\u2028y'.splitlines() }}{{ 'x\u0085y'.split() }}",
    "{{ '%s and %d' % ('a', 3) }}|{{ '%5.2f|%-4s|%03d|%x|%r|%%' % (3.14159, 'ab', 7, 255, 'q') }}|{{ '%(a)s-%(b)s' % {'a': 1, 'b': 2} }}|{{ '%s' % 'solo' }}|{{ '%.3f' % 2 }}",
    "{{ '{} {}'.format('a', 2) }}|{{ '{0}{1}{0}'.format('x','y') }}|{{ '{name}!'.format(name='n') }}|{{ '{:>5}|{:<5}|{:^5}|{:05d}|{:.2f}'.format('r', 'l', 'c', 42, 3.14159) }}|{{ '{{}}'.format() }}",
    # comparisons and logic
    "{{ 1 < 2 < 3 }}{{ 1 < 3 < 2 }}{{ 'a' < 'b' }}{{ [1,2] < [1,3] }}{{ 1 == 1.0 }}{{ 'a' != 'b' }}{{ 2 in [1,2] }}{{ 'b' not in 'abc' }}{{ 'k' in {'k': 1} }}{{ 1 <= 1 }}{{ 2 >= 3 }}",
    "{{ true and 'x' }}|{{ false or 'y' }}|{{ none or 0 }}|{{ not none }}|{{ 0 and 1 }}|{{ [] or {} }}|{{ not 'a' == 'b' }}|{{ 'a' if 0 else 'b' if 1 else 'c' }}",
    "{{ 1 < 'a' }}",
    # tests
    "{{ 1 is number }}{{ true is number }}{{ 'a' is string }}{{ {} is mapping }}{{ [] is iterable }}{{ 'a' is iterable }}{{ 1 is iterable }}{{ [] is sequence }}{{ {} is sequence }}{{ d is mapping }}",
    "{{ true is boolean }}{{ 1 is integer }}{{ 1.0 is float }}{{ true is integer }}{{ 1 is float }}{{ none is boolean }}{{ false is false }}{{ 0 is false }}{{ true is true }}",
    "{{ 5 is divisibleby 5 }}{{ 3 is odd }}{{ 4 is even }}{{ 'ABC' is upper }}{{ 'abc' is lower }}{{ none is sameas none }}{{ 2 is in [1, 2] }}{{ 3 is eq 3 }}{{ 3 is lt 4 }}{{ 3 is gt 4 }}{{ 3 is ge 3 }}{{ 3 is ne 3 }}",
    "{{ 'upper' is filter }}{{ 'nope' is filter }}{{ 'odd' is test }}{{ range is callable }}{{ messages is not string }}{{ x is not defined }}",
    # filters
    "{{ messages|selectattr('role','equalto','user')|list|length }}{{ messages|map(attribute='role')|join(',') }}{{ messages|rejectattr('role', 'eq', 'user')|list|length }}",
    "{{ messages|selectattr('role', 'in', ['user', 'assistant'])|map(attribute='content')|list }}|{{ users|map(attribute='missing', default='?')|list }}|{{ users|selectattr('city')|list|length }}",
    "{{ [1,2,3,4]|select('odd')|list }}{{ [1,2,3,4]|reject('even')|list }}{{ ['a','',none,'b']|select|list }}{{ [1,2]|map('string')|join('-') }}{{ ['a','B']|map('upper')|list }}{{ [3,7]|select('gt', 4)|list }}",
    "{{ {'b': 1, 'a': [1, 2.5, 'x', none, true]}|tojson }}|{{ {'a': {'b': []}}|tojson(indent=2) }}|{{ 'é\"\\n\\u0001'|tojson }}|{{ [1,2]|tojson(separators=(',',':')) }}",
    "{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}|{{ 'é😀'|tojson(ensure_ascii=true) }}|{{ {}|tojson(indent=2) }}|{{ [[]]|tojson(indent=2) }}|{{ [1,[2]]|tojson(indent='\\t') }}|{{ (1, 2)|tojson }}|{{ 1e100|tojson }}",
    "{{ {1: 'int key', true: 'bool key', none: 'none key'}|tojson }}|{{ [nested]|tojson(indent=1) }}",
    "{{ 'line1\\nline2\\n\\nline4'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(2, blank=true) }}|{{ 'a\\nb\\n'|indent('> ') }}|{{ ''|indent }}",
    "{{ d|items|list }}|{% for k, v in d.items() %}{{k}}={{v}};{% endfor %}|{{ d|dictsort }}|{{ d|dictsort(true) }}|{{ d|dictsort(by='value', reverse=true) }}|{{ d.keys()|list }}|{{ d.values()|list }}|{{ d.get('zz', 'dflt') }}|{{ d.get('a') }}|{{ d|length }}",
    "{{ [3,1,2]|sort }}{{ ['b','A','a']|sort }}{{ ['b','A','a']|sort(case_sensitive=true) }}{{ [3,1,2]|sort(reverse=true) }}{{ users|sort(attribute='city')|map(attribute='name')|join }}{{ users|sort(attribute='city,name', reverse=true)|map(attribute='name')|join }}",
    "{{ [1,2,3]|sum }}{{ [[1], [2]]|sum(start=[]) }}{{ [0.5, 1]|sum(start=1) }}{{ [1,2,3]|max }}{{ [1,2,3]|min }}{{ ['b','A']|max }}{{ users|max(attribute='city')|attr('name') }}{{ []|max }}",
    "{{ [1,2,3]|first }}{{ [1,2,3]|last }}{{ 'abc'|first }}{{ 'abc'|last }}{{ []|first }}|{{ [1,2,3]|reverse|list }}{{ 'abc'|reverse }}{{ d|first }}",
    "{{ x|default('d') }}{{ ''|default('e') }}{{ ''|default('e', true) }}{{ none|default('n') }}{{ x|d('dd') }}{{ 0|default(5, boolean=true) }}",
    "{{ 'aaa'|replace('a','b',2) }}{{ 'Hi'|upper }}{{ 'Hi'|lower }}{{ '  x  '|trim }}{{ 'xxaxx'|trim('x') }}{{ 42|string }}{{ '42'|int + 1 }}{{ '4.5'|float }}{{ 'x'|int }}{{ '4.7'|int }}{{ ' 12 '|int }}{{ '0x1A'|int(0, 16) }}{{ 3.9|int }}{{ true|int }}{{ 'nan'|float }}",
    "{{ 3.14159|round(2) }}{{ 2.5|round }}{{ 3.5|round }}{{ 42|round }}{{ 2.675|round(2) }}{{ 1.5|round(0,'floor') }}{{ 1.2|round(0,'ceil') }}{{ -1.5|round }}{{ 1234.5|round(-2) }}{{ -3|abs }}{{ -2.5|abs }}",
    "{{ range(-9223372036854775807, 9223372036854775807, 4611686018427387904)|list }}|{{ 1e308|round(-400) }}|{{ -1e308|round(-400) }}|{{ 3.0|round(400) }}|{{ {'a': 1}|tojson(indent=-3) }}",
    "{{ range(5)|list }}{{ range(1,10,3)|list }}{{ range(5,0,-2)|list }}{{ range(3)|length }}{% for i in range(2, -2, -1) %}{{ i }}{% endfor %}",
    "{{ 'x'|center(7) }}|{{ 'abcdefghijklmnop'|truncate(10) }}|{{ 'abcdefghijklmnop'|truncate(10, true) }}|{{ 'a b c d e f g h i j k'|truncate(9, leeway=0) }}|{{ 'a b c'|wordcount }}|{{ '<b>x</b>  y &amp; z'|striptags }}|{{ '<&>\"'|e }}|{{ '<a>'|safe }}",
    "{{ [1,2,3,4,5]|batch(2)|list }}{{ [1,2,3,4,5]|batch(2, 0)|list }}{{ [1,2,3,4,5]|slice(2)|list }}{{ [1,1,2,1,'A','a']|unique|list }}{{ 'hello %s, %d'|format('you', 3) }}",
    "{{ users|groupby('city')|list }}|{% for g in users|groupby('city') %}{{ g.grouper }}:{{ g.list|length }};{% endfor %}|{% for city, items in users|groupby('city', case_sensitive=true) %}{{ city }}{{ items|length }}{% endfor %}",
    "{{ messages|map(attribute='content')|map('trim')|map('length')|list }}|{{ d|attr('items') is defined }}|{{ d|attr('a') is defined }}",
    # generators are one-shot and always true
    "{% set x = messages|selectattr('role', 'equalto', 'nobody') %}{% if x %}truthy{% else %}falsy{% endif %}|{{ x|list }}",
    "{% set g = messages|map(attribute='role') %}{{ g|list }}{{ g|list }}|{% set r = [1, 2]|reverse %}{{ r|first }}{{ r|list }}",
    "{{ (messages|selectattr('role', 'eq', 'user'))|length }}",
    # loops
    "{% for m in messages %}{{ loop.index }}/{{ loop.length }}{{ loop.first }}{{ loop.last }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.cycle('a','b') }}{{ loop.depth }};{% endfor %}",
    "{% for m in messages if m.role != 'system' %}{{ loop.index0 }}:{{ m.content }}{{ ',' if not loop.last }}{% endfor %}",
    "{% for m in messages %}{{ loop.previtem.role if loop.previtem is defined else '-' }}>{{ loop.nextitem.role if loop.nextitem is defined else '-' }} {% endfor %}",
    "{% for r in ['a', 'a', 'b', 'a'] %}{{ loop.changed(r) }}{% endfor %}",
    "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}",
    "{% for outer in [1, 2] %}{% set o = loop %}{% for inner in 'ab' %}{{ o.index }}{{ loop.index }}{{ inner }} {% endfor %}{% endfor %}",
    "{% for k in d %}{{ k }}{% endfor %}|{% for c in 'héé' %}[{{ c }}]{% endfor %}|{% for x in [] %}x{% else %}none{% endfor %}",
    "{% for m in messages[::-1] %}{{ m.role[0] }}{% endfor %}|{% for m in messages|reverse %}{{ m.role[0] }}{% endfor %}",
    # macros, call blocks, filter blocks
    "{% macro f(a, b=2, c='x') %}{{ a }}-{{ b }}-{{ c }}{% endmacro %}{{ f(1) }}|{{ f(1, 3) }}|{{ f(1, c='z') }}|{{ f() }}|{{ f(b=5, a=4) }}|{{ f|string }}",
    "{% macro f(a, b=a * 2) %}{{ a }}{{ b }}{% endmacro %}{{ f(3) }}{{ f(3, 1) }}",
    "{% macro v() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ v(1, 2, k=3) }}",
    "{% macro f(a) %}{{ a }}{% endmacro %}{{ f(1, 2) }}",
    "{% macro f(a) %}{{ a }}{% endmacro %}{{ f(b=1) }}",
    "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}inner {{ 1 + 1 }}{% endcall %}",
    "{% macro each(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}{% call(x) each([1,2]) %}[{{ x }}]{% endcall %}",
    "{% macro fact(k) %}{{ 1 if k <= 1 else k * fact(k - 1)|int }}{% endmacro %}{{ fact(6) }}",
    "{% filter upper %}hello {{ 'world' }}{% endfilter %}|{% set b %}  block  {% endset %}[{{ b }}]|{% set c | trim | upper %}  trimmed  {% endset %}[{{ c }}]",
    "{% filter replace('a', 'o') | title %}banana bread{% endfilter %}",
    # whitespace control
    "  {% if true %}\n  yes\n  {% endif %}\n  done\n",
    "a  {%- if true -%}  b  {%- endif %}  c\n\n",
    "{# comment #}\nx {#- c -#} y\n  {# c2 #}\nz",
    "{% raw %}{{ not }}{% endraw %}\n{%- raw -%}  {% x %}  {%- endraw %}|",
    "{%- for m in messages -%}\n  {{- m.role -}}\n{%- endfor -%}",
    "{% if true %}\n    indented\n{% endif %}\n{%+ if true %}x{% endif %}\n  {%+ if true %}y{% endif %}",
    "line\n  {{ 'var' }}  \n  {% if true %}block{% endif %}  \n\t{% if true %}tab{% endif %}\n",
    "{{ 'a' }}\n{{ 'b' }}\n{% if true %}\n{{ 'c' }}\n{% endif %}\n",
    "x\r\ny\r\n{% if true %}\r\nz\r\n{% endif %}\r\n",
    "{%- set x = 1 -%}\n\n  {{ x }}  \n\n{#- trailing -#}\n\n",
    "  {%- if true %}a{% endif -%}  \n  b",
    "{%- if true -%}\n\n  x  \n\n{%- endif -%}|a\n{%- if true %}\nb\n{%- endif %}\nc|{{- 'a' -}}\n\n{{- 'b' -}}",
    "{% if true %}    \n  x{% endif %}|   {% if true %}x{% endif %}   \n|x   {% if true %}y{% endif %}|{{ 'a' }}   {% if true %}b{% endif %}|{# c #}   {% if true %}b{% endif %}",
    "\n   {# c #}\n   x{% raw %}\n  {{ x }}\n  {% endraw %}",
    # HF globals
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}",
    "{% if messages|length > 3 %}{{ raise_exception('Too many: ' ~ messages|length) }}{% endif %}",
    "{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%Y-%m-%d %H:%M') }}|{{ strftime_now('%A %B %-d') }}",
    "{% generation %}gen {{ 1 }}{% endgeneration %}",
    # errors
    "{{ foo() }}", "{{ 1 + 'a' }}", "{{ 'a' + 1 }}", "{{ 1 / 0 }}", "{{ 'abc'.nosuch() }}",
    "{% set l = [1, 2] %}{{ l.append(3) }}", "{{ d.pop('a') }}", "{% set x.y = 1 %}",
    "{% for a, b in [1] %}{% endfor %}", "{{ range(200000)|length }}",
    "{% for i in range(3) %}", "{{ 1 +* 2 }}", "{% if %}{% endif %}", "{{ x | nosuchfilter }}", "{{ x is nosuchtest }}",
    "{% endif %}", "{{ 'unterminated }}", "{% include 'other.jinja' %}",
]


def main():
    if jinja2.__version__ != "3.1.2":
        print("note: goldens were made with jinja2 3.1.2 (Debian 12); this is", jinja2.__version__, file=sys.stderr)
    template_dir = os.path.join(DATA_DIR, "templates")
    out = {"now": NOW.isoformat(), "conversations": CONVERSATIONS, "templates": {}}
    for name, special in TEMPLATES.items():
        with open(os.path.join(template_dir, name + ".jinja"), encoding="utf-8") as f:
            text = f.read()
        out["templates"][name] = {"file": "templates/" + name + ".jinja", "special_tokens": special,
                                  "cases": chat_cases(text, special)}
    with open(os.path.join(DATA_DIR, "goldens.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    cases = []
    for template in LANGUAGE_CASES:
        case = {"template": template}
        case.update(render(template, CASE_VARIABLES))
        cases.append(case)
    with open(os.path.join(DATA_DIR, "jinja_cases.json"), "w", encoding="utf-8") as f:
        json.dump({"now": NOW.isoformat(), "variables": CASE_VARIABLES, "cases": cases}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    for name, t in out["templates"].items():
        kinds = [("output" in c) * "ok" or ("raised" in c) * "raised" or "error" for c in t["cases"]]
        print("%-9s %3d renderings, %2d raise_exception, %2d errors" % (name, kinds.count("ok"), kinds.count("raised"), kinds.count("error")))
    print("language cases: %d (%d errors)" % (len(cases), sum("output" not in c for c in cases)))


if __name__ == "__main__":
    main()
