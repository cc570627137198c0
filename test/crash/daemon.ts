/**
 * The daemon under test as a child process (`unihost serve`, run from the
 * sources with tsx) on a data dir of the harness, so that it can be killed
 * with SIGKILL at any moment and started again on the same data dir.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { openSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { request } from 'undici';

const ROOT = resolve(import.meta.dirname, '..', '..');
const CLI = join(ROOT, 'src', 'cli', 'main.ts');

/** Public port + this = the port the gateway binds in the harness's namespace (443 -> 20443). */
export const GATEWAY_PORT_OFFSET = 20000;

export interface DaemonSpec {
  dataDir: string;
  port: number;
  guestOut: string;
  /** a PostgreSQL store (else SQLite in the data dir) */
  storeUrl?: string;
  /** custom domains' certificates from this ACME authority (test/helpers/pebble.ts); none: ACME off */
  acme?: { directory: string; directoryCa: string };
}

/** Runs a CLI command from the sources; returns its stdout. */
function cli(args: string[], env: NodeJS.ProcessEnv = {}): string {
  return execFileSync(process.execPath, ['--import', 'tsx', CLI, ...args], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
  });
}

export class CrashDaemon {
  private child: ChildProcess | null = null;
  readonly url: string;
  readonly configFile: string;
  /** times the daemon was started */
  starts = 0;

  constructor(private readonly spec: DaemonSpec) {
    this.url = `http://127.0.0.1:${spec.port}`;
    this.configFile = join(spec.dataDir, 'crash-config.json');
    writeFileSync(
      this.configFile,
      JSON.stringify({
        dataDir: spec.dataDir,
        listen: `127.0.0.1:${spec.port}`,
        subnet: '10.83.0.0/24',
        logLevel: 'info',
        ...(spec.storeUrl ? { store: { url: spec.storeUrl } } : {}),
        // the gateway (HAProxy, killed too) and the .internal DNS run, as in production
        network: { enabled: true, bridge: 'uhcrash0', dns: true },
        gateway: { enabled: true, listen: '127.0.0.1', portOffset: GATEWAY_PORT_OFFSET },
        acme: spec.acme
          ? { enabled: true, ...spec.acme, maxAttempts: 5, retryBaseMs: 500, retryMaxMs: 2000 }
          : { enabled: false },
        machines: { accel: 'tcg', ksm: false, bootTimeoutMs: 120_000, stopTimeoutMs: 10_000 },
        rateLimit: { max: 0 },
        authFailures: { max: 0 },
        capacity: { vcpusPerCore: 0 },
      }),
    );
  }

  /** Imports the test images and creates the harness's user; returns its token. */
  prepare(): string {
    const env = { UNIHOST_CONFIG: this.configFile };
    cli(['image', 'import-guest', this.spec.guestOut], env);
    return cli(['admin', 'user', 'create', 'crash', '--quiet'], env).trim();
  }

  /** Starts the daemon and resolves once its API answers. */
  async start(token: string): Promise<void> {
    const log = openSync(join(this.spec.dataDir, 'daemon.log'), 'a');
    this.child = spawn(process.execPath, ['--import', 'tsx', CLI, 'serve', '--config', this.configFile], {
      cwd: ROOT,
      stdio: ['ignore', log, log],
    });
    this.starts++;
    const end = Date.now() + 60_000;
    for (;;) {
      if (this.child.exitCode !== null)
        throw new Error(`the daemon exited with ${this.child.exitCode}: see daemon.log`);
      try {
        const r = await request(`${this.url}/v1/instances`, { headers: { authorization: `Bearer ${token}` } });
        await r.body.text();
        if (r.statusCode === 200) return;
      } catch {
        /* not listening yet */
      }
      if (Date.now() > end) throw new Error('the daemon did not answer within 60 s');
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  /** SIGKILL, no goodbye: what a power cut or an OOM kill does. */
  async kill(): Promise<void> {
    const c = this.child;
    if (!c || c.exitCode !== null || c.signalCode !== null) return;
    const gone = new Promise((r) => c.once('exit', r));
    c.kill('SIGKILL');
    await gone;
    this.child = null;
  }

  /** A clean stop (SIGTERM): VMs keep running, as in production. */
  async stop(): Promise<void> {
    const c = this.child;
    if (!c || c.exitCode !== null || c.signalCode !== null) return;
    const gone = new Promise((r) => c.once('exit', r));
    c.kill('SIGTERM');
    await gone;
    this.child = null;
  }
}
