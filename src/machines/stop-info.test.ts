/**
 * deriveStop against every row of docs/guest-contract.md §4, from control
 * channel text as the test guest writes it.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import {
  crashCause,
  deriveStop,
  isFailure,
  parseControl,
  stopCode,
  stopReasonWithoutVm,
  vmmFailure,
  type StopInput,
} from './stop-info.js';

const ctl = (...lines: string[]): string => lines.map((l) => `UNIHOST ${l}\n`).join('');

/** A stop of a unihost-contract guest: clean QEMU exit unless told otherwise. */
const stop = (control: string, over: Partial<StopInput> = {}) =>
  deriveStop({
    control: parseControl(control),
    status: 0,
    panicked: false,
    initiator: 'none',
    forced: false,
    console: '',
    contract: 'unihost',
    ...over,
  });

const BOOTED = ['INIT uptime_ms=2100', 'READY uptime_ms=2500'];

describe('parseControl', () => {
  test('reads every line of the protocol', () => {
    const c = parseControl(ctl(...BOOTED, 'STOP', 'EXIT 7', 'SHUTDOWN'));
    assert.deepEqual(c, {
      init: true,
      ready: true,
      stop: true,
      shutdown: true,
      exit: 7,
      killed: false,
      signal: null,
      oom: false,
      errno: null,
    });
  });

  test('KILLED, SIGNAL with oom, ERROR with text', () => {
    assert.equal(parseControl(ctl('KILLED 9')).killed, true);
    const s = parseControl(ctl('SIGNAL 9 oom'));
    assert.equal(s.signal, 9);
    assert.equal(s.oom, true);
    const plain = parseControl(ctl('SIGNAL 11'));
    assert.equal(plain.signal, 11);
    assert.equal(plain.oom, false);
    assert.equal(parseControl(ctl('INIT', 'ERROR 19 no device with serial vol0')).errno, 19);
  });

  test('strips \\r, ignores unknown words, extra fields, foreign lines and bad numbers', () => {
    const c = parseControl(
      'garbage before\nUNIHOST INIT uptime_ms=1 x=y\r\nUNIHOST FUTURE thing\nUNIHOST READY extra=1\r\n' +
        'not UNIHOST EXIT 5\nUNIHOST EXIT abc\nUNIHOST SHUTDOWN\r\n',
    );
    assert.equal(c.init, true);
    assert.equal(c.ready, true);
    assert.equal(c.exit, null);
    assert.equal(c.shutdown, true);
  });

  test('a partial last line still counts once complete text arrives', () => {
    assert.equal(parseControl('UNIHOST REA').ready, false);
    assert.equal(parseControl('UNIHOST READY\n').ready, true);
  });
});

describe('deriveStop: orderly ends (unihost contract)', () => {
  test('app exits by itself → 3, exit code, stop_code 0', () => {
    assert.deepEqual(stop(ctl(...BOOTED, 'EXIT 3', 'SHUTDOWN')), { stop_reason: 3, exit_code: 3, stop_code: 0 });
    assert.deepEqual(stop(ctl(...BOOTED, 'EXIT 0', 'SHUTDOWN')), { stop_reason: 3, exit_code: 0, stop_code: 0 });
  });

  test('user stop, app exits on SIGTERM → 15', () => {
    assert.deepEqual(stop(ctl(...BOOTED, 'STOP', 'EXIT 0', 'SHUTDOWN'), { initiator: 'user' }), {
      stop_reason: 15,
      exit_code: 0,
      stop_code: 0,
    });
  });

  test('user stop, app killed after ignoring SIGTERM → 13, no exit code', () => {
    assert.deepEqual(stop(ctl(...BOOTED, 'STOP', 'KILLED 9', 'SHUTDOWN'), { initiator: 'user' }), {
      stop_reason: 13,
      exit_code: null,
      stop_code: 0,
    });
    // SIGTERM's default action killed it
    assert.deepEqual(stop(ctl(...BOOTED, 'STOP', 'KILLED 15', 'SHUTDOWN'), { initiator: 'user' }), {
      stop_reason: 13,
      exit_code: null,
      stop_code: 0,
    });
  });

  test('platform stop → 7 / 5', () => {
    assert.deepEqual(stop(ctl(...BOOTED, 'STOP', 'EXIT 0', 'SHUTDOWN'), { initiator: 'platform' }), {
      stop_reason: 7,
      exit_code: 0,
      stop_code: 0,
    });
    assert.deepEqual(stop(ctl(...BOOTED, 'STOP', 'KILLED 9', 'SHUTDOWN'), { initiator: 'platform' }), {
      stop_reason: 5,
      exit_code: null,
      stop_code: 0,
    });
  });

  test('a stop before READY skips the app → 13', () => {
    assert.deepEqual(stop(ctl('INIT', 'STOP', 'SHUTDOWN'), { initiator: 'user' }), {
      stop_reason: 13,
      exit_code: null,
      stop_code: 0,
    });
  });

  test('adopted VM (exit status unknown) that shut down cleanly is not a crash', () => {
    assert.deepEqual(stop(ctl(...BOOTED, 'EXIT 0', 'SHUTDOWN'), { status: null }), {
      stop_reason: 3,
      exit_code: 0,
      stop_code: 0,
    });
  });
});

describe('deriveStop: forced stops', () => {
  test('user-forced → 28, platform-forced → 20, never exit or stop code', () => {
    const c = ctl(...BOOTED);
    assert.deepEqual(stop(c, { forced: true, initiator: 'user', status: null }), {
      stop_reason: 28,
      exit_code: null,
      stop_code: null,
    });
    assert.deepEqual(stop(c, { forced: true, initiator: 'platform', status: null }), {
      stop_reason: 20,
      exit_code: null,
      stop_code: null,
    });
    // even if the guest had managed to report an exit first
    const late = stop(ctl(...BOOTED, 'STOP', 'EXIT 0'), { forced: true, initiator: 'user', status: null });
    assert.deepEqual(late, { stop_reason: 28, exit_code: null, stop_code: null });
  });
});

describe('deriveStop: crashes', () => {
  const SIGNALS: Array<[string, number, number]> = [
    ['SIGNAL 11', 5, 14],
    ['SIGNAL 7', 4, 14],
    ['SIGNAL 4', 3, 0],
    ['SIGNAL 8', 2, 0],
    ['SIGNAL 31', 7, 0],
    ['SIGNAL 9 oom', 1, 12],
    ['SIGNAL 9', 1, 0],
    ['SIGNAL 6', 1, 0],
  ];
  for (const [line, reason, errno] of SIGNALS) {
    test(`app dies of ${line} → 1, reason ${reason}, errno ${errno}, initlvl 127`, () => {
      const s = stop(ctl(...BOOTED, line, 'SHUTDOWN'));
      assert.deepEqual(s, { stop_reason: 1, exit_code: null, stop_code: (errno << 16) | (127 << 8) | reason });
      assert.ok(isFailure(s));
    });
  }

  test('`panic segv` measured value: 950021', () => {
    assert.equal(stop(ctl(...BOOTED, 'SIGNAL 11', 'SHUTDOWN')).stop_code, 950021);
  });

  test('kernel panic while the app runs → 1, reason from console, initlvl 127 (`panic` → 32513)', () => {
    const console = 'sysrq: Trigger a crash\nKernel panic - not syncing: sysrq triggered crash\n';
    const viaStatus = stop(ctl(...BOOTED), { status: 1, console });
    assert.deepEqual(viaStatus, { stop_reason: 1, exit_code: null, stop_code: 32513 });
    // an adopted VM: no exit status, but the QMP event was seen
    assert.deepEqual(stop(ctl(...BOOTED), { status: null, panicked: true, console }), viaStatus);
    // or the VM is simply gone without a SHUTDOWN line
    assert.deepEqual(stop(ctl(...BOOTED), { status: null, console }), viaStatus);
  });

  test('gone without any guest sign and no exit status (killed from outside) → unknown (0), not a crash', () => {
    assert.deepEqual(stop(ctl(...BOOTED), { status: null }), { stop_reason: 0, exit_code: null, stop_code: null });
    assert.deepEqual(stop(ctl(...BOOTED, 'STOP'), { status: null, initiator: 'user' }), {
      stop_reason: 12,
      exit_code: null,
      stop_code: null,
    });
    assert.ok(isFailure(stop(ctl(...BOOTED), { status: null })), 'on-failure restarts it');
    // but an app end line or crash text on the console tells
    assert.equal(stop(ctl(...BOOTED, 'EXIT 0'), { status: null }).stop_reason, 3);
    assert.equal(stop(ctl(...BOOTED), { status: null, console: 'Oops: 0002 [#1]' }).stop_reason, 1);
  });

  test('panic after the app exited: A and exit code kept, shutdown_bit set', () => {
    const s = stop(ctl(...BOOTED, 'EXIT 4'), { status: 1, console: 'BUG: kernel NULL pointer dereference' });
    assert.deepEqual(s, { stop_reason: 3, exit_code: 4, stop_code: (14 << 16) | (1 << 15) | (127 << 8) | 4 });
    assert.ok(isFailure(s));
  });

  test('fatal boot error → 1, reason EXP, errno from ERROR, initlvl 1 (missing volume → 1245441)', () => {
    const s = stop(ctl('INIT', 'ERROR 19 no disk vol0'), {
      status: 1,
      console: 'Kernel panic - not syncing: Attempted to kill init!',
    });
    assert.deepEqual(s, { stop_reason: 1, exit_code: null, stop_code: 1245441 });
    assert.equal(stop(ctl('INIT', 'ERROR 95 9pfs unsupported'), { status: 1 }).stop_code, (95 << 16) | (1 << 8) | 1);
  });

  test('crash before init ran → initlvl 0, reason from console', () => {
    const s = stop('', { status: 1, console: 'BUG: unable to handle page fault for address: 0000' });
    assert.deepEqual(s, { stop_reason: 1, exit_code: null, stop_code: (14 << 16) | 4 });
    assert.deepEqual(stop('', { status: 1, console: 'Too many boot init vars' }), {
      stop_reason: 1,
      exit_code: null,
      stop_code: 1,
    });
  });

  test('user / platform stop during which the guest crashes → 13 / 5 with shutdown_bit', () => {
    const u = stop(ctl(...BOOTED, 'STOP'), { status: 1, initiator: 'user', console: 'general protection fault' });
    assert.deepEqual(u, { stop_reason: 13, exit_code: null, stop_code: (1 << 15) | (127 << 8) | 5 });
    const p = stop(ctl(...BOOTED, 'STOP'), { status: 1, initiator: 'platform', console: 'divide error' });
    assert.deepEqual(p, { stop_reason: 5, exit_code: null, stop_code: (1 << 15) | (127 << 8) | 2 });
  });

  test('the stop_code layout: errno bits 23-16, shutdown bit 15, initlvl 14-8, reason 7-0', () => {
    assert.equal(stopCode(7, 127, 12, true), 0x0cff07);
    assert.equal(stopCode(0, 0, 0, false), 0);
    assert.equal(stopCode(1, 1, 19, false), 0x130101);
  });
});

describe('crashCause', () => {
  const ROWS: Array<[string, number, number]> = [
    ['Out of memory: Killed process 1 (init)', 1, 12],
    ['Kernel panic - not syncing: System is deadlocked on memory', 1, 12],
    ['divide error: 0000 [#1] PREEMPT SMP', 2, 0],
    ['invalid opcode: 0000 [#1] SMP', 3, 0],
    ['BUG: unable to handle page fault for address: ffff', 4, 14],
    ['BUG: kernel NULL pointer dereference, address: 0', 4, 14],
    ['Unable to handle kernel paging request at virtual address', 4, 14],
    ['general protection fault, probably for non-canonical address', 5, 0],
    ['stack segment: 0000 [#1] SMP', 5, 0],
    ['mce: [Hardware Error]: CPU 0: Machine Check Exception', 6, 0],
    ['Kernel panic - not syncing: stack-protector: Kernel stack is corrupted in: foo', 7, 0],
    ['Kernel memory overwrite attempt detected to SLUB object', 7, 0],
    ['Kernel panic - not syncing: Attempted to kill init! exitcode=0x00000100', 1, 0],
    ['', 1, 0],
  ];
  for (const [text, reason, errno] of ROWS) {
    test(`${JSON.stringify(text.slice(0, 40))} → reason ${reason}, errno ${errno}`, () => {
      assert.deepEqual(crashCause(text), [reason, errno]);
    });
  }

  test('the first matching row wins', () => {
    assert.deepEqual(crashCause('Out of memory\ngeneral protection fault'), [1, 12]);
    assert.deepEqual(crashCause('general protection fault\nOut of memory'), [1, 12]);
  });
});

describe('deriveStop: stock Unikraft kernels (no control channel)', () => {
  const uk = (over: Partial<StopInput>) => stop('', { contract: 'unikraft', ...over });

  test('isa-debug-exit 83 (halt) / QEMU exit 0 → K only, clean', () => {
    assert.deepEqual(uk({ status: 83 }), { stop_reason: 1, exit_code: null, stop_code: 0 });
    assert.deepEqual(uk({ status: 0 }), { stop_reason: 1, exit_code: null, stop_code: 0 });
    assert.equal(isFailure(uk({ status: 0 })), false);
  });

  test('user stop → U P K = 13, platform → 5', () => {
    assert.deepEqual(uk({ status: 0, initiator: 'user' }), { stop_reason: 13, exit_code: null, stop_code: 0 });
    assert.deepEqual(uk({ status: 0, initiator: 'platform' }), { stop_reason: 5, exit_code: null, stop_code: 0 });
  });

  test('isa-debug-exit 85, pvpanic or a CRIT line → crash', () => {
    for (const over of [
      { status: 85 },
      { status: 1 },
      { status: null, panicked: true },
      { status: 0, console: '[    0.1] CRIT: [libkvmplat] Abnormal termination!' },
    ]) {
      const s = uk(over);
      assert.equal(s.stop_reason, 1, JSON.stringify(over));
      assert.notEqual(s.stop_code! & 0xff, 0, JSON.stringify(over));
      assert.ok(isFailure(s));
    }
    assert.equal(uk({ status: 85, console: 'Unhandled Trap 14 (page fault)' }).stop_code! & 0xff, 4);
    assert.equal(uk({ status: 85, console: 'Unhandled Trap 13' }).stop_code! & 0xff, 5);
    assert.equal(uk({ status: 85, console: 'Unhandled Trap 6' }).stop_code! & 0xff, 3);
    assert.equal(uk({ status: 85, console: 'Unhandled Trap 0' }).stop_code! & 0xff, 2);
  });

  test('HWRNG init failure is a boot crash with its errno', () => {
    const s = uk({ status: 0, console: 'ERR: Could not initialize the HWRNG (-95)' });
    assert.equal(s.stop_reason, 1);
    assert.equal(s.stop_code! & 0xff, 1);
    assert.equal((s.stop_code! >> 16) & 0xff, 95);
    assert.equal((s.stop_code! >> 8) & 0x7f, 1, 'in init class 1 (early), where ukrandom runs');
  });

  test('gone without any signal and nobody asked → unknown (0)', () => {
    assert.deepEqual(uk({ status: null }), { stop_reason: 0, exit_code: null, stop_code: null });
  });

  test('forced → 28', () => {
    assert.deepEqual(uk({ status: null, forced: true, initiator: 'user' }), {
      stop_reason: 28,
      exit_code: null,
      stop_code: null,
    });
  });
});

describe('isFailure (restart policy on-failure)', () => {
  test('clean ends are no failure; crashes, non-zero exits and unknown ends are', () => {
    assert.equal(isFailure({ stop_reason: 3, exit_code: 0, stop_code: 0 }), false);
    assert.equal(isFailure({ stop_reason: 13, exit_code: null, stop_code: 0 }), false);
    assert.equal(isFailure({ stop_reason: 28, exit_code: null, stop_code: null }), false);
    assert.equal(isFailure({ stop_reason: 3, exit_code: 3, stop_code: 0 }), true);
    assert.equal(isFailure({ stop_reason: 1, exit_code: null, stop_code: 32513 }), true);
    assert.equal(isFailure({ stop_reason: 0, exit_code: null, stop_code: null }), true);
  });

  test('the shutdown bit and initlvl alone do not make a failure', () => {
    assert.equal(isFailure({ stop_reason: 1, exit_code: null, stop_code: (1 << 15) | (127 << 8) }), false);
  });
});

describe('vmmFailure (QEMU failing before the guest runs)', () => {
  const ev = (status: number | null, stderr: string, control = '') => ({
    status,
    panicked: false,
    control: parseControl(control),
    stderr,
  });
  test('QEMU error lines, warnings left out', () => {
    assert.equal(
      vmmFailure(ev(1, 'qemu-system-x86_64: warning: x\nqemu: invalid kernel header\n'), ''),
      'qemu: invalid kernel header',
    );
  });
  test('not when the guest ran, exited 0, panicked or only warned', () => {
    assert.equal(vmmFailure(ev(1, 'qemu: oops'), '[ 0.1] Linux version'), null);
    assert.equal(vmmFailure(ev(1, 'qemu: oops', 'UNIHOST INIT\n'), ''), null);
    assert.equal(vmmFailure(ev(0, 'qemu: oops'), ''), null);
    assert.equal(vmmFailure(ev(null, 'qemu: oops'), ''), null);
    assert.equal(vmmFailure({ ...ev(1, 'qemu: oops'), panicked: true }, ''), null);
    assert.equal(vmmFailure(ev(1, 'qemu-system-x86_64: warning: x\n'), ''), null);
  });
});

describe('stopReasonWithoutVm: the stop fields of a stop that found no VM', () => {
  test('clean shutdowns and forced stops, by the user and by the platform, as the spec numbers them', () => {
    assert.equal(stopReasonWithoutVm('user', false), 15);
    assert.equal(stopReasonWithoutVm('platform', false), 7);
    assert.equal(stopReasonWithoutVm('user', true), 28);
    assert.equal(stopReasonWithoutVm('platform', true), 20);
  });
});
