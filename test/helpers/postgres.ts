/**
 * A throwaway PostgreSQL server for tests: `initdb` into a temp dir, the
 * server listening on a unix socket in that dir only (no TCP port), trust
 * authentication, and the dir removed when it stops (or when the test
 * process exits). One server per test process, one database per use.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  chmodSync,
  chownSync,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';

export interface TestPostgres {
  /** the directory of the server's socket */
  socketDir: string;
  /** a store URL for database `db` (unix socket, no password) */
  url(db: string): string;
  /** creates an empty database and returns its store URL */
  createDb(): Promise<string>;
  /** stops the server (fast shutdown) and starts it again: a database restart */
  stopServer(): void;
  startServer(): void;
  /** stops the server and removes its files */
  close(): void;
}

/** The directory of PostgreSQL's server programs, the newest installed major version. */
export function pgBinDir(): string | undefined {
  const base = '/usr/lib/postgresql';
  if (!existsSync(base)) return undefined;
  const majors = readdirSync(base)
    .filter((v) => /^\d+$/.test(v) && existsSync(join(base, v, 'bin', 'initdb')))
    .sort((a, b) => Number(b) - Number(a));
  return majors[0] ? join(base, majors[0], 'bin') : undefined;
}

/** Why PostgreSQL tests cannot run here, or undefined when they can. */
export function postgresMissing(): string | undefined {
  if (!pgBinDir()) return 'PostgreSQL server programs are not installed (Debian package postgresql)';
  if (process.getuid?.() === 0 && spawnSync('id', ['postgres']).status !== 0)
    return "running as root needs the 'postgres' system user (created by the Debian package)";
  return undefined;
}

let shared: TestPostgres | undefined;

/** The test process's server, started on first use. */
export function testPostgres(): TestPostgres {
  return (shared ??= startTestPostgres());
}

/**
 * Stops the servers of test processes that died without stopping theirs (a
 * SIGKILL skips exit handlers): each server's dir names its owner's pid.
 */
function reapOrphans(bin: string): void {
  for (const name of readdirSync(tmpdir())) {
    if (!name.startsWith('uh-pg-')) continue;
    const dir = join(tmpdir(), name);
    let owner = NaN;
    try {
      owner = Number(readFileSync(join(dir, 'owner.pid'), 'utf8'));
    } catch {
      continue; // not one of ours, or being set up
    }
    if (owner > 0 && alive(owner)) continue;
    spawnSync('runuser', [
      '-u',
      'postgres',
      '--',
      join(bin, 'pg_ctl'),
      '-D',
      join(dir, 'data'),
      '-m',
      'immediate',
      'stop',
    ]);
    spawnSync(join(bin, 'pg_ctl'), ['-D', join(dir, 'data'), '-m', 'immediate', 'stop']);
    rmSync(dir, { recursive: true, force: true });
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

export function startTestPostgres(): TestPostgres {
  const bin = pgBinDir();
  if (!bin) throw new Error(postgresMissing());
  reapOrphans(bin);
  const dir = mkdtempSync(join(tmpdir(), 'uh-pg-'));
  writeFileSync(join(dir, 'owner.pid'), String(process.pid));
  const data = join(dir, 'data');
  // initdb and the server refuse to run as root: as root they run as the Debian package's user
  const asRoot = process.getuid?.() === 0;
  if (asRoot) {
    const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim());
    const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim());
    chownSync(dir, uid, gid);
    chmodSync(dir, 0o700);
  }
  const run = (prog: string, args: string[]) => {
    const argv = asRoot ? ['runuser', '-u', 'postgres', '--', join(bin, prog), ...args] : [join(bin, prog), ...args];
    const r = spawnSync(argv[0]!, argv.slice(1), { encoding: 'utf8', cwd: dir });
    if (r.status !== 0) throw new Error(`${prog} failed: ${r.stderr || r.stdout}`);
  };
  run('initdb', ['-D', data, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--locale=C', '--no-sync']);
  const start = () =>
    run('pg_ctl', [
      '-D',
      data,
      '-l',
      join(dir, 'server.log'),
      '-w',
      '-o',
      // the socket only: no TCP port; fsync off: a test database need not survive a power cut
      `-c listen_addresses='' -k ${dir} -c fsync=off -c synchronous_commit=off -c max_connections=300`,
      'start',
    ]);
  const stop = () => run('pg_ctl', ['-D', data, '-m', 'fast', '-w', 'stop']);
  start();
  let closed = false;
  const close = () => {
    if (closed) return;
    closed = true;
    try {
      run('pg_ctl', ['-D', data, '-m', 'immediate', '-w', 'stop']);
    } catch {
      // already stopped
    }
    rmSync(dir, { recursive: true, force: true });
  };
  process.on('exit', close);
  const url = (db: string) => `postgresql://postgres@/${db}?host=${dir}`;
  return {
    socketDir: dir,
    url,
    async createDb() {
      const name = `uh_${randomBytes(6).toString('hex')}`;
      const admin = new pg.Client({ host: dir, database: 'postgres', user: 'postgres' });
      await admin.connect();
      try {
        await admin.query(`CREATE DATABASE ${name}`);
      } finally {
        await admin.end();
      }
      return url(name);
    },
    stopServer: stop,
    startServer: start,
    close,
  };
}
