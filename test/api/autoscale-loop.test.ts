import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import pino from 'pino';
import { AutoscaleController } from '../../src/reconcile/autoscale.js';
import type { InstanceRec } from '../../src/store/types.js';
import type { ControllerDeps } from '../../src/reconcile/deps.js';
import { startHarness, type Harness } from '../helpers/harness.js';
import { simMachines, wireFigures } from '../helpers/sim-machines.js';
import { replyAsserts } from '../helpers/replies.js';

/**
 * The decision loop over the real API and store, with simulated VMs whose
 * CPU time the test sets, a test clock and passes driven by the test
 * (timers that never fire).
 */
let h: Harness;
let dev: string;
let plain: string;
let scaler: AutoscaleController;
let deps: ControllerDeps;
let now = Date.parse('2026-01-01T00:00:00Z');
const used = new Map<string, number>();
/** millicores each simulated VM burns, set per test */
let load: (i: InstanceRec) => number = () => 0;

const { ok } = replyAsserts('service_groups');
const never = { setTimeout: () => null, clearTimeout: () => undefined };

before(async () => {
  h = await startHarness({}, (s) => {
    deps = s;
    const sim = simMachines(s);
    scaler = new AutoscaleController({
      services: s,
      log: pino({ level: process.env.UNIHOST_TEST_LOG ?? 'silent' }),
      cpuMs: (id) => used.get(id),
      vms: () => sim.list(),
      timers: never,
    });
    wireFigures(s, { sim, autoscale: scaler });
    return [sim, scaler];
  });
  h.daemon.services.clock = { now: () => now };
  dev = await h.user('dev', true);
  plain = await h.user('plain');
  await h.image('app:latest');
});
after(async () => h.close());

const instances = () => h.daemon.store.read((tx) => tx.instances.all());

/** Advances the test clock by one second of every live VM's load, then runs one pass. */
async function second(): Promise<void> {
  now += 1000;
  for (const i of await instances()) {
    if (i.state === 'running' || i.state === 'draining') used.set(i.id, (used.get(i.id) ?? 0) + load(i));
  }
  await scaler.tick();
  await h.until(async () => (await instances()).every((i) => i.state === 'running' || i.state === 'stopped'));
}

async function setup(token: string, name: string, conf: Record<string, unknown>) {
  ok(await h.call('POST', '/v1/services', token, { name, services: [{ port: 443, handlers: ['http', 'tls'] }] }));
  const [m] = ok(
    await h.call('POST', '/v1/instances', token, {
      name: `${name}-m`,
      image: 'app:latest',
      args: ['a', 'b c'],
      env: { K: 'v' },
      memory_mb: 96,
      restart_policy: 'on-failure',
      autostart: true,
      service_group: { name },
    }),
    'instances',
  );
  ok(await h.call('POST', '/v1/services/autoscale', token, { name, master: { uuid: m.uuid }, ...conf }));
  await h.until(async () => (await instances()).find((i) => i.id === m.uuid)?.state === 'running');
  return m;
}

const POLICY = {
  name: 'cpu',
  type: 'step',
  adjustment_type: 'change',
  steps: [
    { upper_bound: 200, adjustment: -1 },
    { lower_bound: 200, upper_bound: 500, adjustment: 0 },
    { lower_bound: 500, adjustment: 1 },
  ],
};

const clonesOf = async (group: string) =>
  (await instances()).filter((i) => i.service_group_id === group && i.autoscale_group_id === group);

test('scale out with clones of the master, cooldown between actions, clamp at max_size; then in, newest first', async () => {
  const m = await setup(dev, 'grow', {
    min_size: 1,
    max_size: 3,
    warmup_time_ms: 2000,
    cooldown_time_ms: 3000,
    policies: [POLICY],
  });
  const master = (await instances()).find((i) => i.id === m.uuid)!;
  const group = master.service_group_id!;
  load = (i) => (i.id === m.uuid ? 900 : 0); // clones idle: they only count once warm
  await second();
  assert.equal((await clonesOf(group)).length, 0, 'the master is still warming up: nothing to judge by');
  await second();
  await second();
  const [c1, ...rest] = await clonesOf(group);
  assert.equal(rest.length, 0);
  assert.ok(c1, 'one clone after the master was warm and busy');
  for (const k of ['image', 'image_ref', 'args', 'env', 'memory_mb', 'restart_policy', 'user_id'] as const)
    assert.deepEqual(c1[k], master[k], k);
  assert.equal(c1.autoscale_group_id, group);
  assert.equal(c1.state, 'running');
  assert.notEqual(c1.private_ip, master.private_ip);

  // cooldown: the metric is still the master's alone (clone in warmup) and high, but no action yet
  await second();
  await second();
  assert.equal((await clonesOf(group)).length, 1, 'within the cooldown nothing more happens');
  // After the clone's warmup the average is (900 + 0) / 2 = 450: no step moves it.
  await second();
  await second();
  assert.equal((await clonesOf(group)).length, 1, 'the warm, idle clone brings the average down');
  load = () => 900;
  for (let k = 0; k < 8; k++) await second();
  assert.equal((await clonesOf(group)).length, 2, 'clamped at max_size 3');

  // CPU per instance is visible to developers only
  const [seen] = ok(await h.call('GET', '/v1/instances', dev, { uuid: m.uuid }), 'instances');
  assert.equal(seen.cpu_millicores, 900);

  load = () => 50;
  const before = (await clonesOf(group)).sort((a, b) => a.created_at.localeCompare(b.created_at));
  for (let k = 0; k < 4; k++) await second();
  const after1 = await clonesOf(group);
  assert.equal(after1.length, 1, 'one clone drained and deleted');
  assert.equal(after1[0]!.id, before[0]!.id, 'the newest clone went first');
  for (let k = 0; k < 4; k++) await second();
  assert.equal((await clonesOf(group)).length, 0);
  assert.equal((await instances()).find((i) => i.id === m.uuid)?.state, 'running', 'the master stays');

  // the decisions are counted in Prometheus /metrics: two scale-outs, two scale-ins
  const text = (await h.call('GET', '/metrics', dev)).text;
  const sample = (dir: string) =>
    Number(
      new RegExp(`^unihost_autoscale_decisions_total\\{group="${group}",direction="${dir}"\\} (\\d+)$`, 'm').exec(
        text,
      )?.[1],
    );
  assert.equal(sample('out'), 2, text);
  assert.equal(sample('in'), 2, text);
});

test('no developer: no cpu_millicores; deleting the configuration drains the clones, keeps the master', async () => {
  const m = await setup(plain, 'plain', { max_size: 2, warmup_time_ms: 0, cooldown_time_ms: 0, policies: [POLICY] });
  const group = (await instances()).find((i) => i.id === m.uuid)!.service_group_id!;
  load = () => 1000;
  await second();
  await second();
  assert.equal((await clonesOf(group)).length, 1);
  const [seen] = ok(await h.call('GET', '/v1/instances', plain, { uuid: m.uuid }), 'instances');
  assert.equal(seen.cpu_millicores, undefined);
  ok(await h.call('DELETE', '/v1/services/autoscale', plain, { name: 'plain' }));
  await h.until(async () => (await clonesOf(group)).length === 0);
  assert.equal((await instances()).find((i) => i.id === m.uuid)?.state, 'running');
  load = () => 0;
});

test('deleting the master removes the configuration and its clones', async () => {
  const m = await setup(dev, 'gone', { max_size: 2, warmup_time_ms: 0, cooldown_time_ms: 0, policies: [POLICY] });
  const group = (await instances()).find((i) => i.id === m.uuid)!.service_group_id!;
  load = () => 1000;
  await second();
  await second();
  assert.equal((await clonesOf(group)).length, 1);
  ok(await h.call('DELETE', `/v1/instances/${m.uuid}`, dev), 'instances');
  assert.equal((await clonesOf(group)).length, 0);
  const [g] = ok(await h.call('GET', '/v1/services/autoscale', dev, { name: 'gone' }));
  assert.equal(g.status, 'unconfigured');
  load = () => 0;
});

test('a clone that stopped (not by the autoscaler) is deleted at the next pass', async () => {
  const m = await setup(dev, 'stale', { max_size: 2, warmup_time_ms: 0, cooldown_time_ms: 0, policies: [POLICY] });
  const group = (await instances()).find((i) => i.id === m.uuid)!.service_group_id!;
  load = (i) => (i.id === m.uuid ? 1000 : 0);
  await second();
  await second();
  const [c] = await clonesOf(group);
  assert.ok(c);
  load = () => 300; // between the steps' thresholds: no scaling once the window holds only this
  for (let k = 0; k < 4; k++) await second();
  assert.equal((await clonesOf(group)).length, 1);
  ok(await h.call('PUT', `/v1/instances/${c.id}/stop`, dev), 'instances');
  await h.until(async () => (await instances()).find((i) => i.id === c.id)?.state === 'stopped');
  await second();
  assert.equal((await clonesOf(group)).length, 0);
  load = () => 0;
});

test('a quota that refuses the clone: nothing half-made, the master runs on, other groups unaffected', async () => {
  const tight = await h.user('tight', true);
  await h.daemon.services.users.setQuotas('tight', { hard: { live_instances: 1 } });
  await setup(tight, 'tight', { max_size: 2, warmup_time_ms: 0, cooldown_time_ms: 0, policies: [POLICY] });
  const other = await setup(dev, 'other', { max_size: 2, warmup_time_ms: 0, cooldown_time_ms: 0, policies: [POLICY] });
  load = () => 1000;
  const mine = async () => (await instances()).filter((i) => i.name.startsWith('tight'));
  for (let k = 0; k < 3; k++) await second();
  assert.deepEqual(
    (await mine()).map((i) => [i.name, i.state]),
    [['tight-m', 'running']],
  );
  const otherGroup = (await instances()).find((i) => i.id === other.uuid)!.service_group_id!;
  assert.equal((await clonesOf(otherGroup)).length, 1, 'the other group scaled');
  load = () => 0;
});

test("with several hosts only the master's host decides; the others' CPU comes from what their agents published", async () => {
  const m = await setup(dev, 'spread', {
    max_size: 3,
    warmup_time_ms: 0,
    cooldown_time_ms: 60_000,
    policies: [POLICY],
  });
  const group = (await instances()).find((i) => i.id === m.uuid)!.service_group_id!;
  // the agent of another host, sharing the store: none of these VMs are its own, and their host says 900
  const asked: string[][] = [];
  const other = new AutoscaleController({
    services: Object.assign(Object.create(deps) as ControllerDeps, { hostId: 'another-host' }),
    log: pino({ level: 'silent' }),
    cpuMs: () => undefined,
    vms: () => [],
    timers: never,
    remoteCpu: async (ids) => {
      asked.push(ids);
      return new Map(ids.map((id) => [id, 900]));
    },
  });
  for (let k = 0; k < 4; k++) {
    now += 1000;
    await other.tick();
  }
  assert.ok(
    asked.some((ids) => ids.includes(m.uuid)),
    'it read the figures of the instances on other hosts',
  );
  assert.equal((await clonesOf(group)).length, 0, 'it never decides for a group whose master is on another host');
  load = (i) => (i.id === m.uuid ? 900 : 0);
  for (let k = 0; k < 3; k++) await second();
  assert.equal((await clonesOf(group)).length, 1, "the master's host decides");
  load = () => 0;
});
