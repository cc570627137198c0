/**
 * The machine controller's logic with a fake driver and a fake clock (real
 * SQLite): boot, readiness, boot timeout and failure, stop, drain and stop
 * escalation, deletion. Restart policies, adoption and volumes are in
 * machines-restart.test.ts; real VMs are in test/vm/.
 */
import { afterEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync } from 'node:fs';
import { advance, closeWorlds, create, logText, rec, running, settle, world } from './testing/machine-world.js';
import { hostClaim, registerHost } from '../services/hosts.js';

afterEach(closeWorlds);

describe('boot', () => {
  test('autostart boots with the image defaults; ready → running with measured timings', async () => {
    const w = await world();
    const id = await create(w, { env: { A: 'b c' } });
    const spec = w.d.specs.at(-1)!;
    assert.equal(spec.id, id);
    assert.equal(spec.memoryMb, 128);
    assert.match(spec.cmdline, /env\.vars=\[ "A=b c" \] -- default$/);
    let r = await rec(w, id);
    assert.equal(r.state, 'starting');
    assert.equal(r.start_count, 1);
    assert.equal(r.started_at, new Date(w.time.now).toISOString());
    await advance(w, 3_000);
    w.d.ready(id);
    await settle(w);
    r = await rec(w, id);
    assert.equal(r.state, 'running');
    assert.equal(r.boot_time_us, 3_000_000);
  });

  test('instance args replace the image default args', async () => {
    const w = await world();
    await create(w, { args: ['x', 'y z'] });
    assert.match(w.d.specs.at(-1)!.cmdline, /(^| )-- x "y z"$/);
  });

  test('an image without files → stopped, stop_reason 4, a log line says why', async () => {
    const w = await world();
    await w.s.store.tx(async (tx) => {
      const digest = `sha256:${'ab'.repeat(32)}`;
      await tx.images.upsert({
        digest,
        namespace: 'official',
        size_in_bytes: 1,
        initrd: false,
        args: '',
        kernel_args: '',
        min_memory_mb: 0,
        created_at: new Date(w.time.now).toISOString(),
      });
      await tx.images.setTag({ ref: 'empty:latest', namespace: 'official', digest });
    });
    const id = await create(w, { image: 'empty:latest' });
    const r = await rec(w, id);
    assert.equal(r.state, 'stopped');
    assert.equal(r.restart_next_at, null, 'stopped for good');
    assert.equal(r.stop_reason, 4);
    assert.equal(r.exit_code, null);
    assert.equal(r.stop_code, null);
    assert.equal(w.d.calls.filter((c) => c.startsWith('start')).length, 0);
    assert.match(logText(w, id), /\[unihost\] the VM could not be started: .+/);
  });

  test('QEMU failing before the guest runs → 4 with its error in the log; a kernel crash with output → 1', async () => {
    const w = await world();
    const bad = await create(w, { restart_policy: 'always' });
    w.d.exit(bad, [], 1, 'qemu-system-x86_64: warning: foo\nqemu: invalid kernel header\n');
    await settle(w);
    const r = await rec(w, bad);
    assert.deepEqual([r.state, r.restart_next_at, r.stop_reason, r.stop_code], ['stopped', null, 4, null]);
    assert.match(logText(w, bad), /\[unihost\] the VMM failed: .*invalid kernel header/);
    const crash = await create(w);
    w.d.console.set(crash, '[    0.5] Kernel panic - not syncing: VFS: Unable to mount root fs\n');
    w.d.exit(crash, [], 1, 'qemu-system-x86_64: warning: foo\n');
    await settle(w);
    const c = await rec(w, crash);
    assert.deepEqual([c.stop_reason, c.stop_code], [1, 1], 'EXP, initlvl 0');
  });

  test('a guest that never signals ready is stopped forcefully after the boot timeout (20)', async () => {
    const w = await world({ bootTimeoutMs: 30_000 });
    const id = await create(w);
    await advance(w, 29_999);
    assert.equal((await rec(w, id)).state, 'starting');
    assert.ok(!w.d.calls.includes(`kill ${id}`));
    await advance(w, 1);
    assert.ok(w.d.calls.includes(`kill ${id}`));
    const r = await rec(w, id);
    assert.equal(r.state, 'stopped');
    assert.equal(r.stop_reason, 20);
    assert.equal(r.exit_code, null);
    assert.equal(r.stop_code, null);
    assert.match(logText(w, id), /did not signal ready within 30 s/);
  });
});

describe('stop', () => {
  test('graceful stop: stop request, guest reports → 15 with exit code, uptime counted', async () => {
    const w = await world();
    const id = await running(w);
    await advance(w, 60_000);
    await w.s.instances.stop(w.user, { uuid: id }, {});
    await settle(w);
    assert.ok(w.d.calls.includes(`stop ${id}`));
    assert.equal((await rec(w, id)).state, 'stopping');
    w.d.exit(id, ['INIT', 'READY', 'STOP', 'EXIT 0', 'SHUTDOWN']);
    await settle(w);
    const r = await rec(w, id);
    assert.deepEqual([r.state, r.stop_reason, r.exit_code, r.stop_code], ['stopped', 15, 0, 0]);
    assert.equal(r.uptime_ms, 60_000);
    assert.equal(r.stopped_at, new Date(w.time.now).toISOString());
    assert.deepEqual(r.runtime, {});
  });

  test('the gateway lets go of a stopping instance before its VM is stopped or killed', async () => {
    let calls: string[] = [];
    const w = await world({
      beforeStop: async (id) => {
        calls = [...w.d.calls];
        calls.push(`gateway ${id}`);
      },
    });
    const a = await running(w);
    await w.s.instances.stop(w.user, { uuid: a }, { force: true });
    await settle(w);
    assert.deepEqual(calls.slice(-1), [`gateway ${a}`]);
    assert.ok(!calls.includes(`kill ${a}`), 'not killed before the gateway let go');
    assert.ok(w.d.calls.includes(`kill ${a}`));
    const b = await running(w);
    await w.s.instances.stop(w.user, { uuid: b }, {});
    await settle(w);
    assert.ok(!calls.includes(`stop ${b}`) && calls.includes(`gateway ${b}`), 'not stopped before the gateway let go');
    assert.ok(w.d.calls.includes(`stop ${b}`));
  });

  test('force → kill → 28', async () => {
    const w = await world();
    const id = await running(w);
    await w.s.instances.stop(w.user, { uuid: id }, { force: true });
    await settle(w);
    assert.ok(w.d.calls.includes(`kill ${id}`));
    assert.ok(!w.d.calls.includes(`stop ${id}`));
    const r = await rec(w, id);
    assert.deepEqual([r.state, r.stop_reason, r.exit_code, r.stop_code], ['stopped', 28, null, null]);
  });

  test('a failing reconcile is logged and retried after a back-off (at most 1 s for the first failure)', async () => {
    const w = await world();
    const id = await running(w);
    w.d.failKill = true;
    await w.s.instances.stop(w.user, { uuid: id }, { force: true });
    await settle(w);
    assert.deepEqual(w.errors, ['machine reconcile failed']);
    assert.equal((await rec(w, id)).state, 'stopping');
    await advance(w, 1_000);
    const r = await rec(w, id);
    assert.deepEqual([r.state, r.stop_reason], ['stopped', 28]);
    assert.equal(w.d.calls.filter((c) => c === `kill ${id}`).length, 2);
  });

  test('a guest that does not shut down within stopTimeoutMs is killed → 28', async () => {
    const w = await world({ stopTimeoutMs: 8_000 });
    const id = await running(w);
    await w.s.instances.stop(w.user, { uuid: id }, {});
    await advance(w, 7_999);
    assert.ok(!w.d.calls.includes(`kill ${id}`));
    assert.equal((await rec(w, id)).state, 'stopping');
    await advance(w, 1);
    assert.ok(w.d.calls.includes(`kill ${id}`));
    const r = await rec(w, id);
    assert.deepEqual([r.state, r.stop_reason], ['stopped', 28]);
    assert.match(logText(w, id), /did not shut down within 8 s/);
  });

  test('drain_timeout_ms: draining until the deadline, then a graceful stop', async () => {
    const w = await world();
    const id = await running(w);
    await w.s.instances.stop(w.user, { uuid: id }, { drain_timeout_ms: 4_000 });
    await advance(w, 3_999);
    assert.equal((await rec(w, id)).state, 'draining');
    assert.ok(!w.d.calls.includes(`stop ${id}`));
    await advance(w, 1);
    assert.equal((await rec(w, id)).state, 'stopping');
    assert.ok(w.d.calls.includes(`stop ${id}`));
    w.d.exit(id, ['READY', 'STOP', 'EXIT 0', 'SHUTDOWN']);
    await settle(w);
    assert.equal((await rec(w, id)).stop_reason, 15);
  });

  test('a start during the stop: the stop is reported as a user stop (15), then the instance boots again', async () => {
    const w = await world();
    const id = await running(w, { restart_policy: 'never' });
    await w.s.instances.stop(w.user, { uuid: id }, {});
    await settle(w);
    await w.s.instances.start(w.user, { uuid: id }, 0);
    await settle(w);
    assert.equal((await rec(w, id)).state, 'stopping');
    w.d.exit(id, ['READY', 'STOP', 'EXIT 0', 'SHUTDOWN']);
    await settle(w);
    const r = await rec(w, id);
    assert.equal(w.d.specs.length, 2, 'booted again');
    assert.deepEqual([r.state, r.desired, r.start_count, r.restart_count], ['starting', 'running', 2, 0]);
  });

  test('delete of a running instance → driver.delete, runtime dir gone', async () => {
    const w = await world();
    const id = await running(w);
    mkdirSync(w.s.paths.instance(id), { recursive: true });
    await w.s.instances.delete(w.user, { uuid: id });
    await settle(w);
    assert.ok(w.d.calls.includes(`delete ${id}`));
    assert.ok(!w.d.running.has(id));
    assert.ok(!existsSync(w.s.paths.instance(id)));
  });
});

test("an instance on another host: its changes never touch this host's network; one that ran here has its tap removed", async () => {
  const detached: string[] = [];
  const w = await world({
    network: {
      attach: async () => ({
        tap: 'uhtap',
        mac: '02:00:00:00:00:02',
        netdevIp: '10.0.0.2/24',
        admitted: Promise.resolve(),
      }),
      detach: async (id) => void detached.push(id),
      park: async () => undefined,
    },
  });
  const here = await running(w);
  // a second live host; this one cordoned: the next instance is placed there
  await registerHost(w.s.store, { ...hostClaim(w.s.config), name: 'other-host' }, w.s.clock);
  await w.s.hosts.mark('test-host', 'cordoned');
  const [e] = await w.s.instances.create(w.user, { image: 'app:latest', autostart: true });
  const there = e!.uuid as string;
  await settle(w);
  assert.ok(!w.d.running.has(there), 'not booted here');
  await w.s.instances.update(w.user, { uuid: there }, { prop: 'tags', op: 'set', value: ['x'] });
  await w.s.instances.delete(w.user, { uuid: there });
  await settle(w);
  assert.deepEqual(detached, [], 'no tap removed for an instance of another host (its create, change and delete)');
  await w.s.instances.delete(w.user, { uuid: here });
  await settle(w);
  assert.deepEqual(detached, [here]);
});

test("a boot's ready mark whose transaction failed is recorded by the retried reconcile, not lost until the boot timeout", async () => {
  const w = await world({ bootTimeoutMs: 60_000 });
  const id = await create(w);
  assert.ok(w.d.running.has(id));
  // the ready signal's transaction fails once, as one that keeps losing serialization conflicts does
  const tx = w.s.store.tx.bind(w.s.store);
  let failures = 1;
  w.s.store.tx = ((f, o) =>
    failures-- > 0
      ? Promise.reject(new Error('the change kept conflicting with concurrent changes (10 attempts)'))
      : tx(f, o)) as typeof w.s.store.tx;
  w.d.ready(id);
  await settle(w);
  assert.deepEqual(w.errors, ['machine reconcile failed']);
  assert.equal((await rec(w, id)).state, 'starting');
  await advance(w, 1_000);
  const r = await rec(w, id);
  assert.equal(r.state, 'running', 'recorded at the retry, long before the 60 s boot timeout');
  assert.ok(r.boot_time_us !== null);
});

test("a boot's marks that come while the lease is not held are recorded once it is held again, not lost until the boot timeout", async () => {
  let held = true;
  const w = await world({ bootTimeoutMs: 60_000, lease: { held: () => held } });
  const id = await create(w);
  assert.ok(w.d.running.has(id));
  held = false; // fenced for a moment: the agent's loop saw its renewals late
  w.d.ready(id);
  await settle(w);
  assert.equal((await rec(w, id)).state, 'starting', 'nothing recorded while fenced');
  held = true;
  w.c.regained();
  await settle(w);
  const r = await rec(w, id);
  assert.equal(r.state, 'running', 'the ready mark kept while fenced is recorded when the lease is held again');
  assert.ok(r.boot_time_us !== null);
});

test("a boot's earlier marks go in the transaction of its booted mark; on their own when it is a second late", async () => {
  const w = await world({ bootTimeoutMs: 60_000 });
  const id = await create(w);
  let commits = 0;
  const tx = w.s.store.tx.bind(w.s.store);
  w.s.store.tx = ((f, o) => (commits++, tx(f, o))) as typeof w.s.store.tx;
  await advance(w, 100);
  w.d.mark(id, 'loaded');
  await advance(w, 200);
  w.d.mark(id, 'init');
  await advance(w, 300);
  assert.equal((await rec(w, id)).vmm_load_time_us, null, 'held for the booted mark');
  assert.equal(commits, 0);
  w.d.ready(id);
  await settle(w);
  let r = await rec(w, id);
  assert.equal(r.state, 'running');
  assert.deepEqual([r.vmm_load_time_us, r.vmm_ready_time_us, r.boot_time_us], [100_000, 300_000, 600_000]);
  assert.equal(commits, 1, 'the three marks in one transaction');

  const slow = await create(w);
  commits = 0;
  w.d.mark(slow, 'loaded');
  await advance(w, 999);
  assert.equal((await rec(w, slow)).vmm_load_time_us, null);
  await advance(w, 1);
  r = await rec(w, slow);
  assert.deepEqual([r.state, r.vmm_load_time_us], ['starting', 0], 'recorded on its own a second later');
  assert.equal(commits, 1);
  await advance(w, 500);
  w.d.ready(slow);
  await settle(w);
  r = await rec(w, slow);
  assert.deepEqual([r.state, r.vmm_load_time_us, r.boot_time_us], ['running', 0, 1_500_000]);
});

test("a boot's held marks are recorded before its end", async () => {
  const w = await world({ bootTimeoutMs: 60_000 });
  const id = await create(w);
  await advance(w, 50);
  w.d.mark(id, 'loaded');
  w.d.exit(id, [], 1);
  await settle(w);
  const r = await rec(w, id);
  assert.equal(r.state, 'stopped');
  assert.equal(r.vmm_load_time_us, 50_000);
});
