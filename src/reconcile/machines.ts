import { existsSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { isUnihostError } from '../errors.js';
import type { Controller, ControllerDeps } from './deps.js';
import { HEALTHY_AFTER_MS } from '../domain/restart.js';
import { ConsoleLog } from '../machines/console-log.js';
import type { DriverFactory, MachineDriver, MachineEvent, MachineRuntime, MachineSpec } from '../machines/driver.js';
import { STOP, vmmFailure } from '../machines/stop-info.js';
import type { InstanceRec, StatusPatch, Tx } from '../store/types.js';
import { fire, readyAt } from '../domain/instance-states.js';
import type { NetworkHooks } from './network.js';
import type { VolumeDriver } from '../volumes/driver.js';
import { follow, RetryingQueue, Timers, type TimerApi } from './engine.js';
import { ReadinessProbes } from './machine-probes.js';
import { VmVolumes } from './machine-volumes.js';
import { escalatedStop, recordExitInTx, restartInTx, type ExitEvent } from './machine-exit.js';
import { bootPlan, recordBootInTx, type BootPlan, type RuntimeRec } from './machine-plan.js';
import { killStrays, settleVanishedInTx, stopWithoutVmInTx } from './machine-adopt.js';
import { snapshotFile, Snapshots } from './machine-snapshots.js';
import { decideMachine, type MachineChooser } from '../images/boot-files.js';

/** A mark of a boot: the VMM's and the guest's (the driver's), or its ports accepting (the platform's probe). */
type MarkEvent = Exclude<MachineEvent, { type: 'exit' }> | { type: 'listening'; at: number };
type MarkField = 'vmm_load_time_us' | 'vmm_ready_time_us' | 'boot_time_us';
/** A mark and the fields it sets (µs since the spawn) on a record that lacks them. */
interface HeldMark {
  ev: MarkEvent;
  fields: Partial<Record<MarkField, number>>;
}
/** How long a boot's earlier marks wait for its `booted` before they are recorded on their own. */
const MARK_HOLD_MS = 1000;

export interface MachineControllerOptions {
  services: ControllerDeps;
  driver: DriverFactory;
  log: { info(o: object, m: string): void; warn(o: object, m: string): void; error(o: object, m: string): void };
  /** a guest that has not signalled ready by then is stopped (platform, forced) */
  bootTimeoutMs?: number;
  /** a graceful stop that has not ended by then becomes a forced one */
  stopTimeoutMs?: number;
  /** open connections of an instance, from the gateway; undefined while no gateway tracks it */
  connections?: (id: string) => number | undefined;
  /**
   * Resolves once the gateway routes no new traffic to a stopping instance,
   * so that a request arriving while its VM ends is held for a wake (or gets
   * the "no instance" answer) instead of being sent to a dead VM and cut.
   */
  beforeStop?: (id: string) => Promise<void>;
  /** the private network; without it VMs get no NIC */
  network?: NetworkHooks;
  /** volume images: checked before a boot, attached as disks */
  volumes: VolumeDriver;
  /** resolves when `ip:port` accepts a TCP connection (readiness of listening apps); rejects on abort */
  probePort?: (ip: string, port: number, signal: AbortSignal) => Promise<void>;
  timers?: TimerApi;
  /** this host's lease (src/reconcile/host-lease.ts): nothing is done while it is not held; default always */
  lease?: { held(): boolean };
}

/**
 * Drives instances' VMs to match the store (level-based): boots instances in
 * `starting`, stops those in `stopping`/`draining`, records what the guest
 * reports, applies restart policies with back-off, adopts VMs after a daemon
 * restart and cleans up after deleted instances. One reconcile per instance
 * runs at a time.
 */
export class MachineController implements Controller {
  readonly driver: MachineDriver;
  private readonly s: ControllerDeps;
  /** A failed reconcile is logged and tried again after a back-off (level-based: the next pass repairs). */
  private readonly queue: RetryingQueue;
  private readonly timers: Timers;
  private readonly bootTimeoutMs: number;
  private readonly stopTimeoutMs: number;
  private off: (() => void) | null = null;
  private closed = false;
  /** VM ends seen but not yet recorded in the store, per instance */
  private readonly unrecordedExits = new Map<string, ExitEvent>();
  /**
   * A boot's marks (loaded, init, ready, listening) whose transaction failed
   * (e.g. it kept losing serialization conflicts), per instance: each comes
   * once per boot, so the retried reconcile records them, or the instance
   * would stay `starting` until its boot timeout.
   */
  private readonly unrecordedMarks = new Map<string, Map<string, MarkEvent>>();
  /**
   * A boot's marks before its last (loaded, init, and ready when ports are
   * probed), held to go in the transaction of the last one, `booted`: one
   * transaction a boot instead of three, fewer changes for every follower of
   * the feed while guests boot. Written on their own after MARK_HOLD_MS (a
   * slow guest shows its progress) and before its end is recorded.
   */
  private readonly heldMarks = new Map<string, HeldMark[]>();
  private readonly markTimers: Timers;
  /** readiness probes of booting instances (none without `probePort`) */
  private readonly probes: ReadinessProbes | undefined;
  private readonly vmVolumes = new VmVolumes();
  private readonly snapshots: Snapshots;
  /** trial boots of this host's driver (none for drivers that boot nothing) */
  private readonly chooser: MachineChooser | undefined;
  /** VMs the driver starts in advance for restores, if it does (docs/snapshots.md, "Warm restores") */
  private readonly warm:
    | { reserve: NonNullable<MachineDriver['reserveWarm']>; release: NonNullable<MachineDriver['releaseWarm']> }
    | undefined;
  /** images whose machine choice this process has made or found unneeded */
  private readonly choiceDone = new Set<string>();
  private choosing: Promise<void> | null = null;
  private chooseAgain = false;

  constructor(private readonly o: MachineControllerOptions) {
    this.s = o.services;
    this.queue = new RetryingQueue(
      (id) => this.reconcile(id),
      (id, e, failures, retryMs) =>
        this.o.log.error({ id, err: e, failures, retry_ms: retryMs }, 'machine reconcile failed'),
      { timers: o.timers, now: () => this.now() },
    );
    this.timers = new Timers(o.timers, (id) => this.kick(id));
    this.markTimers = new Timers(o.timers, (id) => void this.queue.run(id, () => this.writeHeldMarks(id)));
    this.probes =
      o.probePort &&
      new ReadinessProbes(
        o.probePort,
        (id, at) => void this.queue.run(id, () => this.onVmEvent(id, { type: 'listening', at })),
      );
    this.bootTimeoutMs = o.bootTimeoutMs ?? 180_000;
    this.stopTimeoutMs = o.stopTimeoutMs ?? 15_000;
    // Events after stop() (a VM ending while the daemon shuts down) are left to the next start's adoption.
    this.driver = o.driver((id, ev) => {
      if (this.closed) return Promise.resolve();
      // the port probe starts at once; the mark is recorded in its turn (ReadinessProbes)
      if (ev.type === 'ready') this.probes?.ready(id);
      return this.queue.run(id, () => this.onVmEvent(id, ev));
    });
    this.snapshots = new Snapshots(this.s, this.driver, o.log, (id, m) => this.note(id, m));
    this.chooser = this.driver.machineChooser?.();
    const d = this.driver;
    this.warm =
      d.reserveWarm && d.releaseWarm
        ? { reserve: (shape) => d.reserveWarm!(shape), release: (id, broken) => d.releaseWarm!(id, broken) }
        : undefined;
  }

  private now(): number {
    return this.s.clock.now();
  }

  /** Schedules a reconcile of one instance. */
  kick(id: string): void {
    if (!this.closed) void this.queue.kick(id);
  }

  async start(): Promise<void> {
    this.off = follow(this.s.store, {
      kinds: ['instance', 'volume', 'image'],
      change: (c) =>
        c.kind === 'instance'
          ? this.kick(c.id)
          : c.kind === 'volume'
            ? void this.kickVolumeOwner(c.id)
            : this.chooseMachines(),
      resync: () => void this.kickAll(),
      resyncMs: this.s.config.store.resyncMs,
    });
    await this.adoptAll();
    this.chooseMachines();
  }

  /**
   * Makes the machine choice of new images in the background (a pushed
   * Unikraft kernel is test-booted here once, off the request path); a boot
   * that comes first waits for the same decision (docs/machines.md).
   */
  private chooseMachines(): void {
    if (!this.chooser || this.closed) return;
    if (this.choosing) {
      this.chooseAgain = true;
      return;
    }
    this.choosing = (async () => {
      do {
        this.chooseAgain = false;
        const images = await this.s.store.read((tx) => tx.images.list());
        for (const { digest } of images) {
          if (this.closed) return;
          if (this.choiceDone.has(digest)) continue;
          try {
            const c = await decideMachine(this.s.paths, digest, this.chooser!);
            if (c?.fresh)
              this.o.log.info(
                { digest, machine: c.machine, firmware: c.firmware, trials: c.trials },
                'machines: chose how to boot a new Unikraft image by trial boots',
              );
            this.choiceDone.add(digest);
          } catch (e) {
            // an image whose content is not on this host yet (fetched at its first boot here, which then
            // chooses) or a failed read: tried at the next change
            if ((e as { code?: string }).code !== 'UH_NOT_FOUND')
              this.o.log.warn({ err: e, digest }, 'machines: could not choose how to boot an image');
          }
        }
      } while (this.chooseAgain && !this.closed);
    })()
      .catch((e: unknown) => this.o.log.warn({ err: e }, 'machines: reading the images failed'))
      .finally(() => (this.choosing = null));
  }

  /** Waits for the background machine choices (tests). */
  async machineChoices(): Promise<void> {
    while (this.choosing) await this.choosing;
  }

  /** Resync: every instance of this host once more (a failed read is tried at the next resync). */
  private async kickAll(): Promise<void> {
    try {
      for (const i of await this.s.store.read((tx) => tx.instances.all())) if (this.mine(i)) this.kick(i.id);
    } catch (e) {
      this.o.log.warn({ err: e }, 'machine resync: reading the store failed');
    }
  }

  /** Instances placed on this host (the others' VMs belong to their hosts' agents). */
  private mine(i: InstanceRec): boolean {
    return i.host_id === this.s.hostId;
  }

  async stop(): Promise<void> {
    this.closed = true;
    this.off?.();
    await this.choosing; // a trial boot under way ends with its VM
    this.probes?.endAll();
    this.timers.clearAll();
    // held marks go with the process: the next daemon adopts the VM and takes its marks again
    this.markTimers.clearAll();
    this.heldMarks.clear();
    await this.queue.stop();
    await this.driver.close();
  }

  /** Waits until every queued reconcile has run (tests). */
  idle(): Promise<void> {
    return this.queue.drain();
  }

  private async kickVolumeOwner(volumeId: string): Promise<void> {
    const v = await this.s.store.read((tx) => tx.volumes.getAny(volumeId)).catch(() => undefined);
    if (v?.instance_id) this.kick(v.instance_id);
  }

  /** On daemon start: re-attach to running VMs, settle the ones that vanished, remove orphans. */
  private async adoptAll(): Promise<void> {
    const all = (await this.s.store.read((tx) => tx.instances.all())).filter((i) => this.mine(i));
    const known = new Set(all.map((i) => i.id));
    await killStrays(this.driver, join(this.s.config.dataDir, 'instances'), all, this.o.log, (id, m) =>
      this.note(id, m),
    );
    for (const inst of all) {
      const rt = inst.runtime as Partial<RuntimeRec>;
      if (rt.pid) {
        const dir = this.s.paths.instance(inst.id);
        const spec = {
          id: inst.id,
          dir,
          contract: rt.contract ?? 'unihost',
          // a VM being restored from a snapshot (still starting): resumed and marked ready once loaded.
          // Not one paused later for a snapshot of its own (stopping): that one must stay paused.
          ...(rt.restored && inst.state === 'starting'
            ? { restore: snapshotFile(inst.snapshot?.source ? this.s.paths.instance(inst.snapshot.source) : dir) }
            : {}),
          // a running instance's VM a checkpoint had paused when the last daemon died runs on
          ...(inst.state === 'running' || inst.state === 'draining' ? { resumePaused: true } : {}),
        } as MachineSpec;
        const alive = await this.driver.adopt(spec, rt as RuntimeRec);
        if (alive) this.vmVolumes.track(inst.id, await this.volumeIds(inst.id));
        if (!alive) this.note(inst.id, `the VM (pid ${rt.pid}) ended while the daemon was down`);
        this.o.log.info(
          { id: inst.id, pid: rt.pid, alive },
          alive ? 'adopted running VM' : 'VM ended while the daemon was down',
        );
      } else if (inst.state === 'stopping' || inst.state === 'draining') {
        // A stop with no VM (it never booted, or the daemon died around the kill): the stop is
        // complete, unless a start came meanwhile (acknowledged: it must not be lost).
        await this.s.store.tx((tx) => stopWithoutVmInTx(tx, inst.id, this.now()));
      } else if (!['stopped', 'standby', 'starting', 'template', 'checkpoint'].includes(inst.state)) {
        this.note(inst.id, 'the VM was not running when the daemon started');
        await this.s.store.tx((tx) => settleVanishedInTx(tx, inst.id, this.now()));
      }
      this.kick(inst.id);
    }
    await this.vmVolumes.release(this.s.store);
    const dir = join(this.s.config.dataDir, 'instances');
    if (existsSync(dir)) {
      for (const id of readdirSync(dir)) if (!known.has(id)) rmSync(join(dir, id), { recursive: true, force: true });
    }
  }

  /** Appends a platform message to the instance's console log, so `GET log` shows why. */
  private note(id: string, msg: string): void {
    new ConsoleLog(this.s.paths.instance(id)).append(Buffer.from(`\n[unihost] ${msg}\n`));
  }

  /** This agent may act: its host's lease is held (fencing, docs/hosts.md). */
  private held(): boolean {
    return this.o.lease?.held() ?? true;
  }

  /**
   * The lease was lost: this host was declared dead and its instances were
   * moved or stopped. Its VMs end now (none may run beside its new copy);
   * what stays this host's is reconciled when the lease is held again.
   */
  async fence(): Promise<void> {
    for (const id of this.driver.list()) {
      this.o.log.warn({ id }, 'host lease lost: killing the VM');
      await this.driver.kill(id).catch(() => undefined);
    }
  }

  /** The lease is held again: every instance of the store is looked at once more. */
  regained(): void {
    void this.kickAll();
  }

  private async reconcile(id: string): Promise<void> {
    if (this.closed) return;
    // fenced: the host's lease is not held, another host may be taking its instances over
    if (!this.held()) return;
    const found = await this.s.store.read((tx) => tx.instances.getAny(id));
    // placed on another host (or never on this one): its VM, if this host has one, is not its own
    const inst = found && this.mine(found) ? found : undefined;
    const vm = this.driver.inspect(id);
    if (!inst) {
      this.timers.clear(id);
      this.unrecordedExits.delete(id);
      this.unrecordedMarks.delete(id);
      this.takeHeldMarks(id);
      // Only what this host had (a VM, or the files of one) has a tap here. Every change of an instance on
      // another host comes by too: removing its (absent) tap each time queued the network's commands, a
      // spawned `ip` each, ahead of this host's own boots (bench/hosts: the agents' CPU more than doubled).
      // A tap whose instance left no files here is a stray, removed when the daemon starts (network sync).
      const hadHere = vm.running || existsSync(this.s.paths.instance(id));
      if (hadHere) await this.driver.delete(id, this.s.paths.instance(id));
      this.vmVolumes.untrack(id);
      await this.vmVolumes.release(this.s.store);
      if (hadHere) await this.detachNet(id);
      return;
    }
    // a checkpoint runs nothing: it is taken once, of the VM of the instance it names
    if (inst.state === 'checkpoint') return this.snapshots.checkpoint(inst);
    const now = this.now();
    const rt = inst.runtime as Partial<RuntimeRec>;
    if (!vm.running) {
      // A VM's end that could not be recorded yet (its transaction failed): record it now.
      const ended = this.unrecordedExits.get(id);
      if (ended && rt.pid) return this.onExit(inst, rt, ended);
      if (!rt.pid) await this.snapshots.tidy(inst);
      if (inst.state === 'starting' && inst.desired === 'running' && !rt.pid) return this.boot(inst);
      if ((inst.state === 'stopping' || inst.state === 'draining') && !rt.pid)
        return this.s.store.tx((tx) => stopWithoutVmInTx(tx, inst.id, now));
      if (inst.state === 'stopped' && inst.desired === 'running' && inst.restart_next_at) {
        const due = Date.parse(inst.restart_next_at);
        if (due > now) return this.timers.at(id, due, now);
        return this.restartNow(inst);
      }
      return;
    }
    // marks of this boot that could not be recorded yet: recorded now, in their order (the change kicks again)
    const marks = this.unrecordedMarks.get(id);
    if (marks && (inst.state === 'starting' || inst.state === 'running')) {
      for (const ev of [...marks.values()]) await this.onVmEvent(id, ev);
      return;
    }
    switch (inst.state) {
      case 'stopped':
        // its host lost its lease meanwhile and the instance was settled as stopped: the VM goes
        this.note(id, 'the VM ran on after its instance was stopped (its host had lost its lease); ending it');
        return this.driver.kill(id);
      case 'starting':
        if (rt.spawnedAt && now - rt.spawnedAt >= this.bootTimeoutMs) {
          const secs = Math.round(this.bootTimeoutMs / 1000);
          this.note(
            id,
            inst.vmm_ready_time_us !== null && rt.readyPorts?.length
              ? `the application did not accept connections on port ${rt.readyPorts.join(', ')} within ${secs} s; stopping it`
              : `the guest did not signal ready within ${secs} s; stopping it`,
          );
          return this.escalate(inst);
        }
        if (rt.spawnedAt) this.timers.at(id, rt.spawnedAt + this.bootTimeoutMs, now);
        return;
      case 'running':
        if (inst.restart_attempt > 0 && inst.started_at) {
          // Counted from the guest's ready signal: boot time is not "running without problems".
          const healthyAt = readyAt(inst) + HEALTHY_AFTER_MS;
          if (now >= healthyAt) {
            await this.ownTx(id, (tx) => tx.instances.updateStatus(id, { restart_attempt: 0, restart_next_at: null }));
          } else this.timers.at(id, healthyAt, now);
        }
        return;
      case 'draining': {
        const until = inst.stop_request?.drain_until ?? now;
        if (now < until && this.o.connections?.(id) !== 0) return this.timers.at(id, until, now);
        await this.s.store.tx(async (tx) => {
          const cur = await tx.instances.getAny(id);
          if (cur) await fire(tx, cur, 'drained');
        });
        return;
      }
      case 'stopping':
        if (!rt.stopSentAt) await this.leaveGateway(id);
        if (inst.stop_request?.force) return this.driver.kill(id);
        // stateful standby or suspend: the VM's memory goes to a snapshot and the VM ends (else a plain stop)
        if (inst.stop_request?.snapshot && !rt.stopSentAt && (await this.snapshots.take(inst, rt)))
          return this.timers.at(id, now + this.stopTimeoutMs, now);
        if (rt.shutdown === 'none') {
          this.note(id, 'the kernel does not honour shutdown requests (image metadata): ending the VM at once');
          return this.escalate(inst);
        }
        if (!rt.stopSentAt) {
          await this.ownTx(id, (tx) => tx.instances.updateStatus(id, { runtime: { ...rt, stopSentAt: now } }));
          await this.driver.stop(id);
          return this.timers.at(id, now + this.stopTimeoutMs, now);
        }
        if (now >= rt.stopSentAt + this.stopTimeoutMs) {
          this.note(
            id,
            `the guest did not shut down within ${Math.round(this.stopTimeoutMs / 1000)} s; stopping it forcefully`,
          );
          return this.escalate(inst);
        }
        return this.timers.at(id, rt.stopSentAt + this.stopTimeoutMs, now);
      default:
        return;
    }
  }

  /** `beforeStop`, bounded: a stuck gateway delays a stop by at most 2 s. */
  private async leaveGateway(id: string): Promise<void> {
    if (!this.o.beforeStop) return;
    let t: NodeJS.Timeout | undefined;
    await Promise.race([
      this.o.beforeStop(id).catch(() => undefined),
      new Promise<void>((r) => (t = setTimeout(r, 2000))),
    ]);
    clearTimeout(t);
  }

  /** Turns a stop (or a boot that timed out) into a forced stop, keeping who initiated it. */
  private async escalate(inst: InstanceRec): Promise<void> {
    await this.s.store.tx(async (tx) => {
      const cur = await tx.instances.getAny(inst.id);
      if (cur) await fire(tx, cur, 'stop-force', { stop_request: escalatedStop(cur) });
    });
    await this.driver.kill(inst.id);
  }

  /**
   * A back-off delay has passed: start again (live quotas apply). A refusal
   * (a quota, a full host) ends the restart sequence; a store that conflicted
   * or could not be reached is tried again (the reconcile's retry): under a
   * burst of boots on several hosts a restart lost ten serialization
   * conflicts in a row, and its instance stayed stopped for good.
   */
  private async restartNow(inst: InstanceRec): Promise<void> {
    try {
      await this.s.store.tx((tx) => restartInTx(tx, this.s, inst.id));
    } catch (e) {
      if (isUnihostError(e) && (e.code === 'UH_CONFLICT' || e.code === 'UH_UNAVAILABLE')) throw e;
      this.note(inst.id, `restart by policy failed: ${(e as Error).message}`);
      // the sequence ends: stopped for good until someone starts it (its tap is parked, as at a stop)
      await this.s.store.tx((tx) => tx.instances.updateStatus(inst.id, { restart_next_at: null }));
      await this.parkNet(inst.id);
    }
  }

  /** Parks the instance's tap off the bridge; a failure is logged, never fatal (the next start attaches it). */
  private parkNet(id: string): Promise<void> {
    return this.netStep(id, (n) => n.park(id), 'taking the tap off the bridge failed');
  }

  /** Removes the instance's tap; a failure is logged, never fatal (the next start re-creates it). */
  private detachNet(id: string): Promise<void> {
    return this.netStep(id, (n) => n.detach(id), 'removing the tap failed');
  }

  private async netStep(id: string, step: (n: NetworkHooks) => Promise<void>, failed: string): Promise<void> {
    try {
      if (this.o.network) await step(this.o.network);
    } catch (e) {
      this.o.log.warn({ id, err: e }, failed);
    }
  }

  private async boot(inst: InstanceRec): Promise<void> {
    // a new boot: the last one's marks are moot
    this.unrecordedMarks.delete(inst.id);
    this.takeHeldMarks(inst.id);
    const volumes = await this.s.store.read((tx) => tx.volumes.forInstance(inst.id));
    // a volume being made, resized or copied: the boot waits (the volume's change kicks us again)
    if (volumes.some((v) => v.state === 'initializing' || v.state === 'uninitialized' || v.state === 'busy')) return;
    const broken = volumes.find((v) => v.state === 'error');
    const t0 = this.now();
    let rt: MachineRuntime;
    let plan: BootPlan;
    try {
      if (broken) throw new Error(`volume '${broken.name}' is in state error: ${broken.message ?? 'see the operator'}`);
      for (const v of volumes) {
        const problem = await this.o.volumes.check(v.id);
        if (problem) {
          await this.s.store.tx((tx) => tx.volumes.update(v.id, { state: 'error', message: problem }));
          throw new Error(`volume '${v.name}': ${problem}`);
        }
      }
      const restore = (i: InstanceRec, dir: string, machine: string) => this.snapshots.planRestore(i, dir, machine);
      plan = await bootPlan(this.s, { ...this.o, restore, chooser: this.chooser, warm: this.warm }, inst, t0, () =>
        this.now(),
      );
      // a volume being copied (`admin backup`): the boot waits for the release, which kicks it.
      // Checked in the same turn as `track`, so a hold either sees this VM or this boot sees the hold.
      if (this.vmVolumes.isHeld(volumes.map((v) => v.id))) {
        if (plan.spec.warm) this.warm?.release(plan.spec.warm);
        this.o.log.info({ id: inst.id }, 'boot waits: a volume is being backed up');
        return;
      }
      this.vmVolumes.track(
        inst.id,
        volumes.map((v) => v.id),
      );
      rt = await this.driver.start(plan.spec);
      // a restore whose ports accepted in its snapshot is running once resumed: they are only touched
      if (inst.private_ip) this.probes?.expect(inst.id, inst.private_ip, plan.readyPorts, !plan.readyAtResume);
    } catch (e) {
      this.vmVolumes.untrack(inst.id);
      await this.detachNet(inst.id);
      this.note(inst.id, `the VM could not be started: ${(e as Error).message}`);
      this.o.log.warn({ id: inst.id, err: e }, 'boot failed');
      await this.s.store.tx(async (tx) => {
        const cur = await tx.instances.getAny(inst.id);
        if (!cur) return;
        await fire(tx, cur, 'exited', {
          stop_request: null,
          stop_reason: STOP.P, // the platform failed to start it
          exit_code: null,
          stop_code: null,
          stopped_at: new Date(this.now()).toISOString(),
          restart_next_at: null,
        });
      });
      return;
    }
    // The rules admit the tap while QEMU starts (NetworkDriver.attachTap); a VM whose tap they did not admit goes.
    const netFailure = await plan.admitted.then(
      () => undefined,
      (e: unknown) => e as Error,
    );
    this.o.log.info({ id: inst.id, pid: rt.pid, accel: rt.accel }, 'VM started');
    await this.ownTx(inst.id, (tx) => recordBootInTx(tx, inst, rt, plan, t0));
    if (netFailure) {
      this.note(inst.id, `the network rules did not admit its tap: ${netFailure.message}; stopping it`);
      return this.escalate(inst);
    }
    this.timers.at(inst.id, rt.spawnedAt + this.bootTimeoutMs, this.now());
  }

  private async onVmEvent(id: string, ev: MachineEvent | MarkEvent): Promise<void> {
    if (!this.held()) {
      // fenced: an end, or a mark of the boot, is recorded once the lease is held again (if the instance is
      // still this host's). A mark dropped here leaves a booted instance `starting` until its boot timeout
      // (the likely cause of one seen in bench/hosts: an agent busy with boots passes its renewals on late).
      if (ev.type === 'exit') this.unrecordedExits.set(id, ev);
      else this.keepMark(id, ev);
      return;
    }
    const found = await this.s.store.read((tx) => tx.instances.getAny(id));
    // an instance placed elsewhere meanwhile: its VM here is not its own (reconcile ends it)
    const inst = found && this.mine(found) ? found : undefined;
    if (!inst) {
      this.unrecordedExits.delete(id);
      if (found) this.kick(id);
      return;
    }
    const rt = inst.runtime as Partial<RuntimeRec>;
    if (ev.type === 'exit') {
      this.probes?.end(id);
      this.vmVolumes.untrack(id);
      this.unrecordedMarks.delete(id);
      await this.writeHeldMarks(id);
      // a restore that never resumed: the snapshot goes and the instance boots afresh
      if (rt.restored && inst.vmm_ready_time_us === null && (await this.snapshots.restoreFailed(inst, ev.stderr)))
        return this.kick(id);
      // Kept until recorded: if the transaction fails, the retried reconcile records it (level-based).
      this.unrecordedExits.set(id, ev);
      return this.onExit(inst, rt, ev);
    }
    // A resumed guest, and a Unikraft kernel's end of banner, give the init and ready marks at once: the
    // driver sends `ready` alone and both are recorded in its one transaction (a ready guest has run init).
    const resumed = ev.type === 'ready' && !!rt.restored;
    if (ev.type === 'init' && rt.restored) return;
    // An app that listens is running when its ports accept (probed from the host), not at the handover.
    const probe =
      ev.type === 'ready' && !!rt.readyPorts?.length && !!inst.private_ip && !!this.probes && !rt.readyAtResume;
    if (probe) this.probes?.start(id, inst.private_ip!, rt.readyPorts!);
    if (resumed && inst.snapshot) await this.snapshots.consumed(id);
    const since = (at: number): number => Math.max(0, (at - (rt.spawnedAt ?? at)) * 1000);
    // Each mark is taken once per boot (boot() clears them): an adopted VM replays its
    // control channel and reconnects QMP, which must not move the boot's timings.
    const field = {
      loaded: 'vmm_load_time_us',
      init: 'vmm_ready_time_us',
      ready: probe ? null : 'boot_time_us',
      listening: 'boot_time_us',
    } as const;
    const f = field[ev.type];
    if (!f && ev.type !== 'ready') return;
    const mark: HeldMark = { ev, fields: {} };
    if (ev.type === 'ready') mark.fields.vmm_ready_time_us = since(ev.at);
    if (f) mark.fields[f] = since(ev.at);
    const kept = this.unrecordedMarks.get(id);
    if (kept?.delete(ev.type) && kept.size === 0) this.unrecordedMarks.delete(id);
    // a fresh boot's marks before `booted` wait for it; a restore's are recorded at once (an end before its
    // resume is recorded counts as a failed restore: the snapshot goes and the instance boots afresh)
    if (f !== 'boot_time_us' && !rt.restored) return this.holdMark(id, mark);
    const held = this.takeHeldMarks(id);
    await this.writeMarks(id, [...held, mark], f === 'boot_time_us');
  }

  /**
   * Records marks in one transaction: each field the record lacks, the
   * earliest mark's value; `booted` fires with them when `booted` is set.
   * Marks that could not be recorded are kept, as a VM's end is: the
   * retried reconcile records them.
   */
  private async writeMarks(id: string, marks: HeldMark[], booted: boolean): Promise<void> {
    try {
      await this.ownTx(id, async (tx) => {
        const cur = await tx.instances.getAny(id);
        // placed on another host meanwhile (held marks wait up to MARK_HOLD_MS): not this VM's record
        if (!cur || !this.mine(cur)) return;
        const patch: StatusPatch = {};
        for (const m of marks)
          for (const [k, v] of Object.entries(m.fields) as [MarkField, number][])
            if (cur[k] === null && patch[k] === undefined) patch[k] = v;
        if (booted && (await fire(tx, cur, 'booted', patch))) return;
        if (Object.keys(patch).length > 0) await tx.instances.updateStatus(id, patch);
      });
    } catch (e) {
      for (const m of marks) this.keepMark(id, m.ev);
      throw e;
    }
  }

  private holdMark(id: string, mark: HeldMark): void {
    const held = this.heldMarks.get(id);
    if (held) {
      if (!held.some((m) => m.ev.type === mark.ev.type)) held.push(mark);
      return;
    }
    this.heldMarks.set(id, [mark]);
    const now = this.now();
    this.markTimers.at(id, now + MARK_HOLD_MS, now);
  }

  private takeHeldMarks(id: string): HeldMark[] {
    const held = this.heldMarks.get(id) ?? [];
    this.heldMarks.delete(id);
    this.markTimers.clear(id);
    return held;
  }

  /** The held marks of a boot, on their own (its end comes, or its last mark is late); never throws. */
  private async writeHeldMarks(id: string): Promise<void> {
    const marks = this.takeHeldMarks(id);
    if (marks.length === 0) return;
    if (!this.held()) {
      for (const m of marks) this.keepMark(id, m.ev);
      return;
    }
    await this.writeMarks(id, marks, false).catch((e: unknown) =>
      this.o.log.warn({ id, err: e }, 'recording a boot mark failed; kept for the next look'),
    );
  }

  /** A mark of this boot not recorded yet: recorded when the instance is looked at again (`unrecordedMarks`). */
  private keepMark(id: string, ev: MarkEvent): void {
    this.unrecordedMarks.set(id, (this.unrecordedMarks.get(id) ?? new Map<string, MarkEvent>()).set(ev.type, ev));
  }

  /**
   * A transaction on one instance's own record: what its VM did (TxOptions.instance). On PostgreSQL it
   * never conflicts with a placement, which reads every instance: a burst of boots on several hosts
   * made these the most of bench/hosts' conflicts. Runtime state (TxOptions.runtime): on SQLite it
   * commits without an fsync, which took ~1 ms of the event loop a commit on a boot's path.
   */
  private ownTx<T>(id: string, fn: (tx: Tx) => Promise<T>): Promise<T> {
    return this.s.store.tx(fn, { instance: id, runtime: true });
  }

  /** Records a VM's end (src/reconcile/machine-exit.ts) and logs what was decided. */
  private async onExit(inst: InstanceRec, rt: Partial<RuntimeRec>, ev: ExitEvent): Promise<void> {
    const failure = vmmFailure(ev, ev.console);
    if (failure) this.note(inst.id, `the VMM failed: ${failure}`);
    const now = this.now();
    const done = await this.s.store.tx((tx) => recordExitInTx(tx, this.s, inst.id, rt, ev, now));
    // A standby, a template, a restart by policy or a start that came meanwhile keep the tap on the
    // bridge: the wake or the next boot finds it ready. Stopped for good, it is parked off the bridge:
    // a bridge has ports for 1,023 taps, and stopped instances must not take them (docs/network.md,
    // "Lifecycle"); the next start puts it back. Done before this reconcile ends, so no boot of the
    // instance comes between.
    if (done?.state === 'stopped' && !done.restart) await this.parkNet(inst.id);
    this.unrecordedExits.delete(inst.id);
    if (done) this.o.log.info({ id: inst.id, ...done.info, restart: done.restart, delay: done.delay }, 'VM stopped');
  }

  /**
   * Holds a volume for a consistent copy (`unihost admin backup`, through
   * the control socket): the VM that has it open is paused (QEMU drains and
   * flushes its disks first), and boots that would attach it wait. `release`
   * lets both go on. A VM still booting is paused once its QMP answers.
   */
  async holdVolume(volumeId: string): Promise<{ paused: string[]; release(): Promise<void> }> {
    if (!(await this.s.store.read((tx) => tx.volumes.getAny(volumeId)))) throw new Error(`no volume ${volumeId}`);
    this.vmVolumes.hold(volumeId);
    const paused: string[] = [];
    const release = async (): Promise<void> => {
      for (const id of paused)
        await this.driver.resume!(id).catch((e: unknown) =>
          this.o.log.warn({ id, err: e }, 'resuming a VM paused for a backup failed'),
        );
      this.vmVolumes.unhold(volumeId);
      const v = await this.s.store.read((tx) => tx.volumes.getAny(volumeId));
      if (v?.instance_id) this.kick(v.instance_id);
    };
    try {
      for (const id of this.vmVolumes.users(volumeId)) if (await this.pauseForCopy(id)) paused.push(id);
    } catch (e) {
      await release();
      throw e;
    }
    if (paused.length) this.o.log.info({ volume: volumeId, paused }, 'VM paused for a backup of its volume');
    return { paused, release };
  }

  /** Pauses the VM of `id` (waiting up to 30 s for one still booting); false when it ended meanwhile. */
  private async pauseForCopy(id: string): Promise<boolean> {
    if (!this.driver.pause || !this.driver.resume)
      throw new Error('this machine driver cannot pause VMs: stop the instance to back up its volume');
    const until = this.now() + 30_000;
    for (;;) {
      if (!this.vmVolumes.tracked(id)) return false;
      try {
        await this.driver.pause(id);
        return true;
      } catch (e) {
        if (this.now() > until)
          throw new Error(`the VM of instance ${id} could not be paused: ${(e as Error).message}`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  private async volumeIds(instanceId: string): Promise<string[]> {
    return (await this.s.store.read((tx) => tx.volumes.forInstance(instanceId))).map((v) => v.id);
  }

  /** The instances whose VMs run here now. */
  vms(): string[] {
    return this.driver.list();
  }

  /** CPU time and memory of an instance's VM, for autoscale and accounting. */
  stats(id: string): { cpuMs: number; rssBytes: number } | undefined {
    return this.driver.stats(id);
  }
}
