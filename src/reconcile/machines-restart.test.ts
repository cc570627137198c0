/**
 * The machine controller's logic with a fake driver and a fake clock (real
 * SQLite): restart policies and their back-off, daemon restarts (adoption,
 * VMs nothing tracks), volumes. Boot and stop are in machines.test.ts.
 */
import { afterEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { err } from '../errors.js';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  advance,
  close,
  closeWorlds,
  create,
  logText,
  rec,
  running,
  settle,
  world,
  type World,
  overwrite,
} from './testing/machine-world.js';

afterEach(closeWorlds);

describe('restart policy', () => {
  const exitLines = (code: number) => ['INIT', 'READY', `EXIT ${code}`, 'SHUTDOWN'];

  test('never: the app exits → stopped for good', async () => {
    const w = await world();
    const id = await running(w);
    w.d.exit(id, exitLines(3));
    await advance(w, 600_000);
    const r = await rec(w, id);
    assert.deepEqual(
      [r.state, r.restart_next_at, r.stop_reason, r.exit_code, r.restart_count],
      ['stopped', null, 3, 3, 0],
    );
    assert.equal(w.d.specs.length, 1);
  });

  test('always: back-off immediate, 5 s, 10 s, 20 s, 40 s … capped at 300 s', async () => {
    const w = await world();
    const id = await running(w, { restart_policy: 'always' });
    const delays = [0, 5_000, 10_000, 20_000, 40_000, 80_000, 160_000, 300_000, 300_000];
    for (const [n, delay] of delays.entries()) {
      const boots = w.d.specs.length;
      const crashAt = w.time.now;
      w.d.exit(id, exitLines(0));
      await settle(w);
      let r = await rec(w, id);
      assert.equal(r.restart_attempt, n + 1, `attempt after exit ${n + 1}`);
      // counted when the restart happens, not while it is only scheduled
      assert.equal(r.restart_count, delay > 0 ? n : n + 1);
      if (delay > 0) {
        assert.equal(r.state, 'stopped');
        assert.equal(r.desired, 'running');
        assert.equal(r.restart_next_at, new Date(crashAt + delay).toISOString(), `delay of restart ${n + 1}`);
        const view = await w.s.instances.get(w.user, { uuid: id });
        assert.deepEqual(view.restart, { attempt: n + 1, next_at: r.restart_next_at });
        await advance(w, delay - 1);
        assert.equal(w.d.specs.length, boots, `not restarted before ${delay} ms`);
        await advance(w, 1);
      }
      assert.equal(w.d.specs.length, boots + 1, `restart ${n + 1} booted`);
      r = await rec(w, id);
      assert.equal(r.state, 'starting');
      assert.equal(r.restart_next_at, null);
      assert.equal(r.start_count, n + 2);
      assert.equal(r.restart_count, n + 1);
      w.d.ready(id);
      await advance(w, 1_000); // runs 1 s: not yet healthy
    }
  });

  test('a restart that loses to concurrent changes is tried again, not given up', async () => {
    const w = await world();
    const id = await running(w, { restart_policy: 'always' });
    w.d.exit(id, exitLines(0)); // the first restart is at once
    await settle(w);
    w.d.ready(id);
    await advance(w, 1_000);
    w.d.exit(id, exitLines(0)); // the second after 5 s
    await settle(w);
    assert.equal((await rec(w, id)).state, 'stopped');
    const boots = w.d.specs.length;
    // the store refuses the next three transactions as a serialization conflict that outlasted its budget
    const tx = w.s.store.tx.bind(w.s.store);
    let refusals = 3;
    w.s.store.tx = ((fn, o) =>
      refusals-- > 0
        ? Promise.reject(err('UH_CONFLICT', 'the change kept conflicting with concurrent changes'))
        : tx(fn, o)) as typeof w.s.store.tx;
    await advance(w, 5_000);
    assert.equal(w.d.specs.length, boots, 'refused: not booted yet');
    // the reconcile's retries (1 s, 2 s, 4 s ... with jitter)
    for (let s = 0; s < 60 && w.d.specs.length === boots; s++) await advance(w, 1_000);
    assert.ok(refusals < 0, 'every refusal was met, and then transactions went through');
    const r = await rec(w, id);
    assert.equal(w.d.specs.length, boots + 1, 'restarted once the store took it');
    assert.deepEqual([r.state, r.restart_count], ['starting', 2]);
    assert.doesNotMatch(logText(w, id), /restart by policy failed/);
  });

  test('a restart by policy passes host admission: on a full host it is given up, with the reason in the log', async () => {
    // room for two VMs of 128 MB (+48 MB overhead each) in a 400 MB budget, no CPU limit
    const w = await world({ capacity: { memoryMb: 400, vcpusPerCore: 0 } });
    const id = await running(w, { restart_policy: 'always' });
    w.d.exit(id, exitLines(0)); // attempt 1: immediate
    await settle(w);
    w.d.ready(id);
    await settle(w);
    w.d.exit(id, exitLines(0)); // attempt 2: in 5 s
    await settle(w);
    assert.deepEqual([(await rec(w, id)).state, (await rec(w, id)).desired], ['stopped', 'running']);
    // meanwhile two other instances take the host's room
    await running(w);
    await running(w);
    const boots = w.d.specs.length;
    await advance(w, 5_000);
    const r = await rec(w, id);
    // given up: no restart is due (the user's last command, start, stays what it was)
    assert.deepEqual([r.state, r.desired, r.restart_next_at], ['stopped', 'running', null]);
    assert.equal(w.d.specs.length, boots, 'not booted');
    assert.match(logText(w, id), /restart by policy failed: host is full: starting needs 176 MB/);
  });

  test('10 s of healthy running ends the sequence; the next exit restarts at once', async () => {
    const w = await world();
    const id = await running(w, { restart_policy: 'always' });
    w.d.exit(id, exitLines(0)); // attempt 1, immediate
    await settle(w);
    w.d.ready(id);
    await settle(w);
    w.d.exit(id, exitLines(0)); // attempt 2, 5 s
    await advance(w, 5_000);
    assert.equal((await rec(w, id)).state, 'starting');
    await advance(w, 2_000); // boot takes 2 s
    w.d.ready(id);
    await advance(w, 9_999);
    assert.equal((await rec(w, id)).restart_attempt, 2, 'still in the sequence after 9.999 s running');
    await advance(w, 1);
    let r = await rec(w, id);
    assert.equal(r.restart_attempt, 0, 'healthy after 10 s running');
    assert.equal(r.restart_count, 2);
    const boots = w.d.specs.length;
    w.d.exit(id, exitLines(0));
    await settle(w);
    r = await rec(w, id);
    assert.equal(w.d.specs.length, boots + 1, 'immediate restart');
    assert.equal(r.restart_attempt, 1);
    assert.equal(r.restart_count, 3);
  });

  /** An `always` instance that exited twice: its second restart waits for a back-off delay. */
  async function inBackoff() {
    const w = await world();
    const id = await running(w, { restart_policy: 'always' });
    w.d.exit(id, exitLines(0));
    await settle(w);
    w.d.ready(id);
    await settle(w);
    w.d.exit(id, exitLines(0));
    await settle(w);
    return { w, id };
  }

  test('a manual start aborts the back-off and boots at once', async () => {
    const { w, id } = await inBackoff();
    assert.ok((await rec(w, id)).restart_next_at);
    const boots = w.d.specs.length;
    await w.s.instances.start(w.user, { uuid: id }, 0);
    await settle(w);
    assert.equal(w.d.specs.length, boots + 1);
    const r = await rec(w, id);
    assert.deepEqual([r.state, r.restart_attempt, r.restart_next_at], ['starting', 0, null]);
    await advance(w, 10_000);
    assert.equal(w.d.specs.length, boots + 1, 'the old back-off timer does not boot again');
  });

  test('a manual stop aborts the back-off: no restart later', async () => {
    const { w, id } = await inBackoff();
    const boots = w.d.specs.length;
    await w.s.instances.stop(w.user, { uuid: id }, {});
    await advance(w, 600_000);
    assert.equal(w.d.specs.length, boots);
    const r = await rec(w, id);
    assert.deepEqual([r.state, r.desired, r.restart_attempt, r.restart_next_at], ['stopped', 'stopped', 0, null]);
  });

  test('a user stop never restarts, not even with always', async () => {
    const w = await world();
    const id = await running(w, { restart_policy: 'always' });
    await w.s.instances.stop(w.user, { uuid: id }, {});
    await settle(w);
    w.d.exit(id, ['READY', 'STOP', 'EXIT 0', 'SHUTDOWN']);
    await advance(w, 60_000);
    const r = await rec(w, id);
    assert.deepEqual([r.state, r.stop_reason, r.restart_count], ['stopped', 15, 0]);
    assert.equal(w.d.specs.length, 1);
  });

  test('on-failure: crash and non-zero exit restart, exit 0 does not', async () => {
    const w = await world();
    const id = await running(w, { restart_policy: 'on-failure' });
    w.d.exit(id, ['INIT', 'READY'], 1); // kernel panic
    await settle(w);
    let r = await rec(w, id);
    assert.equal(r.restart_count, 1);
    assert.equal(w.d.specs.length, 2, 'a crash restarts at once');
    w.d.ready(id);
    await settle(w);
    w.d.exit(id, exitLines(2));
    await advance(w, 5_000);
    assert.equal(w.d.specs.length, 3, 'non-zero exit restarts');
    w.d.ready(id);
    await settle(w);
    w.d.exit(id, exitLines(0));
    await advance(w, 600_000);
    r = await rec(w, id);
    assert.equal(w.d.specs.length, 3, 'exit 0 is no failure');
    assert.deepEqual(
      [r.state, r.restart_next_at, r.stop_reason, r.exit_code, r.restart_count],
      ['stopped', null, 3, 0, 2],
    );
  });

  test('a crash during boot: stop_code from the ERROR line; always restarts it', async () => {
    const w = await world();
    const once = await create(w);
    w.d.exit(once, ['INIT', 'ERROR 19 no disk'], 1);
    await settle(w);
    const r = await rec(w, once);
    assert.deepEqual([r.state, r.stop_reason, r.stop_code], ['stopped', 1, 1245441]);
    const id = await create(w, { restart_policy: 'always' });
    w.d.exit(id, ['INIT', 'ERROR 19 no disk'], 1);
    await settle(w);
    assert.equal((await rec(w, id)).restart_count, 1);
    assert.equal(w.d.specs.filter((s) => s.id === id).length, 2);
  });
});

describe('daemon restart', () => {
  test('a running VM is adopted; a vanished one is stopped with its reason', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'unihost-mc-'));
    const w1 = await world({}, dir);
    const a = await running(w1);
    const b = await running(w1);
    const pidA = (await rec(w1, a)).runtime.pid as number;
    await close(w1);
    // only `a`'s VM survived the daemon's absence
    const w2 = await world({ alive: [pidA] }, dir);
    await settle(w2);
    assert.ok(w2.d.calls.includes(`adopt ${a}`));
    assert.ok(w2.d.calls.includes(`adopt ${b}`));
    assert.equal((await rec(w2, a)).state, 'running');
    // the adopted VM's control channel is replayed: the boot's timings stay
    const bootTime = (await rec(w2, a)).boot_time_us;
    w2.time.now += 5_000;
    w2.d.ready(a);
    await settle(w2);
    assert.equal((await rec(w2, a)).boot_time_us, bootTime);
    const rb = await rec(w2, b);
    assert.equal(rb.state, 'stopped');
    assert.equal(rb.stop_reason, 0, 'gone without a trace: unknown');
    assert.match(logText(w2, b), /\[unihost\] the VM \(pid \d+\) ended while the daemon was down/);
    await w2.s.instances.stop(w2.user, { uuid: a }, {});
    await settle(w2);
    assert.ok(w2.d.calls.includes(`stop ${a}`));
  });

  test('VMs the store does not record are killed at start; the boot of a starting instance repeats', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'unihost-mc-'));
    const w1 = await world({}, dir);
    const a = await running(w1);
    const pidA = (await rec(w1, a)).runtime.pid as number;
    const b = await create(w1);
    // crash window: the VM of `b` was spawned but its pid never stored
    await w1.s.store.tx((tx) => overwrite(tx, b, { runtime: {}, state: 'starting', desired: 'running' }));
    await close(w1);
    const deleted = '00000000-0000-4000-8000-000000000001';
    const w2 = await world(
      {
        alive: [pidA],
        host: [
          { id: a, pid: pidA },
          { id: a, pid: 7001 }, // a duplicate of a tracked instance
          { id: b, pid: 7002 }, // spawned, pid not stored
          { id: deleted, pid: 7003 }, // deleted, not yet killed
        ],
      },
      dir,
    );
    await settle(w2);
    assert.deepEqual(
      w2.d.calls.filter((c) => c.startsWith('killStray')),
      ['killStray 7001', 'killStray 7002', 'killStray 7003'],
    );
    assert.ok(!w2.d.calls.includes(`killStray ${pidA}`), 'the recorded VM is adopted, not killed');
    const ia = w2.d.calls.indexOf('killStray 7002');
    assert.ok(ia < w2.d.calls.indexOf(`start ${b}`), 'the stray is gone before the instance boots again');
    assert.equal((await rec(w2, a)).state, 'running');
    assert.match(logText(w2, b), /\[unihost\] killed a VM the store does not record \(pid 7002\)/);
  });
});

describe('daemon restart during a stop without a VM (found by test/crash)', () => {
  test('a start acknowledged during the stop survives the restart: the instance boots; a plain stop ends as a user stop', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'unihost-mc-'));
    const w1 = await world({}, dir);
    const a = await create(w1);
    const b = await create(w1);
    // both were stopped before any VM was spawned; `a` got a start afterwards (acknowledged)
    for (const id of [a, b]) {
      await w1.s.store.tx((tx) =>
        overwrite(tx, id, {
          state: 'stopping',
          desired: id === a ? 'running' : 'stopped',
          stop_request: { force: false, drain_until: null, by: 'user' },
          runtime: {},
        }),
      );
    }
    await close(w1);
    const w2 = await world({}, dir);
    await settle(w2);
    assert.ok(w2.d.running.has(a), 'the acknowledged start is kept: it boots');
    assert.equal((await rec(w2, a)).desired, 'running');
    const rb = await rec(w2, b);
    assert.equal(rb.state, 'stopped');
    assert.equal(rb.stop_reason, 15, 'a user stop, not an unknown end');
  });
});

describe('volumes', () => {
  /** A persistent volume with a formatted image (the boot checks it), available. */
  async function volume(w: World): Promise<string> {
    const { uuid } = await w.s.volumes.create(w.user, { size_mb: 8 });
    await w.volumes.format(uuid, 8);
    await w.s.store.tx((tx) => tx.volumes.update(uuid, { state: 'available' }));
    return uuid;
  }
  const vol = async (w: World, id: string) => (await w.s.store.read((tx) => tx.volumes.getAny(id)))!;

  test('stopped while its volume is still being formatted: stopped, not stuck in stopping', async () => {
    const w = await world();
    const id = await create(w, { volumes: [{ size_mb: 16, at: '/data' }] });
    assert.equal((await rec(w, id)).state, 'starting', 'the boot waits for the volume');
    assert.ok(!w.d.running.has(id));
    await w.s.instances.stop(w.user, { uuid: id }, {});
    await settle(w);
    const r = await rec(w, id);
    assert.equal(r.state, 'stopped');
    assert.equal(r.stop_reason, 15);
    assert.equal(r.stop_request, null);
    assert.ok(!w.d.calls.includes(`start ${id}`));
  });

  test('deleted while QEMU spawns: its persistent volume ends available, not mounted; the VM is killed', async () => {
    const w = await world();
    const v = await volume(w);
    const [e] = await w.s.instances.create(w.user, { image: 'app:latest' });
    const id = e!.uuid as string;
    await w.s.volumes.attach(w.user, { uuid: v }, { attach_to: { uuid: id }, at: '/data' });
    w.d.beforeStart = async () => {
      await w.s.instances.delete(w.user, { uuid: id });
    };
    await w.s.instances.start(w.user, { uuid: id }, 0);
    await settle(w);
    assert.ok(w.d.calls.includes(`start ${id}`) && w.d.calls.includes(`delete ${id}`));
    assert.ok(!w.d.running.has(id));
    const r = await vol(w, v);
    assert.equal(r.instance_id, null);
    assert.equal(r.state, 'available');
  });

  test("a deleted instance's volume stays unavailable until its VM is dead", async () => {
    const w = await world();
    const v = await volume(w);
    const [e] = await w.s.instances.create(w.user, { image: 'app:latest' });
    const id = e!.uuid as string;
    await w.s.volumes.attach(w.user, { uuid: v }, { attach_to: { uuid: id }, at: '/data' });
    await w.s.instances.start(w.user, { uuid: id }, 0);
    await settle(w);
    w.d.ready(id);
    await settle(w);
    assert.equal((await vol(w, v)).state, 'mounted');
    // the delete commits; the controller has not killed the VM yet: what does another tenant see?
    let seen: { instance: string | null; state: string; attach: string } | null = null;
    w.d.beforeDelete = async () => {
      const r = await vol(w, v);
      const [other] = await w.s.instances.create(w.user, { image: 'app:latest' });
      const attach = await w.s.volumes
        .attach(w.user, { uuid: v }, { attach_to: { uuid: other!.uuid as string }, at: '/v' })
        .then(
          () => 'attached',
          (e: Error) => e.message,
        );
      seen = { instance: r.instance_id, state: r.state, attach };
    };
    await w.s.instances.delete(w.user, { uuid: id });
    await settle(w);
    assert.ok(w.d.calls.includes(`delete ${id}`));
    const name = (await vol(w, v)).name;
    // not available (nor attachable) while the VM may still write to it
    assert.deepEqual(seen, { instance: null, state: 'mounted', attach: `volume '${name}' is mounted, not available` });
    assert.equal((await vol(w, v)).state, 'available', 'released once the VM is gone');
  });
});
