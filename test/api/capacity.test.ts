import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, type Harness } from '../helpers/harness.js';
import { simMachines } from '../helpers/sim-machines.js';
import { hostMemoryBudgetMb, hostVcpuBudget } from '../../src/services/capacity.js';

// Two 128 MB guests with 50 MB overhead each (356 MB) fit in 400 MB; a third does not.
let h: Harness;
let alice: string;
let bob: string;

before(async () => {
  h = await startHarness({ capacity: { memoryMb: 400, memoryFraction: 0.8, vmOverheadMb: 50 } }, (s) => [
    simMachines(s),
  ]);
  await h.image('app:latest');
  alice = await h.user('alice');
  bob = await h.user('bob');
});
after(async () => h.close());

const create = (token: string, body: object) =>
  h.call('POST', '/v1/instances', token, { image: 'app:latest', memory_mb: 128, ...body });
const entry = async (p: ReturnType<typeof create>) => (await p).body.data.instances[0];
const names = async (token: string) =>
  ((await h.call('GET', '/v1/instances/list', token)).body.data.instances as { name: string }[]).map((i) => i.name);

const stopped = (token: string, name: string) =>
  h.until(
    async () => (await h.call('GET', '/v1/instances', token, { name })).body.data.instances[0].state === 'stopped',
  );

test('the budget is the configured one, or a fraction of the host RAM', () => {
  assert.equal(hostMemoryBudgetMb({ memoryMb: 400, memoryFraction: 0.8, vmOverheadMb: 0 }), 400);
  assert.equal(hostMemoryBudgetMb({ memoryMb: 0, memoryFraction: 0.5, vmOverheadMb: 0 }, 8192 * 1024 * 1024), 4096);
});

test('autostart beyond the host budget is refused whole, for any user; the error names the budget', async () => {
  assert.equal((await entry(create(alice, { name: 'a1', autostart: true }))).state, 'starting');
  assert.equal((await entry(create(bob, { name: 'b1', autostart: true }))).state, 'starting');
  const full = await entry(create(bob, { name: 'b2', autostart: true }));
  assert.equal(full.status, 'error');
  assert.equal(full.error, 9);
  assert.match(full.message, /host is full: starting needs 178 MB .* 356 of the host's 400 MB guest memory budget/);
  assert.deepEqual(await names(bob), ['b1']); // nothing created
  // Two replicas at once count twice.
  const stop = await h.call('PUT', '/v1/instances/stop', alice, { name: 'a1' });
  assert.equal(stop.body.status, 'success', stop.text);
  await stopped(alice, 'a1');
  const twins = await entry(create(bob, { name: 'twin', autostart: true, replicas: 1 }));
  assert.equal(twins.error, 9, JSON.stringify(twins));
});

test('PUT start on a full host is refused and leaves the instance stopped; it works once memory is freed', async () => {
  assert.equal((await entry(create(alice, { name: 'a2', autostart: true }))).state, 'starting');
  assert.equal((await entry(create(alice, { name: 'later' }))).state, 'stopped'); // no autostart: no check
  const r = await h.call('PUT', '/v1/instances/start', alice, { name: 'later' });
  assert.equal(r.body.data.instances[0].error, 9, r.text);
  assert.equal(
    (await h.call('GET', '/v1/instances', alice, { name: 'later' })).body.data.instances[0].state,
    'stopped',
  );
  await h.call('PUT', '/v1/instances/stop', alice, { name: 'a2' });
  await stopped(alice, 'a2');
  const again = await h.call('PUT', '/v1/instances/start', alice, { name: 'later' });
  assert.equal(again.body.data.instances[0].status, 'success', again.text);
});

test('the vCPU budget is cores × vcpusPerCore, or unlimited at 0', () => {
  assert.equal(hostVcpuBudget({ vcpusPerCore: 16, cores: 0 }, 2), 32);
  assert.equal(hostVcpuBudget({ vcpusPerCore: 4, cores: 3 }, 64), 12);
  assert.equal(hostVcpuBudget({ vcpusPerCore: 0, cores: 0 }, 2), Infinity);
});

test('starting beyond the vCPU budget is refused whole; the error names the vCPU budget', async () => {
  // One core at two vCPUs per core: two live VMs, memory plentiful.
  const cpu = await startHarness({ capacity: { memoryMb: 100_000, vcpusPerCore: 2, cores: 1 } }, (s) => [
    simMachines(s),
  ]);
  try {
    await cpu.image('app:latest');
    const carol = await cpu.user('carol');
    const make = async (name: string) =>
      (await cpu.call('POST', '/v1/instances', carol, { image: 'app:latest', name, autostart: true })).body.data
        .instances[0];
    assert.equal((await make('c1')).state, 'starting');
    assert.equal((await make('c2')).state, 'starting');
    const third = await make('c3');
    assert.equal(third.error, 9, JSON.stringify(third));
    assert.match(third.message, /host is full: starting needs 1 vCPU, 2 of the host's 2 vCPU budget \(2 per core\)/);
    const list = (await cpu.call('GET', '/v1/instances/list', carol)).body.data.instances as { name: string }[];
    assert.deepEqual(
      list.map((i) => i.name),
      ['c1', 'c2'],
    );
  } finally {
    await cpu.close();
  }
});
