/**
 * The QEMU driver's two ways of starting a VMM, with real Unikraft kernels
 * (UNIHOST_UNIKRAFT_DIR, default ../shared/unikraft; no NIC, so no namespace):
 * through the posix_spawn helper (the default where python3 is) and by
 * forking the daemon (the fallback). Both must report the same events and
 * the VMM's exit status: helloworld halts (QEMU's isa-debug-exit: 83),
 * crash-abort crashes (85). The same for a warm VM (QEMU started in advance
 * for restores, src/machines/qemu/warm.ts): it waits on a tap of its own
 * (made down and on no bridge: nothing crosses it), its end is seen and its
 * tap removed; while a snapshot loads, none is spawned and one starting is
 * stopped. Also: a VM whose spawner is killed is still seen to end (by
 * polling its pid, as an adopted VM is).
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { DEFAULTS } from '../../src/config.js';
import type { MachineEvent, WarmShape } from '../../src/machines/driver.js';
import { QemuDriver } from '../../src/machines/qemu/driver.js';
import { Spawner } from '../../src/machines/qemu/spawner.js';
import { warmKey } from '../../src/machines/qemu/warm.js';
import { poll, unikraftDir, warmQemus } from '../helpers/vm.js';

interface LinkInfo {
  ifname: string;
  master?: string;
  flags: string[];
}

const UK = unikraftDir();
const root = process.getuid?.() === 0;
const skip = !UK ? 'no Unikraft kernels (set UNIHOST_UNIKRAFT_DIR)' : !root && 'needs root (confined VMs)';

describe('the QEMU driver spawns through the helper and by forking alike', { skip }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'uh-spawnpaths-'));
  const events = new Map<string, MachineEvent[]>();
  const drivers: QemuDriver[] = [];
  const make = (spawner: boolean, warmDir?: string, max = 1) => {
    const d = new QemuDriver(
      {
        qemu: DEFAULTS.machines.qemu,
        accel: 'tcg',
        tbSizeMb: DEFAULTS.machines.tbSizeMb,
        tscKhz: 0,
        logDir: (i) => join(dir, 'logs', i),
        spawner,
        ...(warmDir ? { warm: { dir: warmDir, max } } : {}),
      },
      (id, ev) => events.set(id, [...(events.get(id) ?? []), ev]),
    );
    drivers.push(d);
    return d;
  };
  /** what a warm VM of c-http (16 MB, `pc`) restores */
  const cHttpShape = (): WarmShape => ({
    kernel: join(UK!, 'c-http_qemu-x86_64'),
    memoryMb: 16,
    machine: 'pc',
    firmware: 'seabios',
    contract: 'unikraft',
  });
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
        const shape = cHttpShape();
        const pool = (d as unknown as { pool: { want(s: WarmShape): void; vms: Map<string, unknown> } }).pool;
        pool.want(shape);
        let reserved: { id: string; tap: string } | undefined;
        await poll('a warm VM is ready', async () => (reserved = await d.reserveWarm(shape)), 60_000, 20);
        d.releaseWarm(reserved!.id);
        // its NIC's tap: made for it, down and on no bridge until a restore makes it an instance's
        const tap = reserved!.tap;
        const link = () =>
          (JSON.parse(execFileSync('ip', ['-j', 'link', 'show'], { encoding: 'utf8' })) as LinkInfo[]).find(
            (l) => l.ifname === tap,
          );
        assert.ok(link(), `its tap ${tap} exists`);
        assert.equal(link()!.master, undefined);
        assert.ok(!link()!.flags.includes('UP'), `${tap} is down`);
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
        await poll('its tap is deleted', () => link() === undefined, 10_000, 20);
      },
    );
  }

  test(
    'while a snapshot loads (quiet), no warm VM is spawned and one starting is stopped',
    { skip: !Spawner.usable() && 'python3 is not installed' },
    async () => {
      const base = join(dir, 'warm-quiet');
      const d = make(true, join(base, 'warm'), 2);
      const shape = cHttpShape();
      type Warm = { state: string; pid: number };
      const pool = (
        d as unknown as {
          pool: { want(s: WarmShape): void; quiet<T>(f: () => Promise<T>): Promise<T>; vms: Map<string, Warm> };
        }
      ).pool;
      const procState = (pid: number) => readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')[0];
      let loaded!: () => void;
      const load = pool.quiet(() => new Promise<void>((r) => (loaded = r)));
      pool.want(shape);
      await new Promise((r) => setTimeout(r, 1500));
      assert.equal(warmQemus(base).length, 0, 'no QEMU is spawned while a load is under way');
      loaded();
      await load;
      await poll('the warm VM starts once the load ended', () => warmQemus(base).length === 1, 30_000, 10);
      // a second one (a burst), caught while it starts: stopped for the next load, run on after it
      let starting: Warm | undefined;
      let done!: () => void;
      let quiet: Promise<void> | undefined;
      // as after a restore that found none free: the pool keeps two of the shape
      (d as unknown as { pool: { missed: Map<string, number> } }).pool.missed.set(warmKey(shape), Date.now());
      pool.want(shape);
      await poll(
        'a second warm VM starting',
        () => {
          starting = [...pool.vms.values()].find((w) => w.state === 'starting');
          if (starting) quiet = pool.quiet(() => new Promise<void>((r) => (done = r)));
          return starting !== undefined;
        },
        30_000,
        1,
      );
      // SIGSTOP takes effect once the kernel next runs it
      await poll('stopped during the load', () => procState(starting!.pid) === 'T', 5_000, 5);
      done();
      await quiet;
      assert.notEqual(procState(starting!.pid), 'T', 'running on after it');
      await poll('it becomes free', () => starting!.state === 'free', 30_000, 10);
    },
  );

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
