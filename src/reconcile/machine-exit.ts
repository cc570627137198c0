import { backoffMs, shouldRestart } from '../domain/restart.js';
import type { MachineEvent } from '../machines/driver.js';
import { deriveStop, isFailure, STOP, stopReasonWithoutVm, vmmFailure, type StopInfo } from '../machines/stop-info.js';
import type { ControllerDeps } from './deps.js';
import type { InstanceRec, InstanceState, StopRequest, Tx } from '../store/types.js';
import { fire, type Effects } from '../domain/instance-states.js';
import type { RuntimeRec } from './machine-plan.js';

export type ExitEvent = Extract<MachineEvent, { type: 'exit' }>;

/** What the host observed of a VM's end, mapped to the stop fields (docs/guest-contract.md §4). */
export function stopInfoOf(inst: InstanceRec, rt: Partial<RuntimeRec>, ev: ExitEvent): StopInfo {
  const req = inst.stop_request;
  const forced = req?.force ?? false;
  // the VM ended after its memory went to a snapshot: a clean stop by whoever asked, the guest untouched
  if (req?.snapshot && inst.snapshot && !forced)
    return { stop_reason: stopReasonWithoutVm(req.by, false), exit_code: null, stop_code: null };
  if (!forced && vmmFailure(ev, ev.console)) return { stop_reason: STOP.P, exit_code: null, stop_code: null };
  return deriveStop({
    control: ev.control,
    status: ev.status,
    panicked: ev.panicked,
    initiator: req ? req.by : 'none',
    forced,
    console: ev.console,
    contract: rt.contract ?? 'unihost',
  });
}

/**
 * Records a VM's end on the current record (a stop or start request may have
 * landed meanwhile) and decides on a restart, inside `tx`: the stop fields,
 * `stopped` (or `standby` for scale-to-zero), a restart by policy with its
 * back-off, a start that came during the stop, delete-on-stop. Returns what
 * was decided, or null when the instance is gone.
 */
export async function recordExitInTx(
  tx: Tx,
  s: ControllerDeps,
  id: string,
  rt: Partial<RuntimeRec>,
  ev: ExitEvent,
  now: number,
): Promise<{ info: StopInfo; restart: boolean; delay: number; state?: InstanceState } | null> {
  const cur = await tx.instances.getAny(id);
  if (!cur) return null;
  const info = stopInfoOf(cur, rt, ev);
  const req = cur.stop_request;
  const wanted = cur.desired === 'running';
  // Only ends from inside the instance count; a VMM failure (4) is the platform's and is not retried.
  const initiator = req ? req.by : info.stop_reason & STOP.P ? 'platform' : 'none';
  const restart = wanted && shouldRestart(cur.restart_policy, initiator, isFailure(info));
  // A start that arrived while the VM was being stopped: boot again at once (not a restart by policy).
  // A boot the host gave up on (it never signalled ready) is not started again.
  const startAgain = wanted && !restart && req !== null && !req.gave_up;
  const delay = restart ? backoffMs(cur.restart_attempt) : 0;
  for (const v of await tx.volumes.forInstance(cur.id))
    if (v.state === 'mounted') await tx.volumes.update(v.id, { state: 'idle' });
  if (cur.features.includes('delete-on-stop') && !restart && !startAgain) {
    await s.instances.deleteInTx(tx, (await tx.users.get(cur.user_id))!, cur);
    return { info, restart, delay };
  }
  const startedAt = cur.started_at ? Date.parse(cur.started_at) : ev.at;
  // scale-to-zero: the idle master waits in standby for traffic (unless a start came meanwhile)
  const standby = req?.standby === true && !restart && !startAgain;
  const patch: Effects = {
    ...info,
    stopped_at: new Date(ev.at).toISOString(),
    uptime_ms: cur.uptime_ms + Math.max(0, ev.at - startedAt),
    runtime: {},
    // a due restart (or start) is what keeps it from being stopped for good (endedForGood)
    restart_next_at: restart ? new Date(now + delay).toISOString() : startAgain ? new Date(now).toISOString() : null,
  };
  if (restart) patch.restart_attempt = cur.restart_attempt + 1;
  const effects = { ...patch, stop_request: null };
  // becoming a template: its memory is in the snapshot (without one, a plain stop: the notice said so)
  const templated = req?.snapshot === 'template' && cur.snapshot !== null && !restart && !startAgain;
  const ended =
    (templated && (await fire(tx, cur, 'templated', effects))) ||
    (standby && (await fire(tx, cur, 'slept', effects))) ||
    (await fire(tx, cur, 'exited', effects));
  // An end the state table has no row for (the record already says the VM is down): keep what was observed.
  if (!ended) await tx.instances.updateStatus(cur.id, { runtime: {} });
  return { info, restart, delay, ...(ended ? { state: ended.state } : {}) };
}

/** The stop request of a stop (or a boot that timed out) made forced, keeping who initiated it. */
export function escalatedStop(inst: InstanceRec): StopRequest {
  const req = inst.stop_request;
  return {
    force: true,
    drain_until: null,
    by: req?.by ?? 'platform',
    // scale-to-zero of a kernel that ignores shutdown: still standby once it is down
    ...(req?.standby ? { standby: true } : {}),
    // no stop was asked: the host gives up on a boot (no start follows it, unlike a start during a stop)
    ...(req ? {} : { gave_up: true }),
  };
}

/** A restart by policy whose back-off has passed: started again in `tx` (live quotas apply; throws when refused). */
export async function restartInTx(tx: Tx, s: ControllerDeps, id: string): Promise<void> {
  const cur = await tx.instances.getAny(id);
  if (!cur || cur.state !== 'stopped' || cur.desired !== 'running') return;
  const user = (await tx.users.get(cur.user_id))!;
  await s.instances.startInTx(tx, user, cur, false);
  // A restart by policy is counted when it happens; a start that came during a stop (attempt 0,
  // since a manual start resets the sequence) is no restart.
  const restarted = cur.restart_attempt > 0 ? 1 : 0;
  await tx.instances.updateStatus(cur.id, { restart_next_at: null, restart_count: cur.restart_count + restarted });
}
