// tool_choice "required" and a named function end to end, through the official openai
// client, against `dsvisor start` on the bundled model given a chat template with a
// tool-call syntax (--chat-template). With a Llama 3.1 (JSON) syntax the real worker
// decodes under the composed grammar of that syntax and the gateway's llama3_json parser
// reads the calls: a known name, arguments that pass the schema, whole and streamed.
// With a Hermes syntax, whose "<tool_call>" marker the bundled tokenizer does not have as
// one token, the request is refused naming the marker.
//   node test-tool-syntax-e2e.mjs llama|hermes BASE_URL   (NODE_PATH: the pinned node_modules)
import { createRequire } from "node:module";
import path from "node:path";

const [form, base] = process.argv.slice(2);
const req = createRequire(path.join(process.env.NODE_PATH, "x.js"));
const { default: OpenAI } = await import(req.resolve("openai"));
const { z } = await import(req.resolve("zod"));

let passed = 0, failed = 0;
function check(what, ok, detail = "") {
  if (ok) { passed++; console.log(`ok     ${form}: ${what}`); }
  else { failed++; console.log(`NOT OK ${form}: ${what} ${detail}`); }
}
const run = async (what, fn) => {
  try { await fn(); } catch (e) { check(what, false, String(e)); }
};

const ADD = {
  type: "function",
  function: {
    name: "add",
    parameters: {
      type: "object",
      properties: { a: { type: "integer", minimum: 0, maximum: 99 }, b: { type: "integer", minimum: 0, maximum: 99 } },
      required: ["a", "b"],
      additionalProperties: false,
    },
  },
};
const SAY = {
  type: "function",
  function: {
    name: "say",
    parameters: { type: "object", properties: { word: { enum: ["light", "dark"] } }, required: ["word"],
      additionalProperties: false },
  },
};
const ARGS = {
  add: z.object({ a: z.number().int().min(0).max(99), b: z.number().int().min(0).max(99) }).strict(),
  say: z.object({ word: z.enum(["light", "dark"]) }).strict(),
};
function callsValid(what, calls, allowed) {
  check(`${what}: calls made`, Array.isArray(calls) && calls.length > 0, JSON.stringify(calls));
  for (const c of calls || []) {
    let args = null;
    try { args = JSON.parse(c.function.arguments); } catch { /* judged below */ }
    check(`${what}: ${c.function.name}(${c.function.arguments})`,
      c.type === "function" && typeof c.id === "string" && allowed.includes(c.function.name) && args !== null &&
      ARGS[c.function.name].safeParse(args).success, JSON.stringify(c));
  }
}

const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0 });
const ask = [{ role: "user", content: "And God said" }];

if (form === "llama") {
  await run("required", async () => {
    const r = await client.chat.completions.create({ model: "default", messages: ask, tools: [ADD, SAY],
      tool_choice: "required", parallel_tool_calls: false, max_tokens: 120, temperature: 0.8, seed: 3 });
    const ch = r.choices[0];
    check("required: finish_reason tool_calls, content null", ch.finish_reason === "tool_calls" && ch.message.content === null,
      JSON.stringify(ch));
    callsValid("required", ch.message.tool_calls, ["add", "say"]);
    check("required: one call (parallel_tool_calls false)", (ch.message.tool_calls || []).length === 1);
  });
  await run("named, streamed", async () => {
    const stream = await client.chat.completions.create({ model: "default", messages: ask, tools: [ADD, SAY],
      tool_choice: { type: "function", function: { name: "say" } }, parallel_tool_calls: false, max_tokens: 120,
      temperature: 0.8, seed: 4,
      stream: true });
    const calls = [];
    let finish = null, content = "";
    for await (const chunk of stream) {
      const ch = chunk.choices[0];
      if (!ch) continue;
      if (ch.delta.content) content += ch.delta.content;
      for (const t of ch.delta.tool_calls || []) {
        if (!calls[t.index]) calls[t.index] = { id: t.id, type: "function", function: { name: t.function.name, arguments: "" } };
        if (t.function && t.function.arguments) calls[t.index].function.arguments += t.function.arguments;
      }
      if (ch.finish_reason) finish = ch.finish_reason;
    }
    check("named, streamed: finish_reason tool_calls, no content", finish === "tool_calls" && content === "",
      `${finish} ${JSON.stringify(content)}`);
    callsValid("named, streamed", calls, ["say"]);
  });
} else {
  await run("required refused", async () => {
    try {
      await client.chat.completions.create({ model: "default", messages: ask, tools: [ADD], tool_choice: "required",
        max_tokens: 40 });
      check("required refused: an error", false, "the request was answered");
    } catch (e) {
      check("required refused: 400 naming the marker that is not one token",
        e.status === 400 && /<tool_call>/.test(e.message) && /not one token/.test(e.message), `${e.status} ${e.message}`);
    }
  });
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
