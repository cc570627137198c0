/**
 * bench/rules: what one tap's change costs nftables, as the whole ruleset
 * against the elements that change (`renderTapChanges`), on a host alone and
 * with the overlay (several hosts), side by side in one run.
 *
 *   npx tsx bench/rules.ts [--taps 100] [--remote 200] [--users 10] [--updates 200]
 *
 * Each update admits a new tap or drops it again (in turns), with `--taps`
 * taps already there and, with the overlay, `--remote` instances on other
 * hosts; each is sent to a running `nft -i` (src/network/nft-batch.ts, as
 * the daemon does) inside a network namespace made here and deleted after.
 * Figures: wall time per update (median, p95) and the CPU the `nft` process
 * used per update (/proc/<pid>/stat, over all updates).
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { NftBatch } from '../src/network/nft-batch.js';
import { renderDelete, renderRules, renderTapChanges, type RulesOptions, type TapSpec } from '../src/network/rules.js';

const { values } = parseArgs({
  options: {
    taps: { type: 'string', default: '100' },
    remote: { type: 'string', default: '200' },
    users: { type: 'string', default: '10' },
    updates: { type: 'string', default: '200' },
  },
});
const TAPS = Number(values.taps);
const REMOTE = Number(values.remote);
const USERS = Number(values.users);
const UPDATES = Number(values.updates);

const ip4 = (n: number, net: number): string => `10.${net}.${(n >> 8) & 255}.${n & 255}`;
const mac = (n: number): string =>
  `02:00:00:${((n >> 16) & 255).toString(16).padStart(2, '0')}:${((n >> 8) & 255).toString(16).padStart(2, '0')}:${(n & 255).toString(16).padStart(2, '0')}`;
const tap = (n: number): TapSpec => ({
  tap: `uh${n.toString(16).padStart(12, '0')}`,
  userId: `user-${n % USERS}`,
  ip: ip4(n + 2, 77),
  mac: mac(n + 2),
});

/** CPU (ms) a process has used so far: utime + stime from /proc (clock ticks of 10 ms). */
function cpuMs(pid: number): number {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(f[11]) + Number(f[12])) * 10;
}

const pct = (xs: number[], p: number): number => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) * p)]!;

async function measure(ns: string, overlay: boolean, incremental: boolean): Promise<string> {
  const o: RulesOptions = {
    bridge: 'uhbr0',
    bridgeMac: '02:00:00:00:00:01',
    tapPrefix: 'uh',
    table: 'uhbench',
    hostTcpPorts: [53],
    hostUdpPorts: [53],
    ...(overlay && {
      overlay: {
        port: 'vxuhbr0',
        gateways: ['10.77.255.1', '10.77.255.2'],
        remote: Array.from({ length: REMOTE }, (_, i) => ({ ip: ip4(i + 2, 78), userId: `user-${i % USERS}` })),
      },
    }),
  };
  const nft = new NftBatch(['ip', 'netns', 'exec', ns, 'nft'], 10_000);
  try {
    const base = Array.from({ length: TAPS }, (_, i) => tap(i));
    await nft.run(renderRules(o, base));
    const extra = tap(TAPS);
    const cpu0 = cpuMs(nft.pid!);
    const wall: number[] = [];
    let taps = base;
    for (let i = 0; i < UPDATES; i++) {
      const next = i % 2 === 0 ? [...base, extra] : base;
      const script = incremental ? renderTapChanges(o, taps, next, o.overlay?.remote)! : renderRules(o, next);
      const t0 = performance.now();
      await nft.run(script);
      wall.push(performance.now() - t0);
      taps = next;
    }
    const cpu = (cpuMs(nft.pid!) - cpu0) / UPDATES;
    await nft.run(renderDelete(o.table));
    return `median ${pct(wall, 0.5).toFixed(2)} ms  p95 ${pct(wall, 0.95).toFixed(2)} ms  nft CPU ${cpu.toFixed(2)} ms`;
  } finally {
    nft.close();
  }
}

const ns = `uhbench-rules-${randomBytes(4).toString('hex')}`;
execFileSync('ip', ['netns', 'add', ns]);
try {
  console.log(`# one tap admitted or dropped per update; ${TAPS} taps of ${USERS} users; ${UPDATES} updates each`);
  for (const overlay of [false, true]) {
    const where = overlay ? `overlay, ${REMOTE} instances elsewhere` : 'host alone';
    console.log(`${where.padEnd(36)} whole ruleset  ${await measure(ns, overlay, false)}`);
    console.log(`${where.padEnd(36)} elements       ${await measure(ns, overlay, true)}`);
  }
} finally {
  execFileSync('ip', ['netns', 'del', ns]);
}
