/**
 * How a loaded snapshot starts running (src/machines/qemu/snapshot.ts,
 * `resumeRestored`), with real QEMUs and no guest kernel (the firmware's
 * machine state is enough): a snapshot taken by a VM with
 * `migration.store-global-state=off` (every VM's command line since
 * argv.ts says so) runs by itself at the end of the load, and the wait ends
 * on QEMU's RESUME event without a `cont`; one that carries the paused run
 * state it was taken in (a snapshot from before) is resumed with `cont`.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { DEFAULTS } from '../../src/config.js';
import { qemuArgv } from '../../src/machines/qemu/argv.js';
import { QmpClient } from '../../src/machines/qemu/qmp.js';
import { resumeRestored, streamSnapshot, writeSnapshot } from '../../src/machines/qemu/snapshot.js';

const QEMU = DEFAULTS.machines.qemu;
const GLOBAL = 'migration.store-global-state=off';

describe('a loaded snapshot runs: by itself, or after a cont', () => {
  const dir = mkdtempSync(join(tmpdir(), 'uh-resume-'));
  const procs: ChildProcess[] = [];
  after(() => {
    for (const p of procs) p.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  });

  /** A QEMU with no kernel, no devices and TCG; its QMP connected. */
  const qemu = async (name: string, extra: string[]): Promise<QmpClient> => {
    const qmp = join(dir, `${name}.qmp`);
    const p = spawn(
      QEMU,
      [
        ...['-machine', 'pc', '-accel', 'tcg', '-m', '16', '-nodefaults', '-display', 'none'],
        ...['-qmp', `unix:${qmp},server=on,wait=off`],
        ...extra,
      ],
      { stdio: 'ignore' },
    );
    procs.push(p);
    return QmpClient.connect(qmp, 10_000);
  };

  /** Takes a snapshot of a running VM (paused first, as the platform does), then loads it into a fresh QEMU. */
  const roundTrip = async (name: string, withRunState: boolean) => {
    const global = withRunState ? [] : ['-global', GLOBAL];
    const src = await qemu(`${name}-src`, global);
    const file = join(dir, `${name}.snap`);
    const sock = join(dir, `${name}-out.sock`);
    await writeSnapshot(src, { path: file, socket: { path: sock, uri: `unix:${sock}` } });
    src.close();
    const inbox = join(dir, `${name}-in.sock`);
    const dst = await qemu(`${name}-dst`, [...global, '-incoming', `unix:${inbox}`]);
    const sent: string[] = [];
    // commands sent and events seen, in the order they happened
    const timeline: string[] = [];
    const execute = dst.execute.bind(dst);
    dst.execute = ((cmd: string, args?: Record<string, unknown>) => {
      sent.push(cmd);
      timeline.push(cmd);
      return execute(cmd, args);
    }) as typeof dst.execute;
    const events: string[] = [];
    dst.on('event', (e: string) => {
      events.push(e);
      timeline.push(e);
    });
    await streamSnapshot(file, inbox);
    await resumeRestored(dst, 10_000);
    const status = (await execute<{ status: string }>('query-status')).status;
    dst.close();
    return { sent, events, timeline, status };
  };

  test('every VM is started with the option, so its snapshots carry no run state', () => {
    const argv = qemuArgv(
      {
        id: 'x',
        dir,
        kernel: '/k',
        cmdline: '',
        memoryMb: 16,
        machine: 'pc',
        firmware: 'seabios',
        contract: 'unikraft',
        disks: [],
      },
      { accel: 'tcg', tbSizeMb: 32, tscKhz: 0 },
    );
    assert.equal(argv[argv.indexOf(GLOBAL) - 1], '-global');
  });

  test('without the run state: the guest runs at the end of the load, no cont is sent, nothing asked after RESUME', async () => {
    const r = await roundTrip('plain', false);
    assert.equal(r.status, 'running');
    assert.ok(!r.sent.includes('cont'), `sent ${r.sent.join(', ')}`);
    assert.ok(r.events.includes('RESUME'), `events ${r.events.join(', ')}`);
    // the RESUME event is the answer: nothing more is asked of QEMU once it came
    const asked = r.timeline.slice(r.timeline.indexOf('RESUME') + 1).filter((x) => r.sent.includes(x));
    assert.deepEqual(asked, [], `timeline ${r.timeline.join(', ')}`);
  });

  test('with the paused run state (an older snapshot): resumed with a cont', async () => {
    const r = await roundTrip('legacy', true);
    assert.equal(r.status, 'running');
    assert.ok(r.sent.includes('cont'), `sent ${r.sent.join(', ')}`);
  });
});
