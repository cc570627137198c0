/**
 * Raw QEMU for the benchmarks' baselines: the driver's own command line for
 * an image, on a bridge and tap of the benchmark's own (the daemon's bridge
 * only passes traffic of the taps it made). Run inside the benchmark's
 * network namespace.
 */
import { execFileSync, spawn, spawnSync } from 'node:child_process';
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

/** The driver's command line for `image` with 16 MB and its NIC on `tap` at `ip` (a /24 behind `gateway`). */
export async function rawArgv(
  d: Daemon,
  image: string,
  o: { dir: string; ip: string; gateway: string; tap: string; mac: string },
): Promise<string[]> {
  const m = d.config.machines;
  const digest = await d.store.read(async (tx) => (await tx.images.tag(image))!.digest);
  const b = await imageBootFiles(d.services.paths, digest);
  return qemuArgv(
    {
      id: 'raw',
      dir: o.dir,
      kernel: b.kernel,
      cmdline: buildCmdline({
        kernelArgs: b.kernelArgs,
        netdevIp: `${o.ip}/24:${o.gateway}:${o.gateway}`,
        env: {},
        mounts: [],
        args: b.args,
      }),
      memoryMb: 16,
      machine: b.machine,
      firmware: b.firmware,
      contract: b.contract,
      nic: { tap: o.tap, mac: o.mac },
      disks: [],
    },
    { accel: 'tcg', tbSizeMb: m.tbSizeMb, tscKhz: 0 },
  );
}

/**
 * `n` raw QEMUs of `image` started together (bench/raw-wave.ts) in a network
 * namespace of their own, made here and removed after; returns, for each,
 * spawn -> `port` accepting on its address, in ms.
 */
export async function rawWave(d: Daemon, image: string, n: number, port: number): Promise<number[]> {
  const ns = `uhb-raw-${process.pid}`;
  const ip = (args: string[]) => execFileSync('ip', ['-n', ns, ...args]);
  const dirs: string[] = [];
  try {
    execFileSync('ip', ['netns', 'add', ns]);
    ip(['link', 'set', 'lo', 'up']);
    ip(['link', 'add', 'rawbr', 'type', 'bridge']);
    ip(['addr', 'add', '10.81.0.1/24', 'dev', 'rawbr']);
    ip(['link', 'set', 'rawbr', 'up']);
    const vms = [];
    for (let k = 0; k < n; k++) {
      ip(['tuntap', 'add', `rawtap${k}`, 'mode', 'tap']);
      ip(['link', 'set', `rawtap${k}`, 'master', 'rawbr', 'up']);
      const dir = mkdtempSync(join(tmpdir(), 'unihost-raw-'));
      dirs.push(dir);
      const addr = `10.81.0.${k + 2}`;
      const mac = `02:00:00:00:01:${(k + 2).toString(16).padStart(2, '0')}`;
      const argv = await rawArgv(d, image, { dir, ip: addr, gateway: '10.81.0.1', tap: `rawtap${k}`, mac });
      vms.push({ argv, ip: addr, port, dir });
    }
    const script = join(import.meta.dirname, 'raw-wave.ts');
    const out = execFileSync('ip', ['netns', 'exec', ns, process.execPath, '--import', 'tsx', script], {
      input: JSON.stringify({ qemu: d.config.machines.qemu, vms }),
      encoding: 'utf8',
      timeout: 120_000,
    });
    return (JSON.parse(out) as { ms: number[] }).ms;
  } finally {
    spawnSync('ip', ['netns', 'del', ns]);
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  }
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
    const dir = mkdtempSync(join(tmpdir(), 'unihost-raw-'));
    this.scratch.push(dir);
    const argv = await rawArgv(this.d, image, {
      dir,
      ip: RAW_IP,
      gateway: RAW_GW,
      tap: RAW_TAP,
      mac: '02:00:00:00:00:fa',
    });
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
        // a kernel that halts (helloworld) may have ended already
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          /* gone */
        }
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
