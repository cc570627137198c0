import type { InstanceRec, InstanceState, StatusPatch, StopRequest, Tx } from '../store/types.js';

/**
 * Instance state machine of the API spec as a table: (from, trigger) -> to.
 * Services consult it for user triggers; the machine controller for host
 * events. A missing row means the trigger does nothing in that state.
 */
export type InstanceTrigger =
  | 'start' // PUT start, autostart, restart by policy, wake from standby
  | 'stop' // PUT stop (graceful)
  | 'stop-drain' // PUT stop with drain_timeout_ms > 0
  | 'stop-force' // PUT stop with force
  | 'booted' // guest signalled ready (application main reached)
  | 'drained' // last connection closed or drain timeout expired
  | 'exited' // VM ended (any cause), or a stop completed with no VM to end
  | 'slept' // the VM of an idle scale-to-zero master ended: it waits in standby for traffic
  | 'idle' // scale-to-zero: no traffic for one cooldown
  | 'stop-for-good' // PUT stop during a stop that would end in standby (a suspend, a scale-to-zero sleep): stopped instead
  | 'wake' // request for a standby instance
  | 'templated'; // its memory went to a template's snapshot (or it had one, in standby): it is a template now

export const INSTANCE_TRANSITIONS: ReadonlyArray<readonly [InstanceState, InstanceTrigger, InstanceState]> = [
  ['stopped', 'start', 'starting'],
  ['standby', 'start', 'starting'],
  ['standby', 'wake', 'starting'],
  ['starting', 'booted', 'running'],
  ['starting', 'stop', 'stopping'],
  ['starting', 'stop-drain', 'stopping'],
  ['starting', 'stop-force', 'stopping'],
  ['starting', 'exited', 'stopped'],
  ['running', 'stop', 'stopping'],
  ['running', 'stop-drain', 'draining'],
  ['running', 'stop-force', 'stopping'],
  ['running', 'idle', 'stopping'],
  ['running', 'exited', 'stopped'],
  ['draining', 'drained', 'stopping'],
  ['draining', 'stop-force', 'stopping'],
  ['draining', 'exited', 'stopped'],
  ['stopping', 'stop-force', 'stopping'],
  ['stopping', 'exited', 'stopped'],
  ['stopping', 'stop-for-good', 'stopping'],
  ['draining', 'stop-for-good', 'draining'],
  ['stopping', 'slept', 'standby'],
  ['standby', 'stop', 'stopped'],
  ['standby', 'stop-force', 'stopped'],
  ['stopping', 'templated', 'template'],
  ['standby', 'templated', 'template'],
];

const TABLE = new Map<string, InstanceState>(INSTANCE_TRANSITIONS.map(([f, t, to]) => [`${f}:${t}`, to]));

/** The state after `trigger` in state `from`, or undefined when the trigger does nothing there. */
export function nextState(from: InstanceState, trigger: InstanceTrigger): InstanceState | undefined {
  return TABLE.get(`${from}:${trigger}`);
}

/** What a trigger writes besides `state`: the status fields it implies (stop fields, the stop request, timings). */
export type Effects = StatusPatch & { stop_request?: StopRequest | null };

/**
 * Fires `trigger` on `inst` inside `tx`: the only writer of `state` and
 * `stop_request`, for services (user and platform commands) and the host's
 * reconcilers (booted, drained, exited, slept) alike. When the table has a
 * row, the instance moves to its state with `effects` and the new record
 * is returned; otherwise nothing changes and `undefined` is returned.
 * `inst` must have been read in `tx` (a stale state is refused). `resetRestarts` (a manual start or
 * stop) ends a restart sequence whether or not the state changes, as the
 * API spec's restart policy says.
 */
export async function fire(
  tx: Tx,
  inst: InstanceRec,
  trigger: InstanceTrigger,
  effects: Effects = {},
  o: { resetRestarts?: boolean } = {},
): Promise<InstanceRec | undefined> {
  const to = nextState(inst.state, trigger);
  const reset: StatusPatch = o.resetRestarts ? { restart_attempt: 0, restart_next_at: null } : {};
  if (!to) {
    if (o.resetRestarts) await tx.instances.updateStatus(inst.id, reset);
    return undefined;
  }
  const patch = { ...effects, ...reset };
  await tx.instances.setState(inst.id, inst.state, to, patch);
  return { ...inst, ...patch, state: to };
}

/**
 * Stopped, and no restart by policy nor a start that came during its stop
 * is due: the run is over until someone starts it again.
 */
export const endedForGood = (i: Pick<InstanceRec, 'state' | 'restart_next_at'>): boolean =>
  i.state === 'stopped' && i.restart_next_at === null;

/** When an instance's guest became ready (ms since the epoch): its spawn (`started_at`) plus its boot time; 0 never started. */
export const readyAt = (i: Pick<InstanceRec, 'started_at' | 'boot_time_us'>): number =>
  (Date.parse(i.started_at ?? '') || 0) + Math.round((i.boot_time_us ?? 0) / 1000);

/** States of records that never run: templates and checkpoints (memory kept for new instances to start from). */
export const FROZEN: ReadonlySet<InstanceState> = new Set(['template', 'checkpoint']);

/** States that count as live for quotas (the API spec: "not in the stopped state"; templates and checkpoints never run). */
export const isLive = (s: InstanceState): boolean => s !== 'stopped' && !FROZEN.has(s);

/** States in which stop_reason, exit_code and stop_code may be read. */
export const STOP_INFO_STATES: ReadonlySet<InstanceState> = new Set(['draining', 'stopping', 'stopped', 'standby']);

const REASONS = ['OK', 'EXP', 'MATH', 'INVLOP', 'PGFAULT', 'SEGFAULT', 'HWERR', 'SECERR'];

/** The stop fields as a reader wants them in a message: `stop_reason 1, stop_code 0x7f01 (EXP, errno 0, initlvl 127)`. */
export function describeStop(r: {
  stop_reason: number | null;
  exit_code: number | null;
  stop_code: number | null;
}): string {
  const parts = [`stop_reason ${r.stop_reason ?? 'unknown'}`];
  if (r.exit_code !== null) parts.push(`exit_code ${r.exit_code}`);
  if (r.stop_code !== null) {
    const reason = r.stop_code & 0xff;
    parts.push(
      `stop_code 0x${r.stop_code.toString(16)} (${REASONS[reason] ?? reason}, errno ${(r.stop_code >> 16) & 0xff}, initlvl ${(r.stop_code >> 8) & 0x7f})`,
    );
  }
  return parts.join(', ');
}

/** The stop fields of a stopped instance, for answers of calls that waited for it to run. */
export function stopFields(r: { stop_reason: number | null; exit_code: number | null; stop_code: number | null }) {
  const out: Record<string, number> = {};
  if (r.stop_reason !== null) out.stop_reason = r.stop_reason;
  if (r.exit_code !== null) out.exit_code = r.exit_code;
  if (r.stop_code !== null) out.stop_code = r.stop_code;
  return out;
}

/** What a new instance's spec holds beyond what its create request gave (`PATCH` sets them later). */
export const specDefaults = (): Pick<InstanceRec, 'tags' | 'annotations' | 'delete_lock' | 'hostname'> => ({
  tags: [],
  annotations: {},
  delete_lock: false,
  hostname: null,
});

/** The run fields of an instance that has never run: no counters, timings or stop (create and clone). */
export const NEVER_RUN = {
  stop_request: null,
  start_count: 0,
  started_at: null,
  stopped_at: null,
  uptime_ms: 0,
  boot_time_us: null,
  stop_reason: null,
  exit_code: null,
  stop_code: null,
  vmm_start_time_us: null,
  vmm_load_time_us: null,
  vmm_ready_time_us: null,
  net_time_us: null,
  restart_attempt: 0,
  restart_next_at: null,
  restart_count: 0,
  snapshot: null,
} as const;
