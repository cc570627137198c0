/**
 * The MachineDriver contract (src/machines/driver.ts), run against both
 * implementations: QemuDriver booting the test images `echo`, `exit` and
 * `panic` (Linux guests that follow the guest contract) under TCG, and
 * MemoryMachines, told to end the way those images end by themselves. The
 * in-memory driver that unit tests and API development use must report what
 * a real guest reports, in the same order, and end the same ways.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { MachineDriver, MachineEvent, MachineSpec } from '../../src/machines/driver.js';
import { MemoryMachines } from '../../src/machines/memory.js';
import { hostTscKhz } from '../../src/machines/qemu/argv.js';
import { QemuDriver } from '../../src/machines/qemu/driver.js';
import { deriveStop } from '../../src/machines/stop-info.js';
import { guestOut, killLeaks, poll } from '../helpers/vm.js';
import { requirePart } from '../helpers/require.js';

type Exit = Extract<MachineEvent, { type: 'exit' }>;

const dirs: string[] = [];
after(() => {
  const leaked = killLeaks(dirs);
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
  assert.deepEqual(leaked, [], 'QEMU processes left behind');
});

/** How a guest's application ends by itself: the real test images do it at boot, a memory VM when told. */
type End = { exit: number } | 'crash';

function contract(
  name: string,
  make: (onEvent: (id: string, ev: MachineEvent) => void, dir: string) => MachineDriver,
  o: { skip?: string | false; bootMs: number; play?: (d: MachineDriver, id: string, end: End) => void },
): void {
  describe(`MachineDriver contract: ${name}`, { skip: requirePart(o.skip) }, () => {
    const events = new Map<string, MachineEvent[]>();
    let d: MachineDriver;
    let dir: string;
    const of = (id: string) => events.get(id) ?? [];
    const exitOf = (id: string) => of(id).find((e): e is Exit => e.type === 'exit');
    const spec = (id: string, image = 'echo', args = 'contract'): MachineSpec => ({
      id,
      dir: join(dir, 'instances', id),
      kernel: join(guestOut(), 'vmlinux'),
      initrd: join(guestOut(), `${image}.initrd`),
      cmdline: `console=ttyS0 quiet panic=-1 oops=panic mitigations=off -- ${args}`,
      memoryMb: 128,
      machine: 'microvm',
      contract: 'unihost',
      disks: [],
    });
    const boot = async (id: string) => {
      const rt = await d.start(spec(id));
      assert.ok(rt.pid > 0 && rt.spawnedAt > 0, 'a pid and a spawn time to adopt it by');
      await poll(`${id} ready`, () => of(id).some((e) => e.type === 'ready'), o.bootMs, 20);
    };

    before(() => {
      dir = mkdtempSync(join(tmpdir(), 'uh-mcontract-'));
      dirs.push(dir);
      d = make((id, ev) => events.set(id, [...(events.get(id) ?? []), ev]), dir);
    });

    test('a boot reports loaded, init and ready in that order; the VM runs and has figures', async () => {
      const id = randomUUID();
      await boot(id);
      assert.deepEqual(
        of(id).map((e) => e.type),
        ['loaded', 'init', 'ready'],
      );
      const times = of(id).map((e) => e.at);
      assert.deepEqual(
        times,
        [...times].sort((a, b) => a - b),
        'in time order',
      );
      assert.equal(d.inspect(id).running, true);
      const st = d.stats(id);
      assert.ok(st && st.rssBytes > 0 && st.cpuMs >= 0, `figures of a running VM: ${JSON.stringify(st)}`);
      await assert.rejects(d.start(spec(id)), /already running/);

      // a stop is a clean shutdown: the application's exit 0, the VMM's status 0
      await d.stop(id);
      await poll(`${id} exit`, () => exitOf(id), o.bootMs, 20);
      const ex = exitOf(id)!;
      assert.deepEqual([ex.control.init, ex.control.ready, ex.control.shutdown, ex.status], [true, true, true, 0]);
      const info = deriveStop({
        control: ex.control,
        status: ex.status,
        panicked: ex.panicked,
        initiator: 'user',
        forced: false,
        console: ex.console,
        contract: 'unihost',
      });
      // a clean shutdown the user asked for: both exited, reason OK (0)
      assert.deepEqual(info, { stop_reason: 15, exit_code: 0, stop_code: 0 });
      assert.equal(d.inspect(id).running, false);
      assert.equal(d.stats(id), undefined);
    });

    const stopOf = (ex: Exit) =>
      deriveStop({
        control: ex.control,
        status: ex.status,
        panicked: ex.panicked,
        initiator: 'none',
        forced: false,
        console: ex.console,
        contract: 'unihost',
      });

    test('an application that exits by itself with 3: stop_reason 3 (A K), exit_code 3, stop_code 0', async () => {
      const id = randomUUID();
      await d.start(spec(id, 'exit', '3'));
      await poll(`${id} ready`, () => of(id).some((e) => e.type === 'ready'), o.bootMs, 20);
      o.play?.(d, id, { exit: 3 });
      await poll(`${id} exit`, () => exitOf(id), o.bootMs, 20);
      assert.deepEqual(stopOf(exitOf(id)!), { stop_reason: 3, exit_code: 3, stop_code: 0 });
      await d.delete(id, join(dir, 'instances', id));
    });

    test('a kernel crash while the application runs: stop_reason 1 (K), no exit code, a crash stop_code at initlvl 127', async () => {
      const id = randomUUID();
      await d.start(spec(id, 'panic', ''));
      await poll(`${id} ready`, () => of(id).some((e) => e.type === 'ready'), o.bootMs, 20);
      o.play?.(d, id, 'crash');
      await poll(`${id} exit`, () => exitOf(id), o.bootMs, 20);
      const st = stopOf(exitOf(id)!);
      assert.equal(st.stop_reason, 1);
      assert.equal(st.exit_code, null);
      assert.notEqual((st.stop_code ?? 0) & 0xff, 0, 'a crash reason');
      assert.equal(((st.stop_code ?? 0) >> 8) & 0x7f, 127, 'after the application started');
      await d.delete(id, join(dir, 'instances', id));
    });

    test('delete of a running VM ends it and reports its end', async () => {
      const id = randomUUID();
      await boot(id);
      await d.delete(id, join(dir, 'instances', id));
      await poll(`${id} exit`, () => exitOf(id), o.bootMs, 20);
      assert.equal(d.inspect(id).running, false);
      assert.equal(existsSync(join(dir, 'instances', id)), false);
    });

    test('a kill ends the VM without a clean shutdown; delete removes its files', async () => {
      const id = randomUUID();
      await boot(id);
      await d.kill(id);
      await poll(`${id} exit`, () => exitOf(id), o.bootMs, 20);
      assert.equal(exitOf(id)!.control.shutdown, false, 'no clean shutdown');
      assert.equal(d.inspect(id).running, false);
      await d.delete(id, join(dir, 'instances', id));
      assert.equal(existsSync(join(dir, 'instances', id)), false);
      await d.close();
    });
  });
}

const hasGuest = ((): boolean => {
  try {
    return existsSync(join(guestOut(), 'echo.initrd')) && process.getuid?.() === 0;
  } catch {
    return false;
  }
})();

contract(
  'QemuDriver (TCG, the test images echo, exit and panic)',
  (onEvent, dir) =>
    new QemuDriver(
      {
        qemu: 'qemu-system-x86_64',
        accel: 'tcg',
        tbSizeMb: 32,
        tscKhz: hostTscKhz(),
        logDir: (i) => join(dir, 'logs', i),
      },
      onEvent,
    ),
  { skip: !hasGuest && 'needs root and the test images (guest/build-images.sh)', bootMs: 120_000 },
);
contract('MemoryMachines', (onEvent) => new MemoryMachines(onEvent), {
  bootMs: 1000,
  play: (d, id, end) => (end === 'crash' ? (d as MemoryMachines).crash(id) : (d as MemoryMachines).exit(id, end.exit)),
});
