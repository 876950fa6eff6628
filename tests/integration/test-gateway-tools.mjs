// Reasoning and tool calls through the official openai client, the Vercel AI SDK and
// LangChain JS. Run by test-gateway-tools.sh; argv[2] is the node_modules folder. The
// gateways: GW_R1 (R1: think block opened by the template, DeepSeek tool calls), GW_DS
// (DeepSeek-V3 tool calls), GW_QWEN (Qwen2.5 <tool_call> JSON). Ends with "N passed, N failed".
const mods = process.argv[2];
const { default: OpenAI } = await import(`${mods}/openai/index.mjs`);
const { generateText, streamText, tool } = await import(`${mods}/ai/dist/index.mjs`);
const { createOpenAICompatible } = await import(`${mods}/@ai-sdk/openai-compatible/dist/index.mjs`);
const { ChatOpenAI } = await import(`${mods}/@langchain/openai/index.js`);
const { z } = await import(`${mods}/zod/index.js`);
const { test, expect, makeExpectError, finish } = await import('./client-harness.mjs');

const client = (url) => new OpenAI({ baseURL: url + '/v1', apiKey: 'none', maxRetries: 0, timeout: 15000 });
const r1 = client(process.env.GW_R1), ds = client(process.env.GW_DS), qwen = client(process.env.GW_QWEN);
const eq = (a, b, what) => expect(JSON.stringify(a) === JSON.stringify(b), `${what}: ${JSON.stringify(b)}, got ${JSON.stringify(a)}`);
const expectError = makeExpectError(OpenAI, 'param');
const noMarkers = (s, what) => expect(s == null || !/[｜]|<tool_call>|<\/?think>/.test(s), `no special marker in ${what}: ${s}`);

const WEATHER = {
  type: 'function',
  function: {
    name: 'get_weather', description: 'Get the weather for a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};
const ASK = [{ role: 'user', content: "What's the weather in Paris?" }];

// Streams a chat completion; returns the joined reasoning, content, calls by index, the
// order fields arrived in, the finish reason and usage.
async function collect(c, body) {
  const stream = await c.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  const out = { reasoning: '', content: '', calls: [], order: [], finish: null, usage: null, chunks: 0 };
  for await (const chunk of stream) {
    out.chunks++;
    if (chunk.usage) out.usage = chunk.usage;
    const ch = chunk.choices[0];
    if (!ch) continue;
    const d = ch.delta || {};
    if (d.reasoning_content) { out.reasoning += d.reasoning_content; out.order.push('r'); }
    if (d.content) { out.content += d.content; out.order.push('c'); }
    for (const t of d.tool_calls || []) {
      out.order.push('t');
      if (!out.calls[t.index]) {
        expect(t.id && t.function && t.function.name, `id and name in a call's first delta: ${JSON.stringify(t)}`);
        out.calls[t.index] = { id: t.id, name: t.function.name, arguments: '', pieces: 0 };
      } else {
        expect(!t.id && !(t.function && t.function.name), `no id or name after a call's first delta`);
      }
      if (t.function && t.function.arguments) { out.calls[t.index].arguments += t.function.arguments; out.calls[t.index].pieces++; }
    }
    if (ch.finish_reason) out.finish = ch.finish_reason;
  }
  return out;
}

// ---- reasoning (R1) -------------------------------------------------------------------

await test('openai-reasoning-whole', async () => {
  const r = await r1.chat.completions.create({ model: 'dsv-test', messages: [{ role: 'user', content: 'What is 2+2?' }] });
  const m = r.choices[0].message;
  eq(m.reasoning_content, 'The user asks for 2+2.\nTwo and two make 4.\n', 'reasoning_content');
  eq(m.content, 'The answer is 4.', 'content');
  eq(r.choices[0].finish_reason, 'stop', 'finish_reason');
  const rt = r.usage.completion_tokens_details.reasoning_tokens;
  expect(rt > 0 && rt < r.usage.completion_tokens, `0 < reasoning_tokens ${rt} < completion_tokens ${r.usage.completion_tokens}`);
});

await test('openai-reasoning-streamed', async () => {
  const s = await collect(r1, { model: 'dsv-test', messages: [{ role: 'user', content: 'What is 2+2?' }] });
  eq(s.reasoning, 'The user asks for 2+2.\nTwo and two make 4.\n', 'streamed reasoning');
  eq(s.content, 'The answer is 4.', 'streamed content');
  expect(s.order.indexOf('c') > s.order.lastIndexOf('r'), `reasoning deltas before content deltas: ${s.order.join('')}`);
  expect(s.order.filter((x) => x === 'r').length > 3, 'reasoning in several deltas');
  expect(s.usage.completion_tokens_details.reasoning_tokens > 0, 'reasoning_tokens in the usage chunk');
  eq(s.finish, 'stop', 'finish_reason');
});

await test('openai-reasoning-cut-by-max-tokens', async () => {
  for (const stream of [false, true]) {
    const body = { model: 'dsv-test', messages: [{ role: 'user', content: 'What is 2+2?' }], max_tokens: 6 };
    const s = stream ? await collect(r1, body) : await r1.chat.completions.create(body);
    const m = stream ? { reasoning_content: s.reasoning, content: s.content } : s.choices[0].message;
    expect(m.reasoning_content.startsWith('The user'), `partial reasoning, got ${m.reasoning_content}`);
    expect(!m.content, `no content in a cut think block, got ${m.content}`);
    noMarkers(m.reasoning_content, 'reasoning');
    eq(stream ? s.finish : s.choices[0].finish_reason, 'length', 'finish_reason');
  }
});

await test('openai-reasoning-history-accepted-and-dropped', async () => {
  const r = await r1.chat.completions.create({
    model: 'dsv-test',
    messages: [
      { role: 'user', content: 'Hi' },
      { role: 'assistant', content: '<think>SECRET-A</think>Hello!', reasoning_content: 'SECRET-B' },
      { role: 'user', content: 'What is 2+2?' },
    ],
  });
  eq(r.choices[0].message.content, 'The answer is 4.', 'content');
});

await test('openai-reasoning-format-none-per-request', async () => {
  const r = await r1.chat.completions.create({
    model: 'dsv-test', messages: [{ role: 'user', content: 'What is 2+2?' }], reasoning_format: 'none',
  });
  const m = r.choices[0].message;
  expect(m.reasoning_content === undefined, 'no reasoning_content');
  eq(m.content, 'The user asks for 2+2.\nTwo and two make 4.\n</think>\n\nThe answer is 4.', 'content as generated');
});

await test('openai-reasoning-then-tool-call', async () => {
  const s = await collect(r1, { model: 'dsv-test', messages: ASK, tools: [WEATHER] });
  eq(s.reasoning, 'I should call the tool.\n', 'reasoning');
  eq(s.content, '', 'content');
  eq(s.calls.map((c) => [c.name, JSON.parse(c.arguments)]), [['get_weather', { city: 'Paris' }]], 'calls');
  eq(s.finish, 'tool_calls', 'finish_reason');
});

// ---- tool calls: DeepSeek-V3 and Qwen2.5 -------------------------------------------------

for (const [name, c] of [['deepseek', ds], ['qwen', qwen]]) {
  await test(`openai-${name}-round-trip`, async () => {
    const r = await c.chat.completions.create({ model: 'dsv-test', messages: ASK, tools: [WEATHER], tool_choice: 'auto' });
    const m = r.choices[0].message;
    eq(r.choices[0].finish_reason, 'tool_calls', 'finish_reason');
    expect(m.content === null, `content null, got ${JSON.stringify(m.content)}`);
    eq(m.tool_calls.length, 1, 'one call');
    const call = m.tool_calls[0];
    expect(call.type === 'function' && typeof call.id === 'string' && call.id.length > 0, 'id and type');
    eq(call.function.name, 'get_weather', 'name');
    eq(JSON.parse(call.function.arguments), { city: 'Paris' }, 'arguments');
    const r2 = await c.chat.completions.create({
      model: 'dsv-test', tools: [WEATHER],
      messages: [...ASK, m, { role: 'tool', tool_call_id: call.id, content: '{"temp_c": 18, "sky": "cloudy"}' }],
    });
    eq(r2.choices[0].message.content, 'It is 18°C and cloudy in Paris.', 'the answer after the tool result');
    eq(r2.choices[0].finish_reason, 'stop', 'finish_reason');
  });

  await test(`openai-${name}-streamed-call`, async () => {
    const s = await collect(c, { model: 'dsv-test', messages: ASK, tools: [WEATHER] });
    eq(s.calls.length, 1, 'one call');
    eq(s.calls[0].name, 'get_weather', 'name');
    eq(JSON.parse(s.calls[0].arguments), { city: 'Paris' }, 'arguments');
    if (name === 'deepseek') expect(s.calls[0].pieces > 1, `arguments in pieces, got ${s.calls[0].pieces}`);
    noMarkers(s.content, 'content');
    eq(s.finish, 'tool_calls', 'finish_reason');
  });

  await test(`openai-${name}-tool-choice-none`, async () => {
    const r = await c.chat.completions.create({ model: 'dsv-test', messages: ASK, tools: [WEATHER], tool_choice: 'none' });
    expect(!r.choices[0].message.tool_calls, 'no calls parsed');
    eq(r.choices[0].finish_reason, 'stop', 'finish_reason');
  });
}

await test('openai-deepseek-parallel-calls', async () => {
  const ask = [{ role: 'user', content: 'And in Tokyo and Berlin?' }];
  const r = await ds.chat.completions.create({ model: 'dsv-test', messages: ask, tools: [WEATHER] });
  const m = r.choices[0].message;
  eq(m.content, 'Checking both.', 'content before the calls');
  eq(m.tool_calls.map((t) => JSON.parse(t.function.arguments).city), ['Tokyo', 'Berlin'], 'two calls');
  expect(m.tool_calls[0].id !== m.tool_calls[1].id, 'distinct ids');
  const s = await collect(ds, { model: 'dsv-test', messages: ask, tools: [WEATHER] });
  eq(s.calls.map((t) => JSON.parse(t.arguments).city), ['Tokyo', 'Berlin'], 'two streamed calls');
  const one = await ds.chat.completions.create({ model: 'dsv-test', messages: ask, tools: [WEATHER], parallel_tool_calls: false });
  eq(one.choices[0].message.tool_calls.length, 1, 'parallel_tool_calls false: one call');
});

await test('openai-deepseek-n-choices-with-calls', async () => {
  const r = await ds.chat.completions.create({ model: 'dsv-test', messages: ASK, tools: [WEATHER], n: 2 });
  eq(r.choices.map((c) => [c.index, c.finish_reason, c.message.tool_calls[0].function.name]),
    [[0, 'tool_calls', 'get_weather'], [1, 'tool_calls', 'get_weather']], 'two choices, each a call');
  expect(r.choices[0].message.tool_calls[0].id !== r.choices[1].message.tool_calls[0].id, 'call ids differ across choices');
  const s = await r1.chat.completions.create({ model: 'dsv-test', messages: [{ role: 'user', content: 'What is 2+2?' }],
    n: 2, stream: true, stream_options: { include_usage: true } });
  const reasoning = ['', ''], content = ['', ''];
  let usage;
  for await (const chunk of s) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      reasoning[c.index] += c.delta.reasoning_content || '';
      content[c.index] += c.delta.content || '';
    }
  }
  eq(content, ['The answer is 4.', 'The answer is 4.'], 'content per choice');
  eq(reasoning[1], 'The user asks for 2+2.\nTwo and two make 4.\n', 'reasoning of the second choice');
  expect(usage.completion_tokens_details.reasoning_tokens > 0, 'reasoning tokens over the choices');
});

await test('openai-deepseek-stream-cut-mid-call', async () => {
  const whole = await ds.chat.completions.create({ model: 'dsv-test', messages: ASK, tools: [WEATHER] });
  const n = whole.usage.completion_tokens;
  expect(n > 8, `a call of more than 8 tokens, got ${n}`);
  for (const max_tokens of [3, n - 4, n - 1]) {
    const s = await collect(ds, { model: 'dsv-test', messages: ASK, tools: [WEATHER], max_tokens });
    eq(s.finish, 'length', `finish_reason at max_tokens ${max_tokens}`);
    noMarkers(s.content, 'content');
    for (const t of s.calls) noMarkers(t.arguments, 'arguments');
    const r = await ds.chat.completions.create({ model: 'dsv-test', messages: ASK, tools: [WEATHER], max_tokens });
    eq(r.choices[0].finish_reason, 'length', 'whole answer finish_reason');
    // Cut before the call's end marker the call is not reported; cut after it (only the
    // section's end missing) it is, with the finish reason still "length".
    if (max_tokens < n - 1) expect(!r.choices[0].message.tool_calls, 'an unfinished call is not reported');
    else eq(JSON.parse(r.choices[0].message.tool_calls[0].function.arguments), { city: 'Paris' }, 'the finished call');
    noMarkers(r.choices[0].message.content, 'content');
  }
});

// tool_choice "required": the worker gets the forced call in the template's own syntax
// (the scripted worker checks its reply against that grammar's masks; the real model's
// constrained decoding of the JSON form is test-structured-output's), the template still
// gets the tools, the calls come back parsed.
await test('openai-deepseek-tool-choice-required', async () => {
  const body = { model: 'dsv-test', messages: ASK, tools: [WEATHER], tool_choice: 'required' };
  const r = await ds.chat.completions.create(body);
  const m = r.choices[0].message;
  eq(r.choices[0].finish_reason, 'tool_calls', 'finish_reason');
  eq(m.content, null, 'content');
  eq(m.tool_calls.map((c) => [c.function.name, JSON.parse(c.function.arguments)]),
    [['get_weather', { city: 'Paris' }], ['get_weather', { city: 'Lyon' }]], 'calls');
  const s = await collect(ds, body);
  eq(s.calls.map((c) => [c.name, JSON.parse(c.arguments)]), [['get_weather', { city: 'Paris' }], ['get_weather', { city: 'Lyon' }]],
    'streamed calls');
  eq(s.content, '', 'streamed content');
  eq(s.finish, 'tool_calls', 'streamed finish_reason');
  const one = await ds.chat.completions.create({ ...body, parallel_tool_calls: false,
    tool_choice: { type: 'function', function: { name: 'get_weather' } } });
  eq(one.choices[0].message.tool_calls.length, 1, 'parallel_tool_calls false: one call');
});

await test('openai-qwen-tool-choice-required', async () => {
  const body = { model: 'dsv-test', messages: ASK, tools: [WEATHER], tool_choice: 'required' };
  const want = [['get_weather', { city: 'Paris' }], ['get_weather', { city: 'Lyon' }]];
  const r = await qwen.chat.completions.create(body);
  eq(r.choices[0].finish_reason, 'tool_calls', 'finish_reason');
  eq(r.choices[0].message.content, null, 'content');
  eq(r.choices[0].message.tool_calls.map((c) => [c.function.name, JSON.parse(c.function.arguments)]), want, 'calls');
  const s = await collect(qwen, body);
  eq(s.calls.map((c) => [c.name, JSON.parse(c.arguments)]), want, 'streamed calls');
  eq(s.content, '', 'streamed content');
  eq(s.finish, 'tool_calls', 'streamed finish_reason');
});

await test('openai-bad-tool-requests', async () => {
  await expectError(ds.chat.completions.create({ model: 'dsv-test', messages: ASK, tools: [WEATHER],
    tool_choice: { type: 'function', function: { name: 'get_time' } } }), 400, 'tool_choice');
  await expectError(ds.chat.completions.create({ model: 'dsv-test', messages: ASK, tools: [WEATHER, WEATHER] }), 400, 'tools');
  await expectError(ds.chat.completions.create({ model: 'dsv-test', messages: ASK,
    tools: [{ type: 'function', function: { description: 'no name' } }] }), 400, 'tools[0].function');
  await expectError(ds.chat.completions.create({ model: 'dsv-test', messages: ASK,
    tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: 'x' } } }] }),
  400, 'tools[0].function.parameters');
  await expectError(ds.chat.completions.create({ model: 'dsv-test',
    messages: [...ASK, { role: 'tool', tool_call_id: 'call_1', content: '18' }] }), 400, 'messages[1].tool_call_id');
  await expectError(ds.chat.completions.create({ model: 'dsv-test', messages: ASK, tools: [WEATHER], tool_choice: 'required',
    response_format: { type: 'json_object' } }), 400, 'tool_choice');
  await expectError(ds.chat.completions.create({ model: 'dsv-test', messages: ASK,
    tools: [{ ...WEATHER, function: { ...WEATHER.function, strict: true } }] }), 400, 'tools[0].function.strict');
  await expectError(ds.chat.completions.create({ model: 'dsv-test', messages: ASK, functions: [WEATHER.function] }),
    400, 'functions');
});

// ---- Vercel AI SDK ----------------------------------------------------------------------

const provider = (url) => createOpenAICompatible({ name: 'dsvisor', baseURL: url + '/v1', apiKey: 'none' });

await test('ai-sdk-generateText-with-tools', async () => {
  const seen = [];
  const r = await generateText({
    model: provider(process.env.GW_DS)('dsv-test'),
    prompt: "What's the weather in Paris?",
    tools: {
      get_weather: tool({
        description: 'Get the weather for a city',
        parameters: z.object({ city: z.string() }),
        execute: async ({ city }) => { seen.push(city); return { temp_c: 18, sky: 'cloudy' }; },
      }),
    },
    maxSteps: 2,
  });
  eq(seen, ['Paris'], 'the tool ran with the parsed arguments');
  eq(r.steps[0].toolCalls.map((t) => t.toolName), ['get_weather'], 'first step called the tool');
  eq(r.steps[0].finishReason, 'tool-calls', 'first step finish');
  eq(r.text, 'It is 18°C and cloudy in Paris.', 'final text');
});

await test('ai-sdk-streamText-reasoning', async () => {
  const r = streamText({ model: provider(process.env.GW_R1)('dsv-test'), prompt: 'What is 2+2?' });
  let text = '';
  for await (const piece of r.textStream) text += piece;
  eq(text, 'The answer is 4.', 'streamed text');
  eq(await r.reasoning, 'The user asks for 2+2.\nTwo and two make 4.\n', 'reasoning');
});

// ---- LangChain JS -----------------------------------------------------------------------

await test('langchain-bindTools', async () => {
  const llm = new ChatOpenAI({ model: 'dsv-test', apiKey: 'none', configuration: { baseURL: process.env.GW_QWEN + '/v1' },
    maxRetries: 0 });
  const msg = await llm.bindTools([WEATHER]).invoke("What's the weather in Paris?");
  eq(msg.tool_calls.map((t) => [t.name, t.args]), [['get_weather', { city: 'Paris' }]], 'tool_calls');
  const s = await llm.bindTools([WEATHER]).stream("What's the weather in Paris?");
  let acc;
  for await (const chunk of s) acc = acc ? acc.concat(chunk) : chunk;
  eq(acc.tool_calls.map((t) => [t.name, t.args]), [['get_weather', { city: 'Paris' }]], 'streamed tool_calls');
});

finish();
