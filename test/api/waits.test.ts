import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { startHarness, type Harness } from '../helpers/harness.js';
import { simMachines } from '../helpers/sim-machines.js';

const CAP = 20;
let h: Harness;
let alice: string;
let bob: string;
let aliceId: string;
/** store listeners registered since the start (the waits must not add one per target) */
let registrations = 0;

before(async () => {
  h = await startHarness({ maxWaitsPerUser: CAP, defaultQuotas: { hard: { live_instances: 64 } } }, (s) => [
    simMachines(s),
  ]);
  await h.image('app:latest');
  alice = await h.user('alice');
  bob = await h.user('bob');
  aliceId = (await h.daemon.store.read((tx) => tx.users.getByName('alice')))!.id;
  const store = h.daemon.store;
  const on = store.watch.bind(store);
  store.watch = (from, l) => {
    registrations++;
    return on(from, l);
  };
});
after(async () => h.close());

const waits = () => h.daemon.services.instances.waits;
async function until(cond: () => boolean): Promise<void> {
  for (let i = 0; i < 500 && !cond(); i++) await sleep(10);
  assert.ok(cond(), 'condition not met');
}
async function running(token: string, name: string): Promise<void> {
  const r = await h.call('POST', '/v1/instances', token, {
    name,
    image: 'app:latest',
    autostart: true,
    wait_timeout_ms: 5000,
  });
  assert.equal(r.body.data.instances[0].state, 'running', r.text);
}

test('a wait on N targets adds no store listener, only keyed entries; the cap refuses more, whole', async () => {
  const names = Array.from({ length: CAP }, (_, i) => `w${i}`);
  for (const n of names) await running(alice, n);
  await running(bob, 'b0');
  const ids = names.map((name) => ({ name }));
  const before = registrations;

  const pending = h.call('GET', '/v1/instances/wait', alice, { ids, state: 'stopped', timeout_ms: 30_000 });
  await until(() => waits().reserved(aliceId) === CAP);
  assert.equal(registrations - before, 0, 'a wait registered store listeners');
  assert.equal(waits().watched, CAP);

  // The user's waits are used up: another wait, a start or a create with a wait are refused, and change nothing.
  const more = await h.call('GET', '/v1/instances/wait', alice, { name: 'w0', state: 'running', timeout_ms: 1000 });
  assert.equal(more.body.data.instances[0].error, 5, more.text);
  assert.match(more.body.data.instances[0].message, /too many concurrent waits: 20 waiting \+ 1 requested > 20/);
  const created = await h.call('POST', '/v1/instances', alice, {
    name: 'extra',
    image: 'app:latest',
    autostart: true,
    wait_timeout_ms: 1000,
  });
  assert.equal(created.body.data.instances[0].error, 5, created.text);
  assert.equal((await h.call('GET', '/v1/instances', alice, { name: 'extra' })).body.data.instances[0].error, 8);
  // Without a wait nothing is reserved, so a plain create still works.
  const plain = await h.call('POST', '/v1/instances', alice, { name: 'plain', image: 'app:latest' });
  assert.equal(plain.body.data.instances[0].status, 'success', plain.text);
  const start = await h.call('PUT', '/v1/instances/start', alice, { name: 'plain', wait_timeout_ms: 1000 });
  assert.equal(start.body.data.instances[0].error, 5, start.text);
  assert.equal(
    (await h.call('GET', '/v1/instances', alice, { name: 'plain' })).body.data.instances[0].state,
    'stopped',
  );

  // Another user is not affected.
  const other = await h.call('GET', '/v1/instances/wait', bob, { name: 'b0', state: 'running', timeout_ms: 1000 });
  assert.equal(other.body.data.instances[0].status, 'success', other.text);

  const stop = await h.call('PUT', '/v1/instances/stop', alice, ids);
  assert.equal(stop.body.status, 'success', stop.text);
  const done = await pending;
  assert.equal(done.body.status, 'success', done.text);
  assert.ok(done.body.data.instances.every((e: { state: string }) => e.state === 'stopped'));
  assert.equal(waits().reserved(aliceId), 0);
  assert.equal(waits().watched, 0);
});

test('a client that goes away releases its waits at once', async () => {
  const ac = new AbortController();
  const { request } = await import('undici');
  const p = request(`${h.url}/v1/instances/wait`, {
    method: 'GET',
    headers: { authorization: `Bearer ${alice}`, 'content-type': 'application/json' },
    body: JSON.stringify({ ids: [{ name: 'w1' }, { name: 'w2' }], state: 'running', timeout_ms: 60_000 }),
    signal: ac.signal,
  }).catch(() => undefined);
  await until(() => waits().reserved(aliceId) === 2);
  ac.abort();
  await p;
  await until(() => waits().reserved(aliceId) === 0);
  assert.equal(waits().watched, 0);
});
