import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino, { type Logger } from 'pino';
import { request } from 'undici';
import { DEFAULTS, type Config } from '../../src/config.js';
import { startDaemon, type Controller, type Daemon } from '../../src/daemon.js';
import { testPostgres } from './postgres.js';
import type { Services } from '../../src/services/index.js';

export interface Reply {
  status: number;
  body: any; // eslint-disable-line @typescript-eslint/no-explicit-any
  text: string;
}

export interface Harness {
  daemon: Daemon;
  url: string;
  dataDir: string;
  /** the daemon's store setting ('' for SQLite in the data dir): commands that open the store take it as --store */
  storeUrl: string;
  /**
   * Registers an image record (no kernel files) under `ref` (`app:tag` official,
   * `user/app:tag` private) for control-plane tests; returns its digest.
   */
  image(
    ref: string,
    extra?: { min_memory_mb?: number; args?: string; kernel_args?: string; initrd?: boolean },
  ): Promise<string>;
  /** creates a user and returns its token */
  user(name: string, developer?: boolean): Promise<string>;
  /** sends a request; `body` is JSON-encoded unless it is a string */
  call(
    method: string,
    path: string,
    token: string | null,
    body?: unknown,
    headers?: Record<string, string>,
  ): Promise<Reply>;
  /**
   * Resolves with the first truthy value of `check`, re-run after every
   * committed store change, and every 50 ms for what the store does not
   * hold (a driver's taps, files); rejects after `timeoutMs`.
   */
  until<T>(check: () => Promise<T | undefined | null | false>, timeoutMs?: number): Promise<T>;
  close(): Promise<void>;
}

/** The store the tests run on: SQLite in the data dir (''), or a new database when UNIHOST_TEST_STORE=postgres. */
export async function testStoreUrl(): Promise<string> {
  const which = process.env.UNIHOST_TEST_STORE ?? 'sqlite';
  if (which === 'sqlite') return '';
  if (which !== 'postgres') throw new Error(`UNIHOST_TEST_STORE '${which}': sqlite or postgres`);
  return testPostgres().createDb();
}

type DeepPartial<T> = {
  [K in keyof T]?: T[K] extends readonly unknown[] ? T[K] : T[K] extends object ? DeepPartial<T[K]> : T[K];
};

/**
 * Starts a real daemon (real HTTP on port 0, real SQLite in a temp dir).
 * `controllers` plugs background controllers in (e.g. the simulated machine
 * controller of API tests, or the real QEMU one).
 */
export async function startHarness(
  over: DeepPartial<Config> = {},
  controllers?: (s: Services) => Controller[] | Promise<Controller[]>,
  /** `logger`: where the daemon logs (default: silent, or the level in UNIHOST_TEST_LOG) */
  opts: { logger?: Logger } = {},
): Promise<Harness> {
  // a given data dir is used as it is (an upgrade test opens one an older release wrote) and removed at close
  const dataDir = over.dataDir ?? mkdtempSync(join(tmpdir(), 'unihost-test-'));
  const config: Config = {
    ...DEFAULTS,
    ...(over as Partial<Config>),
    listen: '127.0.0.1:0',
    dataDir,
    // UNIHOST_TEST_STORE=postgres: the same tests on a fresh database of the test process's own PostgreSQL
    store: { ...DEFAULTS.store, url: await testStoreUrl(), ...over.store },
    // harness daemons leave the host's KSM setting alone unless a test asks (test/vm/adopt.test.ts runs the real `serve`, defaults included)
    machines: { ...DEFAULTS.machines, ksm: false, ...over.machines },
    // no host watchdog process per test daemon (test/vm/hosts.test.ts turns it on)
    host: { ...DEFAULTS.host, watchdog: 'off', ...over.host },
    network: { ...DEFAULTS.network, ...over.network },
    gateway: {
      ...DEFAULTS.gateway,
      ...over.gateway,
      wake: { ...DEFAULTS.gateway.wake, ...over.gateway?.wake },
    },
    // A fixed budget: results must not depend on the RAM of the machine running the tests.
    capacity: { ...DEFAULTS.capacity, memoryMb: 1_000_000, vcpusPerCore: 0, ...over.capacity },
    // Many tests send bad tokens on purpose from 127.0.0.1; test/api/rate-limit.test.ts turns the limit on.
    authFailures: { ...DEFAULTS.authFailures, max: 0, ...over.authFailures },
    // never Let's Encrypt from a test: a test that wants ACME names its own directory
    acme: { ...DEFAULTS.acme, enabled: false, ...over.acme },
    // never the host's resolver from a test (it is not on loopback): test/api/domain-proof.test.ts runs its own
    domainProof: { ...DEFAULTS.domainProof, enabled: false, ...over.domainProof },
    defaultQuotas: {
      hard: { ...DEFAULTS.defaultQuotas.hard, ...over.defaultQuotas?.hard },
      limits: { ...DEFAULTS.defaultQuotas.limits, ...over.defaultQuotas?.limits },
    },
  };
  const daemon = await startDaemon(config, {
    logger: opts.logger ?? pino({ level: process.env.UNIHOST_TEST_LOG ?? 'silent' }),
    controllers: controllers ? (s) => controllers(s) : undefined,
  }).catch((e: unknown) => {
    rmSync(dataDir, { recursive: true, force: true });
    throw e;
  });
  return {
    daemon,
    url: daemon.url,
    dataDir,
    storeUrl: config.store.url,
    async image(ref, extra = {}) {
      const digest = `sha256:${createHash('sha256').update(ref).digest('hex')}`;
      const slash = ref.indexOf('/');
      const namespace = slash >= 0 ? ref.slice(0, slash) : 'official';
      await daemon.store.tx(async (tx) => {
        await tx.images.upsert({
          digest,
          namespace,
          size_in_bytes: 1234,
          initrd: extra.initrd ?? false,
          args: extra.args ?? '',
          kernel_args: extra.kernel_args ?? '',
          min_memory_mb: extra.min_memory_mb ?? 0,
          created_at: new Date().toISOString(),
        });
        await tx.images.setTag({ ref, namespace, digest });
      });
      return digest;
    },
    async user(name, developer = false) {
      return (await daemon.services.users.create(name, developer)).token;
    },
    async call(method, path, token, body, headers = {}) {
      const h: Record<string, string> = { ...headers };
      if (token !== null) h.authorization = `Bearer ${token}`;
      let payload: string | undefined;
      if (body !== undefined) {
        payload = typeof body === 'string' ? body : JSON.stringify(body);
        h['content-type'] ??= 'application/json';
      }
      const r = await request(daemon.url + path, { method: method as 'GET', headers: h, body: payload });
      const text = await r.body.text();
      let parsed: unknown;
      try {
        parsed = JSON.parse(text);
      } catch {
        parsed = undefined;
      }
      return { status: r.statusCode, body: parsed, text };
    },
    until(check, timeoutMs = 5000) {
      return new Promise((resolve, reject) => {
        let done = false;
        const finish = (f: () => void) => {
          if (done) return;
          done = true;
          off();
          clearTimeout(timer);
          clearInterval(poll);
          f();
        };
        // one check at a time (a check may be slow: a CLI run); a trigger during one makes one more
        let checking = false;
        let again = false;
        const run = (): void => {
          if (done) return;
          if (checking) return void (again = true);
          checking = true;
          again = false;
          void check().then(
            (v) => {
              checking = false;
              if (v) finish(() => resolve(v));
              else if (again) run();
            },
            (e) => finish(() => reject(e)),
          );
        };
        const off = daemon.store.watch('now', () => run());
        const poll = setInterval(run, 50);
        const timer = setTimeout(
          () =>
            finish(() =>
              reject(new Error(`until: condition not met within ${timeoutMs} ms: ${String(check).slice(0, 300)}`)),
            ),
          timeoutMs,
        );
        run();
      });
    },
    async close() {
      await daemon.close();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}
