#!/usr/bin/env python3
"""Reference outputs for tests/unit/test-chat-jinja.c: renders each case with Jinja2
configured as transformers' apply_chat_template configures it and prints the C table.
Run: python3 tests/unit/test-chat-jinja-cases.py > tests/unit/test-chat-jinja-cases.h"""
import json
import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

MESSAGES = [{"role": "system", "content": "Sys"}, {"role": "user", "content": "Hello there"},
            {"role": "assistant", "content": "Hi!"}]

CASES = [
    ("lstrip_trim_blocks", "A\n  {% if true %}\n    x\n  {% endif %}\nB\n"),
    ("dash_markers", "{%- for m in messages -%}\n  [{{ m.role }}]\n{%- endfor %}\nend\n\n"),
    ("plus_marker", "a\n    {%+ if true %}b{% endif %}\n"),
    ("loop_vars", "{% for x in [10,20,30] %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }}/{{ loop.previtem }}/{{ loop.nextitem }};{% endfor %}"),
    ("break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 5 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
    ("for_else_filter", "{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in range(6) if x is odd %}{{ x }}{{ ',' if not loop.last }}{% endfor %}"),
    ("namespace", "{% set ns = namespace(n=0, s='') %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% set ns.s = ns.s ~ m.role[0] %}{% endfor %}{{ ns.n }} {{ ns.s }}"),
    ("scoping", "{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}{% if true %}{% set x = 3 %}{% endif %}{{ x }}"),
    ("tojson", "{{ {'a': 1, 'b': [true, none, 2.5, 'é\"\\n\\u0001'], 'c': {}} | tojson }}|{{ [1, [2]] | tojson(indent=2) }}|{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}|{{ messages[0] | tojson }}"),
    ("string_methods", "{{ '  ab c  '.strip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' x  y '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'Hello'.startswith('He') }}|{{ 'Hello'.endswith(('x', 'lo')) }}|{{ 'xxhixx'.lstrip('x') }}|{{ 'xxhixx'.rstrip('x') }}|{{ 'hello wORLD'.title() }}|{{ 'AbC'.lower() }}{{ 'AbC'.upper() }}|{{ 'a-b-c'.replace('-', '+', 1) }}|{{ 'abc'.find('c') }}|{{ '-'.join(['x', 'y']) }}|{{ 'hello'.capitalize() }}"),
    ("slicing", "{{ 'héllo'[1:3] }}|{{ [1, 2, 3, 4, 5][::-1] }}|{{ [1, 2, 3, 4, 5][-2:] }}|{{ 'abcdef'[::2] }}|{{ messages[-1].content[:3] }}|{{ 'abc'[-1] }}|{{ [1, 2, 3][5:] }}|{{ 'abcdef'[4:1:-1] }}"),
    ("filters", "{{ messages | length }}|{{ undefined_var | default('d') }}|{{ '' | default('e', true) }}|{{ none | string }}|{{ [3, 1, 2] | first }}{{ [3, 1, 2] | last }}|{{ ['a', 'b'] | join('-') }}|{{ {'x': 1, 'y': 2} | items | list }}|{{ '  t  ' | trim }}|{{ 'ab' | upper }}|{{ -3 | abs }}|{{ '12' | int + 1 }}|{{ '2.5' | float }}|{{ messages | map(attribute='role') | join(',') }}|{{ messages | selectattr('role', 'equalto', 'user') | list | length }}|{{ messages | rejectattr('role', 'equalto', 'user') | map(attribute='content') | list }}|{{ [1, 2] | reverse | list }}|{{ 'abc' | reverse }}|{{ 'a b' | replace(' ', '_') }}|{{ 'hey you' | capitalize }}|{{ 'x' | safe }}|{{ 5 | string ~ 'x' }}|{{ ['a', 'b'] | map('upper') | join }}|{{ 'xay' | trim('xy') }}"),
    ("tests", "{{ x is defined }}{{ none is none }}{{ 'a' is string }}{{ {} is mapping }}{{ [] is mapping }}{{ 3 is number }}{{ 3 is integer }}{{ 3.0 is float }}{{ [1] is iterable }}{{ 4 is divisibleby(2) }}{{ 'abc' is lower }}{{ true is boolean }}{{ x is undefined }}{{ 3 is odd }}{{ 3 is even }}{{ 1 is eq 1 }}{{ 2 is gt(1) }}{{ 'a' is in 'abc' }}{{ none is not none }}{{ raise_exception is callable }}{{ false is sameas false }}"),
    ("operators", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 'ab' * 3 }} {{ 1 ~ 2 ~ 'x' }} {{ 1 < 2 < 3 }} {{ 'b' in 'abc' }} {{ 3 not in [1, 2] }} {{ 1 if false else 2 }} {{ 'x' if false }}| {{ (1, 2) }} {{ (1,) }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1.5e-7 }} {{ 1e15 }} {{ 123456789.0 }} {{ -0.0 }} {{ 2.0 * 3 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ not 0 }} {{ 0 or 'y' }} {{ 'x' and 0 }} {{ - 3 + 4 * 2 }} {{ [1] + [2] }} {{ 'a' < 'b' }} {{ [] == [] }} {{ {'a': 1} == {'a': 1} }}"),
    ("dict_methods", "{% set d = {'a': 1, 'b': none} %}{{ d.get('a') }} {{ d.get('z', 'dflt') }} {{ d.get('z') }} {% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{{ d.keys() | list }} {{ d.values() | list }} {{ d['a'] }} {{ d.b }} {{ 'a' in d }} {% for k in d %}{{ k }}{% endfor %}"),
    ("macro", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', punct='?') }} {{ greet(name='C') }}"),
    ("macro_recursion", "{% macro count(n) %}{{ n }}{% if n > 0 %},{{ count(n - 1) }}{% endif %}{% endmacro %}{{ count(3) }}"),
    ("set_block", "{% set x %}a{{ 1 + 1 }}b{% endset %}[{{ x }}]{% set a, b = 1, 2 %}{{ a }}{{ b }}"),
    ("repr", "{{ messages[0] }}|{{ ['a', \"b'c\", 1, none, true, 1.5] }}|{{ {'k': ('t', 1)} }}|{{ 'x\\ny' | list }}|{{ ['\\n', '\\t', '\\x00', '\\u00a0', 'é', \"'\\\"\"] }}"),
    ("comments", "a\n  {# comment #}\nb\n{#- c -#}\n  c {# x #} d"),
    ("string_escapes", "{{ 'tab\\there' }}|{{ \"q\\\"uote\" }}|{{ '\\u00e9\\x41\\101' }}|{{ 'a' 'b' }}|{{ 'back\\\\slash' }}|{{ 'keep\\d' }}"),
    ("undefined", "[{{ nothing }}]|{% for x in nothing %}a{% endfor %}|{{ nothing | length }}|{{ messages[0].nope is defined }}{{ messages[5] is defined }}|{{ messages[0].nope }}|{{ none.attr is defined }}|{{ nothing | default(none) is none }}"),
    ("conditionals", "{% if messages[0]['role'] == 'system' %}S{% elif false %}E{% else %}N{% endif %}{% if not messages %}empty{% elif messages | length > 2 %}long{% endif %}{% if add_generation_prompt and bos_token %}[{{ bos_token }}{{ eos_token }}]{% endif %}{{ tools is none }}{{ tools is defined }}"),
    ("tool_loop", "{%- for message in messages %}\n    {%- if message.role == 'user' %}\n        {{- '<u>' + message.content + '</u>\\n' }}\n    {%- elif message.role == 'assistant' %}\n        {{- '<a>' + message.content }}\n        {%- if not loop.last %}{{ '</a>' }}{% endif %}\n    {%- endif %}\n{%- endfor %}\n{%- if add_generation_prompt %}\n    {{- '<a>' }}\n{%- endif %}\n"),
    ("unicode_case", "{{ 'ÉCOLE' | lower }}|{{ 'straße' | upper }}|{{ 'ǆ' | title }}|{{ 'ıi' | upper }}|{{ '日本' | length }}|{{ 'αβγ'[1] }}"),
    ("title_capitalize", "{{ \"it's a-b (c) x_y\" | title }}|{{ \"it's a-b (c) x_y\".title() }}|{{ '\u01c6emal ABC' | capitalize }}|{{ '\ufb01ne \u00df' | upper }}|{{ '\u00df' | title }}|{{ '\u0130' | lower | length }}"),
    ("select_sort", "{{ [1, 2, 3, 4] | select('odd') | list }}|{{ ['a', 'code_interpreter', 'b'] | reject('equalto', 'code_interpreter') | join(', ') }}|{{ [0, 1, '', 'x'] | select | list }}|{{ ['b', 'A', 'c'] | sort | list }}|{{ ['b', 'A', 'c'] | sort(case_sensitive=true) | list }}|{{ [3, 1, 2] | sort(reverse=true) | list }}|{{ messages | sort(attribute='role') | map(attribute='role') | join(',') }}|{{ messages | selectattr('content') | list | length }}|{{ [{'f': {'n': 2}}, {'f': {'n': 1}}] | sort(attribute='f.n') | map(attribute='f.n') | list }}|{{ [{'k': 1, 'v': 'a'}, {'k': 0, 'v': 'b'}, {'k': 1, 'v': 'c'}] | sort(attribute='k') | map(attribute='v') | join }}"),
    ("llama31_like", "{{- bos_token }}\n{%- if not date_string is defined %}\n    {%- set date_string = \"26 Jul 2024\" %}\n{%- endif %}\n{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = messages[0]['content']|trim %}\n    {%- set messages = messages[1:] %}\n{%- else %}\n    {%- set system_message = \"\" %}\n{%- endif %}\n{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n{%- if builtin_tools is defined or tools is not none %}\n    {{- \"Environment: ipython\\n\" }}\n{%- endif %}\n{{- \"Today Date: \" + date_string + \"\\n\\n\" }}\n{{- system_message }}\n{{- \"<|eot_id|>\" }}\n{%- for message in messages %}\n    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}\n        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}\n    {%- endif %}\n{%- endfor %}\n{%- if add_generation_prompt %}\n    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n{%- endif %}\n"),
    ("whitespace_unicode", "x {{- '\\u3000y\\u3000' | trim -}} z\n{%- if true -%}\u3000\n  w{% endif %}"),
]

def raise_exception(m):
    raise jinja2.exceptions.TemplateError(m)

def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception

def c_str(s):
    out = '"'
    for ch in s.encode("utf-8"):
        c = chr(ch)
        if c == '"': out += '\\"'
        elif c == '\\': out += '\\\\'
        elif c == '\n': out += '\\n'
        elif c == '\t': out += '\\t'
        elif 0x20 <= ch < 0x7f: out += c
        else: out += '\\%03o' % ch
    return out + '"'

print("/* Generated by tests/unit/test-chat-jinja-cases.py with Jinja2 %s (ImmutableSandboxedEnvironment," % jinja2.__version__)
print(" * trim_blocks, lstrip_blocks, loopcontrols, transformers' tojson): reference outputs. */")
print("static const char jinja_messages[] = %s;" % c_str(json.dumps(MESSAGES)))
print("static const struct jinja_case {\n        const char *name, *src, *want;\n} jinja_cases[] = {")
for name, src in CASES:
    out = env.from_string(src).render(messages=MESSAGES, tools=None, documents=None, add_generation_prompt=True,
                                      bos_token="<s>", eos_token="</s>")
    print("        {%s,\n         %s,\n         %s}," % (c_str(name), c_str(src), c_str(out)))
print("};")
