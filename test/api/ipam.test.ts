import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { startHarness, type Harness } from '../helpers/harness.js';
import { simMachines } from '../helpers/sim-machines.js';

// A /29 leaves 5 addresses for instances (.2 to .6; .1 is the gateway, .7 broadcast).
let h: Harness;
let alice: string;

before(async () => {
  h = await startHarness({ subnet: '10.55.0.0/29' }, (s) => [simMachines(s)]);
  alice = await h.user('alice');
  await h.image('hello:latest');
});
after(() => h.close());

test('addresses come from the subnet, unique while the instance exists, released on delete', async () => {
  const r = await h.call(
    'POST',
    '/v1/instances',
    alice,
    Array.from({ length: 5 }, (_, i) => ({ name: `i${i}`, image: 'hello:latest' })),
  );
  assert.equal(r.body.status, 'success', r.text);
  const ips = r.body.data.instances.map((e: { private_ip: string }) => e.private_ip);
  assert.deepEqual([...ips].sort(), ['10.55.0.2', '10.55.0.3', '10.55.0.4', '10.55.0.5', '10.55.0.6']);

  // the subnet is full: a clear per-entry error (NoFree, 9), nothing created
  const full = await h.call('POST', '/v1/instances', alice, { name: 'extra', image: 'hello:latest' });
  assert.equal(full.body.status, 'error', full.text);
  assert.equal(full.body.data.instances[0].error, 9);
  assert.match(full.body.data.instances[0].message, /no free private IP address left in 10\.55\.0\.0\/29/);
  const list = await h.call('GET', '/v1/instances/list', alice);
  assert.equal(list.body.data.instances.length, 5);

  // a delete releases the address for the next instance
  await h.call('DELETE', '/v1/instances', alice, { name: 'i2' });
  const again = await h.call('POST', '/v1/instances', alice, { name: 'extra', image: 'hello:latest' });
  assert.equal(again.body.data.instances[0].private_ip, ips[2]);
});
