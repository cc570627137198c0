/* eslint-disable @typescript-eslint/no-explicit-any -- API replies are JSON; the assertions check their shape. */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import pino from 'pino';
import { AutoscaleController } from '../../src/reconcile/autoscale.js';
import { Waker } from '../../src/reconcile/wake.js';
import type { InstanceRec, StatusPatch } from '../../src/store/types.js';
import { startHarness, type Harness } from '../helpers/harness.js';
import { simMachines } from '../helpers/sim-machines.js';
import { replyAsserts } from '../helpers/replies.js';

/**
 * Scale-to-zero over the real API and store with simulated VMs: the idle
 * clock (traffic set by the test, a test clock, passes driven by the test),
 * standby, and wakes through the Waker the gateway calls when a group has no
 * running instance. The same through the real gateway and real guests is in
 * test/vm/scale-to-zero.test.ts.
 */
let h: Harness;
let alice: string;
let scaler: AutoscaleController;
let waker: Waker;
let sim: ReturnType<typeof simMachines>;
let now = Date.parse('2026-01-01T00:00:00Z');
/** what the "data plane" saw, per instance id */
const traffic = new Map<string, { busy: number; lastActivity: number }>();

const { ok } = replyAsserts('instances');
/** the message of a refused create (a schema refusal or a refused entry) */
const refusal = (r: { status: number; body: any; text: string }): string => {
  assert.equal(r.body.status, 'error', r.text);
  return r.body.message ?? r.body.data?.instances?.[0]?.message ?? r.text;
};
const never = { setTimeout: () => null, clearTimeout: () => undefined };
const log = pino({ level: process.env.UNIHOST_TEST_LOG ?? 'silent' });

before(async () => {
  h = await startHarness({}, (s) => {
    sim = simMachines(s);
    waker = new Waker(s, log);
    scaler = new AutoscaleController({
      services: s,
      log,
      cpuMs: () => undefined,
      vms: () => [],
      timers: never,
      traffic: (groupId, id) => waker.traffic(groupId, traffic.get(id)),
    });
    return [sim, scaler];
  });
  h.daemon.services.clock = { now: () => now };
  alice = await h.user('alice');
  await h.image('app:latest');
});
after(async () => h.close());

const get = (id: string) => h.daemon.store.read((tx) => tx.instances.getAny(id));
const counts = () =>
  h.daemon.store.read(async (tx) => ({
    instances: (await tx.instances.all()).length,
    groups: (await tx.groups.all()).length,
  }));

async function create(name: string, extra: Record<string, unknown>) {
  const [m] = ok(
    await h.call('POST', '/v1/instances', alice, {
      name,
      image: 'app:latest',
      autostart: true,
      service_group: { services: [{ port: 443, handlers: ['http', 'tls'] }] },
      ...extra,
    }),
  );
  await h.until(async () => ((await get(m.uuid))?.state === 'running' ? true : undefined));
  return (await get(m.uuid))!;
}

async function autoscaleOf(i: InstanceRec) {
  return ok(await h.call('GET', '/v1/services/autoscale', alice, { uuid: i.service_group_id }), 'service_groups')[0];
}

describe('configuration', () => {
  test('features [scale-to-zero] configures min 0, max 1 and the default cooldown', async () => {
    const m = await create('stz-feature', { features: ['scale-to-zero'] });
    const c = await autoscaleOf(m);
    assert.equal(c.min_size, 0);
    assert.equal(c.max_size, 1);
    assert.equal(c.cooldown_time_ms, 1000);
    assert.equal(c.master.uuid, m.id);
  });

  test("the SDK's scale_to_zero object maps: policy on and its cooldown; the feature shows on the instance", async () => {
    const m = await create('stz-sdk', { scale_to_zero: { policy: 'on', cooldown_time_ms: 5000, stateful: false } });
    const c = await autoscaleOf(m);
    assert.equal(c.min_size, 0);
    assert.equal(c.cooldown_time_ms, 5000);
    assert.deepEqual(m.features, ['scale-to-zero']);
    const off = await create('stz-off', { scale_to_zero: { policy: 'off' } });
    assert.equal((await autoscaleOf(off)).status, 'unconfigured');
  });

  test("stateful: the SDK's stateful: true and features [scale-to-zero, stateful] both keep memory in standby; PATCH changes it", async () => {
    const a = await create('stz-stateful', { scale_to_zero: { policy: 'on', stateful: true } });
    assert.deepEqual(a.features, ['scale-to-zero', 'stateful']);
    const b = await create('stz-stateful-f', { features: ['scale-to-zero', 'stateful'] });
    assert.deepEqual(b.features, ['scale-to-zero', 'stateful']);
    assert.equal((await autoscaleOf(b)).min_size, 0);
    const patch = async (value: object) =>
      ok(await h.call('PATCH', '/v1/instances', alice, [{ uuid: b.id, prop: 'scale_to_zero', op: 'set', value }]));
    await patch({ policy: 'on', stateful: false });
    assert.deepEqual((await get(b.id))!.features, ['scale-to-zero']);
    await patch({ policy: 'on', stateful: true });
    assert.deepEqual((await get(b.id))!.features, ['scale-to-zero', 'stateful']);
    await patch({ policy: 'off' });
    assert.deepEqual((await get(b.id))!.features, []);
  });

  test('what cannot be honoured is refused with a message naming it, and nothing is created', async () => {
    const before = await counts();
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ features: ['stateful'] }, /'stateful'.*needs 'scale-to-zero'/],
      [{ scale_to_zero: { policy: 'off', stateful: true } }, /scale_to_zero\.stateful.*policy is 'off'/],
      [{ scale_to_zero: { policy: 'idle' } }, /scale_to_zero\.policy.*'idle'.*not supported/],
      [{ scale_to_zero: { notify_time_ms: 10 } }, /scale_to_zero\.notify_time_ms/],
      [{ scale_to_zero: { policy: 'off' }, features: ['scale-to-zero'] }, /'off' contradicts/],
      [{ scale_to_zero: { policy: 'sometimes' } }, /scale_to_zero\/policy|policy.*on, off, idle/],
      [{ scale_to_zero: { cooldown_time_ms: -1 } }, /cooldown_time_ms/],
      [{ scale_to_zero: { surprise: 1 } }, /surprise/],
      [{ scale_to_zero: {}, service_group: undefined }, /needs a 'service_group'/],
    ];
    for (const [extra, why] of cases) {
      const r = await h.call('POST', '/v1/instances', alice, {
        image: 'app:latest',
        service_group: { services: [{ port: 443, handlers: ['http', 'tls'] }] },
        ...extra,
      });
      assert.match(refusal(r), why, JSON.stringify(extra));
    }
    assert.deepEqual(await counts(), before);
  });
});

describe('idle master to standby, and the wake', () => {
  let m: InstanceRec;
  const pass = async (ms: number) => {
    now += ms;
    await scaler.tick();
  };

  before(async () => {
    m = await create('sleepy', { scale_to_zero: { cooldown_time_ms: 3000 } });
  });

  test('traffic keeps it running: an open connection, or a request within the cooldown', async () => {
    traffic.set(m.id, { busy: 1, lastActivity: 0 });
    await pass(10_000);
    assert.equal((await get(m.id))!.state, 'running');
    traffic.set(m.id, { busy: 0, lastActivity: now - 1000 });
    await pass(1000);
    assert.equal((await get(m.id))!.state, 'running');
  });

  test('no traffic for one cooldown: the platform stops it into standby with stop_reason 7', async () => {
    traffic.set(m.id, { busy: 0, lastActivity: now - 2000 });
    await pass(1000); // 3 s idle
    await h.until(async () => ((await get(m.id))!.state === 'standby' ? true : undefined));
    const r = ok(await h.call('GET', '/v1/instances', alice, { uuid: m.id }))[0];
    assert.equal(r.state, 'standby');
    assert.equal(r.stop_reason, 7);
  });

  test('a wake starts the same instance (uuid, IP, one more start) and resolves once it runs', async () => {
    const before = (await get(m.id))!;
    assert.deepEqual(await waker.wake(m.service_group_id!), { ok: true });
    const after = (await get(m.id))!;
    assert.equal(after.state, 'running');
    assert.equal(after.private_ip, before.private_ip);
    assert.equal(after.start_count, before.start_count + 1);
  });

  test('20 concurrent wakes share one start and all succeed', async () => {
    traffic.set(m.id, { busy: 0, lastActivity: 0 });
    await pass(10_000);
    await h.until(async () => ((await get(m.id))!.state === 'standby' ? true : undefined));
    const starts = (await get(m.id))!.start_count;
    const results = await Promise.all(Array.from({ length: 20 }, () => waker.wake(m.service_group_id!)));
    assert.ok(results.every((r) => r.ok));
    assert.equal((await get(m.id))!.start_count, starts + 1);
  });

  test('idle time starts when the woken master is ready and its held clients are let go', async () => {
    const g = m.service_group_id!;
    const standby = () => h.until(async () => ((await get(m.id))!.state === 'standby' ? true : undefined));
    const boot = (patch: StatusPatch) => h.daemon.store.tx((tx) => tx.instances.updateStatus(m.id, patch));
    traffic.set(m.id, { busy: 0, lastActivity: 0 });
    await pass(10_000);
    await standby();
    assert.ok((await waker.wake(g)).ok);
    // spawned 5 s ago and ready 5 s ago, as far as the record says; the woken
    // request was let go just now and the data plane's counters have not seen it yet
    await boot({ started_at: new Date(now - 5000).toISOString(), boot_time_us: 1000 });
    await pass(1000);
    assert.equal((await get(m.id))!.state, 'running', 'the released request is traffic');
    await pass(2000);
    await standby(); // one cooldown after the release
    assert.ok((await waker.wake(g)).ok);
    now += 10_000; // the release is long past...
    // ...but the boot was slow: spawned 6 s ago, ready 1 s ago
    await boot({ started_at: new Date(now - 6000).toISOString(), boot_time_us: 5_000_000 });
    await pass(0);
    assert.equal((await get(m.id))!.state, 'running', 'boot time is not idle time');
    await pass(2000);
    await standby();
    assert.ok((await waker.wake(g)).ok); // running again, as the next test expects
  });

  test('what the gateway does before it sends the woken request (its table catching up) is no idle time', async () => {
    const g = m.service_group_id!;
    traffic.set(m.id, { busy: 0, lastActivity: 0 });
    await pass(10_000);
    await h.until(async () => ((await get(m.id))!.state === 'standby' ? true : undefined));
    const states: string[] = [];
    const r = await waker.wake(g, async () => {
      // slow: ten cooldowns pass before the request can go
      for (let i = 0; i < 10; i++) {
        await pass(3000);
        states.push((await get(m.id))!.state);
      }
    });
    assert.ok(r.ok);
    assert.deepEqual(new Set(states), new Set(['running']), 'the caller is still held meanwhile');
    await pass(1000);
    assert.equal((await get(m.id))!.state, 'running', 'idle time counts from the release');
  });

  test('a held client keeps the master from standby', async () => {
    traffic.set(m.id, { busy: 0, lastActivity: 0 });
    sim.pause(true);
    const cfg = h.daemon.services.config.gateway.wake;
    cfg.timeoutMs = 400;
    try {
      await pass(10_000);
      await h.until(async () => ((await get(m.id))!.state === 'stopping' ? true : undefined));
      // the stop hangs (paused host); a wake now comes while the master is on its way to standby
      const held = waker.wake(m.service_group_id!);
      assert.equal(waker.held(m.service_group_id!), 1);
      await h.until(async () => ((await get(m.id))!.desired === 'running' ? true : undefined));
      // bounded: the host does nothing, so the hold ends after the timeout with a reason
      const r = await held;
      assert.equal(r.ok, false);
      assert.match((r as { why: string }).why, /did not start within 400 ms/);
    } finally {
      cfg.timeoutMs = 10_000;
      sim.pause(false);
    }
    // the host moves again: the start that came during the stop boots it
    const cur = (await get(m.id))!;
    await h.daemon.store.tx((tx) => tx.instances.updateStatus(m.id, { uptime_ms: cur.uptime_ms + 1 })); // a change: the simulation steps
    await h.until(async () => ((await get(m.id))!.state === 'running' ? true : undefined));
  });

  test('beyond maxHeldPerGroup a wake is refused at once', async () => {
    traffic.set(m.id, { busy: 0, lastActivity: 0 });
    await pass(10_000);
    await h.until(async () => ((await get(m.id))!.state === 'standby' ? true : undefined));
    const cfg = h.daemon.services.config.gateway.wake;
    cfg.maxHeldPerGroup = 2;
    try {
      const all = await Promise.all([1, 2, 3].map(() => waker.wake(m.service_group_id!)));
      assert.deepEqual(
        all.map((r) => r.ok),
        [true, true, false],
      );
      assert.match((all[2] as { why: string }).why, /2 requests are already waiting/);
    } finally {
      cfg.maxHeldPerGroup = 1000;
    }
  });

  test('a master stopped by its user is not woken by traffic; nor is a group without scale-to-zero', async () => {
    ok(await h.call('PUT', '/v1/instances/stop', alice, { uuid: m.id }));
    await h.until(async () => ((await get(m.id))!.state === 'stopped' ? true : undefined));
    assert.equal((await waker.wake(m.service_group_id!)).ok, false);
    assert.equal((await get(m.id))!.state, 'stopped');
    const plain = await create('plain', {});
    assert.equal((await waker.wake(plain.service_group_id!)).ok, false);
  });

  test('a master deleted while a wake waits ends the wake with the reason; other groups are unaffected', async () => {
    const other = await create('other', { features: ['scale-to-zero'] });
    const x = await create('doomed', { features: ['scale-to-zero'] });
    traffic.set(x.id, { busy: 0, lastActivity: 0 });
    traffic.set(other.id, { busy: 1, lastActivity: 0 });
    await pass(10_000);
    await h.until(async () => ((await get(x.id))!.state === 'standby' ? true : undefined));
    sim.pause(true);
    try {
      const w = waker.wake(x.service_group_id!);
      await h.until(async () => ((await get(x.id))!.state === 'starting' ? true : undefined));
      ok(await h.call('DELETE', '/v1/instances', alice, { uuid: x.id }));
      const r = await w;
      assert.equal(r.ok, false);
      assert.match((r as { why: string }).why, /deleted/);
    } finally {
      sim.pause(false);
    }
    assert.equal((await get(other.id))!.state, 'running');
  });
});
