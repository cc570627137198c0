/**
 * The crash harness's checker: after the last restart and convergence, every
 * acknowledged write is compared with what the daemon answers, and the host
 * with what the store knows (QEMU processes, taps, nftables elements, files).
 */
import { rootOf } from '../../src/machines/qemu/procs.js';
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import { connect as tlsConnect } from 'node:tls';
import { request } from 'undici';
import { GATEWAY_PORT_OFFSET } from './daemon.js';
import { tapName } from '../../src/network/host.js';
import type { Ledger } from './workload.js';

type Row = Record<string, unknown>;

export interface CheckResult {
  lost: string[];
  leftovers: string[];
  notConverged: string[];
  /** what came right only after a wait (the gateway catching up after the last restart): reported, not failed */
  late: string[];
}

async function list(url: string, token: string, path: string, plural: string): Promise<Row[]> {
  const out: Row[] = [];
  let from: string | undefined;
  for (;;) {
    const q = new URLSearchParams({ count: '100', details: 'true', ...(from ? { from } : {}) });
    const r = await request(`${url}${path}?${q}`, { headers: { authorization: `Bearer ${token}` } });
    const b = (await r.body.json()) as { data?: Record<string, Row[]> };
    const page = b.data?.[plural] ?? [];
    out.push(...page);
    if (page.length < 100) return out;
    from = String(page[page.length - 1]!.uuid);
  }
}

/** One object by uuid, with details (lists leave some fields out, e.g. a volume's `attached_to`). */
async function one(url: string, token: string, path: string, plural: string, uuid: string): Promise<Row | undefined> {
  const q = new URLSearchParams({ uuid, details: 'true' });
  const r = await request(`${url}${path}?${q}`, { headers: { authorization: `Bearer ${token}` } });
  const b = (await r.body.json()) as { status?: string; data?: Record<string, Row[]> };
  return b.status === 'success' ? b.data?.[plural]?.[0] : undefined;
}

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return !readFileSync(`/proc/${pid}/stat`, 'utf8').includes(') Z ');
  } catch {
    return false;
  }
};

/** HAProxy processes serving this data dir (master-worker, their command line names its config): pid -> parent pid. */
function haproxiesOf(dataDir: string): Map<number, number> {
  const out = new Map<number, number>();
  for (const p of readdirSync('/proc')) {
    if (!/^\d+$/.test(p)) continue;
    let cmd = '';
    let stat = '';
    try {
      cmd = readFileSync(`/proc/${p}/cmdline`, 'utf8');
      stat = readFileSync(`/proc/${p}/stat`, 'utf8');
    } catch {
      continue;
    }
    if (!cmd.includes('haproxy') || !cmd.includes(join(dataDir, 'haproxy')) || !alive(Number(p))) continue;
    // a `haproxy -c` checking the configuration before a reload (its parent is the daemon) serves nothing
    if (!cmd.split('\0').includes('-W')) continue;
    out.set(Number(p), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
  }
  return out;
}

/** HAProxy masters of this data dir: the ones whose parent is not one of them. */
export function haproxyMasters(dataDir: string): number[] {
  const all = haproxiesOf(dataDir);
  return [...all].filter(([, ppid]) => !all.has(ppid)).map(([pid]) => pid);
}

/** Whether a TLS handshake for `name` on 127.0.0.1:`port` completes with a certificate the CA vouches for. */
function tlsOk(port: number, name: string, ca: string): Promise<string | undefined> {
  return new Promise((resolve) => {
    const s = tlsConnect({ host: '127.0.0.1', port, servername: name, ca, timeout: 5000 }, () => {
      s.destroy();
      resolve(undefined);
    });
    s.once('error', (e) => resolve(e.message));
    s.once('timeout', () => (s.destroy(), resolve('timed out')));
  });
}

/**
 * `tlsOk`, asked again every 500 ms for up to 15 s: the gateway's first sync
 * after the last restart (a reload, certificates installed) may still run.
 * Returns why it never worked, or, when it worked late, how late.
 */
async function tlsEventually(port: number, name: string, ca: string): Promise<{ why?: string; lateMs?: number }> {
  const t0 = Date.now();
  let why = await tlsOk(port, name, ca);
  const first = why;
  for (let i = 0; why && i < 30; i++) {
    await new Promise((r) => setTimeout(r, 500));
    why = await tlsOk(port, name, ca);
  }
  if (why) return { why };
  return first ? { lateMs: Date.now() - t0 } : {};
}

/** QEMU processes whose command line names this data dir: pid → instance id (from its jail, else its runtime dir). */
function qemusOf(dataDir: string): Map<number, string> {
  const out = new Map<number, string>();
  for (const p of readdirSync('/proc')) {
    if (!/^\d+$/.test(p)) continue;
    let cmd = '';
    try {
      cmd = readFileSync(`/proc/${p}/cmdline`, 'utf8');
    } catch {
      continue;
    }
    if (!cmd.includes('qemu-system') || !cmd.includes(dataDir) || !alive(Number(p))) continue;
    // a warm VM a restore took runs in its instance's jail under its own name; one still waiting is the pool's
    const root = rootOf(Number(p)) ?? '';
    if (/\/warm\/[0-9a-f-]{36}\/jail$/.test(root)) continue;
    const m = /instances\/([0-9a-f-]{36})\/jail$/.exec(root) ?? /instances\/([0-9a-f-]{36})/.exec(cmd);
    out.set(Number(p), m ? m[1]! : '?');
  }
  return out;
}

/** The last run ended after it began (an app exit, a crash, a boot given up): not a lost start. */
const endedAfterStart = (r: Row): boolean =>
  r.stopped_at !== null && (r.started_at === null || String(r.stopped_at) >= String(r.started_at));

/** Runs read-only queries on the daemon's store: SQLite in the data dir, or PostgreSQL at `storeUrl`. */
async function storeQuery<T>(
  dataDir: string,
  storeUrl: string | undefined,
  fn: (all: (sql: string) => Promise<Row[]>) => Promise<T>,
): Promise<T> {
  if (storeUrl) {
    const c = new pg.Client({ connectionString: storeUrl });
    await c.connect();
    try {
      return await fn(async (sql) => (await c.query(sql)).rows as Row[]);
    } finally {
      await c.end();
    }
  }
  const db = new Database(join(dataDir, 'unihost.db'), { readonly: true, fileMustExist: true });
  try {
    return await fn(async (sql) => db.prepare(sql).all() as Row[]);
  } finally {
    db.close();
  }
}

/** Instances in a state that is not an end state, or whose VM does not match its state. */
export async function converged(dataDir: string, storeUrl?: string): Promise<string[]> {
  return storeQuery(dataDir, storeUrl, async (all) => {
    const rows = await all(
      `SELECT id, name, state, desired, runtime, restart_next_at, started_at, stopped_at
         FROM instances JOIN instance_status USING (id)`,
    );
    const out: string[] = [];
    const qemus = qemusOf(dataDir);
    const pidsOf = new Map<string, number[]>();
    for (const [pid, id] of qemus) pidsOf.set(id, [...(pidsOf.get(id) ?? []), pid]);
    for (const r of rows) {
      const runtime = typeof r.runtime === 'string' ? JSON.parse(r.runtime) : (r.runtime ?? {});
      const pid = (runtime as { pid?: number }).pid;
      const where = `${String(r.name)} (${String(r.id)}): state ${String(r.state)}, desired ${String(r.desired)}`;
      if (!['running', 'stopped', 'standby'].includes(String(r.state))) out.push(`${where}: not settled`);
      else if (r.state === 'running' && !(pid && alive(pid))) out.push(`${where}: running without a live VM`);
      else if (r.state !== 'running' && (pidsOf.get(String(r.id))?.length ?? 0) > 0)
        out.push(`${where}: a VM runs (${pidsOf.get(String(r.id))!.join(', ')})`);
      // stopped for good after a start (no restart due) is an end only if the run that start began has ended
      else if (r.state === 'stopped' && r.desired === 'running' && r.restart_next_at === null && !endedAfterStart(r))
        out.push(`${where}: wanted running, nothing will start it`);
    }
    // certificates of custom domains in use: an order (or its retry) still to come is not settled
    const certs = await all(
      `SELECT c.id, c.common_name, c.validation_attempt FROM certificates c
        WHERE c.state = 'pending' AND EXISTS (SELECT 1 FROM domains d WHERE d.certificate_id = c.id)`,
    );
    for (const c of certs)
      out.push(
        `certificate ${String(c.common_name)} (${String(c.id)}): pending after ${String(c.validation_attempt)} attempts`,
      );
    return out;
  });
}

export async function check(
  url: string,
  token: string,
  dataDir: string,
  ledger: Ledger,
  /** the ACME authority's root (ACME on): custom domains must be served with a certificate under it */
  acmeRoot?: string,
  /** the store, when it is PostgreSQL */
  storeUrl?: string,
): Promise<CheckResult> {
  const lost: string[] = [];
  const notConverged: string[] = [];
  const late: string[] = [];
  const instances = new Map((await list(url, token, '/v1/instances', 'instances')).map((i) => [String(i.uuid), i]));
  const volumes = new Map((await list(url, token, '/v1/volumes', 'volumes')).map((v) => [String(v.uuid), v]));
  const groups = new Map((await list(url, token, '/v1/services', 'service_groups')).map((g) => [String(g.uuid), g]));

  for (const [id, m] of ledger.instances) {
    const got = instances.get(id);
    if (m.exists === true && !got) lost.push(`instance ${m.name}: created, not deleted, but gone`);
    if (m.exists === false && got) lost.push(`instance ${m.name}: deleted, but back`);
    if (m.exists !== true || !got) continue;
    const why = () =>
      `stop_reason ${String(got.stop_reason)}, exit_code ${String(got.exit_code)}, start_count ${String(got.start_count)}, restart_count ${String(got.restart_count)}`;
    if (m.desired === 'running' && got.state !== 'running')
      lost.push(`instance ${m.name} (${id}): last acknowledged start, now ${String(got.state)}: ${why()}`);
    if (m.desired === 'stopped' && got.state !== 'stopped')
      lost.push(`instance ${m.name} (${id}): last acknowledged stop, now ${String(got.state)}: ${why()}`);
    if (m.desired === 'standby' && got.state !== 'standby')
      lost.push(`instance ${m.name} (${id}): last acknowledged suspend, now ${String(got.state)}: ${why()}`);
  }
  for (const [id, m] of ledger.volumes) {
    const got = volumes.get(id);
    if (m.exists === true && !got) lost.push(`volume ${m.name}: created, not deleted, but gone`);
    if (m.exists === false && got) lost.push(`volume ${m.name}: deleted, but back`);
    if (m.exists !== true || !got || m.attachedTo === '?') continue;
    const full = await one(url, token, '/v1/volumes', 'volumes', id);
    const to = ((full?.attached_to as { uuid: string }[] | undefined) ?? [])[0]?.uuid ?? null;
    if (to !== m.attachedTo) {
      const i = m.attachedTo ? ledger.instances.get(m.attachedTo) : undefined;
      const now = m.attachedTo ? instances.get(m.attachedTo) : undefined;
      lost.push(
        `volume ${m.name}: attached to ${String(to)}, acknowledged ${String(m.attachedTo)}` +
          (i ? ` (${i.name}: ledger ${JSON.stringify(i)}, now ${now ? String(now.state) : 'gone'})` : ''),
      );
    }
  }
  for (const [id, m] of ledger.groups) {
    if (m.exists === true && !groups.has(id)) lost.push(`group ${m.name}: created, not deleted, but gone`);
    if (m.exists === false && groups.has(id)) lost.push(`group ${m.name}: deleted, but back`);
  }

  // Host leftovers: anything of this data dir that the store does not know.
  const leftovers: string[] = [];
  const known = new Set(instances.keys());
  for (const [pid, id] of qemusOf(dataDir))
    if (!known.has(id)) leftovers.push(`QEMU pid ${pid} of unknown instance ${id}`);
  const taps = new Set([...known].map((id) => tapName(id)));
  const links = JSON.parse(execFileSync('ip', ['-j', 'link', 'show'], { encoding: 'utf8' })) as { ifname: string }[];
  for (const l of links)
    if (/^uh[0-9a-f]{12}$/.test(l.ifname) && !taps.has(l.ifname)) leftovers.push(`tap ${l.ifname}`);
  let rules = '';
  try {
    rules = execFileSync('nft', ['list', 'table', 'bridge', 'unihost'], { encoding: 'utf8' });
  } catch {
    /* no table: nothing left */
  }
  for (const t of new Set(rules.match(/uh[0-9a-f]{12}/g) ?? []))
    if (!taps.has(t)) leftovers.push(`nftables element for tap ${t}`);
  const dir = join(dataDir, 'instances');
  if (existsSync(dir))
    for (const id of readdirSync(dir)) {
      if (!known.has(id)) leftovers.push(`instance directory ${id}`);
      // a memory snapshot only where the record points at one (suspended or stateful standby)
      else if (existsSync(join(dir, id, 'snapshot.mem')) && !instances.get(id)?.snapshot)
        leftovers.push(`snapshot file of ${id}, which has no snapshot (state ${String(instances.get(id)?.state)})`);
    }
  const vdir = join(dataDir, 'volumes');
  if (existsSync(vdir))
    for (const f of readdirSync(vdir)) {
      const id = f.replace(/\.ext4$/, '');
      if (!volumes.has(id)) leftovers.push(`volume file ${f}`);
    }
  // The gateway after HAProxy and daemon kills: one master, a bounded set of workers, every group served.
  const masters = haproxyMasters(dataDir);
  if (masters.length !== 1)
    leftovers.push(`${masters.length} HAProxy masters of this data dir (want 1): ${masters.join(', ')}`);
  const workers = [...haproxiesOf(dataDir).values()].filter((ppid) => masters.includes(ppid)).length;
  if (workers > 7) leftovers.push(`${workers} HAProxy workers (old ones pile up)`);
  const ca = readFileSync(join(dataDir, 'ca', 'ca.pem'), 'utf8');
  for (const [id, g] of groups) {
    // the metro name (a custom one has a certificate of its own, checked below)
    const fqdn = ((g.domains as { fqdn: string; certificate?: unknown }[] | undefined) ?? []).find(
      (x) => !x.certificate,
    )?.fqdn;
    if (!fqdn) continue;
    const r = await tlsEventually(443 + GATEWAY_PORT_OFFSET, fqdn, ca);
    if (r.why) lost.push(`group ${String(g.name)} (${id}): no TLS for ${fqdn} at the gateway: ${r.why}`);
    else if (r.lateMs) late.push(`TLS for ${fqdn} at the gateway after ${r.lateMs} ms`);
  }
  // Custom domains (ACME on): the order came through the kills; the gateway serves its certificate
  for (const [id, m] of ledger.groups) {
    const g = groups.get(id);
    if (!m.custom || !g || !acmeRoot) continue;
    const d = (g.domains as { fqdn: string; certificate?: { state: string; uuid: string } }[]).find(
      (x) => x.fqdn.replace(/\.$/, '') === m.custom,
    );
    if (!d) lost.push(`group ${m.name}: its custom domain ${m.custom} is gone`);
    else if (d.certificate?.state !== 'valid') {
      const c = d.certificate && (await one(url, token, '/v1/certificates', 'certificates', d.certificate.uuid));
      notConverged.push(
        `group ${m.name}: the certificate of ${m.custom} is ${String(d.certificate?.state)}: ${String(c?.message ?? c?.validation_attempt)}`,
      );
    } else {
      // installed by the gateway's next sync after the certificate turned valid
      const r = await tlsEventually(443 + GATEWAY_PORT_OFFSET, m.custom, acmeRoot);
      if (r.why) lost.push(`group ${m.name}: ${m.custom} is not served with its ACME certificate: ${r.why}`);
      else if (r.lateMs) late.push(`${m.custom} served with its ACME certificate after ${r.lateMs} ms`);
    }
  }
  // Per-VM cgroups of instances that run no VM: v1 (one tree per controller) or v2 (one unified tree)
  const running = new Set([...qemusOf(dataDir).values()]);
  const trees = existsSync('/sys/fs/cgroup/cgroup.controllers') ? ['v2'] : ['memory', 'pids', 'cpu'];
  for (const ctl of trees) {
    const cg = ctl === 'v2' ? join('/sys/fs/cgroup', 'unihost') : join('/sys/fs/cgroup', ctl, 'unihost');
    if (!existsSync(cg)) continue;
    for (const e of readdirSync(cg, { withFileTypes: true }))
      if (e.isDirectory() && known.has(e.name) && !running.has(e.name))
        leftovers.push(`${ctl} cgroup of ${e.name} without a VM`);
  }
  return { lost, leftovers, notConverged: [...notConverged, ...(await converged(dataDir, storeUrl))], late };
}
