/**
 * bench/idle: the CPU an idle daemon uses, beside a bare Fastify server's in
 * the same windows.
 *
 *   npm run build && npx tsx bench/idle.ts [--settle-s 15] [--seconds 20] [--rounds 3]
 *
 * `unihost serve` (compiled, from dist/; its defaults: the gateway and its
 * HAProxy, the registry's route, the private network) runs with a data dir
 * of its own inside a network namespace made here and deleted after, with
 * no instance and no service group. After `--settle-s`, each round reads
 * the CPU of the daemon's process (every thread), of its main thread, and
 * of the bare server, over `--seconds`. HAProxy and the other processes the
 * daemon runs are not counted. Figures: ms of CPU per second, median (worst)
 * of the rounds.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { processStats, threadCpuMs } from '../src/machines/stats.js';

const { values } = parseArgs({
  options: {
    'settle-s': { type: 'string', default: '15' },
    seconds: { type: 'string', default: '20' },
    rounds: { type: 'string', default: '3' },
  },
});
const SETTLE = Number(values['settle-s']) * 1000;
const SECONDS = Number(values.seconds);
const ROUNDS = Number(values.rounds);

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)]!;
const fmt = (xs: number[]) => `${median(xs).toFixed(1)} (${Math.max(...xs).toFixed(1)}) ms/s`;

const ns = `uhbench-idle-${randomBytes(4).toString('hex')}`;
const dataDir = mkdtempSync(join(tmpdir(), 'unihost-bench-idle-'));
const procs: ChildProcess[] = [];
execFileSync('ip', ['netns', 'add', ns]);
try {
  execFileSync('ip', ['-n', ns, 'link', 'set', 'lo', 'up']);
  const inNs = (argv: string[]) => {
    const p = spawn('ip', ['netns', 'exec', ns, ...argv], { stdio: ['ignore', 'ignore', 'inherit'] });
    procs.push(p);
    return p;
  };
  const daemon = inNs([
    process.execPath,
    'bin/unihost.js',
    'serve',
    '--data-dir',
    dataDir,
    '--listen',
    '127.0.0.1:7979',
    '--log-file',
    join(dataDir, 'unihost.log'),
  ]);
  const bare = inNs([
    process.execPath,
    '-e',
    "import('fastify').then(async ({ default: F }) => { const a = F(); a.get('/', async () => ({})); await a.listen({ host: '127.0.0.1', port: 0 }); })",
  ]);
  await sleep(SETTLE);
  for (const p of [daemon, bare]) if (p.exitCode !== null) throw new Error(`a server ended early (${p.exitCode})`);
  // `ip netns exec` execs the command: the pids are the servers'
  const cpu = (): number[] =>
    [processStats(daemon.pid!)?.cpuMs, threadCpuMs(daemon.pid!, daemon.pid!), processStats(bare.pid!)?.cpuMs].map(
      (ms) => {
        if (ms === undefined) throw new Error('a server ended during the measurement');
        return ms;
      },
    );
  const rows = { process: [] as number[], main: [] as number[], bare: [] as number[] };
  for (let r = 0; r < ROUNDS; r++) {
    const before = cpu();
    await sleep(SECONDS * 1000);
    const after = cpu();
    const per = after.map((a, i) => (a - before[i]!) / SECONDS);
    rows.process.push(per[0]!);
    rows.main.push(per[1]!);
    rows.bare.push(per[2]!);
    console.log(
      `round ${r + 1}: daemon ${per[0]!.toFixed(1)} ms/s (main thread ${per[1]!.toFixed(1)}), bare Fastify ${per[2]!.toFixed(1)} ms/s`,
    );
  }
  console.log(`\nidle, no instance, ${ROUNDS} rounds of ${SECONDS} s, median (worst):`);
  console.log(`  unihost daemon   ${fmt(rows.process)}, of it the main thread ${fmt(rows.main)}`);
  console.log(`  bare Fastify     ${fmt(rows.bare)}`);
} finally {
  for (const p of procs) p.kill('SIGTERM');
  await sleep(3000);
  for (const p of procs) if (p.exitCode === null) p.kill('SIGKILL');
  execFileSync('ip', ['netns', 'del', ns]);
  rmSync(dataDir, { recursive: true, force: true });
}
