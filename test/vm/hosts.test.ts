/**
 * Fencing with real VMs (docs/hosts.md): two agents as processes of their
 * own (`unihost serve --role agent`, each its data dir and host name) and an
 * API server, on one PostgreSQL, booting the echo test image under QEMU
 * (no private network: the fencing is the point here). An instance with
 * restart policy `always` runs on host b; b's agent is paused (SIGSTOP)
 * past its lease: b's watchdog ends its VM, the API side declares b dead
 * and the instance boots on host a. b's agent resumes (SIGCONT): its renewal
 * fails on the new epoch, it takes a new lease and starts nothing. At no
 * sample, every 50 ms throughout, do two QEMUs of the instance run. The
 * agents' data dirs start empty: each fetches the image from the store.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DEFAULTS } from '../../src/config.js';
import { startHarness, type Harness } from '../helpers/harness.js';
import { postgresMissing, testPostgres } from '../helpers/postgres.js';
import { requirePart } from '../helpers/require.js';
import { agentArgv, guestOut, poll, qemuProcs, ROOT } from '../helpers/vm.js';
import { importGuestImages } from '../../src/images/guest.js';

const LEASE_MS = 3000;
const qemuMissing = process.getuid?.() !== 0 ? 'needs root (VM confinement)' : undefined;
const missing = postgresMissing() ?? qemuMissing;

describe('fencing with real VMs: a paused agent past its lease', { skip: requirePart(missing) }, () => {
  let url: string;
  let api: Harness;
  let token: string;
  const dirs: Record<string, string> = {};
  const procs: Record<string, ChildProcess> = {};
  const logs: Record<string, string> = {};
  let id = '';

  const startAgent = (name: string): ChildProcess => {
    const dir = dirs[name]!;
    writeFileSync(
      join(dir, 'config.json'),
      JSON.stringify({
        host: { leaseMs: LEASE_MS, watchdog: 'on' },
        network: { enabled: false },
        gateway: { enabled: false },
        machines: { accel: 'tcg', ksm: false },
        capacity: { memoryMb: 2048 },
      }),
    );
    const p = spawn(process.execPath, agentArgv({ name, dir, storeUrl: url, config: join(dir, 'config.json') }), {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, UNIHOST_LOG_LEVEL: 'info' },
    });
    logs[name] = '';
    p.stdout!.on('data', (d: Buffer) => (logs[name] += d.toString()));
    p.stderr!.on('data', (d: Buffer) => (logs[name] += d.toString()));
    return p;
  };
  const hosts = () => api.daemon.services.hosts.list();
  const host = async (name: string) => (await hosts()).find((h) => h.name === name);
  const inst = () => api.daemon.store.read((tx) => tx.instances.getAny(id));

  before(async () => {
    url = await testPostgres().createDb();
    api = await startHarness({ store: { url }, roles: ['api'], host: { ...DEFAULTS.host, leaseMs: LEASE_MS } });
    token = await api.user('alice', true);
    await importGuestImages(api.daemon.services.images, guestOut(), ['echo']);
    for (const name of ['a', 'b']) {
      dirs[name] = mkdtempSync(join(tmpdir(), `unihost-test-host-${name}-`));
      procs[name] = startAgent(name);
    }
    await poll('both agents registered', async () => (await hosts()).length === 2, 60_000, 200);
  });

  after(async () => {
    for (const p of Object.values(procs)) {
      p.kill('SIGCONT');
      p.kill('SIGTERM');
    }
    await Promise.all(
      Object.values(procs).map((p) => new Promise((r) => (p.exitCode !== null ? r(null) : p.once('exit', r)))),
    );
    for (const q of qemuProcs(Object.values(dirs))) process.kill(q.pid, 'SIGKILL');
    // the watchdogs end once their data dir's instances directory is gone
    for (const d of Object.values(dirs)) rmSync(d, { recursive: true, force: true });
    await api?.close();
  });

  test('never two copies: b paused past its lease, its instance boots on a; b resumes fenced', async () => {
    await api.daemon.services.hosts.mark('a', 'cordoned');
    const r = await api.call('POST', '/v1/instances', token, {
      name: 'keep',
      image: 'echo:latest',
      memory_mb: 128,
      restart_policy: 'always',
      autostart: true,
      wait_timeout_ms: 120_000,
    });
    const e = r.body.data.instances[0];
    assert.equal(e.state, 'running', r.text);
    id = e.uuid;
    await api.daemon.services.hosts.mark('a', 'live');
    const b = (await host('b'))!;
    assert.equal((await inst())!.host_id, b.id);
    assert.equal(qemuProcs([id]).length, 1);

    let most = 0;
    const sampler = setInterval(() => (most = Math.max(most, qemuProcs([id]).length)), 50);
    try {
      procs.b!.kill('SIGSTOP');
      await poll('b declared dead', async () => (await host('b'))?.state === 'dead', 30_000, 100);
      await poll(
        'the instance running on a',
        async () => {
          const i = await inst();
          return i?.state === 'running' && i.host_id === (await host('a'))!.id;
        },
        120_000,
        200,
      );
      // a had never booted the image: its agent fetched the content from the store first
      assert.ok(existsSync(join(dirs.a!, 'images', 'blobs', 'sha256', (await inst())!.image.slice(7))));
      const aPid = qemuProcs([id]).map((p) => p.pid);
      const wlog = (n: string) => {
        try {
          return readFileSync(join(dirs[n]!, 'watchdog.log'), 'utf8');
        } catch (e) {
          return String(e);
        }
      };
      assert.equal(aPid.length, 1, `one VM: the one a booted; watchdog of b: ${wlog('b')}; b: ${logs.b!.slice(-2000)}`);
      assert.ok(
        qemuProcs([id, dirs.a!]).every((p) => p.cmdline.includes(dirs.a!)),
        'it is a’s',
      );

      procs.b!.kill('SIGCONT');
      const epoch = (await host('b'))!.epoch;
      await poll(
        'b took a new lease',
        async () => {
          const h = await host('b');
          return h?.state === 'live' && h.epoch > epoch;
        },
        30_000,
        100,
      );
      await new Promise((res) => setTimeout(res, 1000));
      assert.deepEqual(
        qemuProcs([id]).map((p) => p.pid),
        aPid,
        'still the one VM on a',
      );
    } finally {
      clearInterval(sampler);
    }
    assert.equal(most, 1, 'never two QEMUs of the instance at once');
    assert.match(logs.b!, /host lease lost|host lease held again/, logs.b!.slice(-3000));
    const i = (await inst())!;
    assert.equal(i.state, 'running');
    assert.equal(i.restart_count >= 0, true);
    assert.ok(
      readFileSync(join(dirs.b!, 'watchdog.log'), 'utf8').includes(`killing VM ${id}`),
      "b's watchdog ended its VM",
    );
    await api.call('DELETE', `/v1/instances/${id}`, token);
    await poll('no VM left', async () => qemuProcs([id]).length === 0, 30_000, 200);
  });
});
