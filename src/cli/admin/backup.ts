/**
 * `unihost admin backup DIR` and `unihost admin restore DIR` (docs/operations.md,
 * "Backups"): a consistent copy of a data dir and its store while the daemon
 * runs, and the way back into a new data dir.
 *
 * Consistency: the store is copied first, in one snapshot (SQLite's online
 * backup, `pg_dump`); the files are then taken for what that copy names.
 * Images, certificates and snapshots are written once and renamed into
 * place, so a plain copy is whole. A volume a VM has open is copied while
 * the daemon holds it (src/control-socket.ts): the VM is paused with its
 * disks flushed, so the copy is what a power cut at that moment would
 * leave, which ext4's journal recovers. Every file is listed in
 * `manifest.json` with its size and SHA-256, checked again by `restore`.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  createReadStream,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { request } from 'node:http';
import { join, relative, resolve } from 'node:path';
import { promisify } from 'node:util';
import type { Command } from 'commander';
import type { Store, VolumeRec, InstanceRec } from '../../store/types.js';
import type { PgTarget } from '../../store/url.js';
import { unplaceOneHost } from '../../services/hosts.js';

const run = promisify(execFile);

export const MANIFEST = 'manifest.json';
const FORMAT = 'unihost-backup/1';
const SQLITE_FILE = 'unihost.db';
const PG_FILE = 'store.pgdump';

/** Top-level entries of a data dir that are not copied as they are: the store (copied by its own means), runtime files, per-object dirs. */
const NOT_COPIED = new Set([
  'unihost.db',
  'unihost.db-wal',
  'unihost.db-shm',
  'unihost.db-journal',
  'instances',
  'volumes',
  // HAProxy's files and sockets: rendered again from the store at start
  'haproxy',
  'control.sock',
  'unihost.pid',
  // the daemon's own logs (scripts/up.sh: logs/ rolled by --log-file, unihost.out)
  'unihost.log',
  'unihost.out',
  'logs',
]);
/** What is kept of an instance's directory: its console log and its memory snapshot (the rest is runtime). */
const INSTANCE_FILES = ['console.log', 'console.base', 'snapshot.mem'];
/** Instance states in which a VM may be running. */
const LIVE = new Set(['starting', 'running', 'stopping', 'draining']);

export interface Manifest {
  format: typeof FORMAT;
  created_at: string;
  source: { data_dir: string; store: 'sqlite' | 'postgres' };
  /** the store's copy in the backup */
  store_file: string;
  files: { path: string; bytes: number; sha256: string }[];
  /** volumes copied while their VM was paused: how long each pause lasted */
  paused: { volume: string; instances: string[]; ms: number }[];
  /** objects of the store copy whose file was not there (deleted while the backup ran, never made) */
  missing: { path: string; why: string }[];
}

export interface BackupOptions {
  dataDir: string;
  /** SQLite file of the store, or the PostgreSQL server */
  store: { kind: 'sqlite'; path: string } | PgTarget;
  dest: string;
  /** the daemon's control socket (src/control-socket.ts) */
  controlSocket: string;
  /** opens a store (the backup's SQLite copy, or the PostgreSQL server) */
  openStore(sqlitePath: string): Promise<Store>;
  progress(line: string): void;
}

/** Copies with the file system's help: sparse files stay sparse, reflinks where it can. */
async function copy(from: string, to: string): Promise<void> {
  // a directory's content (`dir/.`): the same whether `to` exists (empty) or not
  const src = statSync(from).isDirectory() ? join(from, '.') : from;
  await run('cp', ['-a', '--sparse=always', '--reflink=auto', src, to]);
}

const pgEnv = (t: PgTarget): NodeJS.ProcessEnv => ({
  ...process.env,
  PGHOST: t.host,
  PGPORT: String(t.port),
  PGDATABASE: t.database,
  PGUSER: t.user,
  PGPASSWORD: t.password,
  PGSSLMODE: t.ssl === false ? 'disable' : t.ssl,
  PGCONNECT_TIMEOUT: String(t.connectTimeoutS),
});

async function sha256(file: string): Promise<string> {
  const h = createHash('sha256');
  for await (const chunk of createReadStream(file)) h.update(chunk as Buffer);
  return h.digest('hex');
}

function walk(dir: string, out: string[] = []): string[] {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) walk(p, out);
    else if (e.isFile()) out.push(p);
  }
  return out;
}

function emptyOrAbsent(dir: string): boolean {
  return !existsSync(dir) || readdirSync(dir).length === 0;
}

const mb = (bytes: number): string => `${(bytes / 1048576).toFixed(1)} MB`;

/**
 * Holds a volume through the daemon's control socket. Undefined when no
 * daemon listens (none runs here); throws the daemon's refusal.
 */
export async function holdVolume(
  socketPath: string,
  volumeId: string,
): Promise<{ paused: string[]; release(): void } | undefined> {
  return new Promise((resolve, reject) => {
    const req = request({ socketPath, method: 'POST', path: `/v1/volumes/${volumeId}/hold` }, (res) => {
      let buf = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        buf += chunk;
        if (res.statusCode !== 200) return;
        const nl = buf.indexOf('\n');
        if (nl < 0) return;
        const first = JSON.parse(buf.slice(0, nl)) as { paused: string[] };
        // the hold lasts while this connection stays open
        resolve({ paused: first.paused, release: () => req.destroy() });
      });
      res.on('end', () => {
        if (res.statusCode === 200) return reject(new Error('the daemon ended the hold before it began'));
        let msg = buf;
        try {
          msg = (JSON.parse(buf) as { message: string }).message;
        } catch {
          // not JSON: shown as it came
        }
        reject(new Error(`the daemon cannot hold volume ${volumeId}: ${msg}`));
      });
    });
    req.on('error', (e: NodeJS.ErrnoException) =>
      e.code === 'ENOENT' || e.code === 'ECONNREFUSED' ? resolve(undefined) : reject(e),
    );
    req.end();
  });
}

/** Takes a backup into `o.dest` (absent or empty); returns its manifest. */
export async function takeBackup(o: BackupOptions): Promise<Manifest> {
  if (!emptyOrAbsent(o.dest)) throw new Error(`${o.dest} is not empty: a backup goes into a new directory`);
  if (o.store.kind === 'sqlite' && !existsSync(o.store.path))
    throw new Error(`no store at ${o.store.path}: is ${o.dataDir} a unihost data dir?`);
  const made = !existsSync(o.dest);
  mkdirSync(o.dest, { recursive: true, mode: 0o700 });
  try {
    return await backupInto(o);
  } catch (e) {
    // no half backup is left to be mistaken for one (it would have no manifest anyway)
    removeAll(o.dest, made);
    throw e;
  }
}

/** Removes what a failed backup or restore wrote: the directory if it made it, else the entries `names` it wrote. */
function removeAll(dir: string, made: boolean, names: string[] = readdirSync(dir)): void {
  if (made) rmSync(dir, { recursive: true, force: true });
  else for (const e of names) rmSync(join(dir, e), { recursive: true, force: true });
}

async function backupInto(o: BackupOptions): Promise<Manifest> {
  const t0 = Date.now();
  const manifest: Manifest = {
    format: FORMAT,
    created_at: new Date().toISOString(),
    source: { data_dir: o.dataDir, store: o.store.kind },
    store_file: o.store.kind === 'sqlite' ? SQLITE_FILE : PG_FILE,
    files: [],
    paused: [],
    missing: [],
  };

  // 1. The store, in one consistent snapshot.
  const storeCopy = join(o.dest, manifest.store_file);
  if (o.store.kind === 'sqlite') {
    const { default: Database } = await import('better-sqlite3');
    const db = new Database(o.store.path, { readonly: true, fileMustExist: true });
    try {
      await db.backup(storeCopy);
    } finally {
      db.close();
    }
  } else {
    try {
      await run('pg_dump', ['--format=custom', '--no-owner', `--file=${storeCopy}`], { env: pgEnv(o.store) });
    } catch (e) {
      throw new Error(`pg_dump of ${o.store.display} failed: ${(e as { stderr?: string }).stderr?.trim() || e}`);
    }
  }
  o.progress(
    `store: ${o.store.kind === 'sqlite' ? 'SQLite online backup' : 'pg_dump'} (${mb(statSync(storeCopy).size)})`,
  );

  // What the copy names (PostgreSQL: read just after the dump; a difference is a missing file or an extra one).
  const store = await o.openStore(storeCopy);
  let instances: InstanceRec[];
  let volumes: VolumeRec[];
  try {
    [instances, volumes] = await store.read(async (tx) => [await tx.instances.all(), await tx.volumes.all()] as const);
  } finally {
    await store.close();
  }

  // 2. Files written once: images, certificates, keys, the CA.
  for (const e of readdirSync(o.dataDir)) {
    if (NOT_COPIED.has(e) || e.endsWith('.sock')) continue;
    await copy(join(o.dataDir, e), join(o.dest, e));
  }
  // uploads and pulls under way
  if (existsSync(join(o.dest, 'images', 'tmp'))) await run('rm', ['-rf', join(o.dest, 'images', 'tmp')]);

  // 3. Each instance's console log and memory snapshot.
  for (const i of instances) {
    const from = join(o.dataDir, 'instances', i.id);
    const files = INSTANCE_FILES.filter((f) => existsSync(join(from, f)));
    if (i.snapshot && !i.snapshot.source && !files.includes('snapshot.mem'))
      manifest.missing.push({ path: `instances/${i.id}/snapshot.mem`, why: `instance ${i.name} has no snapshot file` });
    if (files.length === 0) continue;
    mkdirSync(join(o.dest, 'instances', i.id), { recursive: true, mode: 0o700 });
    for (const f of files) await copy(join(from, f), join(o.dest, 'instances', i.id, f));
  }

  // 4. Volumes: each one whole, its VM paused meanwhile.
  const byId = new Map(instances.map((i) => [i.id, i]));
  mkdirSync(join(o.dest, 'volumes'), { mode: 0o700 });
  for (const v of volumes) {
    const file = join(o.dataDir, 'volumes', `${v.id}.ext4`);
    const rel = `volumes/${v.id}.ext4`;
    if (!existsSync(file)) {
      manifest.missing.push({ path: rel, why: `volume ${v.name} (${v.state}) has no image file` });
      continue;
    }
    const hold = await holdVolume(o.controlSocket, v.id);
    const owner = v.instance_id ? byId.get(v.instance_id) : undefined;
    if (!hold && owner && LIVE.has(owner.state))
      throw new Error(
        `volume ${v.name} is attached to instance ${owner.name} (${owner.state}) and no daemon answers on ${o.controlSocket} to pause its VM: start the daemon, or stop the instance, and back up again`,
      );
    const held = Date.now();
    try {
      await copy(file, join(o.dest, rel));
    } finally {
      hold?.release();
    }
    const ms = Date.now() - held;
    if (hold?.paused.length) {
      manifest.paused.push({ volume: v.id, instances: hold.paused, ms });
      o.progress(
        `volume ${v.name}: copied with ${hold.paused.map((id) => byId.get(id)?.name ?? id).join(', ')} paused for ${ms} ms`,
      );
    } else o.progress(`volume ${v.name}: copied`);
  }

  // 5. The list of what is in it, with checksums.
  for (const f of walk(o.dest)) {
    const path = relative(o.dest, f);
    if (path === MANIFEST) continue;
    manifest.files.push({ path, bytes: statSync(f).size, sha256: await sha256(f) });
  }
  manifest.files.sort((a, b) => a.path.localeCompare(b.path));
  writeFileSync(join(o.dest, MANIFEST), `${JSON.stringify(manifest, null, 2)}\n`, { mode: 0o600 });
  for (const m of manifest.missing) o.progress(`not in the backup: ${m.path} (${m.why})`);
  const total = manifest.files.reduce((n, f) => n + f.bytes, 0);
  o.progress(
    `backup of ${o.dataDir} in ${o.dest}: ${manifest.files.length} files, ${mb(total)}, ${Date.now() - t0} ms`,
  );
  return manifest;
}

/** A backup's manifest; throws when `dir` holds none this version reads. */
export function readManifest(dir: string): Manifest {
  let m: Manifest;
  try {
    m = JSON.parse(readFileSync(join(dir, MANIFEST), 'utf8')) as Manifest;
  } catch (e) {
    throw new Error(`${dir} is not a unihost backup (${MANIFEST}: ${(e as Error).message})`);
  }
  if (m.format !== FORMAT) throw new Error(`${dir}: backup format '${m.format}' is not ${FORMAT}`);
  return m;
}

/** Checks every file of a backup against its manifest (size and SHA-256); throws naming the first that differs. */
export async function verifyBackup(dir: string): Promise<Manifest> {
  const m = readManifest(dir);
  for (const f of m.files) {
    const p = join(dir, f.path);
    if (!existsSync(p)) throw new Error(`the backup is damaged: ${f.path} is missing`);
    if (statSync(p).size !== f.bytes || (await sha256(p)) !== f.sha256)
      throw new Error(`the backup is damaged: ${f.path} differs from its checksum in ${MANIFEST}`);
  }
  return m;
}

export interface RestoreOptions {
  from: string;
  dataDir: string;
  /** where the store goes: SQLite in the data dir, or an empty PostgreSQL database */
  store: { kind: 'sqlite'; path: string } | PgTarget;
  openStore(): Promise<Store>;
  /** whether the PostgreSQL database is empty (no unihost tables) */
  pgEmpty?(): Promise<boolean>;
  progress(line: string): void;
}

/** Restores a backup into a new data dir (and store); returns its manifest. */
export async function restoreBackup(o: RestoreOptions): Promise<Manifest> {
  const m = readManifest(o.from);
  if (m.source.store !== o.store.kind)
    throw new Error(
      `the backup holds a ${m.source.store} store and the target is ${o.store.kind}: restore into the same kind (give --store for PostgreSQL)`,
    );
  const taken = ['unihost.db', 'instances', 'volumes', 'images'].find((e) => {
    const p = join(o.dataDir, e);
    return existsSync(p) && (statSync(p).isFile() || readdirSync(p).length > 0);
  });
  if (taken) throw new Error(`${o.dataDir} already holds a data dir (${taken}): restore goes into a new, empty one`);
  if (o.store.kind === 'postgres' && !(await o.pgEmpty!()))
    throw new Error(`the database ${o.store.display} is not empty: restore into a new database`);
  await verifyBackup(o.from);
  o.progress(`backup of ${m.created_at} checked: ${m.files.length} files match their checksums`);
  const made = !existsSync(o.dataDir);
  mkdirSync(o.dataDir, { recursive: true, mode: 0o700 });
  try {
    await restoreInto(o);
  } catch (e) {
    removeAll(o.dataDir, made, [...readdirSync(o.from), 'unihost.db-wal', 'unihost.db-shm']);
    throw e;
  }
  o.progress(`restored into ${o.dataDir}${o.store.kind === 'postgres' ? ` and ${o.store.display}` : ''}`);
  return m;
}

async function restoreInto(o: RestoreOptions): Promise<void> {
  for (const e of readdirSync(o.from)) {
    if (e === MANIFEST || e === PG_FILE) continue;
    await copy(join(o.from, e), join(o.dataDir, e));
  }
  if (o.store.kind === 'postgres')
    try {
      await run(
        'pg_restore',
        ['--no-owner', '--exit-on-error', `--dbname=${o.store.database}`, join(o.from, PG_FILE)],
        {
          env: pgEnv(o.store),
        },
      );
    } catch (e) {
      throw new Error(`pg_restore into ${o.store.display} failed: ${(e as { stderr?: string }).stderr?.trim() || e}`);
    }
  // One host's backup: its instances belong to whichever host starts on it (the host name may differ here).
  const store = await o.openStore();
  try {
    await unplaceOneHost(store);
  } finally {
    await store.close();
  }
}

interface AdminOpts {
  dataDir?: string;
  config?: string;
  store?: string;
}

/** `admin backup DIR`, `admin restore DIR`. */
export function registerBackup(admin: Command): void {
  const settings = async (o: AdminOpts) => {
    const { loadConfig } = await import('../../config.js');
    const { pathsFor } = await import('../../paths.js');
    const { parseStoreUrl } = await import('../../store/url.js');
    const { openStore } = await import('../../store/open.js');
    const { restrictFileModes } = await import('../../file-modes.js');
    const config = loadConfig({
      dataDir: o.dataDir,
      config: o.config,
      ...(o.store ? { store: { url: o.store } } : {}),
    });
    const db = pathsFor(config.dataDir).db;
    return { config, db, target: parseStoreUrl(config.store.url, db), openStore, restrictFileModes };
  };
  admin
    .command('backup <dir>')
    .description(
      'copy the store, images, certificates, snapshots and volumes into DIR while the daemon runs (VMs with volumes pause during their copy)',
    )
    .action(async (dest: string) => {
      const { config, target, openStore } = await settings(admin.opts());
      process.umask(0o077);
      const { controlSocketPath } = await import('../../control-socket.js');
      await takeBackup({
        dataDir: config.dataDir,
        store: target,
        dest: resolve(dest),
        controlSocket: controlSocketPath(config.dataDir),
        openStore: (copy) => openStore(config.store.url, copy),
        progress: (line) => console.error(line),
      });
      console.log(resolve(dest));
    });
  admin
    .command('restore <dir>')
    .description(
      'restore a backup (checked against its checksums) into a new data dir (--data-dir) and store (--store)',
    )
    .action(async (from: string) => {
      const { config, db, target, openStore, restrictFileModes } = await settings(admin.opts());
      process.umask(0o077);
      await restoreBackup({
        from: resolve(from),
        dataDir: config.dataDir,
        store: target,
        openStore: () => openStore(config.store.url, db),
        pgEmpty: async () => {
          if (target.kind !== 'postgres') return true;
          const { default: pg } = await import('pg');
          const { clientConfig } = await import('../../store/postgres/index.js');
          const c = new pg.Client(clientConfig(target));
          await c.connect();
          try {
            const r = await c.query(
              "select count(*)::int as n from information_schema.tables where table_schema = 'public'",
            );
            return (r.rows[0] as { n: number }).n === 0;
          } finally {
            await c.end();
          }
        },
        progress: (line) => console.error(line),
      });
      restrictFileModes(config.dataDir);
      console.log(
        `start it with: unihost serve --data-dir ${config.dataDir}${target.kind === 'postgres' ? ' --store <the same URL>' : ''}\n` +
          'instances that were running are stopped and start again by their restart policy, as after a host restart (docs/operations.md, "Backups")',
      );
    });
}
