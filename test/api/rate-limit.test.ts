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

test('the registry has a budget of its own per user: TOOMANYREQUESTS in its error form, with Retry-After', async () => {
  const frank = await h.user('frank');
  const basic = `Basic ${Buffer.from(`frank:${frank}`).toString('base64')}`;
  const v2 = async () => {
    const r = await request(`${h.url}/v2/`, { headers: { authorization: basic } });
    return { status: r.statusCode, headers: r.headers, body: (await r.body.json()) as Record<string, any> }; // eslint-disable-line @typescript-eslint/no-explicit-any
  };
  // the API's requests do not count against the registry's budget, nor the other way round
  for (let i = 0; i < MAX; i++) assert.equal((await get(h, frank)).status, 200);
  for (let i = 0; i < MAX; i++) assert.equal((await v2()).status, 200);
  const r = await v2();
  assert.equal(r.status, 429);
  assert.ok(Number(r.headers['retry-after']) > 0, `Retry-After ${r.headers['retry-after']}`);
  assert.equal(r.body.errors[0].code, 'TOOMANYREQUESTS');
  assert.match(r.body.errors[0].message, /more than 5 registry requests in 60 s for user frank; retry after \d+ s/);
  // another user's budget is untouched
  const gina = await h.user('gina');
  const g = await request(`${h.url}/v2/`, {
    headers: { authorization: `Basic ${Buffer.from(`gina:${gina}`).toString('base64')}` },
  });
  assert.equal(g.statusCode, 200);
  await g.body.dump();
});

test('max 0 turns the limit off', async () => {
  const t = await off.user('dave');
  for (let i = 0; i < 3 * MAX; i++) assert.equal((await get(off, t)).status, 200);
});

test('failed authentications beyond the budget block the address with 429 and Retry-After; tokens already seen valid still pass (a shared NAT)', async () => {
  const guard = await startHarness({ authFailures: { max: 3, windowMs: 60_000 } });
  try {
    const erin = await guard.user('erin');
    assert.equal((await get(guard, erin)).status, 200);
    for (let i = 0; i < 3; i++) assert.equal((await get(guard, `guess${i}`)).status, 401);
    // The fourth failure is still answered (it is the one over the budget) ...
    assert.equal((await get(guard, 'guess3')).status, 401);
    // ... then erin, a user behind the same address whose token the daemon has seen, keeps working ...
    assert.equal((await get(guard, erin)).status, 200);
    // ... and any other token waits, valid or not: a guess's answer says nothing.
    const fay = await guard.user('fay');
    for (const token of ['guess4', fay]) {
      const r = await get(guard, token);
      assert.equal(r.status, 429, JSON.stringify(r.body));
      const retry = Number(r.headers['retry-after']);
      assert.ok(retry > 0 && retry <= 60, `Retry-After ${r.headers['retry-after']}`);
      assert.match(r.body.message, /too many failed authentications from 127\.0\.0\.1: more than 3 in 60 s/);
    }
  } finally {
    await guard.close();
  }
});

test('the registry shares the failed-login budget: guesses block the address (TOOMANYREQUESTS); known-good credentials pass', async () => {
  const guard = await startHarness({ authFailures: { max: 2, windowMs: 60_000 } });
  try {
    const erin = await guard.user('erin');
    const v2 = async (auth: string) => {
      const r = await request(`${guard.url}/v2/`, { headers: { authorization: auth } });
      return { status: r.statusCode, text: await r.body.text() };
    };
    const basic = (u: string, t: string) => `Basic ${Buffer.from(`${u}:${t}`).toString('base64')}`;
    assert.equal((await v2(basic('erin', erin))).status, 200);
    for (let i = 0; i < 3; i++) assert.equal((await v2(basic('erin', `guess${i}`))).status, 401);
    const blocked = await v2(basic('erin', 'guess9'));
    assert.equal(blocked.status, 429);
    assert.match(blocked.text, /TOOMANYREQUESTS/);
    assert.equal((await v2(basic('erin', erin))).status, 200, "erin's token was seen valid: it passes");
    const fay = await guard.user('fay');
    assert.equal((await v2(basic('fay', fay))).status, 429, 'a token not seen yet waits like a guess');
  } finally {
    await guard.close();
  }
});

test('AuthFailureLimit forgets an address when its window ends', async () => {
  const { AuthFailureLimit } = await import('../../src/api/rate-limit.js');
  const l = new AuthFailureLimit({ max: 1, windowMs: 1000 });
  l.fail('a', 0);
  assert.equal(l.blockedFor('a', 10), 0);
  l.fail('a', 10);
  assert.equal(l.blockedFor('a', 10), 1);
  assert.equal(l.blockedFor('b', 10), 0);
  assert.equal(l.blockedFor('a', 1000), 0);
  l.fail('a', 1001);
  assert.equal(l.blockedFor('a', 1001), 0);
});
