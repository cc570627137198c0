import { existsSync, mkdirSync, rmSync, statfsSync } from 'node:fs';
import { join } from 'node:path';
import type { MachineDriver } from '../machines/driver.js';
import type { InstanceRec, SnapshotRec, StatusPatch } from '../store/types.js';
import { effectiveQuotas } from '../domain/quotas.js';
import { endedForGood } from '../domain/instance-states.js';
import type { ControllerDeps } from './deps.js';
import { ownAddress, type RuntimeRec } from './machine-plan.js';

const MiB = 1024 * 1024;
/** Disk a snapshot must leave free on the data dir's file system. */
const DISK_RESERVE = 256 * MiB;

/** Where an instance's memory snapshot lives on its host (removed with the instance's directory). */
export const snapshotFile = (instanceDir: string): string => join(instanceDir, 'snapshot.mem');

type Log = { info(o: object, m: string): void; warn(o: object, m: string): void };

/**
 * Memory snapshots of instances (docs/snapshots.md), for the machine
 * controller: taken instead of a shutdown when a stop asks for one
 * (stateful standby, suspend), restored instead of a boot when the
 * instance has one that fits. Whatever goes wrong falls back to what the
 * platform did before snapshots (a plain stop, a cold boot) with a console
 * note, a log line and a `notice` event: a snapshot is an optimisation of
 * state the user asked to keep, never a reason for an instance not to run.
 */
export class Snapshots {
  constructor(
    private readonly s: ControllerDeps,
    private readonly driver: MachineDriver,
    private readonly log: Log,
    /** appends a platform line to the instance's console log */
    private readonly note: (id: string, msg: string) => void,
  ) {}

  /**
   * Takes the snapshot a stop asks for and ends the VM. Returns true when
   * it was written and recorded (the VM is ending), false when the stop
   * must go on as a plain one (said why everywhere).
   */
  async take(inst: InstanceRec, rt: Partial<RuntimeRec>): Promise<boolean> {
    const reason = inst.stop_request?.snapshot ?? 'standby';
    // what the instance becomes without one: a template must have it, a standby or suspend boots afresh later
    const after =
      reason === 'template' ? 'the instance did not become a template; it is stopped' : 'the instance will boot afresh';
    const problem = await this.cannotTake(inst);
    if (problem) {
      await this.fellBack(inst, `no memory snapshot: ${problem}; ${after}`);
      return false;
    }
    const path = snapshotFile(this.s.paths.instance(inst.id));
    const t0 = this.s.clock.now();
    let bytes: number;
    try {
      ({ bytes } = await this.driver.snapshot!(inst.id, path));
    } catch (e) {
      await this.fellBack(inst, `the memory snapshot failed (${(e as Error).message}); ${after}`);
      return false;
    }
    const now = this.s.clock.now();
    const rec: SnapshotRec = {
      bytes,
      created_at: new Date(now).toISOString(),
      reason,
      image: inst.image,
      memory_mb: inst.memory_mb,
      machine: rt.machine ?? 'unknown',
      vmm: this.driver.snapshotVersion ?? 'unknown',
    };
    // the address in the guest's memory: the instance's own, or the template's it was cloned from
    const guest = rt.guest ?? ownAddress(inst);
    if (guest) rec.guest = guest;
    const listening = listeningPorts(inst, rt);
    if (listening) rec.listening = listening;
    await this.s.store.tx(async (tx) => {
      if (!(await tx.instances.getAny(inst.id))) return;
      await tx.instances.updateStatus(inst.id, { snapshot: rec, runtime: { ...rt, stopSentAt: now } });
    });
    this.log.info({ id: inst.id, bytes, ms: now - t0, reason }, 'memory snapshot taken; the VM ends');
    // only now: the VM's exit must find the snapshot recorded (else it is taken for a plain stop)
    await this.driver.kill(inst.id);
    return true;
  }

  /**
   * Takes checkpoint `ck` (docs/snapshots.md, "Checkpoints") of the running
   * instance it names: pauses its VM, writes the memory into the
   * checkpoint's directory and lets the VM run on. A checkpoint that cannot
   * be taken goes, with a notice on the instance saying why.
   */
  async checkpoint(ck: InstanceRec): Promise<void> {
    const snap = ck.snapshot;
    if (!snap?.pending) return;
    const src = snap.taken_from ? await this.s.store.read((tx) => tx.instances.getAny(snap.taken_from!)) : undefined;
    const problem = !src
      ? 'the instance is gone'
      : src.state !== 'running'
        ? `the instance is ${src.state}`
        : !this.driver.snapshot || !this.driver.resume
          ? `the '${this.driver.name}' machine driver cannot take snapshots`
          : await this.cannotTake(ck);
    const failed = async (why: string): Promise<void> => {
      const msg = `checkpoint '${ck.name}' was not taken: ${why}`;
      this.log.warn({ id: ck.id, of: snap.taken_from }, msg);
      if (src) this.note(src.id, msg);
      await this.s.store.tx(async (tx) => {
        if (await tx.instances.getAny(ck.id)) await tx.instances.delete(ck.id);
        const cur = src && (await tx.instances.getAny(src.id));
        if (cur) tx.events.notice(cur, msg);
      });
    };
    if (problem || !src) return failed(problem ?? 'the instance is gone');
    const dir = this.s.paths.instance(ck.id);
    mkdirSync(dir, { recursive: true });
    const rt = src.runtime as Partial<RuntimeRec>;
    const t0 = this.s.clock.now();
    let bytes: number;
    try {
      ({ bytes } = await this.driver.snapshot!(src.id, snapshotFile(dir)));
    } catch (e) {
      return failed(`the memory snapshot failed (${(e as Error).message})`);
    } finally {
      // the instance runs on whatever happened (a failed snapshot may have paused it)
      await this.driver.resume!(src.id).catch((e: Error) =>
        this.log.warn({ id: src.id, err: e.message }, 'resuming the VM after a checkpoint failed'),
      );
    }
    const guest = rt.guest ?? ownAddress(src);
    const listening = listeningPorts(src, rt);
    const rec: SnapshotRec = {
      bytes,
      created_at: new Date(this.s.clock.now()).toISOString(),
      reason: 'checkpoint',
      image: src.image,
      memory_mb: src.memory_mb,
      machine: rt.machine ?? 'unknown',
      vmm: this.driver.snapshotVersion ?? 'unknown',
      taken_from: src.id,
      ...(guest ? { guest } : {}),
      ...(listening ? { listening } : {}),
    };
    const kept = await this.s.store.tx(async (tx) => {
      if (!(await tx.instances.getAny(ck.id))) return false;
      await tx.instances.updateStatus(ck.id, { snapshot: rec });
      return true;
    });
    if (!kept) rmSync(dir, { recursive: true, force: true }); // deleted meanwhile
    this.log.info({ id: ck.id, of: src.id, bytes, pausedMs: this.s.clock.now() - t0 }, 'checkpoint taken');
  }

  /** Why no snapshot can be taken now (the user's quota, the disk, the driver), or null. */
  private async cannotTake(inst: InstanceRec): Promise<string | null> {
    if (!this.driver.snapshot) return `the '${this.driver.name}' machine driver cannot take snapshots`;
    // at most the guest's memory (zero pages take a few bytes each)
    const need = inst.memory_mb * MiB;
    const quota = await this.s.store.read(async (tx) => {
      const user = await tx.users.get(inst.user_id);
      if (!user) return null;
      return {
        used: (await tx.usage(user.id)).snapshot_mb,
        max: effectiveQuotas(this.s.config, user).hard.snapshot_mb,
      };
    });
    if (quota && quota.used + inst.memory_mb > quota.max)
      return `quota 'snapshot_mb' would be exceeded (${quota.used} MiB used + up to ${inst.memory_mb} MiB > ${quota.max} MiB)`;
    try {
      const fs = statfsSync(this.s.config.dataDir);
      const free = fs.bavail * fs.bsize;
      if (free < need + DISK_RESERVE)
        return `the data dir's disk has ${Math.floor(free / MiB)} MiB free, less than ${inst.memory_mb + DISK_RESERVE / MiB} MiB`;
    } catch {
      /* statfs not possible: the write itself will tell */
    }
    return null;
  }

  /** Says `msg` in the console log, the log and a `notice` event, applying `patch` in the event's transaction. */
  private async fellBack(inst: InstanceRec, msg: string, patch?: StatusPatch): Promise<void> {
    this.note(inst.id, msg);
    this.log.warn({ id: inst.id }, msg);
    await this.s.store.tx(async (tx) => {
      const cur = await tx.instances.getAny(inst.id);
      if (!cur) return;
      if (patch) await tx.instances.updateStatus(inst.id, patch);
      tx.events.notice(cur, msg);
    });
  }

  /**
   * The file a boot of `inst` (into `dir`, on machine type `machine`)
   * restores from, or null: a snapshot that no longer fits the instance
   * (image, memory, machine, VMM build) or whose file is gone is dropped
   * with a note, and the instance boots afresh. A clone's first start reads
   * its template's file, which stays.
   */
  async planRestore(inst: InstanceRec, dir: string, machine: string): Promise<string | null> {
    const snap = inst.snapshot;
    if (!snap) return null;
    const path = snapshotFile(snap.source ? this.s.paths.instance(snap.source) : dir);
    const mismatch = !existsSync(path)
      ? 'its file is missing'
      : snap.image !== inst.image
        ? `it was taken of image ${snap.image}, the instance now has ${inst.image}`
        : snap.memory_mb !== inst.memory_mb
          ? `it was taken with ${snap.memory_mb} MB of memory, the instance now has ${inst.memory_mb} MB`
          : snap.machine !== machine
            ? `it was taken on machine type ${snap.machine}, the image now boots on ${machine}`
            : snap.vmm !== this.driver.snapshotVersion
              ? `it was taken by ${snap.vmm}, this host runs ${this.driver.snapshotVersion ?? 'a driver without snapshots'}`
              : null;
    if (!mismatch) return path;
    await this.drop(inst, `the memory snapshot cannot be restored (${mismatch}); booting afresh`);
    return null;
  }

  /**
   * A boot from a snapshot ended before the guest resumed: the snapshot is
   * dropped and the instance boots afresh (true), if it is still meant to
   * start; false when the exit must be recorded as usual.
   */
  async restoreFailed(inst: InstanceRec, stderr: string): Promise<boolean> {
    if (inst.state !== 'starting' || inst.desired !== 'running') return false;
    const why = stderr.trim().split('\n').slice(-2).join(' ') || 'QEMU ended while loading it';
    await this.drop(inst, `restoring the memory snapshot failed (${why}); booting afresh`, { runtime: {} });
    return true;
  }

  /** The guest resumed from the snapshot: the file has served (a later stop takes a new one). */
  async consumed(id: string): Promise<void> {
    await this.s.store.tx(async (tx) => {
      if (await tx.instances.getAny(id)) await tx.instances.updateStatus(id, { snapshot: null });
    });
    rmSync(snapshotFile(this.s.paths.instance(id)), { force: true });
  }

  /**
   * Level-based clean-up of an instance without a VM: a snapshot of an
   * instance stopped for good is discarded (a stop ends what a suspend or
   * standby kept), and a file no record points at is removed. A start that
   * came while the snapshot was being taken (a wake of a master on its way
   * to standby) leaves it `stopped` with a start due: that start restores
   * the snapshot.
   */
  async tidy(inst: InstanceRec): Promise<void> {
    if (inst.snapshot && endedForGood(inst)) {
      await this.s.store.tx(async (tx) => {
        const cur = await tx.instances.getAny(inst.id);
        if (cur?.snapshot && endedForGood(cur)) await tx.instances.updateStatus(inst.id, { snapshot: null });
      });
      this.log.info({ id: inst.id }, 'memory snapshot discarded: the instance was stopped');
    } else if (inst.snapshot) return;
    rmSync(snapshotFile(this.s.paths.instance(inst.id)), { force: true });
  }

  /** The snapshot is given up: said as a fall-back, the record and the file dropped. */
  private async drop(inst: InstanceRec, msg: string, extra: StatusPatch = {}): Promise<void> {
    await this.fellBack(inst, msg, { snapshot: null, ...extra });
    rmSync(snapshotFile(this.s.paths.instance(inst.id)), { force: true });
  }
}

/**
 * The guest ports known to accept in a VM's memory: its readiness ports once
 * this boot reached `running` (they were probed, or came accepting with the
 * snapshot it resumed from); undefined before.
 */
function listeningPorts(inst: InstanceRec, rt: Partial<RuntimeRec>): number[] | undefined {
  return inst.boot_time_us !== null && rt.readyPorts ? [...rt.readyPorts] : undefined;
}
