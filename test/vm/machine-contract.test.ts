/**
 * The MachineDriver contract (src/machines/driver.ts), run against both
 * implementations: QemuDriver booting the test image `echo` (a Linux guest
 * that follows the guest contract) under TCG, and MemoryMachines. The
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

type Exit = Extract<MachineEvent, { type: 'exit' }>;

const dirs: string[] = [];
after(() => {
  const leaked = killLeaks(dirs);
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
  assert.deepEqual(leaked, [], 'QEMU processes left behind');
});

function contract(
  name: string,
  make: (onEvent: (id: string, ev: MachineEvent) => void, dir: string) => MachineDriver,
  o: { skip?: string | false; bootMs: number },
): void {
  describe(`MachineDriver contract: ${name}`, { skip: o.skip }, () => {
    const events = new Map<string, MachineEvent[]>();
    let d: MachineDriver;
    let dir: string;
    const of = (id: string) => events.get(id) ?? [];
    const exitOf = (id: string) => of(id).find((e): e is Exit => e.type === 'exit');
    const spec = (id: string): MachineSpec => ({
      id,
      dir: join(dir, 'instances', id),
      kernel: join(guestOut(), 'vmlinux'),
      initrd: join(guestOut(), 'echo.initrd'),
      cmdline: 'console=ttyS0 quiet panic=-1 oops=panic mitigations=off -- contract',
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
      assert.deepEqual(info, { stop_reason: 15, exit_code: 0, stop_code: info.stop_code });
      assert.equal(d.inspect(id).running, false);
      assert.equal(d.stats(id), undefined);
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
  'QemuDriver (TCG, the echo test image)',
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
contract('MemoryMachines', (onEvent) => new MemoryMachines(onEvent), { bootMs: 1000 });
