import type { MachineDriver } from '../machines/driver.js';
import { stopReasonWithoutVm } from '../machines/stop-info.js';
import type { InstanceRec, Tx } from '../store/types.js';
import { fire } from '../domain/instance-states.js';
import type { RuntimeRec } from './machine-plan.js';

/**
 * Ends every VM of this data dir whose pid the store does not record: a
 * daemon killed between spawning a VM and storing its pid (the instance
 * is still `starting` and boots again), between a delete and the kill
 * (no instance), or a duplicate. Killed, not adopted: the store lacks
 * what adoption needs (spawn time, boot plan), and a boot repeats cheaply.
 */
export async function killStrays(
  driver: MachineDriver,
  instancesDir: string,
  all: InstanceRec[],
  log: { warn(o: object, m: string): void },
  note: (id: string, msg: string) => void,
): Promise<void> {
  if (!driver.scan || !driver.killStray) return;
  const pids = new Map(all.map((i) => [i.id, (i.runtime as Partial<RuntimeRec>).pid]));
  for (const vm of driver.scan(instancesDir)) {
    if (pids.get(vm.id) === vm.pid) continue;
    const gone = await driver.killStray(vm.pid);
    const why = pids.has(vm.id) ? 'a VM the store does not record' : 'a VM of a deleted instance';
    log.warn({ id: vm.id, pid: vm.pid, gone }, `killed ${why}`);
    if (pids.has(vm.id)) note(vm.id, `killed ${why} (pid ${vm.pid}), left by a daemon crash`);
  }
}

/** An instance that claims a VM nobody has (e.g. `running` with no pid): stopped, cause unknown (0). */
export async function settleVanishedInTx(tx: Tx, id: string, now: number): Promise<void> {
  const cur = await tx.instances.getAny(id);
  if (!cur) return;
  await fire(tx, cur, 'exited', {
    stop_request: null,
    stop_reason: 0,
    exit_code: null,
    stop_code: null,
    stopped_at: new Date(now).toISOString(),
    restart_next_at: null,
    runtime: {},
  });
}

/**
 * A stop of an instance without a VM (its boot waited for a volume being
 * formatted, or the daemon died around the kill): nothing to shut down, so
 * it is stopped at once with the fields of a stop without a VM (user 15,
 * platform 7, forced 28/20; `standby` for scale-to-zero), or boots if a
 * start came meanwhile.
 */
export async function stopWithoutVmInTx(tx: Tx, id: string, now: number): Promise<void> {
  const cur = await tx.instances.getAny(id);
  if (!cur || (cur.state !== 'stopping' && cur.state !== 'draining') || (cur.runtime as Partial<RuntimeRec>).pid)
    return;
  if (cur.desired === 'running') {
    // the stop is complete (no VM) and the start that came meanwhile boots it
    const stopped = await fire(tx, cur, 'exited', { stop_request: null });
    if (stopped) await fire(tx, stopped, 'start');
    return;
  }
  const req = cur.stop_request;
  const user = req?.by !== 'platform';
  const effects = {
    stop_reason: stopReasonWithoutVm(user ? 'user' : 'platform', req?.force ?? false),
    exit_code: null,
    stop_code: null,
    stopped_at: new Date(now).toISOString(),
    stop_request: null,
    restart_next_at: null,
  };
  if (!(req?.standby && (await fire(tx, cur, 'slept', effects)))) await fire(tx, cur, 'exited', effects);
}
