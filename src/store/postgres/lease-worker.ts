import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import type pg from 'pg';
import type { LeaseRenewal, LeaseRenewalOptions, LeaseRenewals } from '../types.js';
import { RENEW_LEASE_SQL } from './tx.js';

/**
 * The host lease's renewals in a worker thread with a connection of its own
 * (`Store.leaseRenewals`, docs/hosts.md "Leases and fencing"). An agent
 * booting many VMs at once kept its event loop and its pool's connections
 * busy: a renewal due every quarter of the lease was sent seconds late, and
 * the other agents declared a live host dead (bench/hosts with a 3 s
 * lease). Here the timer and the write run beside the daemon's work; the
 * daemon only learns the outcome (and still decides, on its own clock,
 * whether it may act).
 *
 * The worker's code is plain JavaScript run with `eval` (the same under tsx
 * and from dist/); it loads the daemon's own `pg`.
 */
const CODE = `
const { parentPort, workerData: w } = require('node:worker_threads');
const { renameSync, writeFileSync } = require('node:fs');
const pg = require(w.pgPath);
const pool = new pg.Pool({ ...w.config, max: 1, idleTimeoutMillis: 0, query_timeout: w.everyMs * 2 });
pool.on('error', () => {}); // a broken idle connection: the next query opens another
let epoch = w.epoch;
let timer;
let stopped = false;
async function renew() {
  const sent = performance.timeOrigin + performance.now();
  const e = epoch;
  const until = new Date(Date.now() + w.leaseMs).toISOString();
  try {
    const r = await pool.query(w.sql, [until, w.hostId, e]);
    const ok = (r.rowCount || 0) > 0;
    if (ok && w.vmsUntil) {
      try {
        // the watchdog's deadline, atomically (a name of its own: the daemon writes the file too, at a new epoch)
        const tmp = w.vmsUntil.file + '.renewals';
        writeFileSync(tmp, String(Math.floor(sent + w.vmsUntil.afterMs)), { mode: 0o600 });
        renameSync(tmp, w.vmsUntil.file);
      } catch {} // a data dir going away: the watchdog ends with it
    }
    parentPort.postMessage({ sent, epoch: e, ok });
  } catch (err) {
    parentPort.postMessage({ sent, epoch: e, error: String((err && err.message) || err) });
  }
  if (!stopped) timer = setTimeout(renew, w.everyMs);
}
parentPort.on('message', (m) => {
  if (m.epoch !== undefined) epoch = m.epoch;
  if (m.stop) {
    stopped = true;
    clearTimeout(timer);
    pool.end().catch(() => {}).finally(() => parentPort.close());
  }
});
timer = setTimeout(renew, w.everyMs);
`;

export function startLeaseRenewals(
  config: pg.ClientConfig,
  o: LeaseRenewalOptions,
  on: (r: LeaseRenewal) => void,
): LeaseRenewals {
  // what structured cloning takes: the connection settings without the type parsers (an UPDATE returns no values)
  const { types: _types, ...plain } = config;
  const pgPath = createRequire(import.meta.url).resolve('pg');
  let epoch = o.epoch;
  let stopping = false;
  let w: Worker;
  let ended: Promise<void>;
  const spawn = () => {
    w = new Worker(CODE, { eval: true, workerData: { ...o, epoch, config: plain, pgPath, sql: RENEW_LEASE_SQL } });
    w.unref(); // never what keeps the daemon up
    w.on('message', (m: { sent: number; epoch: number; ok?: boolean; error?: string }) => {
      // the send time on this thread's clock (performance.now() has another origin in a worker)
      const at = m.sent - performance.timeOrigin;
      on(
        m.error !== undefined ? { at, epoch: m.epoch, error: new Error(m.error) } : { at, epoch: m.epoch, ok: !!m.ok },
      );
    });
    w.on('error', (e) => on({ at: performance.now(), epoch, error: e }));
    ended = new Promise<void>((r) => w.once('exit', () => r()));
    // a worker that died (it should not) is replaced: the renewals go on
    void ended.then(() => {
      if (!stopping) setTimeout(() => !stopping && spawn(), o.everyMs).unref();
    });
  };
  spawn();
  return {
    epoch: (e) => {
      epoch = e;
      w.postMessage({ epoch: e });
    },
    stop: async () => {
      if (stopping) return;
      stopping = true;
      w.postMessage({ stop: true });
      // a worker stuck in a query past its timeout is ended
      const t = setTimeout(() => void w.terminate(), 2000);
      await ended;
      clearTimeout(t);
    },
  };
}
