// The node client tests' harness: named cases, expectations, OpenAI error checks and the
// closing "N passed, N failed" line (exit status 1 unless some passed and none failed).
let passed = 0, failed = 0;

export async function test(name, fn) {
  try {
    await fn();
    passed++;
    console.log(`ok   ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e && e.stack ? e.stack.split('\n').slice(0, 3).join(' | ') : e}`);
  }
}

export function expect(cond, what) { if (!cond) throw new Error(`expected ${what}`); }

// expectError(promise, status, want): the promise fails with the openai client's APIError
// of that status whose field `key` ('code', 'param') is want (when want is given).
export function makeExpectError(OpenAI, key) {
  return async (promise, status, want) => {
    try {
      await promise;
    } catch (e) {
      expect(e instanceof OpenAI.APIError, `an APIError, got ${e}`);
      expect(e.status === status, `status ${status}, got ${e.status}`);
      if (want) expect(e[key] === want, `${key} ${want}, got ${e[key]}`);
      return e;
    }
    throw new Error(`expected an error ${status}`);
  };
}

export function finish() {
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed || !passed ? 1 : 0);
}
