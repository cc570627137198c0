/**
 * The QEMU driver's two ways of starting a VMM, with real Unikraft kernels
 * (UNIHOST_UNIKRAFT_DIR, default ../shared/unikraft; no NIC, so no namespace):
 * through the posix_spawn helper (the default where python3 is) and by
 * forking the daemon (the fallback). Both must report the same events and
 * the VMM's exit status: helloworld halts (QEMU's isa-debug-exit: 83),
 * crash-abort crashes (85). The same for a warm VM (QEMU started in advance
 * for restores, src/machines/qemu/warm.ts): it waits, and its end is seen.
 * Also: a VM whose spawner is killed is still seen to end (by polling its
 * pid, as an adopted VM is).
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { DEFAULTS } from '../../src/config.js';
import type { MachineEvent, WarmShape } from '../../src/machines/driver.js';
import { QemuDriver } from '../../src/machines/qemu/driver.js';
import { Spawner } from '../../src/machines/qemu/spawner.js';
import { poll, unikraftDir, warmQemus } from '../helpers/vm.js';

const UK = unikraftDir();
const root = process.getuid?.() === 0;
const skip = !UK ? 'no Unikraft kernels (set UNIHOST_UNIKRAFT_DIR)' : !root && 'needs root (confined VMs)';

describe('the QEMU driver spawns through the helper and by forking alike', { skip }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'uh-spawnpaths-'));
  const events = new Map<string, MachineEvent[]>();
  const drivers: QemuDriver[] = [];
  const make = (spawner: boolean, warmDir?: string) => {
    const d = new QemuDriver(
      {
        qemu: DEFAULTS.machines.qemu,
        accel: 'tcg',
        tbSizeMb: DEFAULTS.machines.tbSizeMb,
        tscKhz: 0,
        logDir: (i) => join(dir, 'logs', i),
        spawner,
        ...(warmDir ? { warm: { dir: warmDir, max: 1 } } : {}),
      },
      (id, ev) => events.set(id, [...(events.get(id) ?? []), ev]),
    );
    drivers.push(d);
    return d;
  };
  const boot = async (d: QemuDriver, kernel: string) => {
    const id = randomUUID();
    await d.start({
      id,
      dir: join(dir, 'instances', id),
      kernel: join(UK!, `${kernel}_qemu-x86_64`),
      cmdline: kernel,
      memoryMb: 16,
      machine: 'pc',
      firmware: 'seabios',
      contract: 'unikraft',
      disks: [],
    });
    return id;
  };
  const types = (id: string) => (events.get(id) ?? []).map((e) => e.type);
  const exitOf = (id: string) => events.get(id)?.find((e) => e.type === 'exit');

  after(async () => {
    for (const d of drivers) await d.close();
    rmSync(dir, { recursive: true, force: true });
  });

  for (const spawner of [true, false]) {
    const how = spawner ? 'the posix_spawn helper' : 'a fork of the daemon';
    test(
      `through ${how}: ready, then the VMM's exit status of a halt (83) and of a crash (85)`,
      {
        skip: spawner && !Spawner.usable() && 'python3 is not installed',
      },
      async () => {
        const d = make(spawner);
        for (const [kernel, status] of [
          ['helloworld', 83],
          ['crash-abort', 85],
        ] as const) {
          const id = await boot(d, kernel);
          await poll(`${kernel} ends`, () => exitOf(id), 60_000, 20);
          const ex = exitOf(id) as Extract<MachineEvent, { type: 'exit' }>;
          assert.equal(ex.status, status, `${kernel} through ${how}: ${ex.stderr}`);
          assert.ok(types(id).includes('ready'), `${kernel}: ${types(id).join(', ')}`);
          assert.ok(
            !types(id).includes('init'),
            'the end of a Unikraft banner is one `ready` (init and ready at once)',
          );
        }
      },
    );
  }

  for (const spawner of [true, false]) {
    const how = spawner ? 'the posix_spawn helper' : 'a fork of the daemon';
    test(
      `a warm VM started through ${how} waits for a restore, and its end is seen`,
      { skip: spawner && !Spawner.usable() && 'python3 is not installed' },
      async () => {
        const base = join(dir, `warm-${spawner}`);
        const d = make(spawner, join(base, 'warm'));
        const shape: WarmShape = {
          kernel: join(UK!, 'c-http_qemu-x86_64'),
          memoryMb: 16,
          machine: 'pc',
          firmware: 'seabios',
          contract: 'unikraft',
        };
        const pool = (d as unknown as { pool: { want(s: WarmShape): void; vms: Map<string, unknown> } }).pool;
        pool.want(shape);
        let reserved: { id: string } | undefined;
        await poll('a warm VM is ready', async () => (reserved = await d.reserveWarm(shape)), 60_000, 20);
        d.releaseWarm(reserved!.id);
        const qemus = warmQemus(base);
        assert.equal(qemus.length, 1, 'one warm QEMU waits');
        const pid = qemus[0]!.pid;
        // started by the helper (its child), or by the daemon's fork (this process's child)
        const parent = Number(readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')[1]);
        const helper = (d as unknown as { spawner: Spawner | null }).spawner?.helperPid;
        assert.equal(parent, spawner ? helper : process.pid);
        process.kill(pid, 'SIGKILL');
        await poll('the pool sees its warm VM end', () => pool.vms.size === 0, 30_000, 20);
        assert.equal(await d.reserveWarm(shape), undefined, 'an ended warm VM is not reserved');
      },
    );
  }

  test(
    'a VM whose helper was killed is still seen to end (its pid polled)',
    {
      skip: !Spawner.usable() && 'python3 is not installed',
    },
    async () => {
      const d = make(true);
      // c-http serves until stopped: it outlives the helper
      const id = await boot(d, 'c-http');
      await poll('c-http ready', () => types(id).includes('ready'), 60_000, 20);
      const helper = (d as unknown as { spawner: Spawner }).spawner.helperPid!;
      process.kill(helper, 'SIGKILL');
      await new Promise((r) => setTimeout(r, 300));
      assert.equal(d.inspect(id).running, true, 'the VM lives on without its spawner');
      await d.kill(id);
      await poll('c-http ends', () => exitOf(id), 30_000, 20);
      assert.equal(d.inspect(id).running, false);
    },
  );
});
