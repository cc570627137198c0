/**
 * The machine controller's logic with a fake driver and a fake clock (real
 * SQLite): back-off sequence, restart policies, drain, stop escalation, boot
 * timeout and failure, deletion, adoption. Real VMs are in test/vm/.
 */
import { afterEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DEFAULTS, type Config } from '../config.js';
import { ConsoleLog } from '../machines/console-log.js';
import type { MachineDriver, MachineEvent, MachineRuntime, MachineSpec } from '../machines/driver.js';
import { parseControl } from '../machines/stop-info.js';
import { createServices, type Services } from '../services/index.js';
import { SqliteStore } from '../store/sqlite/index.js';
import type { InstanceRec, UserRec } from '../store/types.js';
import type { TimerApi } from './engine.js';
import { MachineController } from './machines.js';
import { MemoryVolumes } from '../volumes/memory.js';

/** A clock and timers that only move when the test says so. */
class FakeTime implements TimerApi {
  now = Date.parse('2030-01-01T00:00:00.000Z');
  private seq = 0;
  readonly pending = new Map<number, { at: number; fn: () => void }>();

  setTimeout(fn: () => void, ms: number): unknown {
    const id = ++this.seq;
    this.pending.set(id, { at: this.now + ms, fn });
    return id;
  }

  clearTimeout(t: unknown): void {
    this.pending.delete(t as number);
  }

  /** The earliest pending timer, if any fires by `until`. */
  next(until: number): [number, { at: number; fn: () => void }] | undefined {
    let best: [number, { at: number; fn: () => void }] | undefined;
    for (const e of this.pending) if (e[1].at <= until && (!best || e[1].at < best[1].at)) best = e;
    return best;
  }
}

/** Records what the controller asks; the test plays the VM's part. */
class FakeDriver implements MachineDriver {
  readonly name = 'fake';
  readonly calls: string[] = [];
  readonly specs: MachineSpec[] = [];
  readonly running = new Set<string>();
  /** pids `adopt` reports alive */
  readonly alive = new Set<number>();
  /** VMs running on the "host" that `scan` reports */
  readonly host: { id: string; pid: number }[] = [];
  private pid = 1000;

  constructor(
    private readonly time: FakeTime,
    private readonly onEvent: (id: string, ev: MachineEvent) => void,
  ) {}

  /** runs inside `start`, before the VM "spawns" (to interleave API calls with a boot) */
  beforeStart: ((spec: MachineSpec) => Promise<void>) | null = null;
  async start(spec: MachineSpec): Promise<MachineRuntime> {
    this.calls.push(`start ${spec.id}`);
    await this.beforeStart?.(spec);
    this.specs.push(spec);
    this.running.add(spec.id);
    return { pid: ++this.pid, spawnedAt: this.time.now, accel: 'tcg' };
  }
  async adopt(spec: MachineSpec, rt: MachineRuntime): Promise<boolean> {
    this.calls.push(`adopt ${spec.id}`);
    if (!this.alive.has(rt.pid)) {
      this.onEvent(spec.id, this.exitEvent('', null, '', spec.id));
      return false;
    }
    this.running.add(spec.id);
    return true;
  }
  scan(): { id: string; pid: number }[] {
    return [...this.host];
  }
  async killStray(pid: number): Promise<boolean> {
    this.calls.push(`killStray ${pid}`);
    return true;
  }
  async stop(id: string): Promise<void> {
    this.calls.push(`stop ${id}`);
  }
  /** makes the next kill throw (a transient host error) */
  failKill = false;
  async kill(id: string): Promise<void> {
    this.calls.push(`kill ${id}`);
    if (this.failKill) {
      this.failKill = false;
      throw new Error('EPERM (simulated)');
    }
    if (this.running.delete(id)) this.onEvent(id, this.exitEvent('', null, '', id));
  }
  /** runs inside `delete`, before the VM is "killed" */
  beforeDelete: (() => Promise<void>) | null = null;
  async delete(id: string, dir: string): Promise<void> {
    this.calls.push(`delete ${id}`);
    await this.beforeDelete?.();
    this.running.delete(id);
    rmSync(dir, { recursive: true, force: true });
  }
  inspect(id: string) {
    return { running: this.running.has(id), pid: null };
  }
  stats() {
    return undefined;
  }
  async close(): Promise<void> {}

  /** console output of the current boot, per VM */
  readonly console = new Map<string, string>();

  exitEvent(control: string, status: number | null, stderr = '', id = ''): MachineEvent {
    return {
      type: 'exit',
      at: this.time.now,
      status,
      panicked: false,
      control: parseControl(control),
      stderr,
      console: this.console.get(id) ?? '',
    };
  }
  /** The guest signals ready. */
  ready(id: string): void {
    this.onEvent(id, { type: 'ready', at: this.time.now });
  }
  /** The VM ends with these control lines. */
  exit(id: string, lines: string[], status: number | null = 0, stderr = ''): void {
    assert.ok(this.running.delete(id), `VM ${id} was not running`);
    this.onEvent(id, this.exitEvent(lines.map((l) => `UNIHOST ${l}\n`).join(''), status, stderr, id));
  }
}

interface World {
  s: Services;
  c: MachineController;
  d: FakeDriver;
  time: FakeTime;
  /** the in-memory volume images the controller checks and attaches */
  volumes: MemoryVolumes;
  user: UserRec;
  dir: string;
  /** messages the controller logged as errors */
  errors: string[];
}

let worlds: World[] = [];

async function world(
  opts: {
    stopTimeoutMs?: number;
    bootTimeoutMs?: number;
    alive?: number[];
    host?: { id: string; pid: number }[];
    beforeStop?: (id: string) => Promise<void>;
  } = {},
  dir?: string,
): Promise<World> {
  dir ??= mkdtempSync(join(tmpdir(), 'unihost-mc-'));
  const config: Config = { ...DEFAULTS, dataDir: dir };
  const time = new FakeTime();
  const s = createServices(config, new SqliteStore(join(dir, 'unihost.db')), { now: () => time.now });
  let d!: FakeDriver;
  const errors: string[] = [];
  const volumes = new MemoryVolumes();
  const c = new MachineController({
    services: s,
    volumes,
    driver: (onEvent) => {
      d = new FakeDriver(time, onEvent);
      for (const pid of opts.alive ?? []) d.alive.add(pid);
      d.host.push(...(opts.host ?? []));
      return d;
    },
    log: { info: () => undefined, warn: () => undefined, error: (o, m) => void errors.push(m) },
    timers: time,
    stopTimeoutMs: opts.stopTimeoutMs ?? 15_000,
    bootTimeoutMs: opts.bootTimeoutMs ?? 60_000,
    beforeStop: opts.beforeStop,
  });
  const existing = await s.store.read((tx) => tx.users.getByName('alice'));
  const user = existing ?? (await s.users.create('alice', false)).user;
  if (!existing) {
    const kernel = join(dir, 'fake-kernel');
    writeFileSync(kernel, 'not a real kernel');
    await s.images.importKernel('app:latest', { kernel, machine: 'microvm', args: ['default'] });
  }
  await c.start();
  const w = { s, c, d, time, volumes, user, dir, errors };
  worlds.push(w);
  return w;
}

/** Stops a world's controller and store, keeping the data dir (for adoption tests). */
async function close(w: World): Promise<void> {
  worlds = worlds.filter((x) => x !== w);
  await w.c.stop();
  await w.s.store.close();
}

afterEach(async () => {
  for (const w of [...worlds]) {
    await close(w);
    rmSync(w.dir, { recursive: true, force: true });
  }
});

/** Lets every queued reconcile run. */
const settle = async (w: World): Promise<void> => {
  for (let i = 0; i < 3; i++) {
    await w.c.idle();
    await new Promise((r) => setImmediate(r));
  }
};

/** Moves the fake clock forward by `ms`, firing due timers in order. */
async function advance(w: World, ms: number): Promise<void> {
  const until = w.time.now + ms;
  await settle(w);
  for (let e = w.time.next(until); e; e = w.time.next(until)) {
    w.time.pending.delete(e[0]);
    w.time.now = Math.max(w.time.now, e[1].at);
    e[1].fn();
    await settle(w);
  }
  w.time.now = until;
  await settle(w);
}

const rec = async (w: World, id: string): Promise<InstanceRec> =>
  (await w.s.store.read((tx) => tx.instances.getAny(id)))!;

async function create(w: World, extra: Record<string, unknown> = {}): Promise<string> {
  const [e] = await w.s.instances.create(w.user, { image: 'app:latest', autostart: true, ...extra });
  await settle(w);
  return e!.uuid as string;
}

/** Creates an autostarted instance and lets its guest signal ready. */
async function running(w: World, extra: Record<string, unknown> = {}): Promise<string> {
  const id = await create(w, extra);
  assert.ok(w.d.running.has(id), 'booted');
  w.d.ready(id);
  await settle(w);
  assert.equal((await rec(w, id)).state, 'running');
  return id;
}

const logText = (w: World, id: string): string =>
  new ConsoleLog(w.s.paths.instance(id)).read(0, 1 << 20).output.toString('utf8');

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
    assert.equal(r.desired, 'stopped');
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
    assert.deepEqual([r.state, r.desired, r.stop_reason, r.stop_code], ['stopped', 'stopped', 4, null]);
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

describe('restart policy', () => {
  const exitLines = (code: number) => ['INIT', 'READY', `EXIT ${code}`, 'SHUTDOWN'];

  test('never: the app exits → stopped for good', async () => {
    const w = await world();
    const id = await running(w);
    w.d.exit(id, exitLines(3));
    await advance(w, 600_000);
    const r = await rec(w, id);
    assert.deepEqual(
      [r.state, r.desired, r.stop_reason, r.exit_code, r.restart_count],
      ['stopped', 'stopped', 3, 3, 0],
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
      [r.state, r.desired, r.stop_reason, r.exit_code, r.restart_count],
      ['stopped', 'stopped', 3, 0, 2],
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
    await w1.s.store.tx((tx) => tx.instances.update(b, { runtime: {}, state: 'starting', desired: 'running' }));
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
        tx.instances.update(id, {
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
