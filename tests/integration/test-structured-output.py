#!/usr/bin/env python3
"""Structured output end to end against a running `dsvisor start` on the bundled default
model: response_format json_schema on chat and completions, streamed and not, for a set
of schemas; every reply is judged by python3-jsonschema (not by the grammar engine that
produced it). Also json_object, guided_* fields, a refused keyword (400 naming it and its
pointer), logit_bias and logprob alternatives with text and bytes.

    test-structured-output.py BASE_URL DSVISOR MODEL   (DSVISOR, MODEL: for `dsvisor tokenize`)
"""
import json
import re
import subprocess
import sys
import urllib.error
import urllib.request

import jsonschema

BASE, DSVISOR, MODEL = sys.argv[1:4]

SCHEMAS = {
    "person": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 12},
            "age": {"type": "integer"},
            "alive": {"type": "boolean"},
        },
        "required": ["name", "age", "alive"],
        "additionalProperties": False,
    },
    "enum": {"type": "string", "enum": ["Genesis", "Exodus", "Leviticus", "Numbers"]},
    "bounded_array": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 4},
    "nested": {
        "type": "object",
        "properties": {
            "book": {"type": "string", "maxLength": 10},
            "verse": {
                "type": "object",
                "properties": {"chapter": {"type": "integer"}, "text": {"type": "string", "maxLength": 20}},
                "required": ["chapter", "text"],
                "additionalProperties": False,
            },
        },
        "required": ["book", "verse"],
        "additionalProperties": False,
    },
    "any_of": {
        "type": "object",
        "properties": {"value": {"anyOf": [{"type": "string", "maxLength": 8}, {"type": "integer"}, {"type": "null"}]}},
        "required": ["value"],
        "additionalProperties": False,
    },
    "array_of_enums": {
        "type": "object",
        "properties": {
            "tribes": {
                "type": "array",
                "items": {"enum": ["Judah", "Levi", "Dan", "Gad"]},
                "minItems": 1,
                "maxItems": 3,
            }
        },
        "required": ["tribes"],
        "additionalProperties": False,
    },
    "refs": {
        "$defs": {"name": {"type": "string", "maxLength": 8}},
        "type": "object",
        "properties": {"father": {"$ref": "#/$defs/name"}, "son": {"$ref": "#/$defs/name"}},
        "required": ["father", "son"],
        "additionalProperties": False,
    },
    "nullable_and_const": {
        "type": "object",
        "properties": {
            "kind": {"const": "psalm"},
            "number": {"type": ["integer", "null"]},
            "title": {"type": ["string", "null"], "maxLength": 10},
        },
        "required": ["kind", "number", "title"],
        "additionalProperties": False,
    },
    "optional_props": {
        "type": "object",
        "properties": {"a": {"type": "boolean"}, "b": {"type": "string", "maxLength": 5}},
        "required": ["a"],
        "additionalProperties": False,
    },
    "bounded_numbers": {
        "type": "object",
        "properties": {
            "chapter": {"type": "integer", "minimum": 1, "maximum": 150},
            "weight": {"type": "number", "minimum": 0, "exclusiveMaximum": 10},
            "even": {"type": "integer", "multipleOf": 2},
        },
        "required": ["chapter", "weight", "even"],
        "additionalProperties": False,
    },
    "pattern_and_format": {
        "type": "object",
        "properties": {
            "ref": {"type": "string", "pattern": "^[A-Z][a-z]{2,5} [0-9]{1,3}:[0-9]{1,2}$"},
            "day": {"type": "string", "format": "date"},
        },
        "required": ["ref", "day"],
        "additionalProperties": False,
    },
    "tuple_bool_int": {
        "type": "array",
        "prefixItems": [{"type": "boolean"}, {"enum": [1, 2, 3]}],
        "items": False,
        "minItems": 2,
    },
}

passed = failed = 0


def check(what, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok     {what}")
    else:
        failed += 1
        print(f"NOT OK {what} {detail}")


def post(path, body):
    req = urllib.request.Request(BASE + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def completion(api, body, stream):
    """(text, finish_reason, status, raw) of one request."""
    body = dict(body, model="default", stream=stream)
    status, raw = post("/v1/chat/completions" if api == "chat" else "/v1/completions", body)
    if status != 200:
        return None, None, status, raw
    if not stream:
        c = json.loads(raw)["choices"][0]
        return (c["message"]["content"] if api == "chat" else c["text"]), c["finish_reason"], status, raw
    text, finish = "", None
    for line in raw.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ch = json.loads(line[6:])["choices"]
        if not ch:
            continue
        piece = ch[0].get("delta", {}).get("content") if api == "chat" else ch[0].get("text")
        text += piece or ""
        finish = ch[0].get("finish_reason") or finish
    return text, finish, status, raw


def ask(api, extra, prompt="Answer in JSON."):
    body = {"max_tokens": 400, "temperature": 0.7, "seed": 11, **extra}
    if api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return body


for name, schema in SCHEMAS.items():
    for api in ("chat", "completions"):
        for stream in (False, True):
            fmt = {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}
            text, finish, status, raw = completion(api, ask(api, {"response_format": fmt}), stream)
            what = f"{name} {api} {'streamed' if stream else 'whole'}"
            if status != 200:
                check(what, False, f"status {status}: {raw[:300]}")
                continue
            try:
                jsonschema.validate(json.loads(text), schema, format_checker=jsonschema.FormatChecker())
                check(f"{what}: {text}", finish == "stop", f"finish_reason {finish}")
            except (ValueError, jsonschema.ValidationError) as e:
                check(what, False, f"{finish}: {text!r}: {e}")

# json_object: any object (strings unbounded here, so a generous budget and a low temperature)
text, finish, status, raw = completion("chat", ask("chat", {"response_format": {"type": "json_object"}, "max_tokens": 600,
                                                             "temperature": 0.2}), False)
if finish == "stop":
    check("json_object gives an object", isinstance(json.loads(text), dict), text)
else:
    check("json_object cut by max_tokens is returned as is (finish_reason length)", status == 200 and
          finish == "length" and text.startswith("{"), f"{status} {finish} {text[:80]!r}")

# stop with a constraint, as vLLM: stop strings are matched on the output text as usual and
# cut it even where the grammar is not complete (finish_reason stop, the stop string left out)
for stream in (False, True):
    text, finish, status, raw = completion("completions", ask("completions", {"guided_regex": "[a-z]{3}:[a-z]{2,5}",
                                                                               "stop": [":"]}), stream)
    check(f"stop cuts a constrained output ({'streamed' if stream else 'whole'}): {text!r}",
          status == 200 and finish == "stop" and re.fullmatch("[a-z]{3}", text or "") is not None, f"{status} {finish} {raw[:200]}")
text, finish, status, raw = completion("chat", ask("chat", {"guided_choice": ["Amen", "Selah"], "stop": ["zzz"]}), False)
check("a stop string that never matches leaves the constrained output whole", status == 200 and finish == "stop" and
      text in ("Amen", "Selah"), f"{status} {raw[:200]}")

# vLLM's fields
text, finish, status, raw = completion("completions", ask("completions", {"guided_json": SCHEMAS["refs"]}), False)
check("guided_json", status == 200 and finish == "stop" and jsonschema.Draft202012Validator(SCHEMAS["refs"]).is_valid(json.loads(text)),
      f"{status} {raw[:200]}")
text, finish, status, raw = completion("chat", ask("chat", {"guided_choice": ["Amen", "Selah", "Hallelujah"]}), True)
check("guided_choice streamed", status == 200 and text in ("Amen", "Selah", "Hallelujah") and finish == "stop", f"{status} {text!r}")
text, finish, status, raw = completion("completions", ask("completions", {"guided_regex": "[A-Z][a-z]{1,8} [0-9]{1,3}:[0-9]{1,3}"}),
                                       False)
check("guided_regex", status == 200 and re.fullmatch(r"[A-Z][a-z]{1,8} [0-9]{1,3}:[0-9]{1,3}", text or "") is not None,
      f"{status} {text!r}")
text, finish, status, raw = completion("chat", ask("chat", {"guided_grammar": 'root ::= "Psalm " [1-9] [0-9]?'}), False)
check("guided_grammar", status == 200 and re.fullmatch(r"Psalm [1-9][0-9]?", text or "") is not None, f"{status} {text!r}")

# max_tokens cuts a constrained output: finish_reason length, the text as it is
text, finish, status, raw = completion("chat", ask("chat", {"response_format": {"type": "json_schema", "json_schema": {
    "name": "p", "schema": SCHEMAS["person"]}}, "max_tokens": 4}), False)
check("max_tokens cut: length, a prefix of a person", status == 200 and finish == "length" and '{"name":"'.startswith(text[:9]),
      f"{finish} {text!r}")

# a keyword the engine cannot enforce: 400 naming it and where it is, streamed or not
for stream in (False, True):
    bad = {"type": "object", "properties": {"id": {"not": {"type": "string"}}}}
    _, _, status, raw = completion("chat", ask("chat", {"response_format": {"type": "json_schema", "json_schema": {
        "name": "bad", "schema": bad}}}), stream)
    msg = json.loads(raw)["error"]["message"] if status == 400 else raw
    check(f"refused keyword is a 400 naming keyword and pointer ({'streamed' if stream else 'whole'}): {msg}",
          status == 400 and "'not'" in msg and "/properties/id" in msg)
status, raw = post("/v1/chat/completions", ask("chat", {"model": "default", "response_format": {"type": "json_schema"}}))
check("json_schema without its object is a 400 naming response_format",
      status == 400 and json.loads(raw)["error"]["param"] == "response_format", raw[:200])

# logit_bias: -100 bans the greedy first token; ids outside the vocabulary are refused
base = ask("completions", {"temperature": 0, "max_tokens": 1, "logprobs": 2}, "And God said")
text0, _, status, raw = completion("completions", base, False)
lp = json.loads(raw)["choices"][0]["logprobs"]
top = lp["top_logprobs"][0]
check("completions logprobs alternatives are token texts", status == 200 and not any(k.startswith("token_id:") for k in top), raw[:300])
status, raw = post("/v1/chat/completions", ask("chat", {"model": "default", "temperature": 0, "max_tokens": 1,
                                                       "logprobs": True, "top_logprobs": 3}, "And God said"))
content = json.loads(raw)["choices"][0]["logprobs"]["content"][0] if status == 200 else {}
alts = content.get("top_logprobs", [])
check("chat top_logprobs carry token text and bytes",
      len(alts) == 3 and all(isinstance(a["bytes"], list) and not a["token"].startswith("token_id:") for a in alts) and
      all(bytes(a["bytes"]).decode("utf-8", "replace") == a["token"] for a in alts), json.dumps(alts)[:300])
def ids(text):
    out = subprocess.run([DSVISOR, "tokenize", "--model", MODEL], input=json.dumps(text) + "\n", capture_output=True,
                         text=True, check=True).stdout
    return json.loads(out)["ids"]


# The first token's id: the one token the prompt's tokenization gains with its text (a
# SentencePiece piece at the start of an output decodes without its leading space, so
# the candidates with and without one are both banned).
prompt_ids = ids("And God said")
greedy = []
for cont in (text0, " " + text0):
    with_first = ids("And God said" + cont)
    if with_first[:len(prompt_ids)] == prompt_ids and len(with_first) == len(prompt_ids) + 1:
        greedy.append(with_first[-1])
check(f"the greedy first token {text0!r} has candidate ids {greedy}", greedy, f"{prompt_ids}")
text1, _, status, raw = completion("completions", dict(base, logit_bias={str(i): -100 for i in greedy}), False)
check(f"logit_bias -100 bans the greedy token: {text0!r} -> {text1!r}", status == 200 and text1 != text0, raw[:200])
text2, _, status, raw = completion("completions", dict(base, logit_bias={str(i): 5 for i in greedy}), False)
check("a positive logit_bias keeps it", status == 200 and text2 == text0, raw[:200])
status, raw = post("/v1/completions", ask("completions", {"model": "default", "logit_bias": {"99999999": 1}}))
check("logit_bias id outside the vocabulary is a 400", status == 400 and "logit_bias" in raw, raw[:200])
status, raw = post("/v1/completions", ask("completions", {"model": "default", "logit_bias": {"5": 101}}))
check("logit_bias value outside [-100, 100] is a 400 naming logit_bias",
      status == 400 and json.loads(raw)["error"]["param"] == "logit_bias", raw[:200])

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
