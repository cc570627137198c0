import type { Contract, ControlState } from './driver.js';
import { APP_INITLVL, handoverOffset, unikraftCrash } from './unikraft.js';

/** stop_reason bits (the API spec's stop reason table). */
export const STOP = { K: 1, A: 2, P: 4, U: 8, F: 16 } as const;

/**
 * `stop_reason` of a stop that found no VM to end (it never booted, or it
 * waited in standby): a clean shutdown asked by `by` (user 15, platform 7),
 * or a forced one (user 28, platform 20).
 */
export function stopReasonWithoutVm(by: 'user' | 'platform', force: boolean): number {
  const who = by === 'user' ? STOP.U | STOP.P : STOP.P;
  return force ? STOP.F | who : who | STOP.A | STOP.K;
}

/**
 * Maps what the host observed when a VM ended to the spec's `stop_reason`,
 * `exit_code` and `stop_code` (the API spec's bit tables; the mapping in docs/guest-contract.md §4).
 */
export interface StopInput {
  control: ControlState;
  /** VMM exit status; null when unknown (adopted VM) */
  status: number | null;
  /** QMP GUEST_PANICKED seen */
  panicked: boolean;
  /** who asked the VM to stop, if anyone */
  initiator: 'none' | 'user' | 'platform';
  /** the host ended the VM without a clean shutdown */
  forced: boolean;
  /** console output of this boot (crash cause) */
  console: string;
  contract: Contract;
}

export interface StopInfo {
  stop_reason: number;
  exit_code: number | null;
  stop_code: number | null;
}

/** Crash cause from the console: [pattern, reason, errno]; the first match wins. */
const CRASH_CAUSES: ReadonlyArray<[RegExp, number, number]> = [
  [/Out of memory|System is deadlocked on memory/, 1, 12],
  [/divide error/, 2, 0],
  [/invalid opcode/, 3, 0],
  [
    /BUG: unable to handle page fault|BUG: kernel NULL pointer dereference|[Uu]nable to handle kernel paging request/,
    4,
    14,
  ],
  [/general protection fault|stack segment/, 5, 0],
  [/Machine check|\[Hardware Error\]/, 6, 0],
  [/stack-protector|Kernel stack is corrupted|Kernel memory overwrite attempt/, 7, 0],
  [/Unhandled Trap 0\b|Divide error/i, 2, 0],
  [/Unhandled Trap 6\b/, 3, 0],
  [/Unhandled Trap 14\b|Page fault/, 4, 14],
  [/Unhandled Trap 13\b/, 5, 0],
];

/** Application signal → [reason, errno]. */
const SIGNAL_CAUSES: Record<number, [number, number]> = { 11: [5, 14], 7: [4, 14], 4: [3, 0], 8: [2, 0], 31: [7, 0] };

export function crashCause(console: string): [number, number] {
  for (const [re, reason, errno] of CRASH_CAUSES) if (re.test(console)) return [reason, errno];
  return [1, 0];
}

export function stopCode(reason: number, initlvl: number, errno: number, shutdown: boolean): number {
  return ((errno & 0xff) << 16) | ((shutdown ? 1 : 0) << 15) | ((initlvl & 0x7f) << 8) | (reason & 0xff);
}

/** Whether the console shows the kernel crashing (any row of the crash table, or a panic/oops line). */
export function hasCrashText(console: string): boolean {
  return CRASH_CAUSES.some(([re]) => re.test(console)) || /Kernel panic|Oops|Attempted to kill init/.test(console);
}

export function deriveStop(i: StopInput): StopInfo {
  const who = i.initiator === 'user' ? STOP.U | STOP.P : i.initiator === 'platform' ? STOP.P : 0;
  if (i.forced) return { stop_reason: STOP.F | (who || STOP.P), exit_code: null, stop_code: null };
  const c = i.control;
  if (i.contract === 'unikraft') return deriveUnikraft(i, who);
  const appEnded = c.exit !== null || c.killed || c.signal !== null;
  if (i.status === null && !i.panicked && !c.shutdown && !appEnded && !hasCrashText(i.console)) {
    // Gone without any sign from the guest and no exit status (killed from outside, or ended while
    // the daemon was down without a trace): the reason is unknown, not a crash.
    return { stop_reason: who, exit_code: null, stop_code: null };
  }
  const crashed = i.status === 1 || i.panicked || !c.shutdown;
  if (crashed) {
    let [reason, errno] = crashCause(i.console);
    if (c.errno !== null) [reason, errno] = [1, c.errno];
    const lvl = c.ready ? 127 : c.init ? 1 : 0;
    const afterEnd = c.stop || c.exit !== null || c.killed || c.signal !== null;
    const exit = c.exit !== null && !c.killed ? c.exit : null;
    return {
      stop_reason: who | STOP.K | (exit !== null ? STOP.A : 0),
      exit_code: exit,
      stop_code: stopCode(reason, lvl, errno, afterEnd),
    };
  }
  if (c.signal !== null && !c.killed) {
    const [reason, errno] = c.signal === 9 && c.oom ? [1, 12] : (SIGNAL_CAUSES[c.signal] ?? [1, 0]);
    return { stop_reason: who | STOP.K, exit_code: null, stop_code: stopCode(reason, 127, errno, false) };
  }
  if (c.exit !== null) return { stop_reason: who | STOP.A | STOP.K, exit_code: c.exit, stop_code: 0 };
  return { stop_reason: who | STOP.K, exit_code: null, stop_code: 0 };
}

/**
 * Stock Unikraft kernels: no control channel; isa-debug-exit 83 = halt, 85 =
 * crash (Unikraft's exit codes), the cause from the console (machines/unikraft.ts).
 */
function deriveUnikraft(i: StopInput, who: number): StopInfo {
  const cause = unikraftCrash(i.console);
  const crashed = i.status === 85 || i.status === 1 || i.panicked || cause !== null;
  if (crashed) {
    const c = cause ?? { reason: 1, errno: 0, initlvl: handoverOffset(i.console) >= 0 ? APP_INITLVL : 0 };
    return {
      stop_reason: who | STOP.K,
      exit_code: null,
      stop_code: stopCode(c.reason, c.initlvl, c.errno, who !== 0),
    };
  }
  if (i.status === null && who === 0) return { stop_reason: 0, exit_code: null, stop_code: null };
  return { stop_reason: who | STOP.K, exit_code: null, stop_code: 0 };
}

/**
 * QEMU itself failed (unreadable kernel, bad device): it exited non-zero with
 * an error and the guest never ran (no console output, no control line, no
 * panic event). A platform failure (stop_reason 4), not a guest crash.
 * Returns QEMU's error lines, or null.
 */
export function vmmFailure(
  ev: { status: number | null; panicked: boolean; control: ControlState; stderr: string },
  console: string,
): string | null {
  if (ev.status === null || ev.status === 0 || ev.panicked || ev.control.init) return null;
  const errors = ev.stderr.split('\n').filter((l) => l.trim() && !/warning:/i.test(l));
  return errors.length > 0 && console.trim() === '' ? errors.join('; ') : null;
}

/** Whether a stop counts as a failure for restart policy `on-failure`. */
export function isFailure(s: StopInfo): boolean {
  return (
    (s.stop_code !== null && (s.stop_code & 0xff) !== 0) ||
    (s.exit_code !== null && s.exit_code !== 0) ||
    s.stop_reason === 0
  );
}

/** An empty control state: nothing reported yet. */
export const emptyControl = (): ControlState => ({
  init: false,
  ready: false,
  stop: false,
  shutdown: false,
  exit: null,
  killed: false,
  signal: null,
  oom: false,
  errno: null,
});

/** Applies one control-channel line (docs/guest-contract.md §2) to `c`; unknown lines are ignored. */
export function applyControlLine(c: ControlState, raw: string): void {
  const w = raw.replace(/\r$/, '').trim().split(/\s+/);
  if (w[0] !== 'UNIHOST') return;
  const n = Number(w[2]);
  switch (w[1]) {
    case 'INIT':
      c.init = true;
      break;
    case 'READY':
      c.ready = true;
      break;
    case 'STOP':
      c.stop = true;
      break;
    case 'SHUTDOWN':
      c.shutdown = true;
      break;
    case 'EXIT':
      if (Number.isInteger(n)) c.exit = n;
      break;
    case 'KILLED':
      c.killed = true;
      break;
    case 'SIGNAL':
      if (Number.isInteger(n)) c.signal = n;
      c.oom = w.includes('oom');
      break;
    case 'ERROR':
      if (Number.isInteger(n)) c.errno = n;
      break;
  }
}

/** Parses control-channel text (docs/guest-contract.md §2). */
export function parseControl(text: string): ControlState {
  const c = emptyControl();
  for (const raw of text.split('\n')) applyControlLine(c, raw);
  return c;
}
