/**
 * Crash-only daemon: the real CLI daemon (`unihost serve`) is killed with
 * SIGKILL while VMs run; the VMs keep running, and the next daemon adopts
 * them (state, log, QMP control); one a checkpoint had paused runs on. A VM
 * that vanished while the daemon was down ends up stopped with an honest
 * reason. `admin backup` of the running daemon's data dir, and `restore`.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdtempSync, openSync, closeSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { pathsFor } from '../../src/paths.js';
import { SqliteStore } from '../../src/store/sqlite/index.js';
import { overwrite } from '../../src/reconcile/testing/machine-world.js';
import { alive, guestOut, killLeaks, poll, qemuProcs, ROOT } from '../helpers/vm.js';
import { QmpClient } from '../../src/machines/qemu/qmp.js';
import { freePort } from '../../src/gateway/haproxy/process.js';
import { runtimeFiles } from '../../src/machines/qemu/argv.js';
import { JEMALLOC, JEMALLOC_CONF } from '../../src/cli/admin/service.js';

type Any = any; // eslint-disable-line @typescript-eslint/no-explicit-any

// Machines only: the private network is tested in its own namespace (daemon-network.test.ts).
const env = { ...process.env, UNIHOST_ACCEL: 'tcg', UNIHOST_LOG_LEVEL: 'info', UNIHOST_NETWORK: '0' };
let dir: string;
let url: string;
let port: number;
let token: string;
let daemon: ChildProcess | null = null;
const ids: Record<string, string> = {};

const cli = (...args: string[]): string =>
  execFileSync(process.execPath, [join(ROOT, 'bin', 'unihost.js'), ...args], { cwd: ROOT, env, encoding: 'utf8' });

async function api(method: string, path: string, body?: unknown): Promise<Any> {
  const r = await request(url + path, {
    method: method as 'GET',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await r.body.text();
  assert.equal(r.statusCode, 200, text);
  return JSON.parse(text);
}

const one = async (method: string, path: string, body?: unknown): Promise<Any> => {
  const r = await api(method, path, body);
  const e = r.data.instances[0];
  assert.equal(e.status, 'success', JSON.stringify(r));
  return e;
};

/** Starts `unihost serve` and waits until its API answers. */
async function startDaemon(): Promise<ChildProcess> {
  const out = openSync(join(dir, 'daemon.log'), 'a');
  const child = spawn(
    process.execPath,
    [join(ROOT, 'bin', 'unihost.js'), 'serve', '--data-dir', dir, '--listen', `127.0.0.1:${port}`],
    // with the allocator the daemon is started with in production (scripts/up.sh, the systemd unit)
    {
      cwd: ROOT,
      env: { ...env, ...(existsSync(JEMALLOC) ? { LD_PRELOAD: JEMALLOC, MALLOC_CONF: JEMALLOC_CONF } : {}) },
      stdio: ['ignore', out, out],
    },
  );
  closeSync(out);
  daemon = child;
  await poll(
    'daemon API up',
    async () => {
      if (child.exitCode !== null) throw new Error(`daemon exited: ${readFileSync(join(dir, 'daemon.log'), 'utf8')}`);
      try {
        const r = await request(`${url}/v1/instances/list`, { headers: { authorization: `Bearer ${token}` } });
        await r.body.text();
        return r.statusCode === 200;
      } catch {
        return false;
      }
    },
    60_000,
    100,
  );
  return child;
}

async function kill9(): Promise<void> {
  const d = daemon!;
  d.kill('SIGKILL');
  if (d.exitCode === null && d.signalCode === null) await once(d, 'exit');
  daemon = null;
}

const pidOf = (name: string): number => {
  const [p] = qemuProcs([ids[name]!]);
  assert.ok(p, `a QEMU of ${name} runs`);
  return p.pid;
};

const logText = async (name: string): Promise<string> => {
  const e = await one('GET', '/v1/instances/log', { uuid: ids[name], offset: 0, limit: 16383 });
  return Buffer.from(e.output, 'base64').toString('utf8');
};

before(async () => {
  if (!existsSync(join(ROOT, 'dist', 'cli', 'index.js')))
    execFileSync('npx', ['tsc', '-p', 'tsconfig.build.json'], { cwd: ROOT, stdio: 'inherit' });
  dir = mkdtempSync(join(tmpdir(), 'unihost-adopt-'));
  port = await freePort('127.0.0.1');
  url = `http://127.0.0.1:${port}`;
  cli('image', '--data-dir', dir, 'import-guest', guestOut());
  token = cli('admin', '--data-dir', dir, 'user', 'create', 'carol', '--quiet').trim();
  assert.match(token, /\S{16,}/);
  await startDaemon();
});

after(async () => {
  // Stop the daemon gracefully (VMs keep running by design), then kill and report what is left.
  if (daemon) {
    const d = daemon;
    d.kill('SIGTERM');
    await Promise.race([once(d, 'exit'), new Promise((r) => setTimeout(r, 10_000))]);
    if (d.exitCode === null && d.signalCode === null) d.kill('SIGKILL');
  }
  const leaked = killLeaks([dir, ...Object.values(ids)]);
  rmSync(dir, { recursive: true, force: true });
  assert.deepEqual(
    leaked.map((p) => p.cmdline),
    [],
    'QEMU processes left behind',
  );
});

test('kill -9 of the daemon: VMs keep running; the next daemon adopts them', async () => {
  const r = await api('POST', '/v1/instances', [
    {
      name: 'survivor',
      image: 'echo:latest',
      args: ['adopt', 'me'],
      env: { ECHO_FILE: '/data/note.txt' },
      volumes: [{ size_mb: 16, at: '/data' }],
      autostart: true,
      wait_timeout_ms: 180_000,
    },
    { name: 'victim', image: 'echo:latest', autostart: true, wait_timeout_ms: 180_000 },
  ]);
  for (const e of r.data.instances) {
    assert.equal(e.status, 'success', JSON.stringify(r));
    assert.equal(e.state, 'running', JSON.stringify(r));
    ids[e.name] = e.uuid;
  }
  console.log(
    `# 2 concurrent boots via the CLI daemon: boot_time_us ${r.data.instances.map((e: Any) => e.boot_time_us)}`,
  );
  await poll('echo printed its args', async () => /echo: running/.test(await logText('survivor')));
  const pid = pidOf('survivor');
  const before = await one('GET', `/v1/instances/${ids.survivor}`);
  // the preloaded allocator is the daemon's own: QEMU gets the system's (its memory is measured as QEMU's)
  if (existsSync(JEMALLOC)) {
    assert.match(readFileSync(join(dir, 'daemon.log'), 'utf8'), /memory allocator: jemalloc/);
    const qemuEnv = readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0');
    assert.ok(qemuEnv.length > 1, 'the environment of the QEMU is read');
    assert.ok(!qemuEnv.some((v) => /^(LD_PRELOAD|MALLOC_CONF)=/.test(v)), qemuEnv.join(' '));
    assert.doesNotMatch(readFileSync(`/proc/${pid}/maps`, 'utf8'), /jemalloc/);
  } else console.log(`# no ${JEMALLOC} (Debian's libjemalloc2): the daemon's allocator is not checked`);

  await kill9();
  await new Promise((r) => setTimeout(r, 500));
  assert.ok(alive(pid), 'the VM outlived the daemon');

  await startDaemon();
  const g = await one('GET', `/v1/instances/${ids.survivor}`);
  assert.equal(g.state, 'running', 'adopted');
  assert.equal(g.start_count, 1, 'not booted again');
  assert.equal(g.started_at, before.started_at);
  assert.equal(g.boot_time_us, before.boot_time_us, 'the boot time measured at boot, not at adoption');
  assert.equal(pidOf('survivor'), pid, 'the same VM');
  const log = await logText('survivor');
  assert.equal(log.split('echo: argv[2]=<me>').length - 1, 1, `the log once, not replayed on adoption:\n${log}`);

  // QMP control of the adopted VM works: a graceful stop reaches the guest
  await one('PUT', `/v1/instances/${ids.survivor}/stop`);
  const w = await one('GET', '/v1/instances/wait', { uuid: ids.survivor, state: 'stopped', timeout_ms: 60_000 });
  assert.equal(w.state, 'stopped');
  const s = await one('GET', `/v1/instances/${ids.survivor}`);
  assert.deepEqual([s.stop_reason, s.exit_code, s.stop_code], [15, 0, 0]);
  assert.match(await logText('survivor'), /echo: SIGTERM, exiting/);
  await poll('adopted QEMU gone', () => !alive(pid), 10_000);
});

test('what the VM wrote to its volume across the kill -9 is read by another instance', async () => {
  const vol = (await one('GET', `/v1/instances/${ids.survivor}`)).volumes[0];
  assert.ok(vol, 'the survivor has its volume');
  const d = await api('PUT', '/v1/volumes/detach', { uuid: vol.uuid });
  assert.equal(d.status, 'success', JSON.stringify(d));
  await api('POST', '/v1/instances', {
    name: 'reader',
    image: 'echo:latest',
    args: ['second'],
    env: { ECHO_FILE: '/v/note.txt' },
  });
  const a = await api('PUT', '/v1/volumes/attach', { uuid: vol.uuid, attach_to: { name: 'reader' }, at: '/v' });
  assert.equal(a.status, 'success', JSON.stringify(a));
  const st = await one('PUT', '/v1/instances/start', { name: 'reader', wait_timeout_ms: 180_000 });
  assert.equal(st.state, 'running');
  ids.reader = st.uuid;
  await poll('the reader printed the bytes written before the kill -9', async () =>
    /adopt me/.test(await logText('reader')),
  );
  await one('DELETE', `/v1/instances/${ids.reader}`);
});

test('a VM a checkpoint had paused when the daemon died runs on once adopted', async () => {
  const e = await one('POST', '/v1/instances', {
    name: 'napper',
    image: 'echo:latest',
    autostart: true,
    wait_timeout_ms: 180_000,
  });
  ids.napper = e.uuid;
  await poll('echo runs', async () => /echo: running/.test(await logText('napper')));
  await kill9();
  // what a daemon killed in the middle of a checkpoint leaves: the VM paused (QMP stop), nobody to resume it
  const q = await QmpClient.connect(runtimeFiles(join(dir, 'instances', ids.napper!)).qmp, 10_000);
  await q.execute('stop');
  assert.equal(((await q.execute('query-status')) as { status: string }).status, 'paused');
  q.close();

  await startDaemon();
  // a paused guest would not see the power button: the stop would end forced, after the stop timeout
  await one('PUT', `/v1/instances/${ids.napper}/stop`);
  const w = await one('GET', '/v1/instances/wait', { uuid: ids.napper, state: 'stopped', timeout_ms: 60_000 });
  assert.equal(w.state, 'stopped');
  const s = await one('GET', `/v1/instances/${ids.napper}`);
  assert.deepEqual([s.stop_reason, s.exit_code, s.stop_code], [15, 0, 0], 'a clean stop: the guest ran again');
  assert.match(await logText('napper'), /echo: SIGTERM, exiting/);
  await one('DELETE', `/v1/instances/${ids.napper}`);
});

test('a VM killed while the daemon is down → stopped with an honest reason and a log line', async () => {
  assert.equal((await one('GET', `/v1/instances/${ids.victim}`)).state, 'running');
  const pid = pidOf('victim');
  await kill9();
  process.kill(pid, 'SIGKILL');
  await poll('VM killed', () => !alive(pid), 10_000);

  await startDaemon();
  const w = await one('GET', '/v1/instances/wait', { uuid: ids.victim, state: 'stopped', timeout_ms: 30_000 });
  assert.equal(w.state, 'stopped');
  const g = await one('GET', `/v1/instances/${ids.victim}`);
  assert.equal(g.stop_reason, 0, 'unknown: the guest left no sign why it ended');
  assert.equal(g.exit_code, undefined);
  assert.equal(g.stop_code, undefined);
  assert.ok(g.stopped_at);
  assert.match(await logText('victim'), /\[unihost\] the VM \(pid \d+\) ended while the daemon was down/);
  assert.deepEqual(qemuProcs([ids.victim!]), []);
});

test('crash windows: a VM whose pid was never stored, or whose instance was deleted, is killed at start', async () => {
  const r = await api('POST', '/v1/instances', [
    { name: 'lost', image: 'echo:latest', autostart: true, wait_timeout_ms: 180_000 },
    { name: 'gone', image: 'echo:latest', autostart: true, wait_timeout_ms: 180_000 },
  ]);
  for (const e of r.data.instances) {
    assert.equal(e.state, 'running', JSON.stringify(r));
    ids[e.name] = e.uuid;
  }
  const lostPid = pidOf('lost');
  const gonePid = pidOf('gone');
  await kill9();
  // what a daemon killed at the wrong moment leaves: `lost` spawned but its pid not stored,
  // `gone` deleted (committed) but its VM not killed yet
  const store = new SqliteStore(pathsFor(dir).db);
  await store.tx(async (tx) => {
    await overwrite(tx, ids.lost!, { state: 'starting', desired: 'running', runtime: {} });
    await tx.instances.delete(ids.gone!);
  });
  await store.close();
  assert.ok(alive(lostPid) && alive(gonePid));

  await startDaemon();
  await poll('both untracked VMs killed', () => !alive(lostPid) && !alive(gonePid), 30_000);
  const w = await one('GET', '/v1/instances/wait', { uuid: ids.lost, state: 'running', timeout_ms: 180_000 });
  assert.equal(w.state, 'running', 'booted again');
  const lost = qemuProcs([ids.lost!]);
  assert.equal(lost.length, 1, 'one VM, not two');
  assert.notEqual(lost[0]!.pid, lostPid);
  assert.deepEqual(qemuProcs([ids.gone!]), []);
  assert.ok(!existsSync(join(dir, 'instances', ids.gone!)), "the deleted instance's files are removed");
  assert.match(await logText('lost'), /\[unihost\] killed a VM the store does not record/);
  await one('DELETE', `/v1/instances/${ids.lost}`);
});

test('admin backup while a VM writes its volume (paused for the copy, not restarted); restore gives the same objects and bytes', async () => {
  const e = await one('POST', '/v1/instances', {
    name: 'keeper',
    image: 'echo:latest',
    args: ['keep', 'me'],
    env: { ECHO_FILE: '/data/note.txt' },
    volumes: [{ size_mb: 16, at: '/data' }],
    autostart: true,
    wait_timeout_ms: 180_000,
  });
  ids.keeper = e.uuid;
  // the app syncs what it writes: a copy taken from now on has it
  await poll('echo wrote its volume', async () => /echo: \| keep me/.test(await logText('keeper')));
  const pid = pidOf('keeper');
  const work = mkdtempSync(join(tmpdir(), 'unihost-backup-'));
  const [backup, restored, refused] = ['backup', 'restored', 'refused'].map((n) => join(work, n)) as [
    string,
    string,
    string,
  ];
  const admin = (...args: string[]) =>
    spawnSync(process.execPath, [join(ROOT, 'bin', 'unihost.js'), 'admin', ...args], {
      cwd: ROOT,
      env,
      encoding: 'utf8',
    });
  try {
    const b = admin('--data-dir', dir, 'backup', backup);
    assert.equal(b.status, 0, b.stderr);
    assert.match(b.stderr, /volume vol-\w+: copied with keeper paused for \d+ ms/);
    const daemonLog = readFileSync(join(dir, 'daemon.log'), 'utf8');
    assert.match(daemonLog, /VM paused for a backup of its volume/);
    assert.match(daemonLog, /backup hold released/);
    assert.equal(pidOf('keeper'), pid, 'the same VM runs on');
    assert.equal((await one('GET', `/v1/instances/${ids.keeper}`)).state, 'running');
    const manifest = JSON.parse(readFileSync(join(backup, 'manifest.json'), 'utf8'));
    assert.deepEqual(manifest.paused[0].instances, [ids.keeper]);

    const r = admin('--data-dir', restored, 'restore', backup);
    assert.equal(r.status, 0, r.stderr);
    // the same objects in the restored store as in the live one
    const objects = async (db: string) => {
      const s = new SqliteStore(db);
      try {
        return await s.read(async (tx) => ({
          users: (await tx.users.list()).map((u) => u.id).sort(),
          instances: (await tx.instances.all()).map((i) => `${i.id} ${i.name} ${i.image}`).sort(),
          volumes: (await tx.volumes.all()).map((v) => `${v.id} ${v.name} ${v.instance_id}`).sort(),
        }));
      } finally {
        await s.close();
      }
    };
    assert.deepEqual(await objects(pathsFor(restored).db), await objects(pathsFor(dir).db));
    // the volume's bytes: the synced file, a clean file system
    const vol = (await one('GET', `/v1/instances/${ids.keeper}`)).volumes[0].uuid;
    const image = join(restored, 'volumes', `${vol}.ext4`);
    // a copy of a mounted ext4 is what a power cut leaves: the journal replays (e2fsck here, the kernel at mount)
    const fsck = spawnSync('e2fsck', ['-fy', image], { encoding: 'utf8' });
    assert.ok(fsck.status === 0 || fsck.status === 1, `e2fsck: ${fsck.status} ${fsck.stdout}`);
    execFileSync('e2fsck', ['-fn', image], { stdio: 'ignore' });
    assert.equal(
      execFileSync('debugfs', ['-R', 'cat /note.txt', image], { encoding: 'utf8', stdio: 'pipe' }),
      'keep me\n',
    );

    // a damaged backup is refused before anything is written
    execFileSync(
      'sh',
      ['-c', `printf x | dd of=${join(backup, 'volumes', `${vol}.ext4`)} bs=1 seek=2000000 conv=notrunc`],
      {
        stdio: 'ignore',
      },
    );
    const d = admin('--data-dir', refused, 'restore', backup);
    assert.notEqual(d.status, 0);
    assert.match(d.stderr, /the backup is damaged: volumes\/.*\.ext4 differs from its checksum/);
    assert.ok(!existsSync(refused), 'nothing restored');
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  await one('DELETE', `/v1/instances/${ids.keeper}`);
});
