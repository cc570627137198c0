/**
 * The HAProxy process: a stale pid file (its number now another process's)
 * must not get that process killed or adopted, a stray HAProxy of the data
 * dir is ended, and with a CPU weight every HAProxy process runs in the
 * gateway's cgroup.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { BackendTable, backendPair, METRO, request, route, testPlane } from '../testing.js';
import { HAPROXY_BIN, isHaproxyOf, strayHaproxies } from './process.js';

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

test('a stale haproxy.pid naming another process: that process lives on, a HAProxy of our own starts', async () => {
  const dir = await mkdtemp(path.join(tmpdir(), 'uh-hp-pid-'));
  const other = spawn('sleep', ['60'], { stdio: 'ignore' });
  const a = await backendPair('http', 'A');
  const table = new BackendTable();
  await table.set('gA', a);
  try {
    await mkdir(path.join(dir, 'haproxy'), { recursive: true });
    await writeFile(path.join(dir, 'haproxy', 'haproxy.pid'), `${other.pid}\n`);
    const plane = await testPlane(dir, table);
    try {
      const name = `app-aaaa1111.${METRO}`;
      for (const r of await plane.setRoutes([route('gA', 80, a[0].port, ['http'], [name])]))
        assert.equal(r.error, undefined);
      assert.equal((await request(plane.boundPort(80)!, name)).status, 200, 'a HAProxy of its own serves');
      assert.ok(alive(other.pid!), 'the process the stale file named was not killed');
      assert.equal(await isHaproxyOf(other.pid!, path.join(dir, 'haproxy', 'haproxy.cfg')), false);
    } finally {
      await plane.close();
    }
  } finally {
    other.kill('SIGKILL');
    for (const x of a) await x.close();
    await rm(dir, { recursive: true, force: true });
  }
});

test('a `haproxy -c` checking the configuration is not a HAProxy of the data dir (not adopted, not a stray)', async () => {
  const dir = await mkdtemp(path.join(tmpdir(), 'uh-hp-check-'));
  const config = path.join(dir, 'haproxy.cfg');
  await writeFile(config, 'global\n');
  // a long-lived process whose command line is that of a check: `haproxy -c +1 -f <config>` (tail, renamed)
  const check = spawn('bash', ['-c', `exec -a haproxy tail -c +1 -f ${config}`], { stdio: 'ignore' });
  try {
    let argv: string[] = [];
    for (let i = 0; i < 100 && argv[0] !== 'haproxy'; i++) {
      await new Promise((r) => setTimeout(r, 20));
      argv = (await readFile(`/proc/${check.pid!}/cmdline`, 'utf8').catch(() => '')).split('\0');
    }
    assert.deepEqual(argv.slice(0, 5), ['haproxy', '-c', '+1', '-f', config]);
    assert.equal(await isHaproxyOf(check.pid!, config), false);
    assert.deepEqual(await strayHaproxies(config), []);
  } finally {
    check.kill('SIGKILL');
    await rm(dir, { recursive: true, force: true });
  }
});

test('a second HAProxy of the same data dir (a master nobody runs, and its worker) is ended when the daemon starts', async () => {
  const dir = await mkdtemp(path.join(tmpdir(), 'uh-hp-stray-'));
  const a = await backendPair('http', 'A');
  const table = new BackendTable();
  await table.set('gA', a);
  const config = path.join(dir, 'haproxy', 'haproxy.cfg');
  let stray: ReturnType<typeof spawn> | undefined;
  try {
    const first = await testPlane(dir, table);
    const name = `app-aaaa1111.${METRO}`;
    for (const r of await first.setRoutes([route('gA', 80, a[0].port, ['http'], [name])]))
      assert.equal(r.error, undefined);
    await first.close({ keep: true }); // the daemon goes; its HAProxy stays, as after a crash
    // as a daemon killed between spawning a master and HAProxy writing its pid file leaves one
    stray = spawn(
      HAPROXY_BIN,
      ['-W', '-S', path.join(dir, 'stray-master.sock'), '-f', config, '-p', path.join(dir, 'stray.pid')],
      { stdio: 'ignore', detached: true },
    );
    await waitFor(async () => (await strayHaproxies(config)).length >= 4, 'the stray master and its worker run');
    const plane = await testPlane(dir, table);
    try {
      // HAProxy is adopted with the first route table
      for (const r of await plane.setRoutes([route('gA', 80, a[0].port, ['http'], [name])]))
        assert.equal(r.error, undefined);
      const gone = stray;
      await waitFor(async () => gone.signalCode !== null || gone.exitCode !== null, 'the stray master ended');
      assert.equal(gone.signalCode, 'SIGKILL', 'the stray master was ended by the daemon');
      const left = await strayHaproxies(config);
      assert.equal(left.length, 2, `one master and its worker are left: ${left.join(', ')}`);
      assert.equal((await request(plane.boundPort(80)!, name)).status, 200);
    } finally {
      await plane.close();
    }
  } finally {
    if (stray?.pid && alive(stray.pid)) process.kill(-stray.pid, 'SIGKILL');
    // whatever a failed run left of this data dir's HAProxies
    for (const pid of await strayHaproxies(config)) process.kill(pid, 'SIGKILL');
    for (const x of a) await x.close();
    await rm(dir, { recursive: true, force: true });
  }
});

async function waitFor(check: () => Promise<boolean>, what: string): Promise<void> {
  const end = Date.now() + 10_000;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out: ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** The cpu cgroup `pid` is in (`/unihost-gateway`), from /proc: v1's `cpu` line or v2's unified one. */
async function cpuCgroup(pid: number): Promise<string | undefined> {
  const lines = (await readFile(`/proc/${pid}/cgroup`, 'utf8')).trim().split('\n');
  const v1 = lines.find((l) => l.split(':')[1]?.split(',').includes('cpu'));
  return (v1 ?? lines.find((l) => l.startsWith('0::')))?.split(':')[2];
}

test('with a CPU weight, HAProxy (master and every worker, after reloads too) runs in the gateway cgroup with that weight', async (t) => {
  const v2 = existsSync('/sys/fs/cgroup/cgroup.controllers');
  const ctrl = v2 ? '/sys/fs/cgroup' : '/sys/fs/cgroup/cpu';
  if (process.getuid?.() !== 0 || !existsSync(path.join(ctrl, 'cgroup.procs')))
    return t.skip('needs root and a cgroup cpu controller');
  const dir = await mkdtemp(path.join(tmpdir(), 'uh-hp-cg-'));
  const a = await backendPair('http', 'A');
  const table = new BackendTable();
  await table.set('gA', a);
  const config = path.join(dir, 'haproxy', 'haproxy.cfg');
  try {
    const plane = await testPlane(dir, table, { cpuWeight: 400, minReloadGapMs: 0 });
    try {
      const name = `app-aaaa1111.${METRO}`;
      for (const port of [80, 8080]) {
        // each new port is a reload: a new worker, forked by the master
        for (const r of await plane.setRoutes([route('gA', port, a[0].port, ['http'], [name])]))
          assert.equal(r.error, undefined);
        const procs = await strayHaproxies(config);
        assert.ok(procs.length >= 2, 'a master and a worker');
        for (const pid of procs)
          assert.equal(await cpuCgroup(pid), '/unihost-gateway', `haproxy ${pid} after port ${port}`);
      }
      const weight = v2 ? ['cpu.weight', '400'] : ['cpu.shares', '4096'];
      assert.equal((await readFile(path.join(ctrl, 'unihost-gateway', weight[0]!), 'utf8')).trim(), weight[1]);
    } finally {
      await plane.close();
    }
  } finally {
    for (const x of a) await x.close();
    await rm(dir, { recursive: true, force: true });
  }
});
