/* eslint-disable @typescript-eslint/no-explicit-any -- CLI JSON output is parsed and its shape asserted. */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createConnection, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { runCli, spawnCli, untilOutput, type CliResult } from '../helpers/cli.js';
import { startHarness, type Harness } from '../helpers/harness.js';
import { simMachines } from '../helpers/sim-machines.js';

function oneLine(r: CliResult, code: number, re: RegExp): void {
  assert.equal(r.code, code, r.stderr);
  assert.doesNotMatch(r.stderr, /\n\s+at /, r.stderr);
  assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
  assert.match(r.stderr, /^unihost: /);
  assert.match(r.stderr, re);
}

const jsonLines = (s: string): any[] =>
  s
    .trim()
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l));

/** A loopback TCP proxy to the daemon whose connections the test can cut and refuse. */
async function cuttingProxy(port: number) {
  const open = new Set<Socket>();
  let refusing = false;
  const server: Server = createServer((client) => {
    if (refusing) return client.destroy();
    const up = createConnection({ host: '127.0.0.1', port });
    for (const s of [client, up]) {
      open.add(s);
      s.on('close', () => open.delete(s));
      s.on('error', () => {});
    }
    client.pipe(up).pipe(client);
    client.on('close', () => up.destroy());
    up.on('close', () => client.destroy());
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    /** cuts every open connection and refuses new ones until `resume` */
    cut() {
      refusing = true;
      for (const s of open) s.destroy();
    },
    resume() {
      refusing = false;
    },
    close: async () => {
      for (const s of open) s.destroy();
      server.close();
      await once(server, 'close');
    },
  };
}

describe('unihost events (real CLI against a real daemon)', () => {
  let h: Harness;
  let env: Record<string, string>;
  const cli = (...args: string[]) => runCli(args, env);
  const api = (method: string, path: string, body?: unknown) => h.call(method, path, env.UKC_TOKEN!, body);

  before(async () => {
    h = await startHarness({}, (s) => [simMachines(s)]);
    await h.image('echo:latest', { args: 'hi' });
    env = { UKC_METRO: `${h.url}/v1`, UKC_TOKEN: await h.user('alice') };
    assert.equal((await cli('instance', 'create', '-n', 'web', '--start', 'echo:latest')).code, 0);
    assert.equal((await cli('instance', 'stop', 'web')).code, 0);
  });
  after(async () => h?.close());

  test('without -f: the backlog in JSON and as a table, then exit 0', async () => {
    const j = await cli('events', '-o', 'json');
    assert.equal(j.code, 0, j.stderr);
    const evs = jsonLines(j.stdout);
    assert.ok(evs.length >= 3, j.stdout);
    assert.equal(evs[0].type, 'created');
    assert.equal(evs[0].instance.name, 'web');
    assert.ok(evs.some((e) => e.type === 'state' && e.to_state === 'running'));
    assert.equal(evs.at(-1).to_state, 'stopped');
    evs.forEach((e, i) => assert.equal(e.id, evs[0].id + i, 'ids are consecutive'));

    const t = await cli('events');
    assert.equal(t.code, 0, t.stderr);
    const lines = t.stdout.trim().split('\n');
    assert.match(lines[0]!, /^ID +AT +INSTANCE +UUID +CHANGE$/);
    assert.equal(lines.length, evs.length + 1);
    assert.match(lines[1]!, new RegExp(`^${evs[0].id} +\\S+ +web +${evs[0].instance.uuid} +created$`));
    assert.match(t.stdout, /^\d+ +\S+ +web +\S+ +\w+ -> stopped$/m);

    const later = jsonLines((await cli('events', '-o', 'json', '--from', String(evs[1].id))).stdout);
    assert.deepEqual(later, evs.slice(2));
    assert.equal((await cli('events', '--instance', 'nobody')).stdout.trim(), 'no events');
  });

  test('errors: unknown group, wrong token, unreachable metro, bad --from', async () => {
    oneLine(await cli('events', '--group', 'nogroup'), 3, /nogroup/);
    oneLine(await runCli(['events', '--token', 'wrong'], env), 4, /token was refused/);
    // a port nothing listens on: bind one, note it, close it
    const s = createServer().listen(0, '127.0.0.1');
    await once(s, 'listening');
    const port = (s.address() as AddressInfo).port;
    s.close();
    await once(s, 'close');
    oneLine(await runCli(['events', '-f'], { ...env, UKC_METRO: `http://127.0.0.1:${port}` }), 5, /cannot reach/);
    oneLine(await cli('events', '--from', 'x'), 2, /--from/);
  });

  test('-f prints an event that happens while it runs', async () => {
    const p = spawnCli(['events', '-f', '-o', 'json', '--instance', 'live'], env);
    let stderr = '';
    p.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    try {
      const seen = untilOutput(p, /"to_state":"running"/);
      assert.equal((await cli('instance', 'create', '-n', 'live', '--start', 'echo:latest')).code, 0);
      const evs = jsonLines(await seen);
      assert.equal(evs[0].type, 'created');
      assert.ok(evs.every((e) => e.instance.name === 'live'));
      assert.equal(stderr, '');
    } finally {
      p.kill('SIGINT');
    }
    const [code] = p.exitCode === null ? await once(p, 'close') : [p.exitCode];
    assert.equal(code, 0, stderr);
  });

  test('-f resumes after a dropped connection without losses or duplicates', async () => {
    const proxy = await cuttingProxy(Number(new URL(h.url).port));
    const p = spawnCli(['events', '-f', '-o', 'json'], { ...env, UKC_METRO: `${proxy.url}/v1` });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    p.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    try {
      const seen = untilOutput(p, /"name":"before"/);
      assert.equal((await cli('instance', 'create', '-n', 'before', 'echo:latest')).code, 0);
      await seen;
      proxy.cut();
      // these happen while the CLI has no connection
      assert.equal((await api('POST', '/v1/instances', { name: 'gap', image: 'echo:latest' })).status, 200);
      assert.equal((await api('PUT', '/v1/instances/start', { name: 'gap' })).body.status, 'success');
      assert.equal((await api('DELETE', '/v1/instances', { name: 'gap' })).body.status, 'success');
      const back = untilOutput(p, /"type":"deleted","instance":\{[^}]*"name":"gap"/);
      proxy.resume();
      await back.catch((e: Error) => assert.fail(`${e.message}\nstderr: ${stderr}\nstdout: ${stdout}`));
      assert.match(stderr, /reconnecting after \d+/);
    } finally {
      if (p.exitCode === null) {
        p.kill('SIGINT');
        await once(p, 'close');
      }
      await proxy.close();
    }
    const got = jsonLines(stdout);
    const ids = got.map((e) => e.id);
    assert.equal(new Set(ids).size, ids.length, 'no duplicates');
    ids.forEach((id, i) => assert.equal(id, ids[0] + i, `ids consecutive: ${ids.join(',')}`));
    const all = jsonLines((await cli('events', '-o', 'json')).stdout);
    assert.deepEqual(got, all, 'the followed stream equals the log');
  });
});
