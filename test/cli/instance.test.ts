/* eslint-disable @typescript-eslint/no-explicit-any -- CLI JSON output is parsed and its shape asserted. */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { ConsoleLog } from '../../src/machines/console-log.js';
import { runCli, spawnCli, untilOutput, type CliResult } from '../helpers/cli.js';
import { startHarness, type Harness } from '../helpers/harness.js';
import { simMachines } from '../helpers/sim-machines.js';

/** No stack traces, ever: one `unihost: ...` line per problem. */
function oneLine(r: CliResult, re: RegExp): void {
  assert.doesNotMatch(r.stderr, /\n\s+at /, r.stderr);
  assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
  assert.match(r.stderr, /^unihost: /);
  assert.match(r.stderr, re);
}

describe('unihost instance (real CLI against a real daemon)', () => {
  let h: Harness;
  let env: Record<string, string>;
  const cli = (...args: string[]) => runCli(args, env);
  const consoleOf = (uuid: string) => new ConsoleLog(join(h.dataDir, 'instances', uuid));

  before(async () => {
    h = await startHarness({}, (s) => [simMachines(s)]);
    await h.image('echo:latest', { args: 'hi' });
    env = { UKC_METRO: `${h.url}/v1`, UKC_TOKEN: await h.user('alice') };
  });
  after(async () => h?.close());

  test('create, get, list (table and JSON) and delete', async () => {
    const c = await cli(
      'instance',
      'create',
      '-n',
      'web',
      '-m',
      '64',
      '-e',
      'A=1',
      '--start',
      'echo:latest',
      '--',
      'x',
      '-y',
    );
    assert.equal(c.code, 0, c.stderr);
    assert.match(c.stdout, /^NAME +UUID +STATE +IP +FQDN\nweb +[0-9a-f-]{36} +running +10\.\S+/);

    const g = await cli('instance', 'get', 'web', '-o', 'json');
    assert.equal(g.code, 0, g.stderr);
    const inst = JSON.parse(g.stdout);
    assert.equal(inst.name, 'web');
    assert.equal(inst.state, 'running');
    assert.equal(inst.memory_mb, 64);
    assert.deepEqual(inst.args, ['x', '-y']);
    assert.deepEqual(inst.env, { A: '1' });

    const gt = await cli('instance', 'get', inst.uuid);
    assert.equal(gt.code, 0, gt.stderr);
    assert.match(gt.stdout, new RegExp(`^uuid: +${inst.uuid}\\nname: +web\\nstate: +running\\n`));
    assert.match(gt.stdout, /^memory_mb: +64$/m);

    const y = await cli('instance', 'get', 'web', '-o', 'yaml');
    assert.match(y.stdout, /^name: web$/m);
    assert.match(y.stdout, /^args:\n {2}- x\n {2}- -y$/m);

    assert.equal((await cli('instance', 'create', '-n', 'idle', 'echo:latest')).code, 0);
    const t = await cli('instance', 'list');
    assert.equal(t.code, 0, t.stderr);
    const lines = t.stdout.trim().split('\n');
    assert.match(lines[0]!, /^NAME +STATE +IMAGE +MEMORY +IP +FQDN +BOOT +CREATED +ARGS$/);
    assert.match(t.stdout, /^web +running +echo:latest +64 MiB +10\.\S+ +1\.0 ms +\d+s ago +x -y$/m);
    assert.match(t.stdout, /^idle +stopped +/m);
    assert.equal(lines.length, 3);
    // the tag moved on to another image (a new push): the instance is pinned to its digest, shown instead
    const tag = await h.daemon.store.read((tx) => tx.images.tag('echo:latest'));
    await h.image('echo-next:1');
    const next = (await h.daemon.store.read((tx) => tx.images.tag('echo-next:1')))!.digest;
    await h.daemon.store.tx((tx) => tx.images.setTag({ ...tag!, digest: next }));
    try {
      const moved = await cli('instance', 'list');
      assert.match(moved.stdout, new RegExp(`^web +running +${tag!.digest.slice(0, 19)} +64 MiB`, 'm'));
    } finally {
      await h.daemon.store.tx((tx) => tx.images.setTag(tag!));
    }

    const j = await cli('instance', 'list', '-o', 'json');
    const list = JSON.parse(j.stdout);
    assert.deepEqual(list.map((i: any) => [i.name, i.state]).sort(), [
      ['idle', 'stopped'],
      ['web', 'running'],
    ]);
    const running = JSON.parse((await cli('instance', 'ls', '--state', 'running', '-o', 'json')).stdout);
    assert.deepEqual(
      running.map((i: any) => i.name),
      ['web'],
    );

    const d = await cli('instance', 'delete', 'web', 'idle');
    assert.equal(d.code, 0, d.stderr);
    assert.match(d.stdout, /^web +running +deleted$/m);
    assert.match(d.stdout, /^idle +stopped +deleted$/m);
    assert.equal((await cli('instance', 'list')).stdout.trim(), 'no instances');
    const api = await h.call('GET', '/v1/instances/list', env.UKC_TOKEN!);
    assert.deepEqual(api.body.data.instances, []);
  });

  test('stop waits for stopped, start for running, wait reports the state', async () => {
    assert.equal((await cli('instance', 'create', '-n', 'svc', 'echo:latest')).code, 0);
    const s = await cli('instance', 'start', 'svc');
    assert.equal(s.code, 0, s.stderr);
    assert.match(s.stdout, /^svc +stopped +running$/m);
    const w = await cli('instance', 'wait', 'svc', '-o', 'json');
    assert.equal(JSON.parse(w.stdout)[0].state, 'running');
    const st = await cli('instance', 'stop', 'svc');
    assert.equal(st.code, 0, st.stderr);
    assert.match(st.stdout, /^svc +running +stopped$/m);
    assert.equal((await cli('instance', 'start', 'svc')).code, 0);
    const su = await cli('instance', 'suspend', 'svc');
    assert.equal(su.code, 0, su.stderr);
    assert.match(su.stdout, /^svc +running +standby$/m);
    const again = await cli('instance', 'suspend', 'svc');
    assert.equal(again.code, 1, again.stderr);
    oneLine(again, /instance 'svc' is standby: only a running instance can be suspended/);
    assert.equal((await cli('instance', 'stop', 'svc')).code, 0);
    const timeout = await cli('instance', 'wait', 'svc', '-s', 'running', '-t', '200ms');
    assert.equal(timeout.code, 6, timeout.stderr);
    oneLine(timeout, /did not reach state 'running'/);
    assert.equal((await cli('instance', 'rm', 'svc')).code, 0);
  });

  test('template makes a template; create --template starts from it; mistakes are one line each', async () => {
    assert.equal((await cli('instance', 'create', '-n', 'golden', '--start', 'echo:latest')).code, 0);
    const t = await cli('instance', 'template', 'golden');
    assert.equal(t.code, 0, t.stderr);
    assert.match(t.stdout, /^golden +running +template$/m);
    const c = await cli('instance', 'create', '-n', 'copy', '--template', 'golden', '--start');
    assert.equal(c.code, 0, c.stderr);
    assert.match(c.stdout, /^copy +[0-9a-f-]{36} +running +10\.\S+/m);
    const both = await cli('instance', 'create', '--template', 'golden', 'echo:latest');
    assert.equal(both.code, 2, both.stderr);
    oneLine(both, /give an image, or --template NAME .* or --checkpoint NAME to start from \(one of them\)/);
    const args = await cli('instance', 'create', '--template', 'golden', '-m', '256');
    oneLine(args, /--template: arguments, --env, --memory and --volume are its own/);
    const again = await cli('instance', 'template', 'copy', 'nope');
    assert.equal(again.code, 3, `not found: ${again.stderr}`);
    assert.match(again.stdout, /^copy +running +template$/m, 'the one that could be made is shown');
    oneLine(again, /No instance with name 'nope'/);
    // a checkpoint of a running instance, and an instance from it
    assert.equal((await cli('instance', 'create', '-n', 'live', '--start', 'echo:latest')).code, 0);
    const ck = await cli('instance', 'checkpoint', 'live', '-n', 'copy-1');
    assert.equal(ck.code, 0, ck.stderr);
    assert.match(ck.stdout, /^copy-1 +[0-9a-f-]{36} +checkpoint$/m);
    const fromCk = await cli('instance', 'create', '-n', 'again', '--checkpoint', 'copy-1', '--start');
    assert.equal(fromCk.code, 0, fromCk.stderr);
    assert.match(fromCk.stdout, /^again +[0-9a-f-]{36} +running/m);
    const stopped = await cli('instance', 'checkpoint', 'golden');
    oneLine(stopped, /instance 'golden' is template: a checkpoint is taken of a running instance/);
    for (const n of ['again', 'copy-1', 'live', 'copy', 'golden'])
      assert.equal((await cli('instance', 'rm', n)).code, 0);
  });

  test('logs prints the decoded console log; -n keeps the last lines', async () => {
    const c = JSON.parse((await cli('instance', 'create', '-n', 'talk', '-o', 'json', 'echo:latest')).stdout);
    consoleOf(c[0].uuid).append(Buffer.from('booting\nline two\nline three ünïcode\n'));
    const all = await cli('instance', 'logs', 'talk');
    assert.equal(all.code, 0, all.stderr);
    assert.equal(all.stdout, 'booting\nline two\nline three ünïcode\n');
    const tail = await cli('instance', 'logs', '-n', '2', 'talk');
    assert.equal(tail.stdout, 'line two\nline three ünïcode\n');
    // more than one API chunk (16383 bytes) is read to the end
    const big = 'x'.repeat(99) + '\n';
    consoleOf(c[0].uuid).append(Buffer.from(big.repeat(400)));
    const long = await cli('instance', 'logs', 'talk');
    assert.equal(long.stdout.length, 'booting\nline two\nline three ünïcode\n'.length + 40_000);
    assert.equal((await cli('instance', 'rm', 'talk')).code, 0);
  });

  test('logs -f follows output that grows and ends when the instance stops', async () => {
    const c = JSON.parse(
      (await cli('instance', 'create', '-n', 'follow', '--start', '-o', 'json', 'echo:latest')).stdout,
    );
    const log = consoleOf(c[0].uuid);
    log.append(Buffer.from('first line\n'));
    const p = spawnCli(['instance', 'logs', '-f', '--interval', '100ms', 'follow'], env);
    let stderr = '';
    p.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    try {
      assert.match(await untilOutput(p, /first line\n/), /^first line\n$/);
      log.append(Buffer.from('second '));
      log.append(Buffer.from('line\n'));
      assert.equal(await untilOutput(p, /second line\n/), 'second line\n');
      const closed = once(p, 'close');
      log.append(Buffer.from('last words\n'));
      const rest = untilOutput(p, /last words\n/);
      const stop = await h.call('PUT', '/v1/instances/stop', env.UKC_TOKEN!, { name: 'follow' });
      assert.equal(stop.body.status, 'success', stop.text);
      assert.equal(await rest, 'last words\n');
      const [code] = await closed;
      assert.equal(code, 0, stderr);
    } finally {
      p.kill();
    }
    assert.equal((await cli('instance', 'rm', 'follow')).code, 0);
  });
});
