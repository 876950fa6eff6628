// Structured output through real client libraries against a running `dsvisor start`
// on the bundled default model: the official openai client's chat.completions.parse with
// a zod schema (zodResponseFormat), and the Vercel AI SDK's generateObject through
// @ai-sdk/openai-compatible. Each must get back an object its zod schema accepts.
//   node test-structured-clients.mjs BASE_URL   (NODE_PATH: the pinned node_modules)
import { createRequire } from "node:module";
import path from "node:path";

const base = process.argv[2];
const req = createRequire(path.join(process.env.NODE_PATH, "x.js"));
const { default: OpenAI } = await import(req.resolve("openai"));
const { zodResponseFormat } = await import(req.resolve("openai/helpers/zod"));
const { z } = await import(req.resolve("zod"));
const { generateObject } = await import(req.resolve("ai"));
const { createOpenAICompatible } = await import(req.resolve("@ai-sdk/openai-compatible"));

let passed = 0, failed = 0;
function check(what, ok, detail = "") {
  if (ok) { passed++; console.log(`ok     ${what}`); }
  else { failed++; console.log(`NOT OK ${what} ${detail}`); }
}

const Verse = z.object({
  book: z.enum(["Genesis", "Exodus", "Psalms"]),
  chapter: z.number().int(),
  text: z.string().max(16),
  canonical: z.boolean(),
});

const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused" });
try {
  const r = await client.chat.completions.parse({
    model: "default",
    messages: [{ role: "user", content: "A verse, as JSON." }],
    response_format: zodResponseFormat(Verse, "verse"),
    max_tokens: 300,
    temperature: 0.7,
    seed: 3,
  });
  const msg = r.choices[0].message;
  check(`openai chat.completions.parse: ${msg.content}`, msg.parsed !== null && Verse.safeParse(msg.parsed).success &&
        r.choices[0].finish_reason === "stop", JSON.stringify(r.choices[0]));
} catch (e) {
  check("openai chat.completions.parse", false, String(e));
}

const Tribe = z.object({
  name: z.string().max(10),
  sons: z.array(z.enum(["Reuben", "Simeon", "Levi", "Judah"])).min(1).max(3),
  blessed: z.boolean(),
});
const provider = createOpenAICompatible({ name: "dsvisor", baseURL: `${base}/v1`, supportsStructuredOutputs: true });
try {
  const { object, finishReason } = await generateObject({
    model: provider("default"),
    schema: Tribe,
    prompt: "A tribe, as JSON.",
    maxOutputTokens: 300,
    temperature: 0.7,
    seed: 5,
  });
  check(`ai generateObject: ${JSON.stringify(object)}`, Tribe.safeParse(object).success && finishReason === "stop",
        JSON.stringify(object));
} catch (e) {
  check("ai generateObject", false, String(e) + (e.text ? ` text: ${e.text}` : ""));
}

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
