/**
 * Crash-consistency harness (docs/security.md, "Crash consistency"):
 * concurrent clients run mixed operations (create, start, stop, delete
 * instances; create, delete, attach, detach volumes; create and delete
 * service groups) against the real daemon with real QEMU guests while the
 * daemon is killed with SIGKILL at random points, and sometimes a QEMU with
 * it. After each kill the daemon is started again on the same data dir.
 * At the end a checker compares every acknowledged write with the store and
 * the host with the store: lost writes, leftovers (QEMU, taps, nftables
 * elements, files) and instances that did not converge are counted.
 *
 *   npx tsx test/crash/run.ts [--ops 1000] [--kills 30] [--clients 8] [--seed N] [--max-instances 2] [--no-acme]
 *
 * Needs root, ip, nft, QEMU and the test images (UNIHOST_GUEST_OUT or
 * guest/out); runs itself inside a network namespace it creates and deletes.
 * Exits 1 when anything was lost, left over or did not converge.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { insideTestNetns, runFileInNewNetns } from '../helpers/netns.js';
import { guestOut, killLeaks } from '../helpers/vm.js';
import { check, converged, haproxyMasters, type CheckResult } from './check.js';
import { CrashDaemon, GATEWAY_PORT_OFFSET } from './daemon.js';
import { hasPebble, startPebble } from '../helpers/pebble.js';
import { Client, Ledger, prng } from './workload.js';

export interface CrashOptions {
  ops: number;
  kills: number;
  clients: number;
  seed: number;
  maxInstances: number;
  /** also SIGKILL the gateway's HAProxy master in 40% of the kills (the long form; see docs/security.md) */
  killHaproxy?: boolean;
  /**
   * ACME on, against pebble in the harness's namespace: half the new groups
   * get a custom domain, whose order the kills interrupt; at the end each
   * must be valid and served by the gateway (needs Debian's pebble)
   */
  acme?: boolean;
  /** the store: a PostgreSQL URL (the many-hosts store; its lease and watchdog on); default SQLite in the data dir */
  storeUrl?: string;
  /** progress lines (stderr by default) */
  say?: (line: string) => void;
}

export interface CrashReport extends CheckResult {
  seed: number;
  ops: number;
  acknowledged: number;
  unanswered: number;
  refused: number;
  suspends: number;
  daemonKills: number;
  /** daemon kills that landed while requests were in flight (not after the workload ended) */
  killsInFlight: number;
  qemuKills: number;
  haproxyKills: number;
  instances: number;
  volumes: number;
  groups: number;
  /** groups created with a custom domain (an ACME order each) */
  customDomains: number;
}

/** custom domains of the harness's groups (its DNS answers them with the gateway's address) */
const CUSTOM_DOMAIN = 'crash.test';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Runs the whole harness (inside a network namespace) and returns its counts. */
export async function runCrash(o: CrashOptions): Promise<CrashReport> {
  const say = o.say ?? ((l: string) => process.stderr.write(`${l}\n`));
  const rnd = prng(o.seed);
  const dataDir = mkdtempSync(join(tmpdir(), 'unihost-crash-'));
  // the gateway's ports are offset (443 -> 20443): the authority validates there
  const pebble = o.acme
    ? await startPebble({
        httpPort: 80 + GATEWAY_PORT_OFFSET,
        tlsPort: 443 + GATEWAY_PORT_OFFSET,
        resolve: (name) => (name.endsWith(`.${CUSTOM_DOMAIN}`) ? '127.0.0.1' : undefined),
      })
    : undefined;
  const d = new CrashDaemon({
    dataDir,
    port: 7990,
    guestOut: guestOut(),
    ...(o.storeUrl ? { storeUrl: o.storeUrl } : {}),
    ...(pebble ? { acme: { directory: pebble.directory, directoryCa: pebble.directoryCa } } : {}),
  });
  const ledger = new Ledger();
  let daemonKills = 0;
  let killsInFlight = 0;
  let qemuKills = 0;
  let haproxyKills = 0;
  try {
    const token = d.prepare();
    await d.start(token);
    // Clients wait on `upGate` while the daemon is down; the killer swaps it.
    let upGate: Promise<void> = Promise.resolve();
    // Kill points: operation counts, spread at random over the run.
    const points = Array.from({ length: o.kills }, () => Math.floor(rnd() * o.ops)).sort((a, b) => a - b);
    const clients = Array.from(
      { length: o.clients },
      (_, id) =>
        new Client({
          url: d.url,
          token,
          rnd,
          ledger,
          maxInstances: o.maxInstances,
          up: () => upGate,
          id,
          ...(pebble ? { customDomain: CUSTOM_DOMAIN } : {}),
        }),
    );
    let started = 0;
    const worker = async (c: Client): Promise<void> => {
      while (started < o.ops) {
        started++;
        await c.step();
      }
    };
    const killer = async (): Promise<void> => {
      for (const at of points) {
        // a point the clients outran (they finished first) is still a kill: mid-boot, mid-reconcile
        while (ledger.ops < at && started < o.ops) await sleep(5);
        await sleep(Math.floor(rnd() * 200)); // land anywhere: mid-request, mid-transaction, mid-boot
        let reopen!: () => void;
        upGate = new Promise<void>((r) => (reopen = r));
        if (ledger.inFlight > 0) killsInFlight++;
        await d.kill();
        daemonKills++;
        if (o.killHaproxy !== false && rnd() < 0.4) {
          // the gateway's HAProxy master too: the next daemon must bring a working one back
          for (const pid of haproxyMasters(dataDir)) {
            try {
              process.kill(pid, 'SIGKILL');
              haproxyKills++;
            } catch {
              /* already gone */
            }
          }
        }
        if (rnd() < 0.3) {
          const victims = qemuPids(dataDir);
          const pid = victims[Math.floor(rnd() * victims.length)];
          if (pid) {
            try {
              process.kill(pid, 'SIGKILL');
              qemuKills++;
            } catch {
              /* already gone */
            }
          }
        }
        await d.start(token);
        reopen();
        if (daemonKills % 5 === 0) say(`  ${ledger.ops}/${o.ops} operations, ${daemonKills} daemon kills`);
      }
    };
    await Promise.all([...clients.map(worker), killer()]);

    // One more kill and start, then wait for every instance to settle.
    await d.kill();
    daemonKills++;
    await d.start(token);
    // Settled means settled for 2 s: right after the start, a record may still say `running` for a VM
    // that died while the daemon was down, until the daemon's first look restarts it (a CI run read
    // such an instance settled, and `starting` again a moment later in the check below).
    const end = Date.now() + 180_000;
    for (let settledReads = 0; settledReads < 5 && Date.now() < end;) {
      settledReads = (await converged(dataDir, o.storeUrl)).length === 0 ? settledReads + 1 : 0;
      if (settledReads < 5) await sleep(500);
    }
    const result = await check(d.url, token, dataDir, ledger, pebble && (await pebble.root()), o.storeUrl);
    return {
      seed: o.seed,
      ops: ledger.ops,
      acknowledged: ledger.acknowledged,
      suspends: ledger.suspends,
      unanswered: ledger.unanswered,
      refused: ledger.refused,
      daemonKills,
      killsInFlight,
      qemuKills,
      haproxyKills,
      instances: ledger.instances.size,
      volumes: ledger.volumes.size,
      groups: ledger.groups.size,
      customDomains: [...ledger.groups.values()].filter((g) => g.custom).length,
      ...result,
    };
  } finally {
    await d.kill();
    await pebble?.close();
    killLeaks([dataDir]);
    rmSync(dataDir, { recursive: true, force: true });
  }
}

function qemuPids(dataDir: string): number[] {
  try {
    return execFileSync('pgrep', ['-f', `qemu-system.*${dataDir}`], { encoding: 'utf8' })
      .split('\n')
      .filter(Boolean)
      .map(Number);
  } catch {
    return []; // none
  }
}

/** The counts as the harness prints them. */
export function describeReport(r: CrashReport): string {
  const lines = [
    `seed ${r.seed}: ${r.ops} operations (${r.acknowledged} acknowledged, ${r.refused} refused, ${r.unanswered} unanswered by a killed daemon)`,
    `objects: ${r.instances} instances, ${r.volumes} volumes, ${r.groups} groups created (${r.customDomains} with a custom domain: an ACME order); ${r.suspends} suspends acknowledged`,
    `kills: ${r.daemonKills} daemon (SIGKILL; ${r.killsInFlight} with requests in flight), ${r.qemuKills} QEMU, ${r.haproxyKills} HAProxy master`,
    `lost acknowledged writes: ${r.lost.length}`,
    ...r.lost.map((l) => `  ${l}`),
    `leftovers the store does not know: ${r.leftovers.length}`,
    ...r.leftovers.map((l) => `  ${l}`),
    `instances not converged: ${r.notConverged.length}`,
    ...r.notConverged.map((l) => `  ${l}`),
    ...(r.late.length ? [`right only after a wait (the gateway catching up): ${r.late.length}`] : []),
    ...r.late.map((l) => `  ${l}`),
  ];
  return lines.join('\n');
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      ops: { type: 'string', default: '1000' },
      kills: { type: 'string', default: '30' },
      clients: { type: 'string', default: '8' },
      seed: { type: 'string' },
      'max-instances': { type: 'string', default: '2' },
      'no-acme': { type: 'boolean', default: false },
      store: { type: 'string' },
    },
  });
  const seed = values.seed !== undefined ? Number(values.seed) : Math.floor(Math.random() * 2 ** 31);
  const opts = {
    ops: Number(values.ops),
    kills: Number(values.kills),
    clients: Number(values.clients),
    seed,
    maxInstances: Number(values['max-instances']),
    acme: !values['no-acme'] && hasPebble(),
    ...(values.store ? { storeUrl: values.store } : {}),
  };
  process.stderr.write(`crash harness: ${JSON.stringify(opts)} (replay with --seed ${seed})\n`);
  const r = await runCrash(opts);
  console.log(describeReport(r));
  process.exitCode = r.lost.length + r.leftovers.length + r.notConverged.length > 0 ? 1 : 0;
}

if (process.argv[1] && import.meta.filename === process.argv[1]) {
  if (insideTestNetns()) await main();
  else {
    const r = runFileInNewNetns(import.meta.url, {
      prefix: 'uhcrash',
      args: process.argv.slice(2),
      stdio: 'inherit',
      timeoutMs: 4 * 3600_000, // the long form runs for as long as its operations take
    });
    process.exitCode = r.status ?? 1;
  }
}
