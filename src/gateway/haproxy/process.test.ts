/**
 * The HAProxy process's pid file: a stale one (its number now another
 * process's) must not get that process killed or adopted.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { BackendTable, backendPair, METRO, request, route, testPlane } from '../testing.js';
import { isHaproxyOf } from './process.js';

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
