import {
  closeSync,
  existsSync,
  mkdirSync,
  openSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  truncateSync,
  writeFileSync,
  writeSync,
  constants,
} from 'node:fs';
import { basename, dirname, join } from 'node:path';
import pLimit from 'p-limit';
import type { MachineChooser } from '../../images/boot-files.js';
import { ConsoleLog } from '../console-log.js';
import type {
  ControlState,
  MachineDriver,
  MachineEvent,
  MachineRuntime,
  MachineSpec,
  WarmReservation,
  WarmShape,
} from '../driver.js';
import { processStats } from '../stats.js';
import { emptyControl } from '../stop-info.js';
import { handoverOffset } from '../unikraft.js';
import { watchFiles, type FilesWatch } from './console-watch.js';
import { ControlTail } from './control-tail.js';
import { HeldFile } from './held-file.js';
import { confinedCommand, jailArgv, jailRoot, makeCgroups, processUid, removeCgroups, vmUid } from './jail.js';
import { alive, hostVms, killGroup, killVm, runsInJail } from './procs.js';
import { QmpClient } from './qmp.js';
import { qemuArgv, runtimeFiles, type QemuOptions } from './argv.js';
import { qemuMachineChooser } from './choose.js';
import { qemuVersion, resumeRestored, snapshotSocket, streamSnapshot, writeSnapshot } from './snapshot.js';
import { launch, Spawner } from './spawner.js';
import { setWarmPriority, WarmPool, warmInbox, warmShapeOf, type WarmVm } from './warm.js';

export interface QemuDriverOptions extends QemuOptions {
  qemu: string;
  /** directory of an instance's console log (persists across boots) */
  logDir(id: string): string;
  /** raw console bytes kept before they are moved into the bounded log */
  serialChunk?: number;
  /** per-VM confinement (own uid, chroot, seccomp, rlimits, cgroups; docs/security.md); default on */
  confine?: boolean;
  log?: (obj: object, msg: string) => void;
  /**
   * VMs started in advance for restores (warm.ts): where they wait, how many
   * at most (0: none), how long one may wait unused. Confined VMs only.
   */
  warm?: { dir: string; max: number; idleMs?: number };
  /** start VMMs through the posix_spawn helper (spawner.ts) where python3 is there; default on */
  spawner?: boolean;
}

interface Vm {
  id: string;
  /** the uid QEMU runs as (confined VMs) */
  uid?: number;
  dir: string;
  pid: number;
  contract: MachineSpec['contract'];
  spawnedAt: number;
  qmp: QmpClient | null;
  /** the watch of its console and control files */
  watcher: FilesWatch | null;
  poll: NodeJS.Timeout | null;
  powerdown: NodeJS.Timeout | null;
  panicked: boolean;
  status: number | null;
  exited: boolean;
  /** not a child of ours (adopted, or its spawner ended): its end is noticed by polling the pid */
  orphan: boolean;
  /** the control channel (unihost contract) */
  ctl: ControlTail | null;
  seen: { init: boolean; ready: boolean };
  /** booted from a snapshot: resumed once QEMU has loaded it (no boot banner, no control lines to wait for) */
  restoring: boolean;
  /** adopted for a running instance: `cont` once QMP answers (MachineSpec.resumePaused) */
  resumePaused: boolean;
  console: ConsoleLog;
  /** what a warm VM must share to restore this VM's snapshots (null: none can) */
  shape: WarmShape | null;
  /** console bytes of this boot (for the crash cause), capped */
  bootConsole: string;
  serialOffset: number;
  /** its runtime files (runtimeFiles), and serial.raw held open for the pump */
  files: ReturnType<typeof runtimeFiles>;
  serial: HeldFile;
  /** serial.pos, kept open: the position is rewritten in place after every console read (-1: closed, the VM ended) */
  posFd: number | null;
  done: Promise<void>;
  resolveDone: () => void;
}

/**
 * Boots each VM as a detached `qemu-system-x86_64` in its own process group,
 * so VMs outlive a daemon restart. Control (QMP) and guest signals (control
 * serial port written to a file) are re-read when a VM is adopted.
 */
export class QemuDriver implements MachineDriver {
  readonly name = 'qemu';
  private readonly vms = new Map<string, Vm>();
  /** the uid chosen for a VM being spawned, until it is tracked */
  private readonly uids = new Map<string, number>();
  private version: string | undefined;
  private readonly pool: WarmPool | null;
  /** the posix_spawn helper, or null: the daemon forks (spawner.ts) */
  private readonly spawner: Spawner | null;

  constructor(
    private readonly o: QemuDriverOptions,
    private readonly onEvent: (id: string, ev: MachineEvent) => void,
  ) {
    this.spawner =
      o.spawner !== false && Spawner.usable()
        ? new Spawner(
            (pid) => this.orphaned(pid),
            (why) => this.o.log?.({ err: why }, 'the VM spawner ended; its VMs run on, followed by their pids'),
          )
        : null;
    this.pool =
      o.warm && o.warm.max > 0 && o.confine !== false
        ? new WarmPool({
            ...o,
            dir: o.warm.dir,
            max: o.warm.max,
            idleMs: o.warm.idleMs ?? 10 * 60_000,
            takenUids: () => this.liveUids(),
            spawner: this.spawner,
          })
        : null;
  }

  /** A VM whose spawner ended: no one reports its end now, the poll sees it. */
  private orphaned(pid: number): void {
    for (const vm of this.vms.values()) if (vm.pid === pid) vm.orphan = true;
  }

  /** uids of the live VMs (adopted ones included: their uid is read from /proc when tracked) */
  private liveUids(): Set<number> {
    const taken = new Set<number>();
    for (const vm of this.vms.values()) if (!vm.exited && vm.uid !== undefined) taken.add(vm.uid);
    return taken;
  }

  async reserveWarm(shape: WarmShape): Promise<WarmReservation | undefined> {
    return this.pool?.reserve(shape);
  }

  releaseWarm(id: string, broken = false): void {
    this.pool?.release(id, broken);
  }

  get snapshotVersion(): string {
    return (this.version ??= `${qemuVersion(this.o.qemu)}; ${this.o.accel}`);
  }

  /** Trial boots with this driver's QEMU, accelerator and confinement, one decision at a time. */
  machineChooser(): MachineChooser {
    const c = qemuMachineChooser(this.o);
    return { vmm: this.snapshotVersion, run: (kernel, memoryMb) => this.trials(() => c.run(kernel, memoryMb)) };
  }
  /** trial boots of different images run one after the other: they measure boot times */
  private readonly trials = pLimit(1);

  async start(spec: MachineSpec): Promise<MachineRuntime> {
    if (this.vms.get(spec.id)?.exited === false) throw new Error(`VM ${spec.id} is already running`);
    // Idempotent boot: a VM of this instance that nothing tracks (a daemon killed between spawn and
    // storing its pid) is ended before its runtime files are replaced. None can run if its directory,
    // made before every spawn, is not there: the first boot skips the scan of /proc (2 ms here).
    const strays = existsSync(spec.dir) ? hostVms(dirname(spec.dir)) : [];
    for (const stray of strays.filter((v) => v.id === spec.id)) {
      this.o.log?.({ id: spec.id, pid: stray.pid }, 'killing an untracked VM of this instance before booting it');
      if (!(await killVm(stray.pid))) throw new Error(`an earlier VM of this instance (pid ${stray.pid}) does not end`);
    }
    if (spec.warm) {
      const w = this.pool?.take(spec.warm);
      if (w) {
        const rt = await this.startWarm(spec, w);
        if (rt) return rt;
      }
    }
    mkdirSync(spec.dir, { recursive: true });
    const f = runtimeFiles(spec.dir);
    for (const p of Object.values(f)) rmSync(p, { force: true });
    const argv = this.command(spec);
    const spawnedAt = Date.now();
    const at: { vm?: Vm } = {};
    // the snapshot to restore is QEMU's fd 3 (`-incoming fd:3`, argv.ts); an end is reported once `at.vm` is set
    const pid = await launch(
      this.spawner,
      argv,
      { stderr: f.stderr, ...(spec.restore ? { fd3: spec.restore } : {}) },
      (code) => {
        at.vm!.status = code;
        this.finish(at.vm!);
      },
    );
    const vm = (at.vm = this.track(spec, pid, spawnedAt));
    void this.connectQmp(vm);
    return { pid, spawnedAt, accel: this.o.accel };
  }

  /**
   * A restore into a warm VM (warm.ts), whose tap the network made the
   * instance's: its files and jail move into the instance's directory, its
   * cgroups become the instance's, and the snapshot is streamed into it.
   * Resolves undefined when it could not be bound (the warm VM is ended and
   * the caller starts a VMM as usual).
   */
  private async startWarm(spec: MachineSpec, w: WarmVm): Promise<MachineRuntime | undefined> {
    const at = Date.now();
    const f = runtimeFiles(spec.dir);
    const q = w.qmp!;
    try {
      if (!spec.restore || !spec.nic) throw new Error('a warm VM restores a snapshot with a NIC');
      mkdirSync(spec.dir, { recursive: true });
      for (const p of Object.values(f)) rmSync(p, { force: true });
      const wf = runtimeFiles(w.dir);
      for (const k of ['qmp', 'serial', 'control', 'stderr'] as const) if (existsSync(wf[k])) renameSync(wf[k], f[k]);
      rmSync(jailRoot(spec.dir), { recursive: true, force: true });
      renameSync(jailRoot(w.dir), jailRoot(spec.dir));
      for (const dir of makeCgroups(spec.id, spec.memoryMb, this.o.log))
        writeFileSync(join(dir, 'cgroup.procs'), String(w.pid));
      removeCgroups(w.id);
      rmSync(w.dir, { recursive: true, force: true });
    } catch (e) {
      this.o.log?.({ id: spec.id, warm: w.id, err: (e as Error).message }, 'a warm VM could not be used; starting one');
      w.onExit = () => undefined;
      q.close();
      await killVm(w.pid);
      removeCgroups(w.id);
      rmSync(w.dir, { recursive: true, force: true });
      return undefined;
    }
    const vm = this.track(spec, w.pid, at);
    vm.uid = w.uid;
    w.onExit = (code) => {
      vm.status = code;
      this.finish(vm);
    };
    if (w.exited) w.onExit(w.status);
    this.useQmp(vm, q);
    // a VM started in advance ran at a low priority; as the instance's it runs as any other
    setWarmPriority(w.pid, 0);
    void this.pool!.quiet(() => this.loadWarm(vm, q, spec.restore!)).then(() => {
      // the next restore of this shape gets one too: started once this one runs, not while it loads
      const shape = warmShapeOf(spec);
      if (shape) this.pool?.want(shape);
    });
    return { pid: w.pid, spawnedAt: at, accel: this.o.accel };
  }

  /** Streams the snapshot into a warm VM and resumes it; a failed load ends it (QEMU exits; the controller boots afresh). */
  private async loadWarm(vm: Vm, q: QmpClient, file: string): Promise<void> {
    this.onEvent(vm.id, { type: 'loaded', at: Date.now() });
    const inbox = warmInbox(jailRoot(vm.dir));
    try {
      await streamSnapshot(file, inbox);
    } catch (e) {
      this.o.log?.(
        { id: vm.id, err: (e as Error).message },
        'the snapshot could not be sent to the warm VM; ending it',
      );
      await this.kill(vm.id);
      return;
    } finally {
      rmSync(dirname(inbox), { recursive: true, force: true });
    }
    await this.resumeLoaded(vm, q);
  }

  /** QEMU's command line, confined unless configured otherwise. */
  private command(spec: MachineSpec): string[] {
    const argv = qemuArgv(spec, this.o);
    if (this.o.confine === false) return [this.o.qemu, ...argv];
    mkdirSync(jailRoot(spec.dir), { recursive: true });
    const cgroups = makeCgroups(spec.id, spec.memoryMb, this.o.log);
    // a uid no live VM has (adopted ones included: their uid is read from /proc when tracked)
    const taken = this.liveUids();
    for (const u of this.pool?.uids() ?? []) taken.add(u);
    const uid = vmUid(spec.id, taken);
    this.uids.set(spec.id, uid);
    return confinedCommand(this.o.qemu, [...argv, ...jailArgv(spec.dir, uid)], spec.memoryMb, cgroups);
  }

  scan(instancesDir: string): { id: string; pid: number }[] {
    return hostVms(instancesDir);
  }

  async killStray(pid: number): Promise<boolean> {
    return killVm(pid);
  }

  async adopt(spec: MachineSpec, rt: MachineRuntime): Promise<boolean> {
    let mine = false;
    try {
      const cmdline = readFileSync(`/proc/${rt.pid}/cmdline`, 'utf8');
      // this instance's VM of this data dir (a restored copy of a data dir on the same host never takes the original's VMs)
      mine = cmdline.includes(`unihost-${spec.id}`) && cmdline.includes(runtimeFiles(spec.dir).qmp);
      // a warm VM a restore took (warm.ts) has its own name, and runs in the instance's jail
      if (!mine)
        mine = /(^|\/)qemu-system-[^/]*$/.test(cmdline.split('\0')[0] ?? '') && runsInJail(rt.pid, jailRoot(spec.dir));
    } catch {
      mine = false;
    }
    const vm = this.track(spec, rt.pid, rt.spawnedAt, true);
    if (!mine) {
      this.finish(vm);
      return false;
    }
    void this.connectQmp(vm);
    return true;
  }

  /** Starts following a VM's files; `adopted`: not our child, so its exit is noticed by polling the pid. */
  private track(spec: MachineSpec, pid: number, spawnedAt: number, adopted = false): Vm {
    let resolveDone!: () => void;
    const done = new Promise<void>((r) => (resolveDone = r));
    const files = runtimeFiles(spec.dir);
    const vm: Vm = {
      id: spec.id,
      dir: spec.dir,
      pid,
      contract: spec.contract,
      spawnedAt,
      qmp: null,
      watcher: null,
      poll: null,
      powerdown: null,
      panicked: false,
      status: null,
      exited: false,
      orphan: adopted,
      ctl:
        spec.contract === 'unihost'
          ? new ControlTail(
              {
                path: files.control,
                savedPath: files.controlState,
                onFlood: (bytes) =>
                  this.o.log?.(
                    { id: spec.id, bytes },
                    'the guest flooded its control channel: no longer read this boot, file truncated',
                  ),
              },
              adopted,
            )
          : null,
      uid: adopted ? processUid(pid) : this.uids.get(spec.id),
      seen: { init: false, ready: false },
      // adopted too: a daemon killed mid-restore leaves a VM that may still wait to be resumed
      restoring: !!spec.restore,
      resumePaused: !!spec.resumePaused,
      console: new ConsoleLog(this.o.logDir(spec.id), undefined, true),
      shape: warmShapeOf(spec),
      bootConsole: '',
      serialOffset: adopted ? savedSerialPos(spec.dir) : 0,
      files,
      serial: new HeldFile(files.serial),
      posFd: null,
      done,
      resolveDone,
    };
    this.vms.set(spec.id, vm);
    this.uids.delete(spec.id);
    // only the files the pump reads: not serial.pos, which it writes itself, nor QMP's socket or stderr
    vm.watcher = watchFiles(
      spec.dir,
      new Set([basename(files.serial), basename(files.control)]),
      // paused while the guest boots (its banner, a Linux kernel's messages), not once it is ready
      () => (vm.seen.ready ? 0 : CONSOLE_PAUSE_MS),
      () => {
        if (!vm.exited) this.pump(vm);
      },
    );
    // inotify can miss events on some file systems; a poll backs it up (and sees an adopted VM end).
    vm.poll = setInterval(() => {
      this.pump(vm);
      if (vm.orphan && !alive(vm.pid)) this.finish(vm);
    }, 250);
    this.pump(vm);
    return vm;
  }

  /** Follows a VM's QMP connection: panics, and its end. */
  private useQmp(vm: Vm, q: QmpClient): void {
    vm.qmp = q;
    q.on('event', (name: string) => {
      if (name === 'GUEST_PANICKED') vm.panicked = true;
    });
    q.on('close', () => {
      vm.qmp = null;
      setTimeout(() => {
        if (!alive(vm.pid)) this.finish(vm);
      }, 50);
    });
  }

  private async connectQmp(vm: Vm): Promise<void> {
    try {
      const q = await QmpClient.connect(runtimeFiles(vm.dir).qmp, 10_000);
      if (vm.exited) return q.close();
      this.useQmp(vm, q);
      this.onEvent(vm.id, { type: 'loaded', at: Date.now() });
      if (vm.restoring) await this.resumeLoaded(vm, q);
      // `cont` of a running guest changes nothing; of one a checkpoint left paused, it runs on
      else if (vm.resumePaused)
        await q
          .execute('cont')
          .catch((e: Error) => this.o.log?.({ id: vm.id, err: e.message }, 'cont of an adopted VM failed'));
    } catch (e) {
      this.o.log?.({ id: vm.id, err: e }, 'QMP connection failed');
    }
  }

  /** A VM booted from a snapshot: resumed once loaded; its init and ready are that moment (the guest booted long ago). */
  private async resumeLoaded(vm: Vm, q: QmpClient): Promise<void> {
    try {
      await resumeRestored(q, 30_000);
    } catch (e) {
      this.o.log?.({ id: vm.id, err: (e as Error).message }, 'restoring the snapshot failed; ending the VM');
      await this.kill(vm.id);
      return;
    }
    const at = Date.now();
    vm.seen.init = vm.seen.ready = true;
    this.onEvent(vm.id, { type: 'init', at });
    this.onEvent(vm.id, { type: 'ready', at });
  }

  async snapshot(id: string, path: string): Promise<{ bytes: number }> {
    const vm = this.vms.get(id);
    if (!vm || vm.exited) throw new Error('the VM is not running');
    if (!vm.qmp) throw new Error('the VM has no QMP connection');
    const socket = snapshotSocket(this.o.confine === false ? null : jailRoot(vm.dir), vm.dir);
    // the guest stays paused: the caller ends the VM once the snapshot is recorded
    const written = await writeSnapshot(vm.qmp, { path, socket, uid: vm.uid });
    // the next restore of this shape (a wake, a clone of a template) takes a VM started meanwhile
    if (vm.shape) this.pool?.want(vm.shape);
    return written;
  }

  async pause(id: string): Promise<void> {
    const vm = this.vms.get(id);
    if (!vm || vm.exited) throw new Error('the VM is not running');
    if (!vm.qmp) throw new Error('the VM has no QMP connection yet');
    // QEMU's `stop` drains and flushes every disk before it answers
    await vm.qmp.execute('stop');
  }

  async resume(id: string): Promise<void> {
    const vm = this.vms.get(id);
    if (!vm || vm.exited || !vm.qmp) throw new Error('the VM is not running');
    // after an outgoing migration QEMU is `postmigrate`; `cont` re-activates its disks and runs the guest
    await vm.qmp.execute('cont');
  }

  /**
   * Moves new console bytes into the bounded log and reads new control
   * lines. Never throws (it runs from a file watcher and timers): a failure
   * is logged and the next call tries again.
   */
  private pump(vm: Vm): void {
    try {
      this.pumpOnce(vm);
    } catch (e) {
      this.o.log?.({ id: vm.id, err: (e as Error).message }, 'reading the console of a VM failed; trying again');
    }
  }

  private pumpOnce(vm: Vm): void {
    const f = vm.files;
    const { skipped, bytes: fresh } = readConsole(vm.serial, vm.serialOffset);
    if (skipped > 0) {
      vm.console.append(Buffer.from(`\n[unihost: ${skipped} bytes of console output skipped]\n`));
      vm.serialOffset += skipped;
    }
    if (fresh.length > 0) {
      vm.console.append(fresh);
      vm.serialOffset += fresh.length;
      vm.bootConsole = (vm.bootConsole + fresh.toString('utf8')).slice(-65536);
      if (vm.serialOffset > (this.o.serialChunk ?? 256 * 1024)) {
        // QEMU appends (O_APPEND), so truncating restarts its writes at 0.
        truncateSync(f.serial, 0);
        vm.serialOffset = 0;
      }
      // A crash between the append above and this write replays one chunk at most on adoption. Written in
      // place, one pwrite of a fixed width: a writeFileSync (open, truncate, close) took 0.2 ms quiet and
      // much more beside the store's fsyncs, on the event loop, ahead of the handover seen below.
      vm.posFd ??= openSync(f.serialPos, constants.O_WRONLY | constants.O_CREAT, 0o600);
      if (vm.posFd >= 0) writeSync(vm.posFd, String(vm.serialOffset).padEnd(POS_WIDTH), 0);
    }
    if (vm.ctl) {
      if (vm.ctl.pump()) {
        const c = vm.ctl.state;
        if (c.init && !vm.seen.init) {
          vm.seen.init = true;
          this.onEvent(vm.id, { type: 'init', at: Date.now() });
        }
        if (c.ready && !vm.seen.ready) {
          vm.seen.ready = true;
          this.onEvent(vm.id, { type: 'ready', at: Date.now() });
        }
      }
    } else if (!vm.restoring && !vm.seen.ready && handoverOffset(vm.bootConsole) >= 0) {
      // Stock Unikraft kernels have no control channel: the end of the boot banner is the
      // handover to the application (machines/unikraft.ts). It is init and ready at once: `ready`
      // alone says both (the controller records them in one transaction).
      vm.seen.init = vm.seen.ready = true;
      this.onEvent(vm.id, { type: 'ready', at: Date.now() });
    }
  }

  private finish(vm: Vm): void {
    if (vm.exited) return;
    vm.exited = true;
    this.pump(vm);
    letGo(vm);
    removeCgroups(vm.id);
    let stderr = '';
    try {
      stderr = readFileSync(runtimeFiles(vm.dir).stderr, 'utf8').slice(-4096);
    } catch {
      stderr = '';
    }
    const control: ControlState = { ...(vm.ctl?.state ?? emptyControl()) };
    // Only the QMP event: exit status 1 is also how QEMU itself fails (bad kernel), and the controller tells them apart.
    const panicked = vm.panicked;
    vm.resolveDone();
    this.onEvent(vm.id, {
      type: 'exit',
      at: Date.now(),
      status: vm.status,
      panicked,
      control,
      stderr,
      console: vm.bootConsole,
    });
  }

  async stop(id: string): Promise<void> {
    const vm = this.vms.get(id);
    if (!vm || vm.exited || vm.powerdown) return;
    const press = (): void => {
      const c = vm.ctl?.state;
      if (vm.exited || c?.stop || c?.shutdown) {
        if (vm.powerdown) clearInterval(vm.powerdown);
        return;
      }
      vm.qmp?.execute('system_powerdown').catch(() => undefined);
    };
    // A press before the guest's acpid runs is lost: repeat until the guest says STOP.
    vm.powerdown = setInterval(press, 1000);
    press();
  }

  async kill(id: string): Promise<void> {
    const vm = this.vms.get(id);
    if (!vm || vm.exited) return;
    killGroup(vm.pid);
    await Promise.race([vm.done, new Promise((r) => setTimeout(r, 5000))]);
    if (!vm.exited && !alive(vm.pid)) this.finish(vm);
  }

  async delete(id: string, dir: string): Promise<void> {
    await this.kill(id);
    this.vms.delete(id);
    removeCgroups(id);
    rmSync(dir, { recursive: true, force: true });
  }

  inspect(id: string): { running: boolean; pid: number | null } {
    const vm = this.vms.get(id);
    return { running: !!vm && !vm.exited, pid: vm?.pid ?? null };
  }

  list(): string[] {
    return [...this.vms].filter(([, vm]) => !vm.exited).map(([id]) => id);
  }

  stats(id: string): { cpuMs: number; rssBytes: number } | undefined {
    const vm = this.vms.get(id);
    return vm && !vm.exited ? processStats(vm.pid) : undefined;
  }

  async close(): Promise<void> {
    await this.pool?.close();
    this.spawner?.close();
    for (const vm of this.vms.values()) letGo(vm);
    this.vms.clear();
  }
}

/**
 * How long the watch of a VM's console stays closed after a change while
 * the guest boots (console-watch.ts): the latest a write is read then; once
 * the guest is ready the watch stays open (docs/machines.md, "Console
 * log"). bench/boot with one core kept busy: ~200 wake-ups of the daemon
 * per c-http boot without it, ~40 with it; a write is rarely on the boot's
 * path (the end of a Unikraft banner is followed by the application's own
 * start, 2-5 ms).
 */
const CONSOLE_PAUSE_MS = 2;

/** Width of serial.pos: a decimal position padded with spaces (older daemons wrote it unpadded; both read). */
const POS_WIDTH = 20;

/** Stops watching a VM that ended (or that the daemon lets go as it stops): its watch, timers, QMP and open files. */
function letGo(vm: Vm): void {
  vm.watcher?.close();
  if (vm.poll) clearInterval(vm.poll);
  if (vm.powerdown) clearInterval(vm.powerdown);
  vm.qmp?.close();
  if (vm.posFd !== null && vm.posFd >= 0) closeSync(vm.posFd);
  vm.posFd = -1;
  vm.serial.close();
  vm.ctl?.close();
  vm.console.close();
}

/** The console position an earlier daemon recorded for a VM; 0 when unknown or past the file's end. */
function savedSerialPos(dir: string): number {
  const f = runtimeFiles(dir);
  try {
    const pos = Number(readFileSync(f.serialPos, 'utf8'));
    return Number.isInteger(pos) && pos >= 0 && pos <= statSync(f.serial).size ? pos : 0;
  } catch {
    return 0;
  }
}

/** The most console bytes one pump reads; a larger backlog is skipped to its last CONSOLE_TAIL bytes. */
export const MAX_CONSOLE_READ = 4 * 1024 * 1024;
export const CONSOLE_TAIL = 1024 * 1024;

/**
 * The console bytes of `path` after `offset`. A backlog larger than
 * MAX_CONSOLE_READ (a guest that wrote while the daemon was down) is not
 * read whole: all but its last CONSOLE_TAIL bytes are skipped (the bounded
 * log would drop them at once), and `skipped` says how many.
 */
export function readConsole(file: HeldFile, offset: number): { skipped: number; bytes: Buffer } {
  const size = file.size();
  const skipped = size - offset > MAX_CONSOLE_READ ? size - offset - CONSOLE_TAIL : 0;
  return { skipped, bytes: file.readFrom(offset + skipped, Infinity, size) };
}
