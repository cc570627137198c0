/**
 * Property-based fuzzing of every endpoint of the table (issue 14): valid,
 * mutated and adversarial bodies, queries, headers and tokens against a real
 * daemon. Properties: no 5xx, no crash or error log, every rejection is the
 * spec's envelope with a message that names the problem, and a rejected
 * request changes nothing in the store.
 *
 * Short form by default; `UNIHOST_FUZZ_RUNS=100000` runs the long form
 * (docs/security.md), `UNIHOST_FUZZ_SEED` picks another seed.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import pino from 'pino';
import { storeDump, type StoreDump } from '../helpers/dump.js';
import { startHarness, type Harness } from '../helpers/harness.js';
import { simMachines } from '../helpers/sim-machines.js';
import { ENDPOINTS } from '../../src/api/routes/index.js';
import { compile } from '../../src/api/request.js';
import type { EndpointDef } from '../../src/api/endpoint.js';
import { adversarial, deepJson, mutate, shortTimeouts, valid, type Known } from '../helpers/fuzz-arbitraries.js';
import { checkReply, type Sent } from '../helpers/fuzz-checks.js';

const RUNS = Number(process.env.UNIHOST_FUZZ_RUNS ?? 2500);
const SEED = Number(process.env.UNIHOST_FUZZ_SEED ?? 1414);
const CHUNK = 500;

let h: Harness;
let token: string;
let db: StoreDump;
const errorLogs: string[] = [];
const known: Known = { uuids: [], names: [], strings: ['nginx:latest', '/data', 'running', 'stopped', 'step'] };

type Any = any; // eslint-disable-line @typescript-eslint/no-explicit-any
const data = (r: { body: Any }): Any[] => Object.values(r.body.data as Record<string, Any[]>)[0]!;

before(async () => {
  const logger = pino({ level: 'error' }, { write: (line: string) => void errorLogs.push(line) });
  h = await startHarness({ rateLimit: { max: 0, windowMs: 60_000 } }, (s) => [simMachines(s)], { logger });
  token = await h.user('fuzzer');
  const other = await h.user('other');
  await h.image('nginx:latest');
  for (const [t, p] of [
    [token, 'f'],
    [other, 'o'],
  ] as const) {
    const call = (m: string, path: string, body?: unknown) => h.call(m, path, t, body);
    const g = data(
      await call('POST', '/v1/services', { name: `${p}-group`, services: [{ port: 443, handlers: ['tls', 'http'] }] }),
    )[0];
    const v = data(await call('POST', '/v1/volumes', { name: `${p}-vol`, size_mb: 1 }))[0];
    const i = data(
      await call('POST', '/v1/instances', {
        name: `${p}-inst`,
        image: 'nginx:latest',
        service_group: { uuid: g.uuid },
        autostart: true,
      }),
    )[0];
    for (const o of [g, v, i]) {
      assert.equal(o.status, 'success', JSON.stringify(o));
      known.uuids.push(o.uuid);
      known.names.push(o.name);
    }
  }
  db = storeDump(h.dataDir, h.storeUrl);
});
after(async () => {
  await db?.close();
  await h?.close();
});

/** Every row of every table: what a rejected request must leave alone. */
const snapshot = (): Promise<string> => db.snapshot();

/** Waits until background work an accepted request started (simulated boots, volume set-up) has settled. */
async function settle(): Promise<string> {
  let last = await snapshot();
  for (let i = 0; i < 100; i++) {
    await new Promise((r) => setTimeout(r, 3));
    const now = await snapshot();
    if (now === last) return now;
    last = now;
  }
  throw new Error('the store keeps changing without requests');
}

const CONTENT_TYPES = [
  'application/json',
  'application/json; charset=utf-8',
  'text/plain',
  'application/x-www-form-urlencoded',
  'multipart/form-data; boundary=x',
  'application/octet-stream',
  '',
  '*/*',
  'garbage/ x;;',
];
const MALFORMED = [
  '{',
  '{"a":',
  '[1,]',
  'nul\u0000',
  '\u0000',
  '{"a":1}}',
  'undefined',
  'NaN',
  '"\\ud800"',
  '\ufeff{}',
];

const printable = fc.string({ unit: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)) });

/** The authorization header, mostly the real token; every other variant must get 401. */
const auth = fc.oneof(
  { weight: 30, arbitrary: fc.constant({ kind: 'valid' as const }) },
  fc.constantFrom('=', '==', 'A', 'AA', '%', ' x', '.', '/', '+').map((s) => ({ kind: 'bad' as const, suffix: s })),
  fc.constantFrom('', 'Bearer', 'Bearer ', 'Basic dXNlcjpwYXNz', 'bearer', 'Token x').map((v) => ({
    kind: 'bad' as const,
    header: v,
  })),
  printable.map((v) => ({ kind: 'bad' as const, header: `Bearer ${v}` })),
  fc.constant({ kind: 'bad' as const, header: null }),
  fc.nat({ max: 20 }).map((n) => ({ kind: 'bad' as const, truncate: n + 1 })),
);

function segment(): fc.Arbitrary<string> {
  return fc.oneof(
    { weight: 4, arbitrary: fc.constantFrom(...known.uuids) },
    { weight: 2, arbitrary: fc.uuid() },
    fc.constantFrom('x', '..', '%00', '%2F', 'é', '-1', ' ', 'A'.repeat(3000)).map(encodeURIComponent),
    printable.map(encodeURIComponent),
  );
}

function queryOf(def: EndpointDef): fc.Arbitrary<string> {
  const props = compile(def).queryProps;
  const keys = [...Object.keys(props), ...(def.target === 'required' ? ['uuid', 'name'] : [])];
  const value = (k: string) =>
    fc.oneof(
      props[k] ? valid(props[k], known).map((v) => (typeof v === 'object' ? JSON.stringify(v) : String(v))) : fc.uuid(),
      adversarial().map((v) => (typeof v === 'string' ? v : (JSON.stringify(v) ?? ''))),
    );
  const pair = fc.oneof(
    keys.length > 0
      ? fc.constantFrom(...keys).chain((k) => value(k).map((v) => [k, v]))
      : fc.constant<string[]>(['zz_unknown', '1']),
    printable.map((k) => [k, 'x']),
  );
  return fc.oneof(
    { weight: 3, arbitrary: fc.constant('') },
    fc.array(pair, { minLength: 1, maxLength: 3 }).map((ps) => '?' + new URLSearchParams(ps).toString()),
  );
}

function bodyOf(def: EndpointDef): fc.Arbitrary<{ body?: unknown; raw?: string }> {
  const entry = valid(compile(def).entrySchema, known);
  const one = fc.oneof(
    entry,
    entry.map((e) => [e]),
  );
  return fc.oneof(
    { weight: 2, arbitrary: fc.constant({}) },
    { weight: 3, arbitrary: one.map((body) => ({ body: shortTimeouts(body) })) },
    { weight: 4, arbitrary: one.chain(mutate).map((body) => ({ body: shortTimeouts(body) })) },
    { weight: 2, arbitrary: adversarial().map((body) => ({ body: shortTimeouts(body) })) },
    fc.constantFrom(...MALFORMED).map((raw) => ({ raw })),
    deepJson().map((raw) => ({ raw })),
    fc.integer({ min: 1_048_000, max: 1_100_000 }).map((n) => ({ raw: `{"name":"${'x'.repeat(n)}"}` })),
  );
}

function requestOf(def: EndpointDef): fc.Arbitrary<Sent> {
  // A wait without timeout waits as long as possible (api-v1.md): bound it in the query, which every entry takes.
  const waits = def.method === 'GET' && 'timeout_ms' in compile(def).queryProps;
  const withTimeout = (q: string) => (!waits || q.includes('timeout') ? q : `${q}${q ? '&' : '?'}timeout_ms=20`);
  const urls = [def.path, def.localPath].filter((u): u is string => u !== undefined);
  const wrongMethod = fc.constantFrom('GET', 'POST', 'PUT', 'DELETE', 'PATCH');
  return fc
    .record({
      url: fc.constantFrom(...urls),
      uuid: segment(),
      policy: fc.oneof(fc.constantFrom('cpu-up', 'p'), segment()),
      method: fc.oneof({ weight: 9, arbitrary: fc.constant(def.method as string) }, wrongMethod),
      query: queryOf(def),
      body: bodyOf(def),
      contentType: fc.oneof({ weight: 4, arbitrary: fc.constant(undefined) }, fc.constantFrom(...CONTENT_TYPES)),
      auth,
    })
    .map((r) => ({
      endpoint: `${def.method} ${def.path}`,
      method: r.method,
      path: r.url.replace(':uuid', r.uuid).replace(':policy', r.policy) + withTimeout(r.query),
      body: r.body.raw ?? (r.body.body === undefined ? undefined : (JSON.stringify(r.body.body) ?? 'null')),
      contentType: r.contentType,
      auth: r.auth,
    }));
}

const anyRequest = () => fc.oneof(...ENDPOINTS.map((d) => requestOf(d as EndpointDef)));

function authHeader(a: Sent['auth']): string | null {
  if (a.kind === 'valid') return `Bearer ${token}`;
  if ('suffix' in a) return `Bearer ${token}${a.suffix}`;
  if ('truncate' in a) return `Bearer ${token.slice(0, -a.truncate)}`;
  return a.header;
}

/** Every request must be answered: generated timeouts are short, so a request still open after 10 s hangs. */
async function answered<T>(p: Promise<T>, req: Sent): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const hung = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () =>
        reject(new Error(`no answer within 10 s: ${req.method} ${req.path.slice(0, 300)} ${req.body?.slice(0, 500)}`)),
      10_000,
    );
  });
  try {
    return await Promise.race([p, hung]);
  } finally {
    clearTimeout(timer);
  }
}

test(`fuzz: ${RUNS} requests across every endpoint (seed ${SEED})`, { timeout: 3_600_000 }, async () => {
  const failures = new Map<string, string>();
  const counts = { total: 0, accepted: 0, rejected: 0, byStatus: {} as Record<number, number> };
  let state = await settle();
  const t0 = Date.now();
  for (let done = 0; done < RUNS; done += CHUNK) {
    const batch = fc.sample(anyRequest(), { numRuns: Math.min(CHUNK, RUNS - done), seed: SEED + done });
    for (const req of batch) {
      const headers: Record<string, string> = {};
      if (req.contentType !== undefined) headers['content-type'] = req.contentType;
      const header = authHeader(req.auth);
      if (header !== null) headers.authorization = header;
      const reply = await answered(h.call(req.method, req.path, null, req.body, headers), req);
      counts.total++;
      counts.byStatus[reply.status] = (counts.byStatus[reply.status] ?? 0) + 1;
      const problems = checkReply(req, reply);
      const rejected = reply.status >= 400 || reply.body?.status === 'error';
      if (rejected) {
        counts.rejected++;
        if ((await snapshot()) !== state) problems.push('a rejected request changed the store');
      } else {
        counts.accepted++;
        state = await settle();
      }
      if (errorLogs.length > 0) problems.push(`error logged: ${errorLogs.splice(0).join(' | ').slice(0, 500)}`);
      for (const p of problems) {
        const key = `${req.endpoint}: ${p.replace(/'[^']*'/g, "'…'").slice(0, 120)}`;
        if (!failures.has(key))
          failures.set(
            key,
            `${req.method} ${req.path.slice(0, 200)} ${String(req.body).slice(0, 300)}\n  -> ${reply.status} ${reply.text.slice(0, 400)}`,
          );
      }
    }
  }
  const health = await h.call('GET', '/v1/healthz', token);
  assert.equal(health.status, 200, 'the daemon no longer answers');
  const secs = ((Date.now() - t0) / 1000).toFixed(1);
  console.log(
    `fuzz: ${counts.total} requests in ${secs} s, ${counts.accepted} accepted, ${counts.rejected} rejected, by status ${JSON.stringify(counts.byStatus)}`,
  );
  assert.equal(counts.total, RUNS);
  const report = [...failures].slice(0, 30).map(([k, v]) => `${k}\n  ${v}`);
  if (process.env.UNIHOST_FUZZ_KEYS) console.log([...failures.keys()].join('\n'));
  assert.equal(failures.size, 0, `${failures.size} distinct failures:\n${report.join('\n')}`);
  assert.ok(counts.accepted > RUNS / 40, 'too few valid requests reach the handlers');
});

/** The failures the fuzzer found, each pinned by name (answers outside the envelope, unclear messages). */
test('errors raised before routing use the envelope and name the problem', async () => {
  const envelope = (r: { status: number; body: Any }, status: number, re: RegExp) => {
    assert.equal(r.status, status, JSON.stringify(r.body));
    assert.equal(r.body.status, 'error');
    assert.match(r.body.message, re);
    assert.deepEqual(Object.keys(r.body.errors[0]).sort(), ['error', 'message', 'status']);
    assert.equal(r.body.errors[0].status, status);
  };
  envelope(await h.call('GET', `/v1/volumes/${'a'.repeat(3000)}`, token), 400, /path '.*': a segment is longer/);
  envelope(await h.call('GET', `/v1/volumes/list?state=${'x'.repeat(40_000)}`, token), 431, /query string/);
  envelope(await h.call('GET', '/v1/volumes', token, '{}', { 'content-type': 'garbage/ x;;' }), 400, /content-type/);
  envelope(await h.call('GET', '/v1/volumes/list', token, { '': 1 }), 400, /body: a parameter has an empty name/);
  envelope(
    await h.call('POST', '/v1/volumes', token, { name: 'v', size_mb: 1, x: { '': 1 } }),
    400,
    /unknown parameter 'x'/,
  );
  envelope(await h.call('GET', '/v1/volumes/list', token, { "'": 1 }), 400, /^unknown parameter "'"$/);
  envelope(await h.call('GET', '/v1/volumes/list', token, { '.': 1 }), 400, /^unknown parameter '\.'$/);
  const steps = [{ lower_bound: 1, adjustment: 1 }];
  const bad = { name: 'p', type: 'step', steps, 'a b': 1, nested: 1 };
  envelope(
    await h.call('POST', `/v1/services/${known.uuids[0]}/autoscale/policies`, token, bad),
    400,
    /unknown parameter "a b"/,
  );
});
