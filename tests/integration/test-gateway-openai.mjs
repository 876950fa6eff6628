// The gateway through the official openai client: models, chat and completions, streamed
// and not, usage, typed errors (404, 400, 401) and a stream that fails midway. Run by
// test-gateway-openai.sh; argv[2] is the client's module path. Ends with "N passed, N failed".
const { default: OpenAI } = await import(process.argv[2]);
const { test, expect, makeExpectError, finish } = await import('./client-harness.mjs');
const { readFileSync } = await import('node:fs');

const base = process.env.GW_URL + '/v1';
const client = new OpenAI({ baseURL: base, apiKey: process.env.GW_KEY, maxRetries: 0, timeout: 15000 });
const expectError = makeExpectError(OpenAI, 'code');

await test('models-list', async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  expect(ids.length === 1 && ids[0] === 'dsv-test', `[dsv-test], got ${ids}`);
});

await test('chat-non-streamed', async () => {
  const r = await client.chat.completions.create({
    model: 'dsv-test', messages: [{ role: 'system', content: 'be brief' }, { role: 'user', content: 'hello there world' }],
    temperature: 0.7, top_p: 0.9, max_tokens: 10, seed: 3, stop: ['zzz'], presence_penalty: 0.1, frequency_penalty: 0.1,
  });
  expect(r.object === 'chat.completion', 'chat.completion');
  expect(r.choices[0].message.content === 'hello there world', `content, got ${r.choices[0].message.content}`);
  expect(r.choices[0].finish_reason === 'stop', 'finish stop');
  expect(r.usage.prompt_tokens === 3 && r.usage.completion_tokens === 3 && r.usage.total_tokens === 6, 'usage');
});

await test('chat-streamed-with-usage', async () => {
  const stream = await client.chat.completions.create({
    model: 'dsv-test', messages: [{ role: 'user', content: 'one two three four' }], max_tokens: 3,
    stream: true, stream_options: { include_usage: true },
  });
  let text = '', finish = null, usage = null, chunks = 0;
  for await (const c of stream) {
    chunks++;
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) {
      text += ch.delta?.content ?? '';
      finish = ch.finish_reason ?? finish;
    }
  }
  expect(text === 'one two three', `text, got '${text}'`);
  expect(finish === 'length', `finish length, got ${finish}`);
  expect(usage && usage.completion_tokens === 3 && usage.prompt_tokens === 4, 'usage in the last chunk');
  expect(chunks >= 5, `role + 3 tokens + finish + usage chunks, got ${chunks}`);
});

await test('usage-cached-tokens', async () => {
  const r = await client.chat.completions.create({
    model: 'dsv-test', messages: [{ role: 'user', content: '__cached__ one two three' }], max_tokens: 2,
  });
  expect(r.usage.prompt_tokens === 4 && r.usage.prompt_tokens_details?.cached_tokens === 3,
    `cached prompt tokens in usage, got ${JSON.stringify(r.usage)}`);
  const plain = await client.chat.completions.create({
    model: 'dsv-test', messages: [{ role: 'user', content: 'one two three' }], max_tokens: 2,
  });
  expect(plain.usage.prompt_tokens_details === undefined, `none cached: no details, got ${JSON.stringify(plain.usage)}`);
});

await test('completions-non-streamed', async () => {
  const r = await client.completions.create({ model: 'dsv-test', prompt: 'the quick brown fox', max_tokens: 2 });
  expect(r.choices[0].text === 'the quick', `text, got ${r.choices[0].text}`);
  expect(r.choices[0].finish_reason === 'length', 'finish length');
  expect(r.usage.total_tokens === 6, 'usage');
});

await test('completions-streamed', async () => {
  const stream = await client.completions.create({ model: 'dsv-test', prompt: 'a b c', max_tokens: 5, stream: true });
  let text = '';
  for await (const c of stream) text += c.choices[0]?.text ?? '';
  expect(text === 'a b c', `text, got '${text}'`);
});

await test('unknown-model-404', async () => {
  await expectError(client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'x' }] }),
    404, 'model_not_found');
});

await test('negative-max-tokens-400', async () => {
  const e = await expectError(client.completions.create({ model: 'dsv-test', prompt: 'x', max_tokens: -1 }), 400);
  expect(e.param === 'max_tokens', `param max_tokens, got ${e.param}`);
  expect(e instanceof OpenAI.BadRequestError, 'BadRequestError');
});

await test('wrong-key-401', async () => {
  const bad = new OpenAI({ baseURL: base, apiKey: 'sk-wrong', maxRetries: 0 });
  const e = await expectError(bad.chat.completions.create({ model: 'dsv-test', messages: [{ role: 'user', content: 'x' }] }), 401);
  expect(e instanceof OpenAI.AuthenticationError, 'AuthenticationError');
});

await test('stream-fails-midway', async () => {
  const dying = new OpenAI({ baseURL: process.env.GW_DYING_URL + '/v1', apiKey: process.env.GW_KEY, maxRetries: 0 });
  const stream = await dying.chat.completions.create({
    model: 'dsv-test', messages: [{ role: 'user', content: 'one two three four five' }], stream: true,
  });
  let text = '';
  try {
    for await (const c of stream) text += c.choices[0]?.delta?.content ?? '';
  } catch (e) {
    expect(text === 'one two', `two tokens before the error, got '${text}'`);
    expect(e instanceof OpenAI.APIError, `an APIError, got ${e}`);
    return;
  }
  throw new Error(`the stream ended without an error after '${text}'`);
});

// Requests each fake worker has received so far.
const requestsPerWorker = () => process.env.GW_WORKER_LOGS.split(':').map(
  (f) => readFileSync(f, 'utf8').split('\n').filter((l) => l.startsWith('request ')).length);

await test('chat-n-choices-on-one-instance', async () => {
  const before = requestsPerWorker();
  const r = await client.chat.completions.create({
    model: 'dsv-test', messages: [{ role: 'user', content: 'one two three' }], n: 3, seed: 5, max_tokens: 10,
  });
  expect(r.choices.length === 3, `3 choices, got ${r.choices.length}`);
  r.choices.forEach((c, i) => {
    expect(c.index === i, `index ${i}, got ${c.index}`);
    expect(c.message.content === 'one two three' && c.finish_reason === 'stop', `choice ${i}: ${JSON.stringify(c)}`);
  });
  expect(r.usage.prompt_tokens === 3 && r.usage.completion_tokens === 9 && r.usage.total_tokens === 12,
    `usage over the choices, prompt once: ${JSON.stringify(r.usage)}`);
  const added = requestsPerWorker().map((n, i) => n - before[i]).sort();
  expect(JSON.stringify(added) === '[0,3]', `all 3 choices on one instance (its prefix cache), got ${added}`);
});

await test('chat-n-choices-streamed', async () => {
  const stream = await client.chat.completions.create({
    model: 'dsv-test', messages: [{ role: 'user', content: 'alpha beta' }], n: 2, stream: true,
    stream_options: { include_usage: true },
  });
  const text = ['', ''], finish = [null, null];
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text[c.index] += c.delta.content || '';
      if (c.finish_reason) finish[c.index] = c.finish_reason;
    }
  }
  expect(text[0] === 'alpha beta' && text[1] === 'alpha beta', `both choices' text, got ${JSON.stringify(text)}`);
  expect(finish[0] === 'stop' && finish[1] === 'stop', `a finish per choice, got ${finish}`);
  expect(usage && usage.completion_tokens === 4 && usage.prompt_tokens === 2, `usage ${JSON.stringify(usage)}`);
});

finish();
