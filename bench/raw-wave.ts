/**
 * A wave of raw QEMUs: bench/hosts' baseline for the boots of a failover.
 * Reads `{ qemu, vms: [{ argv, ip, port, dir }] }` (JSON) on stdin, starts
 * every VM at once the fastest way this host has (the daemon's own
 * posix_spawn helper, else a fork of Node), and prints `{ ms: [...] }`: for
 * each VM, spawn -> its port accepting. Then it kills them all. Run it inside
 * the network namespace that holds their taps:
 *
 *   ip netns exec NS node --import tsx bench/raw-wave.ts < wave.json
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { Spawner } from '../src/machines/qemu/spawner.js';
import { portOpen } from './raw-qemu.js';

interface Wave {
  qemu: string;
  vms: { argv: string[]; ip: string; port: number; dir: string }[];
}

async function main(): Promise<void> {
  let text = '';
  for await (const chunk of process.stdin) text += String(chunk);
  const wave = JSON.parse(text) as Wave;
  const spawner = Spawner.usable() ? new Spawner(() => undefined) : null;
  const kills: (() => void)[] = [];
  try {
    const t0 = performance.now();
    const ms = await Promise.all(
      wave.vms.map(async (vm) => {
        if (spawner) {
          const pid = await spawner.start([wave.qemu, ...vm.argv], { stderr: join(vm.dir, 'stderr') }, () => undefined);
          kills.push(() => {
            try {
              process.kill(pid, 'SIGKILL');
            } catch {
              /* ended already */
            }
          });
        } else {
          const p = spawn(wave.qemu, vm.argv, { stdio: 'ignore' });
          kills.push(() => p.kill('SIGKILL'));
        }
        await portOpen(vm.ip, vm.port, 60_000);
        return performance.now() - t0;
      }),
    );
    process.stdout.write(JSON.stringify({ ms }) + '\n');
  } finally {
    for (const k of kills) k();
    spawner?.close();
  }
}

await main();
