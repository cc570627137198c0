/**
 * The machine controller's unit-test world: a fake driver the test plays the
 * VM's part with, a fake clock, in-memory volume images and real SQLite
 * (src/reconcile/machines.test.ts, machines-restart.test.ts).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DEFAULTS, type Config } from '../../config.js';
import { ConsoleLog } from '../../machines/console-log.js';
import type { MachineDriver, MachineEvent, MachineRuntime, MachineSpec } from '../../machines/driver.js';
import { parseControl } from '../../machines/stop-info.js';
import { createServices, type Services } from '../../services/index.js';
import { hostClaim, registerHost } from '../../services/hosts.js';
import { SqliteStore } from '../../store/sqlite/index.js';
import {
  SPEC_FIELDS,
  type InstanceRec,
  type SpecPatch,
  type StatusPatch,
  type StopRequest,
  type Tx,
  type UserRec,
} from '../../store/types.js';
import type { TimerApi } from '../engine.js';
import { MachineController } from '../machines.js';
import type { NetworkHooks } from '../network.js';
import { MemoryVolumes } from '../../volumes/memory.js';

/** A clock and timers that only move when the test says so. */
export class FakeTime implements TimerApi {
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
export class FakeDriver implements MachineDriver {
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
  list() {
    return [...this.running];
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
  /** A boot mark before ready: QMP answers (`loaded`), the guest's init runs (`init`). */
  mark(id: string, type: 'loaded' | 'init'): void {
    this.onEvent(id, { type, at: this.time.now });
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

export interface World {
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

export async function world(
  opts: {
    stopTimeoutMs?: number;
    bootTimeoutMs?: number;
    alive?: number[];
    host?: { id: string; pid: number }[];
    beforeStop?: (id: string) => Promise<void>;
    /** host capacity (default: the embedded one, 80 % of this machine's RAM) */
    capacity?: Partial<Config['capacity']>;
    /** the network's hooks (default: none, instances boot without a NIC) */
    network?: NetworkHooks;
    /** the host's lease (default: always held) */
    lease?: { held(): boolean };
  } = {},
  dir?: string,
): Promise<World> {
  dir ??= mkdtempSync(join(tmpdir(), 'unihost-mc-'));
  const config: Config = {
    ...DEFAULTS,
    dataDir: dir,
    capacity: { ...DEFAULTS.capacity, ...opts.capacity },
    // fake time runs for minutes and nothing renews the lease here: one that outlasts any test
    host: { ...DEFAULTS.host, leaseMs: 1e12 },
  };
  const time = new FakeTime();
  const s = createServices(config, new SqliteStore(join(dir, 'unihost.db')), { now: () => time.now });
  s.hostId = (await registerHost(s.store, { ...hostClaim(config), name: 'test-host' }, s.clock)).id;
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
    ...(opts.network ? { network: opts.network } : {}),
    ...(opts.lease ? { lease: opts.lease } : {}),
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
export async function close(w: World): Promise<void> {
  worlds = worlds.filter((x) => x !== w);
  await w.c.stop();
  await w.s.store.close();
}

/** Closes every world still open and removes its data dir (each test file's `afterEach`). */
export async function closeWorlds(): Promise<void> {
  for (const w of [...worlds]) {
    await close(w);
    rmSync(w.dir, { recursive: true, force: true });
  }
}

/** Lets every queued reconcile run. */
export const settle = async (w: World): Promise<void> => {
  for (let i = 0; i < 3; i++) {
    await w.c.idle();
    await new Promise((r) => setImmediate(r));
  }
};

/** Moves the fake clock forward by `ms`, firing due timers in order. */
export async function advance(w: World, ms: number): Promise<void> {
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

export const rec = async (w: World, id: string): Promise<InstanceRec> =>
  (await w.s.store.read((tx) => tx.instances.getAny(id)))!;

export async function create(w: World, extra: Record<string, unknown> = {}): Promise<string> {
  const [e] = await w.s.instances.create(w.user, { image: 'app:latest', autostart: true, ...extra });
  await settle(w);
  return e!.uuid as string;
}

/** Creates an autostarted instance and lets its guest signal ready. */
export async function running(w: World, extra: Record<string, unknown> = {}): Promise<string> {
  const id = await create(w, extra);
  assert.ok(w.d.running.has(id), 'booted');
  w.d.ready(id);
  await settle(w);
  assert.equal((await rec(w, id)).state, 'running');
  return id;
}

export const logText = (w: World, id: string): string =>
  new ConsoleLog(w.s.paths.instance(id)).read(0, 1 << 20).output.toString('utf8');

/**
 * Writes a record as a crash would have left it (tests of crash windows
 * only): spec fields as a service, `state` and `stop_request` past the state
 * table, the rest as a reconciler.
 */
export async function overwrite(tx: Tx, id: string, patch: Partial<InstanceRec>): Promise<void> {
  const cur = (await tx.instances.getAny(id))!;
  const spec: SpecPatch = {};
  const status: StatusPatch & { stop_request?: StopRequest | null } = {};
  for (const [k, v] of Object.entries(patch)) {
    if ((SPEC_FIELDS as readonly string[]).includes(k)) Object.assign(spec, { [k]: v });
    else if (k !== 'state') Object.assign(status, { [k]: v });
  }
  if (Object.keys(spec).length > 0) await tx.instances.updateSpec(id, spec);
  await tx.instances.setState(id, cur.state, patch.state ?? cur.state, status);
}
