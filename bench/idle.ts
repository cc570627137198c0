/**
 * bench/idle: the CPU an idle daemon uses, beside a bare Fastify server's in
 * the same windows.
 *
 *   npm run build && npx tsx bench/idle.ts [--settle-s 15] [--seconds 20] [--rounds 3] [--instances N]
 *
 * `unihost serve` (compiled, from dist/; its defaults: the gateway and its
 * HAProxy, the registry's route, the private network) runs with a data dir
 * of its own inside a network namespace made here and deleted after, with
 * no instance and no service group; with `--instances N`, N stopped
 * instances of Unikraft's helloworld (UNIHOST_UNIKRAFT_DIR), each published
 * in a service group of its own, every tenth group autoscaled, made through
 * the API before the settling time. After `--settle-s`, each round reads
 * the CPU of the daemon's process (every thread), of its main thread, and
 * of the bare server, over `--seconds`. HAProxy and the other processes the
 * daemon runs are not counted. Figures: ms of CPU per second, median (worst)
 * of the rounds.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { processStats, threadCpuMs } from '../src/machines/stats.js';

const { values } = parseArgs({
  options: {
    'settle-s': { type: 'string', default: '15' },
    seconds: { type: 'string', default: '20' },
    rounds: { type: 'string', default: '3' },
    instances: { type: 'string', default: '0' },
  },
});
const INSTANCES = Number(values.instances);
const UK = process.env.UNIHOST_UNIKRAFT_DIR ?? join(import.meta.dirname, '..', '..', 'shared', 'unikraft');
const KERNEL = join(UK, 'helloworld_qemu-x86_64');
if (INSTANCES > 0 && !existsSync(KERNEL))
  throw new Error(`--instances needs Unikraft's helloworld: no ${KERNEL} (UNIHOST_UNIKRAFT_DIR)`);

/**
 * Makes `n` stopped instances through the API at `base` (run inside the
 * namespace), each with a service group of its own, and an autoscale
 * configuration on every tenth group; prints nothing, exits non-zero on a
 * refusal.
 */
const SEED = `
const [base, token, n] = process.argv.slice(1);
const h = { authorization: 'Bearer ' + token, 'content-type': 'application/json' };
// the daemon may not listen yet
for (let t = 0; ; t++) {
  const up = await fetch(base + '/v1/instances', { headers: h }).then((r) => r.ok, () => false);
  if (up) break;
  if (t > 60) throw new Error('the daemon did not answer in 30 s');
  await new Promise((r) => setTimeout(r, 500));
}
const call = async (method, path, body) => {
  const r = await fetch(base + path, { method, headers: h, body: JSON.stringify(body) });
  const j = await r.json();
  if (!r.ok) throw new Error(method + ' ' + path + ': ' + r.status + ' ' + JSON.stringify(j));
  return j.data;
};
for (let i = 0; i < Number(n); i++) {
  const d = await call('POST', '/v1/instances', {
    name: 'idle-' + i,
    image: 'helloworld:latest',
    autostart: false,
    service_group: { services: [{ port: 443, destination_port: 8080, handlers: ['tls', 'http'] }] },
  });
  const g = d.instances[0].service_group;
  if (i % 10 === 0)
    await call('POST', '/v1/services/' + g.uuid + '/autoscale', { master: { name: 'idle-' + i }, min_size: 1, max_size: 4 });
}
`;
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
  const cli = (...argv: string[]) =>
    execFileSync(process.execPath, ['bin/unihost.js', ...argv, '--data-dir', dataDir], { encoding: 'utf8' });
  let token = '';
  if (INSTANCES > 0) {
    cli('image', 'import', '--kernel', KERNEL, '--machine', 'pc', 'helloworld:latest');
    token = /^token: (\S+)$/m.exec(cli('admin', 'user', 'create', 'idle'))![1]!;
    const n = String(INSTANCES);
    cli('admin', 'user', 'quotas', 'idle', `instances=${n}`, `service_groups=${n}`, `services=${n}`, `domains=${n}`);
  }
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
  if (INSTANCES > 0) {
    const t0 = performance.now();
    const seed = inNs([
      process.execPath,
      '--input-type=module',
      '-e',
      SEED,
      'http://127.0.0.1:7979',
      token,
      String(INSTANCES),
    ]);
    const code = await new Promise((r) => seed.once('exit', r));
    if (code !== 0) throw new Error(`seeding ${INSTANCES} instances failed (${String(code)})`);
    console.log(
      `${INSTANCES} stopped instances, each in a group of its own, made in ${((performance.now() - t0) / 1000).toFixed(1)} s`,
    );
  }
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
  console.log(
    `\nidle, ${INSTANCES > 0 ? `${INSTANCES} stopped instances` : 'no instance'}, ${ROUNDS} rounds of ${SECONDS} s, median (worst):`,
  );
  console.log(`  unihost daemon   ${fmt(rows.process)}, of it the main thread ${fmt(rows.main)}`);
  console.log(`  bare Fastify     ${fmt(rows.bare)}`);
} finally {
  for (const p of procs) p.kill('SIGTERM');
  await sleep(3000);
  for (const p of procs) if (p.exitCode === null) p.kill('SIGKILL');
  execFileSync('ip', ['netns', 'del', ns]);
  rmSync(dataDir, { recursive: true, force: true });
}
