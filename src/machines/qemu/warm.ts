import { execFile } from 'node:child_process';
import { createHash, randomUUID } from 'node:crypto';
import { chmodSync, mkdirSync, readdirSync, readFileSync, realpathSync, rmSync } from 'node:fs';
import { setPriority } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import pLimit from 'p-limit';
import { warmShape, type MachineSpec, type WarmReservation, type WarmShape } from '../driver.js';
import { qemuArgv, runtimeFiles, type QemuOptions } from './argv.js';
import { confinedCommand, jailArgv, jailRoot, makeCgroups, removeCgroups, vmUid } from './jail.js';
import { alive, killGroup, killVm, rootOf } from './procs.js';
import { QmpClient } from './qmp.js';
import { launch, type Spawner } from './spawner.js';

const execFileP = promisify(execFile);

/**
 * Warm VMs (docs/snapshots.md, "Warm restores"): QEMUs started in advance
 * listening for a snapshot (`-incoming unix:`), confined like any VM, with
 * the NIC of the cold command line plugged on a tap of their own (down, on
 * no bridge). A restore takes one of the snapshot's shape instead of
 * starting a QEMU: the network renames its tap into the instance's and puts
 * it on the bridge, its files and jail are renamed into the instance's
 * directory, and the snapshot is streamed into it over a socket in its jail.
 * That leaves the load and the resume on the wake's path, not QEMU's own
 * start (~20-60 ms) nor a hot-plug of the NIC (~10-40 ms: QMP `netdev_add`
 * and `device_add`). The snapshot carries the guest's MAC (virtio-net's
 * migrated state): the placeholder the warm VM starts with is replaced.
 */

/** The socket a warm VM listens on for the snapshot, under its jail (the daemon's path to it). */
export const warmInbox = (jail: string): string => join(jail, 'in', 'snap.sock');

/** The MAC of a warm VM's NIC until the snapshot's state replaces it (locally administered). */
const WARM_MAC = '02:00:00:00:00:01';

/**
 * The tap of a warm VM: `uw`, four hex digits of its pool's directory (a
 * pool removes only its own leftovers: several daemons may share a host in
 * tests), eight of its id. Not the instances' `uh` prefix: the network's
 * `sync` leaves it alone until it is renamed into an instance's tap.
 */
export const warmTap = (poolDir: string, id: string): string =>
  `uw${createHash('sha256').update(poolDir).digest('hex').slice(0, 4)}${id.replace(/-/g, '').slice(0, 8)}`;

export const warmKey = (s: WarmShape): string =>
  JSON.stringify([s.kernel, s.initrd ?? '', s.memoryMb, s.machine, s.firmware ?? '', s.contract]);

/** The shape of a spec, or null when no warm VM can restore it (not `pc`, disks, no NIC). */
export function warmShapeOf(spec: MachineSpec): WarmShape | null {
  if (spec.machine !== 'pc' || spec.disks.length > 0 || !spec.nic) return null;
  return warmShape(spec);
}

export interface WarmVm {
  id: string;
  key: string;
  shape: WarmShape;
  /** its directory (runtime files and jail) until a restore moves them into the instance's */
  dir: string;
  /** its tap (`warmTap`), open in its QEMU until a restore renames it into the instance's */
  tap: string;
  pid: number;
  uid: number;
  qmp: QmpClient | null;
  state: 'starting' | 'free' | 'reserved' | 'taken' | 'gone';
  /** when it was made free or reserved (ms) */
  since: number;
  status: number | null;
  exited: boolean;
  /** called with QEMU's exit status once taken (the instance's VM ends); before, the pool forgets it */
  onExit: ((status: number | null) => void) | null;
  /** settles when it is no longer starting (free, or failed) */
  ready: Promise<void>;
  settle: () => void;
}

export interface WarmPoolOptions extends QemuOptions {
  qemu: string;
  /** where warm VMs live until taken (`<data dir>/warm`) */
  dir: string;
  /** most warm VMs at once (free, starting or reserved); 0: none */
  max: number;
  /** a free warm VM unused this long ends (ms) */
  idleMs: number;
  /** uids of the driver's live VMs (a warm VM takes none of them) */
  takenUids(): Set<number>;
  /**
   * the driver's posix_spawn helper (spawner.ts), or null: the daemon forks. A warm VM is started
   * when a restore's guest runs, while its wake waits for readiness: a fork would stop the daemon's
   * event loop for 8-18 ms then (twice: `mknod`, then QEMU)
   */
  spawner?: Spawner | null;
  log?: (obj: object, msg: string) => void;
}

/**
 * Guest memory up to this size is faulted in while a warm VM waits (`-mem-prealloc`), not while the
 * snapshot loads: there, each first write to a 2 MiB huge page of guest RAM had the kernel zero it
 * (70 % of the load's time in a profile here).
 */
const PREALLOC_MAX_MB = 256;

/** The nice value of a warm VM until a restore takes it (MachineDriver.start sets 0 again). */
const WARM_NICE = 19;

/** Sets the nice value of every thread of `pid` (Linux's is per thread; a new thread takes its creator's). */
export function setWarmPriority(pid: number, nice: number): void {
  for (const tid of safeReaddir(`/proc/${pid}/task`)) {
    try {
      setPriority(Number(tid), nice);
    } catch {
      /* ended already: its exit is seen */
    }
  }
}

/** How long a restore waits for a warm VM of its shape that is still starting (then it starts its own). */
const STARTING_WAIT_MS = 300;

/**
 * A restore that found no free warm VM of its shape (restores in a burst:
 * clones made back to back, wakes of several stateful groups) makes the
 * pool keep two of that shape, within `max`, for this long.
 */
const BURST_MS = 5 * 60_000;

/** How long a short command of a warm VM's start (`mknod`) may take. */
const RUN_TIMEOUT_MS = 10_000;

/** A reservation not followed by a restore within this time ends the warm VM. */
const RESERVED_MS = 60_000;

export class WarmPool {
  private readonly vms = new Map<string, WarmVm>();
  private readonly spawns = pLimit(1);
  /** per shape, starts queued or under way */
  private readonly wanted = new Map<string, number>();
  /** per shape, when a restore last found no free warm VM of it */
  private readonly missed = new Map<string, number>();
  private readonly timer: NodeJS.Timeout;
  private closed = false;
  /** loads under way (`quiet`); while any, starting warm VMs are stopped and none is spawned */
  private loads = 0;
  private readonly stopped = new Set<WarmVm>();
  private loadsDone: Promise<void> = Promise.resolve();
  private endLoads: () => void = () => undefined;

  constructor(private readonly o: WarmPoolOptions) {
    this.sweep();
    this.timer = setInterval(() => this.expire(), Math.min(o.idleMs, 5000));
    this.timer.unref();
  }

  /** uids of warm VMs not yet taken (the driver's VMs take none of them) */
  uids(): Set<number> {
    return new Set([...this.vms.values()].filter((w) => w.state !== 'taken' && !w.exited).map((w) => w.uid));
  }

  /**
   * Makes sure a free warm VM of this shape exists or is being started (two
   * while the shape's restores come in a burst: `BURST_MS`), ending the
   * longest unused one of another shape when the pool is full.
   */
  want(shape: WarmShape): void {
    if (this.o.max <= 0 || this.closed || shape.machine !== 'pc') return;
    const key = warmKey(shape);
    const now = Date.now();
    const live = [...this.vms.values()].filter((w) => w.state !== 'taken' && w.state !== 'gone');
    const mine = live.filter((w) => w.key === key && (w.state === 'free' || w.state === 'starting'));
    for (const w of mine) w.since = now;
    const missed = this.missed.get(key);
    const target = missed !== undefined && now - missed < BURST_MS ? 2 : 1;
    let need = target - mine.length - (this.wanted.get(key) ?? 0);
    for (; need > 0; need--) {
      if (live.length + this.pending() >= this.o.max) {
        const idle = live.filter((w) => w.state === 'free' && w.key !== key).sort((a, b) => a.since - b.since)[0];
        if (!idle) return;
        live.splice(live.indexOf(idle), 1);
        void this.end(idle, 'the pool is full and another shape is wanted');
      }
      this.wanted.set(key, (this.wanted.get(key) ?? 0) + 1);
      let counted = true;
      // once its VM is in the pool (or it gave up), a start is no longer counted as wanted
      const placed = () => {
        if (!counted) return;
        counted = false;
        const n = (this.wanted.get(key) ?? 1) - 1;
        if (n > 0) this.wanted.set(key, n);
        else this.wanted.delete(key);
      };
      void this.spawns(() => this.start(shape, key, placed)).finally(placed);
    }
  }

  /** starts queued or under way whose VM is not in the pool yet */
  private pending(): number {
    let n = 0;
    for (const c of this.wanted.values()) n += c;
    return n;
  }

  /** Takes a free warm VM of this shape for a restore about to start; undefined when there is none. */
  async reserve(shape: WarmShape): Promise<WarmReservation | undefined> {
    const key = warmKey(shape);
    const usable = (v: WarmVm) => v.key === key && v.state === 'free' && !v.exited && alive(v.pid);
    let w = [...this.vms.values()].find(usable);
    if (!w) {
      this.missed.set(key, Date.now());
      // one still starting (made for the snapshot just written, or after the last restore) is usually
      // ready sooner than a QEMU started now: it is waited for, at full priority, for a bounded time
      const starting = [...this.vms.values()].find((v) => v.key === key && v.state === 'starting');
      if (!starting) return undefined;
      setWarmPriority(starting.pid, 0);
      await Promise.race([starting.ready, sleep(STARTING_WAIT_MS)]);
      if (!usable(starting)) return undefined;
      w = starting;
    }
    w.state = 'reserved';
    w.since = Date.now();
    return { id: w.id, tap: w.tap };
  }

  /** Gives a reserved warm VM back (the restore did not happen); `broken`: its tap is gone, it ends. */
  release(id: string, broken = false): void {
    const w = this.vms.get(id);
    if (w?.state !== 'reserved') return;
    if (broken) return void this.end(w, 'its tap could not be taken');
    w.state = 'free';
    w.since = Date.now();
  }

  /** The reserved warm VM `id` for its restore: the pool no longer owns it. */
  take(id: string): WarmVm | undefined {
    const w = this.vms.get(id);
    if (!w || w.state !== 'reserved' || w.exited || !w.qmp) return undefined;
    w.state = 'taken';
    this.vms.delete(id);
    return w;
  }

  /**
   * Runs `load` (a snapshot loading into its VM) with the machine to itself,
   * as far as warm VMs go: the ones starting are stopped (SIGSTOP) until it
   * ends, and none is spawned meanwhile. A warm VM starts (its QEMU's
   * initialisation, its guest memory faulted in) while a restore's guest
   * runs, often just as the next restore comes; here, on 2 cores, the
   * two at once made the load take 30-50 ms instead of 15-20.
   */
  async quiet<T>(load: () => Promise<T>): Promise<T> {
    if (this.loads++ === 0) {
      this.loadsDone = new Promise<void>((r) => (this.endLoads = r));
      for (const w of this.vms.values())
        if (w.state === 'starting' && !w.exited && signal(w.pid, 'SIGSTOP')) this.stopped.add(w);
    }
    try {
      return await load();
    } finally {
      if (--this.loads === 0) {
        for (const w of this.stopped) signal(w.pid, 'SIGCONT');
        this.stopped.clear();
        this.endLoads();
      }
    }
  }

  /** Ends every warm VM not taken (daemon stop). */
  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.timer);
    this.spawns.clearQueue();
    await Promise.all([...this.vms.values()].map((w) => this.end(w, 'the daemon stops')));
  }

  private async start(shape: WarmShape, key: string, placed: () => void): Promise<void> {
    if (this.closed) return;
    if ([...this.vms.values()].filter((w) => w.state !== 'gone').length >= this.o.max) return;
    const id = randomUUID();
    const dir = join(this.o.dir, id);
    const jail = jailRoot(dir);
    const taken = new Set([...this.o.takenUids(), ...this.uids()]);
    const uid = vmUid(id, taken);
    const tap = warmTap(this.o.dir, id);
    let w: WarmVm | undefined;
    try {
      // the jail's /in, where QEMU listens for the snapshot (made as root before QEMU drops to its uid)
      mkdirSync(join(jail, 'in'), { recursive: true, mode: 0o700 });
      // QEMU, once it is its uid, passes through it (the daemon's umask may have closed it)
      chmodSync(jail, 0o711);
      // its NIC's tap (QEMU opens it as root, before it drops to its uid), kept down until a restore
      await this.run(['nice', '-n', String(WARM_NICE), 'ip', 'tuntap', 'add', 'dev', tap, 'mode', 'tap']);
      const argv = [
        ...qemuArgv(
          // the NIC of the cold command line, so that the devices (and PCI slots) match the snapshot's
          { id, dir, ...shape, cmdline: '', disks: [], nic: { tap, mac: WARM_MAC } },
          { accel: this.o.accel, tbSizeMb: this.o.tbSizeMb, tscKhz: this.o.tscKhz },
        ),
        ...(shape.memoryMb <= PREALLOC_MAX_MB ? ['-mem-prealloc'] : []),
        // listening from the start, so a restore only connects and sends
        '-incoming',
        `unix:${warmInbox(jail)}`,
        ...jailArgv(dir, uid),
      ];
      // not while a snapshot loads (`quiet`)
      await this.loadsDone;
      if (this.closed) throw new Error('the daemon stops');
      const [cmd, ...args] = confinedCommand(
        this.o.qemu,
        argv,
        shape.memoryMb,
        makeCgroups(id, shape.memoryMb, this.o.log),
      );
      // its end is reported once `w` is set (launch)
      const pid = await launch(
        this.o.spawner,
        ['nice', '-n', String(WARM_NICE), cmd!, ...args],
        { stderr: runtimeFiles(dir).stderr },
        (code) => this.ended(w!, code),
      );
      // its start (20-60 ms of CPU) yields to the VMs and the daemon: it is ahead of need
      setWarmPriority(pid, WARM_NICE);
      let settle!: () => void;
      const ready = new Promise<void>((r) => (settle = r));
      const vm: WarmVm = {
        ready,
        settle,
        id,
        key,
        shape,
        dir,
        tap,
        pid,
        uid,
        qmp: null,
        state: 'starting',
        since: Date.now(),
        status: null,
        exited: false,
        onExit: null,
      };
      w = vm;
      this.vms.set(id, vm);
      placed();
      vm.qmp = await QmpClient.connect(runtimeFiles(dir).qmp, 10_000);
      if (vm.exited) throw new Error(`QEMU ended: ${this.stderr(vm)}`);
      if (this.closed) throw new Error('the daemon stops');
      if (vm.state === 'starting') {
        vm.state = 'free';
        vm.since = Date.now();
      }
      vm.settle();
    } catch (e) {
      if (!this.closed) this.o.log?.({ id, err: (e as Error).message }, 'a warm VM could not be started');
      if (w) await this.end(w, 'it failed to start');
      else this.clean(id, dir, tap);
    }
  }

  /** A warm VM's QEMU ended (once taken, its instance's VM: `onExit`). */
  private ended(vm: WarmVm, code: number | null): void {
    vm.exited = true;
    vm.status = code;
    if (vm.onExit) return vm.onExit(code);
    this.forget(vm);
  }

  /**
   * Runs a short command to its end (through the spawner when there is one); rejects unless it
   * exits 0, or after RUN_TIMEOUT_MS (a helper that died meanwhile never reports the end).
   */
  private async run(argv: string[]): Promise<void> {
    const spawner = this.o.spawner;
    if (!spawner) return void (await execFileP(argv[0]!, argv.slice(1), { timeout: RUN_TIMEOUT_MS }));
    let timer: NodeJS.Timeout | undefined;
    try {
      const end = await new Promise<{ code: number | null; signal: string | null }>((resolve, reject) => {
        timer = setTimeout(
          () => reject(new Error(`${argv[0]} did not end within ${RUN_TIMEOUT_MS} ms`)),
          RUN_TIMEOUT_MS,
        );
        spawner.start(argv, { stderr: '/dev/null' }, resolve).catch(reject);
      });
      if (end.code !== 0) throw new Error(`${argv.join(' ')} failed (${end.signal ?? `exit status ${end.code}`})`);
    } finally {
      clearTimeout(timer);
    }
  }

  private stderr(w: WarmVm): string {
    try {
      return readFileSync(runtimeFiles(w.dir).stderr, 'utf8').trim().slice(-500) || `status ${w.status}`;
    } catch {
      return `status ${w.status}`;
    }
  }

  /** Free ones unused for idleMs, reserved ones never restored into: ended. */
  private expire(): void {
    const now = Date.now();
    for (const [key, at] of this.missed) if (now - at >= BURST_MS) this.missed.delete(key);
    for (const w of this.vms.values()) {
      if (w.state === 'free' && now - w.since > this.o.idleMs) void this.end(w, 'unused');
      // ended with no one to report it (its spawner had died): its place goes to a new one
      else if (w.state === 'free' && !alive(w.pid)) void this.end(w, 'its QEMU ended');
      else if (w.state === 'reserved' && now - w.since > RESERVED_MS) void this.end(w, 'reserved and never used');
    }
  }

  private async end(w: WarmVm, why: string): Promise<void> {
    if (w.state === 'gone' || w.state === 'taken') return;
    w.state = 'gone';
    w.qmp?.close();
    await killVm(w.pid);
    this.o.log?.({ id: w.id, why }, 'warm VM ended');
    this.forget(w);
  }

  private forget(w: WarmVm): void {
    w.settle();
    if (w.state === 'taken') return;
    w.state = 'gone';
    w.qmp?.close();
    this.vms.delete(w.id);
    this.clean(w.id, w.dir, w.tap);
  }

  /** Removes what a warm VM that was not taken leaves: cgroups, directory, tap (not awaited). */
  private clean(id: string, dir: string, tap?: string): void {
    removeCgroups(id);
    rmSync(dir, { recursive: true, force: true });
    if (tap) this.run(['ip', 'link', 'del', 'dev', tap]).catch(() => undefined); // absent: never made
  }

  /**
   * At start: warm VMs an earlier daemon left (its pool died with it) are
   * killed, and their directories removed. Bound ones are not here: a
   * restore moves a warm VM's jail into its instance's directory.
   */
  private sweep(): void {
    const dir = realPath(this.o.dir);
    for (const name of safeReaddir('/proc')) {
      if (!/^\d+$/.test(name)) continue;
      const pid = Number(name);
      const root = rootOf(pid);
      if (root?.startsWith(`${dir}/`)) killGroup(pid);
    }
    for (const id of safeReaddir(this.o.dir)) this.clean(id, join(this.o.dir, id));
    // and their taps
    const mine = warmTap(this.o.dir, '');
    execFileP('ip', ['-j', 'link', 'show', 'type', 'tun'])
      .then(({ stdout }) => {
        const links = (stdout.trim() ? JSON.parse(stdout) : []) as { ifname: string }[];
        for (const l of links)
          if (l.ifname.startsWith(mine)) void execFileP('ip', ['link', 'del', 'dev', l.ifname]).catch(() => undefined);
      })
      .catch(() => undefined);
  }
}

/** Sends `sig` to `pid`; false when it is gone. */
function signal(pid: number, sig: NodeJS.Signals): boolean {
  try {
    process.kill(pid, sig);
    return true;
  } catch {
    return false;
  }
}

function realPath(p: string): string {
  try {
    return realpathSync(p);
  } catch {
    return p;
  }
}

function safeReaddir(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}
