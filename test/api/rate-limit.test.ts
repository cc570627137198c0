import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'undici';
import { startHarness, type Harness } from '../helpers/harness.js';

const MAX = 5;
let h: Harness;
let off: Harness;

before(async () => {
  h = await startHarness({ rateLimit: { max: MAX, windowMs: 60_000 } });
  off = await startHarness({ rateLimit: { max: 0, windowMs: 60_000 } });
});
after(async () => {
  await h.close();
  await off.close();
});

async function get(base: Harness, token: string) {
  const r = await request(`${base.url}/v1/instances`, { headers: { authorization: `Bearer ${token}` } });
  return { status: r.statusCode, headers: r.headers, body: (await r.body.json()) as Record<string, any> }; // eslint-disable-line @typescript-eslint/no-explicit-any
}

test('a user over the limit gets 429 with Retry-After, in the envelope; other users do not', async () => {
  const alice = await h.user('alice');
  const bob = await h.user('bob');
  for (let i = 0; i < MAX; i++) assert.equal((await get(h, alice)).status, 200);
  const r = await get(h, alice);
  assert.equal(r.status, 429);
  const retry = Number(r.headers['retry-after']);
  assert.ok(retry > 0 && retry <= 60, `Retry-After ${r.headers['retry-after']}`);
  assert.equal(r.body.status, 'error');
  assert.match(
    r.body.message,
    /rate limit exceeded: more than 5 requests in 1 minute for this user; retry after \d+ s/,
  );
  assert.deepEqual(r.body.errors[0].error, 5);
  assert.equal((await get(h, bob)).status, 200);
});

test("the limit is per user: all of the user's tokens share it", async () => {
  const first = await h.user('carol');
  const { token: second } = await h.daemon.services.users.newToken('carol');
  for (let i = 0; i < MAX; i++) assert.equal((await get(h, i % 2 ? first : second)).status, 200);
  assert.equal((await get(h, second)).status, 429);
});

test('max 0 turns the limit off', async () => {
  const t = await off.user('dave');
  for (let i = 0; i < 3 * MAX; i++) assert.equal((await get(off, t)).status, 200);
});
