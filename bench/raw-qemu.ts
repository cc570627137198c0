/**
 * Raw QEMU for the benchmarks' baselines: the driver's own command line for
 * an image, on a bridge and tap of the benchmark's own (the daemon's bridge
 * only passes traffic of the taps it made). Run inside the benchmark's
 * network namespace.
 */
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Daemon } from '../src/daemon.js';
import { buildCmdline } from '../src/domain/cmdline.js';
import { imageBootFiles } from '../src/images/boot-files.js';
import { qemuArgv } from '../src/machines/qemu/argv.js';
import { Spawner } from '../src/machines/qemu/spawner.js';

const RAW_BRIDGE = 'benchbr0';
const RAW_GW = '10.80.0.1';
export const RAW_IP = '10.80.0.2';
const RAW_TAP = 'benchtap0'; // not the daemon's tap prefix: its rules drop unknown taps

/** Resolves when `ip:port` accepts, trying every ms. */
export function portOpen(ip: string, port: number, giveUpMs = 20_000): Promise<void> {
  const end = performance.now() + giveUpMs;
  return new Promise((resolve, reject) => {
    const attempt = (): void => {
      const s = connect({ host: ip, port });
      s.setTimeout(100);
      const retry = (): void => {
        s.destroy();
        if (performance.now() > end) reject(new Error(`${ip}:${port} never accepted`));
        else setTimeout(attempt, 1);
      };
      s.once('connect', () => (s.destroy(), resolve()));
      s.once('error', retry);
      s.once('timeout', retry);
    };
    attempt();
  });
}

export class RawQemu {
  private readonly scratch: string[] = [];
  private readonly spawner = Spawner.usable() ? new Spawner(() => undefined) : null;

  constructor(private readonly d: Daemon) {
    execFileSync('ip', ['link', 'add', RAW_BRIDGE, 'type', 'bridge']);
    execFileSync('ip', ['addr', 'add', `${RAW_GW}/24`, 'dev', RAW_BRIDGE]);
    execFileSync('ip', ['link', 'set', RAW_BRIDGE, 'up']);
    execFileSync('ip', ['tuntap', 'add', RAW_TAP, 'mode', 'tap']);
    execFileSync('ip', ['link', 'set', RAW_TAP, 'master', RAW_BRIDGE, 'up']);
  }

  /** Spawns `image` (16 MB, the driver's argv, NIC at RAW_IP) and times spawn → `ready(dir)`; kills it after. */
  async time(image: string, ready: (dir: string) => Promise<void>): Promise<number> {
    const m = this.d.config.machines;
    const digest = await this.d.store.read(async (tx) => (await tx.images.tag(image))!.digest);
    const b = await imageBootFiles(this.d.services.paths, digest);
    const dir = mkdtempSync(join(tmpdir(), 'unihost-raw-'));
    this.scratch.push(dir);
    const argv = qemuArgv(
      {
        id: 'raw',
        dir,
        kernel: b.kernel,
        cmdline: buildCmdline({
          kernelArgs: b.kernelArgs,
          netdevIp: `${RAW_IP}/24:${RAW_GW}:${RAW_GW}`,
          env: {},
          mounts: [],
          args: b.args,
        }),
        memoryMb: 16,
        machine: b.machine,
        firmware: b.firmware,
        contract: b.contract,
        nic: { tap: RAW_TAP, mac: '02:00:00:00:00:fa' },
        disks: [],
      },
      { accel: 'tcg', tbSizeMb: m.tbSizeMb, tscKhz: 0 },
    );
    // started the fastest way this host has (the daemon's own posix_spawn helper, where python3 is): a
    // fork of this Node process would add 8-18 ms here to the baseline that the platform does not pay
    const t0 = performance.now();
    if (this.spawner) {
      let ended!: () => void;
      const gone = new Promise<void>((r) => (ended = r));
      const pid = await this.spawner.start([m.qemu, ...argv], { stderr: join(dir, 'stderr') }, () => ended());
      try {
        await ready(dir);
        return performance.now() - t0;
      } finally {
        process.kill(pid, 'SIGKILL');
        await gone;
      }
    }
    const p = spawn(m.qemu, argv, { stdio: 'ignore' });
    try {
      await ready(dir);
      return performance.now() - t0;
    } finally {
      p.kill('SIGKILL');
      await new Promise((r) => p.once('exit', r));
    }
  }

  /** How the baseline is started: `posix_spawn helper` or `fork`. */
  get how(): string {
    return this.spawner ? 'posix_spawn helper' : 'fork of Node';
  }

  close(): void {
    for (const link of [RAW_TAP, RAW_BRIDGE]) {
      try {
        execFileSync('ip', ['link', 'del', link], { stdio: 'ignore' });
      } catch {
        /* not created */
      }
    }
    for (const p of this.scratch) rmSync(p, { recursive: true, force: true });
    this.spawner?.close();
  }
}
