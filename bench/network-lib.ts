/** Statistics, the host's HTTP clients and the printed tables of bench/network.ts. */
import { Client, Pool, request } from 'undici';

const sorted = (xs: number[]) => [...xs].sort((a, b) => a - b);
export const q = (xs: number[], p: number) => {
  const s = sorted(xs);
  return s.length ? s[Math.min(s.length - 1, Math.ceil(p * s.length) - 1)]! : NaN;
};
export const median = (xs: number[]) => q(xs, 0.5);

export interface HttpRow {
  what: string;
  runs: number;
  /** requests/s of each run */
  rps: number[];
  /** per-request latencies of all runs, ms */
  lat: number[];
  failed: number;
  requests: number;
}
const f1 = (n: number) => (Number.isFinite(n) ? n.toFixed(n >= 100 ? 0 : 1) : '-');
const f2 = (n: number) => (Number.isFinite(n) ? n.toFixed(2) : '-');

function httpTable(rows: HttpRow[]): string {
  const head = `${'HTTP GET / (new TCP connection per request)'.padEnd(62)} runs   req/s (min-max)        median ms  p99 ms  failed/requests`;
  const lines = rows.map((r) => {
    const rps = `${f1(median(r.rps))} (${f1(Math.min(...r.rps))}-${f1(Math.max(...r.rps))})`;
    const lat = r.lat.length
      ? `${f2(median(r.lat)).padStart(9)}  ${f2(q(r.lat, 0.99)).padStart(6)}`
      : `${'-'.padStart(9)}  ${'-'.padStart(6)}`;
    return `${r.what.padEnd(62)} ${String(r.runs).padStart(4)}   ${rps.padEnd(22)} ${lat}  ${r.failed}/${r.requests}`;
  });
  return [head, ...lines].join('\n');
}

export type DdFigures = { guest: number[]; guestTmpfs: number[]; ext4: number[]; raw: number[]; tmpfs: number[] };
export function report(host: HttpRow[], guest: HttpRow[], dd: DdFigures, sizes: { mb: number; volMb: number }): void {
  const { mb: MB, volMb: VOL_MB } = sizes;
  const byWhat = (rows: HttpRow[], s: string) => rows.find((r) => r.what.includes(s))!;
  const hw = byWhat(host, 'busybox wget');
  const gw = byWhat(guest, 'by IP, busybox wget, sequential');
  const gl = byWhat(guest, 'loopback');
  const ratio = (a: number, b: number) => `${(a / b).toFixed(2)}x`;
  console.log(`\n${httpTable([...host, ...guest])}`);
  console.log(
    `\nratios guest → guest / host → guest, both busybox wget sequential: ` +
      `req/s ${ratio(median(gw.rps), median(hw.rps))}, median latency ${ratio(median(gw.lat), median(hw.lat))}; ` +
      `guest → guest / guest loopback: req/s ${ratio(median(gw.rps), median(gl.rps))}, ` +
      `median latency ${ratio(median(gw.lat), median(gl.lat))}`,
  );
  const dl = (what: string, xs: number[]) =>
    `${what.padEnd(62)} ${String(xs.length).padStart(4)}   ${f1(median(xs)).padStart(7)} (${f1(Math.min(...xs))}-${f1(Math.max(...xs))})`;
  console.log(
    [
      `\n${`sequential write, ${MB} MiB, dd bs=1M conv=fsync`.padEnd(62)} runs   MiB/s median (min-max)`,
      dl(`guest, to its ${VOL_MB} MB volume (ext4 image, virtio-blk)`, dd.guest),
      dl(`host, into a ${VOL_MB} MB ext4 image, loop-mounted`, dd.ext4),
      dl(`host, into a ${VOL_MB} MB raw image file (notrunc)`, dd.raw),
      dl('guest, to tmpfs /tmp (no disk: the copy under TCG)', dd.guestTmpfs),
      dl('host, to a tmpfs', dd.tmpfs),
    ].join('\n'),
  );
  console.log(
    `\nratios guest volume / host: vs ext4 image ${ratio(median(dd.guest), median(dd.ext4))}, ` +
      `vs raw image file ${ratio(median(dd.guest), median(dd.raw))}; ` +
      `guest tmpfs / host tmpfs ${ratio(median(dd.guestTmpfs), median(dd.tmpfs))}; ` +
      `guest volume / guest tmpfs ${ratio(median(dd.guest), median(dd.guestTmpfs))}`,
  );
}

/** `n` GETs of `/` one after another on one keep-alive connection. */
export async function undiciSeq(url: string, n: number): Promise<{ rps: number; lat: number[]; failed: number }> {
  const c = new Client(url);
  const lat: number[] = [];
  let failed = 0;
  try {
    const t0 = performance.now();
    for (let i = 0; i < n; i++) {
      const t = performance.now();
      try {
        const r = await c.request({ path: '/', method: 'GET' });
        await r.body.text();
        if (r.statusCode !== 200) failed++;
      } catch {
        failed++;
      }
      lat.push(performance.now() - t);
    }
    return { rps: n / ((performance.now() - t0) / 1000), lat, failed };
  } finally {
    await c.close();
  }
}

/** GETs of `/` from `conns` connections at once for `seconds`. */
export async function undiciConc(
  url: string,
  conns: number,
  seconds: number,
): Promise<{ rps: number; lat: number[]; failed: number; n: number }> {
  const pool = new Pool(url, { connections: conns });
  const lat: number[] = [];
  let failed = 0;
  const t0 = performance.now();
  const end = t0 + seconds * 1000;
  const worker = async () => {
    while (performance.now() < end) {
      const t = performance.now();
      try {
        const r = await pool.request({ path: '/', method: 'GET' });
        await r.body.text();
        if (r.statusCode !== 200) failed++;
      } catch {
        failed++;
      }
      lat.push(performance.now() - t);
    }
  };
  try {
    await Promise.all(Array.from({ length: conns }, worker));
    return { rps: lat.length / ((performance.now() - t0) / 1000), lat, failed, n: lat.length };
  } finally {
    await pool.close();
  }
}

/** One GET of `/`: its status, 0 when it failed. */
export async function undiciSeqOnce(url: string): Promise<number> {
  try {
    const r = await request(`${url}/`);
    await r.body.text();
    return r.statusCode;
  } catch {
    return 0;
  }
}
