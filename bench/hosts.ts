/**
 * bench/hosts (issue 22): several hosts on one PostgreSQL, on this machine.
 * Each host is a network namespace of its own with an agent process in it
 * (`unihost serve --role agent`, its own data dir, bridge and VMs); the API
 * server runs here, PostgreSQL on a unix socket. Side by side in each round:
 *
 *   (a) placement + boot of N c-http instances (16 MB) on 1 host (the other
 *       two cordoned) vs on 3 hosts: the same 2 cores either way, so the
 *       ratio is the platform's overhead of spreading (goal <= 1.1x);
 *   (b) failover: a host with a third of them dies (its agent, its watchdog
 *       and its QEMUs SIGKILLed): from the kill to every one of its
 *       instances running on another host (goal: lease + boot + 2 s, with
 *       "boot" measured in the same round: as many raw QEMUs of the kernel
 *       started together beside the instances that survived, the last one's
 *       spawn -> port accepting; bench/raw-wave.ts);
 *   (c) guest to guest across hosts vs on one host (goal >= 0.8x), first,
 *       on quiet hosts: a guest on h1 (image `httpbench`, busybox wget, one
 *       new connection per request) fetches from an `http` guest on h1 and
 *       from one on h2, over the VXLAN link the hosts' namespaces share, in
 *       turns within each round; requests/s sequential and with 4 loops.
 *
 * The hosts' network: a bridge in a namespace of its own, one veth per host
 * (MTU 1600: VXLAN adds 50 bytes), the hosts' addresses 10.97.0.1-3 on it.
 *
 *   npx tsx bench/hosts.ts [--rounds 3] [--instances 48] [--lease-ms 3000]
 *
 * As root, with the Unikraft kernels (UNIHOST_UNIKRAFT_DIR) and PostgreSQL.
 */
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import pino from 'pino';
import { DEFAULTS } from '../src/config.js';
import { startDaemon, type Daemon } from '../src/daemon.js';
import { testPostgres } from '../test/helpers/postgres.js';
import { agentArgv, guestOut, importCHttp, unikraftDir } from '../test/helpers/vm.js';
import { LocalConsoles } from '../src/machines/console-log.js';
import { pathsFor } from '../src/paths.js';
import { importGuestImages } from '../src/images/guest.js';
import { apiCaller, stats } from './boot-unikraft.js';
import { rawWave } from './raw-qemu.js';

const { values: args } = parseArgs({
  options: {
    rounds: { type: 'string', default: '3' },
    instances: { type: 'string', default: '12' },
    'lease-ms': { type: 'string', default: '3000' },
  },
});
const ROUNDS = Number(args.rounds);
const N = Number(args.instances);
const LEASE_MS = Number(args['lease-ms']);
const HOSTS = ['h1', 'h2', 'h3'];

interface Host {
  name: string;
  ns: string;
  dir: string;
  /** its address on the hosts' network */
  address: string;
  proc?: ChildProcess;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function until(what: string, check: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out: ${what}`);
    await sleep(50);
  }
}

function startAgent(h: Host, storeUrl: string): void {
  writeFileSync(
    join(h.dir, 'config.json'),
    JSON.stringify({
      host: { leaseMs: LEASE_MS, watchdog: 'on' },
      gateway: { enabled: false },
      machines: { accel: 'tcg', ksm: false },
      // all hosts share this machine's 2 cores: the one-host side must take every instance (32 vCPUs by default)
      capacity: { vcpusPerCore: 64 },
    }),
  );
  h.proc = spawn(
    'ip',
    [
      'netns',
      'exec',
      h.ns,
      process.execPath,
      ...agentArgv({ name: h.name, dir: h.dir, storeUrl, config: join(h.dir, 'config.json'), address: h.address }),
    ],
    { stdio: ['ignore', 'inherit', 'inherit'], env: { ...process.env, UNIHOST_LOG_LEVEL: 'warn' } },
  );
}

/** Kills everything that runs in a host's namespace: its agent, watchdog and QEMUs (a host that dies). */
function killHost(h: Host): void {
  const pids = spawnSync('ip', ['netns', 'pids', h.ns], { encoding: 'utf8' }).stdout.split('\n').filter(Boolean);
  for (const p of pids) spawnSync('kill', ['-9', p]);
  // the watchdog is detached but was started in the namespace: it is among them
}

/** CPU time (ms) of every process now, by pid, with what it is: what a phase cost whom (its delta). */
function cpuNow(agents: Set<number>): Map<number, { kind: string; ms: number }> {
  const out = new Map<number, { kind: string; ms: number }>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const pid = Number(name);
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      // utime and stime (fields 14 and 15 of the line; clock ticks of 10 ms)
      const ms = (Number(f[11]) + Number(f[12])) * 10;
      const kind = comm.startsWith('qemu-system')
        ? 'QEMUs'
        : agents.has(pid)
          ? 'agents'
          : pid === process.pid
            ? 'bench+API'
            : comm === 'postgres'
              ? 'PostgreSQL'
              : comm === 'node'
                ? 'other node (watchdogs)'
                : 'other';
      out.set(pid, { kind, ms });
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

/** What each kind of process spent between two `cpuNow` (processes that ended meanwhile are not counted). */
function cpuSpent(a: Map<number, { kind: string; ms: number }>, b: Map<number, { kind: string; ms: number }>): string {
  const by = new Map<string, number>();
  for (const [pid, x] of b) by.set(x.kind, (by.get(x.kind) ?? 0) + x.ms - (a.get(pid)?.ms ?? 0));
  return [...by]
    .sort((p, q) => q[1] - p[1])
    .map(([k, ms]) => `${k} ${(ms / 1000).toFixed(1)}`)
    .join(', ');
}

/**
 * (c): requests/s of a guest on h1 to an `http` guest on h1 and to one on h2
 * (httpbench's phases p1 and p2, in turns within each of its rounds): the
 * ratio across / local per round, sequential and with 4 loops.
 */
async function guestToGuest(
  api: Daemon,
  call: ReturnType<typeof apiCaller>,
  hosts: Host[],
): Promise<{ seq: number[]; par: number[] }> {
  const createOn = async (host: string, body: Record<string, unknown>) => {
    for (const h of hosts) await api.services.hosts.mark(h.name, h.name === host ? 'live' : 'cordoned');
    try {
      const r = await call('POST', '/v1/instances', {
        memory_mb: 128,
        autostart: true,
        wait_timeout_ms: 180_000,
        ...body,
      });
      const e = Object.values(r.data ?? {})[0]?.[0] as Record<string, unknown> | undefined;
      if (e?.state !== 'running') throw new Error(`${String(body.name)} did not start: ${JSON.stringify(r)}`);
      return e;
    } finally {
      for (const h of hosts) await api.services.hosts.mark(h.name, 'live');
    }
  };
  const local = await createOn('h1', { name: 'srv-local', image: 'http:latest' });
  const remote = await createOn('h2', { name: 'srv-remote', image: 'http:latest' });
  const env = { HB_ROUNDS: String(ROUNDS), HB_REQUESTS: '100', HB_PAR: '4' };
  const urls = [`http://${String(local.private_ip)}:8080/`, `http://${String(remote.private_ip)}:8080/`];
  const cli = await createOn('h1', { name: 'cli', image: 'httpbench:latest', args: urls, env });
  const consoles = new LocalConsoles((id) => pathsFor(hosts[0]!.dir).instance(id));
  const text = async () => (await consoles.read(String(cli.uuid), 0, 1 << 20)).output.toString('utf8');
  await until('httpbench done', async () => /httpbench: done/.test(await text()), 600_000);
  const out = await text();
  const rate = (r: number, p: number, mode: 'seq' | 'par'): number => {
    const re =
      mode === 'seq'
        ? new RegExp(`httpbench: r${r} p${p} seq (\\d+) (\\d+) (\\d+)`)
        : new RegExp(`httpbench: r${r} p${p} par \\d+ (\\d+) (\\d+) (\\d+)`);
    const m = re.exec(out);
    if (!m) throw new Error(`no ${mode} line for round ${r}, phase ${p}:\n${out.slice(-2000)}`);
    if (Number(m[2]) > 0) throw new Error(`${m[2]} requests failed in round ${r}, phase ${p} (${mode})`);
    return Number(m[1]) / (Number(m[3]) / 1e6);
  };
  const res = { seq: [] as number[], par: [] as number[] };
  for (let r = 1; r <= ROUNDS; r++)
    for (const mode of ['seq', 'par'] as const) {
      const [near, far] = [rate(r, 1, mode), rate(r, 2, mode)];
      res[mode].push(far / near);
      console.log(
        `round ${r}: guest to guest ${mode}: on one host ${near.toFixed(1)} req/s, across hosts ${far.toFixed(1)} req/s: ratio ${(far / near).toFixed(2)}`,
      );
    }
  for (const e of [cli, local, remote]) await call('DELETE', `/v1/instances/${String(e.uuid)}`, {});
  await until('deleted', async () => (await api.store.read((tx) => tx.instances.all())).length === 0, 120_000);
  return res;
}

async function main(): Promise<void> {
  const uk = unikraftDir();
  if (!uk) throw new Error('the Unikraft kernels are missing (UNIHOST_UNIKRAFT_DIR)');
  const pg = testPostgres();
  const storeUrl = await pg.createDb();
  const apiDir = mkdtempSync(join(tmpdir(), 'unihost-bench-hosts-api-'));
  const hosts: Host[] = HOSTS.map((name, k) => ({
    name,
    ns: `uhb-${name}-${process.pid}`,
    dir: mkdtempSync(join(tmpdir(), `unihost-bench-hosts-${name}-`)),
    address: `10.97.0.${k + 1}`,
  }));
  const ul = `uhb-ul-${process.pid}`;
  let api: Daemon | undefined;
  try {
    execFileSync('ip', ['netns', 'add', ul]);
    execFileSync('ip', ['-n', ul, 'link', 'add', 'ul', 'type', 'bridge']);
    execFileSync('ip', ['-n', ul, 'link', 'set', 'ul', 'up']);
    for (const h of hosts) {
      execFileSync('ip', ['netns', 'add', h.ns]);
      execFileSync('ip', ['-n', h.ns, 'link', 'set', 'lo', 'up']);
      const peer = ['type', 'veth', 'peer', 'name', h.name, 'netns', ul];
      execFileSync('ip', ['-n', h.ns, 'link', 'add', 'ul0', 'mtu', '1600', ...peer]);
      execFileSync('ip', ['-n', ul, 'link', 'set', h.name, 'mtu', '1600', 'master', 'ul', 'up']);
      execFileSync('ip', ['-n', h.ns, 'addr', 'add', `${h.address}/24`, 'dev', 'ul0']);
      execFileSync('ip', ['-n', h.ns, 'link', 'set', 'ul0', 'up']);
    }
    api = await startDaemon(
      {
        ...DEFAULTS,
        dataDir: apiDir,
        listen: '127.0.0.1:0',
        roles: ['api'],
        store: { ...DEFAULTS.store, url: storeUrl },
        host: { ...DEFAULTS.host, leaseMs: LEASE_MS },
      },
      { logger: pino({ level: 'warn' }) },
    );
    const user = await api.services.users.create('bench', true);
    await api.services.users.setQuotas('bench', {
      hard: { instances: 10 * N, live_instances: 10 * N, live_memory_mb: 1024 * N },
      limits: {},
    });
    const call = apiCaller(api.url, user.token);
    await importCHttp(api.services.images, uk);
    await importGuestImages(api.services.images, guestOut(), ['http', 'httpbench']);
    for (const h of hosts) startAgent(h, storeUrl);
    const hostList = () => api!.services.hosts.list();
    await until('three agents', async () => (await hostList()).filter((h) => h.state === 'live').length === 3, 60_000);
    console.log('three agents live');
    const running = async (ids: string[]) => {
      const all = await api!.store.read((tx) => tx.instances.all());
      const byId = new Map(all.map((i) => [i.id, i]));
      return ids.filter((id) => byId.get(id)?.state === 'running').length;
    };

    /** creates refused for conflicting transactions and sent again (reported) */
    let conflicts = 0;
    const createOne = async (name: string): Promise<string> => {
      for (let attempt = 0; ; attempt++) {
        const r = await call('POST', '/v1/instances', {
          name,
          image: 'c-http:latest',
          memory_mb: 16,
          restart_policy: 'always',
          autostart: true,
        });
        const e = Object.values(r.data ?? {})[0]?.[0] ?? (r as unknown as Record<string, unknown>);
        if (e.status === 'success') return String(e.uuid);
        // the store's answer after 10 serialization failures: a client sends it again
        if (attempt < 5 && /kept conflicting/.test(String(e.message))) {
          conflicts++;
          continue;
        }
        throw new Error(`create failed: ${JSON.stringify(e)}`);
      }
    };
    /** Creates N instances (4 requests at a time) and returns ms until all run, and their ids. */
    const agents = () => new Set(hosts.flatMap((h) => (h.proc?.pid ? [h.proc.pid] : [])));
    const batch = async (tag: string): Promise<{ ms: number; ids: string[]; cpu: string }> => {
      const cpu0 = cpuNow(agents());
      const t0 = performance.now();
      const ids: string[] = [];
      for (let k = 0; k < N; k += 4)
        ids.push(
          ...(await Promise.all(Array.from({ length: Math.min(4, N - k) }, (_, j) => createOne(`${tag}-${k + j}`)))),
        );
      await until(`${N} running`, async () => (await running(ids)) === N, 60_000).catch(async (e: unknown) => {
        const all = await api!.store.read((tx) => tx.instances.all());
        const hostRows = await api!.store.read((tx) => tx.hosts.list());
        const states = all.map((i) => `${i.name}:${i.state}@${i.host_id?.slice(0, 8)}`).join(' ');
        // what a boot that never ended left: its VM (alive or not) and the end of its console
        for (const i of all.filter((x) => ids.includes(x.id) && x.state !== 'running')) {
          const h = hosts.find((x) => x.name === hostRows.find((r) => r.id === i.host_id)?.name);
          const pid = (i.runtime as { pid?: number }).pid;
          const alive = pid !== undefined && spawnSync('kill', ['-0', String(pid)]).status === 0;
          const log = h ? join(pathsFor(h.dir).instance(i.id), 'console.log') : '';
          const tail = existsSync(log) ? readFileSync(log, 'utf8').slice(-300) : '(no console log)';
          console.error(
            `${i.name} (${i.id}) ${i.state} on ${h?.name}: pid ${pid} ${alive ? 'alive' : 'gone'}, ` +
              `vmm_load ${i.vmm_load_time_us} vmm_ready ${i.vmm_ready_time_us} boot ${i.boot_time_us}; console: ${JSON.stringify(tail)}`,
          );
        }
        throw new Error(`${(e as Error).message}; states: ${states}`);
      });
      return { ms: performance.now() - t0, ids, cpu: cpuSpent(cpu0, cpuNow(agents())) };
    };
    const clear = async (ids: string[]) => {
      for (const id of ids) await call('DELETE', `/v1/instances/${id}`, {});
      await until('deleted', async () => (await api!.store.read((tx) => tx.instances.all())).length === 0, 120_000);
    };

    const g2g = await guestToGuest(api, call, hosts);

    // a first boot on each host fetches the image from the store: once, before the rounds
    const warm = await batch('warm');
    await clear(warm.ids);

    const one: number[] = [];
    const three: number[] = [];
    const failover: number[] = [];
    /** per round: the failover's boots raw (the slowest of the wave), and the goal it gives */
    const rawBoot: number[] = [];
    const goals: number[] = [];
    for (let r = 0; r < ROUNDS; r++) {
      for (const h of ['h2', 'h3']) await api.services.hosts.mark(h, 'cordoned');
      const a = await batch(`one${r}`);
      one.push(a.ms);
      await clear(a.ids);
      for (const h of ['h2', 'h3']) await api.services.hosts.mark(h, 'live');
      const b = await batch(`three${r}`);
      three.push(b.ms);
      console.log(
        `round ${r + 1}: ${N} on 1 host ${a.ms.toFixed(0)} ms, on 3 hosts ${b.ms.toFixed(0)} ms: ratio ${(b.ms / a.ms).toFixed(2)}`,
      );
      // where the time of each went: CPU seconds per kind of process (2 cores: 2 s of CPU per second at most)
      console.log(`  CPU s on 1 host: ${a.cpu}\n  CPU s on 3 hosts: ${b.cpu}`);

      // failover: h2 dies
      const h2 = hosts[1]!;
      const h2id = (await hostList()).find((h) => h.name === 'h2')!.id;
      const all = await api.store.read((tx) => tx.instances.all());
      const lost = all.filter((i) => i.host_id === h2id).map((i) => i.id);
      const cpu0 = cpuNow(agents());
      const t0 = performance.now();
      const wall0 = Date.now();
      killHost(h2);
      // where the failover's time goes: when h2 was seen dead, each lost instance placed elsewhere, each running
      const seen = { dead: NaN, placed: new Map<string, number>(), running: new Map<string, number>() };
      await until(
        'failover',
        async () => {
          const at = performance.now() - t0;
          const now = await api!.store.read((tx) => tx.instances.all());
          if (Number.isNaN(seen.dead) && (await hostList()).find((h) => h.name === 'h2')?.state === 'dead')
            seen.dead = at;
          for (const id of lost) {
            const i = now.find((x) => x.id === id);
            if (!i || i.host_id === h2id) continue;
            if (!seen.placed.has(id)) seen.placed.set(id, at);
            if (i.state === 'running' && !seen.running.has(id)) seen.running.set(id, at);
          }
          return seen.running.size === lost.length;
        },
        300_000,
      );
      const ms = performance.now() - t0;
      failover.push(ms);
      const span = (m: Map<string, number>) => {
        const v = [...m.values()].sort((x, y) => x - y);
        return `${v[0]!.toFixed(0)}-${v[v.length - 1]!.toFixed(0)} ms (median ${v[v.length >> 1]!.toFixed(0)})`;
      };
      console.log(
        `round ${r + 1}: failover of ${lost.length} instances: ${ms.toFixed(0)} ms after the kill; ` +
          `h2 dead at ${seen.dead.toFixed(0)} ms, placed elsewhere ${span(seen.placed)}, running ${span(seen.running)}`,
      );
      console.log(`  CPU s during the failover: ${cpuSpent(cpu0, cpuNow(agents()))}`);
      // the boots' own parts (ms after the kill, from the instances' records): picked up by the new host's
      // agent, its tap made, QEMU spawned, the banner's end, the port accepting
      const recs = (await api.store.read((tx) => tx.instances.all())).filter((i) => lost.includes(i.id));
      const part = (f: (i: (typeof recs)[number]) => number) => {
        const v = recs.map(f).sort((x, y) => x - y);
        return `${v[v.length >> 1]!.toFixed(0)} (${v[0]!.toFixed(0)}-${v[v.length - 1]!.toFixed(0)})`;
      };
      const spawn = (i: (typeof recs)[number]) => Date.parse(i.started_at!) - wall0;
      console.log(
        `  boots, ms after the kill, median (first-last): picked up ${part((i) => spawn(i) - (i.vmm_start_time_us ?? 0) / 1000)}, ` +
          `tap ready ${part((i) => spawn(i) - ((i.vmm_start_time_us ?? 0) - (i.net_time_us ?? 0)) / 1000)}, ` +
          `spawned ${part(spawn)}, banner ${part((i) => spawn(i) + (i.vmm_ready_time_us ?? 0) / 1000)}, ` +
          `port accepts ${part((i) => spawn(i) + (i.boot_time_us ?? 0) / 1000)}`,
      );
      // the failover's boots raw: as many QEMUs of the same kernel started together beside the instances
      // that survived (the failed-over ones deleted first), spawn -> port accepting
      for (const id of lost) await call('DELETE', `/v1/instances/${id}`, {});
      const left = b.ids.length - lost.length;
      await until(
        'moved ones deleted',
        async () => (await api!.store.read((tx) => tx.instances.all())).length === left,
        120_000,
      );
      const wave = await rawWave(api, 'c-http:latest', lost.length, 8080);
      const rawMax = Math.max(...wave);
      const goal = LEASE_MS + rawMax + 2000;
      rawBoot.push(rawMax);
      goals.push(goal);
      console.log(
        `  raw: ${lost.length} QEMUs started together beside ${left} running: all accepting after ${rawMax.toFixed(0)} ms ` +
          `(median ${stats(wave).median.toFixed(0)}); goal lease ${LEASE_MS} + ${rawMax.toFixed(0)} + 2000 = ${goal.toFixed(0)} ms: ` +
          `${ms <= goal ? 'met' : 'NOT met'} (${(ms / goal).toFixed(2)}x)`,
      );
      await clear(b.ids);
      startAgent(h2, storeUrl);
      await until('h2 back', async () => (await hostList()).find((h) => h.name === 'h2')?.state === 'live', 60_000);
    }
    const ratios = three.map((t, k) => t / one[k]!);
    const s = stats(ratios);
    const f = stats(failover);
    console.log(
      `\n${N} c-http (16 MB), ${ROUNDS} rounds, lease ${LEASE_MS} ms; creates sent again after a conflict: ${conflicts}`,
    );
    console.log(
      `placement + boot, 3 hosts / 1 host: median ${s.median.toFixed(2)}, worst ${s.max.toFixed(2)} (goal <= 1.1)`,
    );
    console.log(
      `failover, kill -> all running elsewhere: median ${f.median.toFixed(0)} ms, max ${f.max.toFixed(0)} ms ` +
        `(goal: lease ${LEASE_MS} + boot + 2000 ms)`,
    );
    const byGoal = failover.map((x, k) => x / goals[k]!);
    console.log(
      `  boot: the same boots raw, all accepting after median ${stats(rawBoot).median.toFixed(0)} ms, max ${stats(rawBoot).max.toFixed(0)} ms; ` +
        `failover / goal per round: ${byGoal.map((x) => x.toFixed(2)).join(', ')} (met when <= 1.00 in every round)`,
    );
    for (const mode of ['seq', 'par'] as const) {
      const g = stats(g2g[mode]);
      console.log(
        `guest to guest (${mode === 'seq' ? 'sequential' : '4 loops'}), across hosts / on one host: ` +
          `median ${g.median.toFixed(2)}, worst ${g.min.toFixed(2)} (goal >= 0.8)`,
      );
    }
  } finally {
    for (const h of hosts) {
      killHost(h);
      spawnSync('ip', ['netns', 'del', h.ns]);
      rmSync(h.dir, { recursive: true, force: true });
    }
    spawnSync('ip', ['netns', 'del', ul]);
    await api?.close();
    rmSync(apiDir, { recursive: true, force: true });
    pg.close();
  }
}

await main();
