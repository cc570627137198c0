/* eslint-disable @typescript-eslint/no-explicit-any -- CLI JSON output is parsed and its shape asserted. */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { runCli } from '../helpers/cli.js';
import { startHarness, type Harness } from '../helpers/harness.js';
import { simMachines } from '../helpers/sim-machines.js';

describe('unihost service, volume, scale, cert, image, quota, completion', () => {
  let h: Harness;
  let env: Record<string, string>;
  let token: string;
  const cli = (...args: string[]) => runCli(args, env);
  const json = async (...args: string[]) => {
    const r = await cli(...args, '-o', 'json');
    assert.equal(r.code, 0, r.stderr);
    return JSON.parse(r.stdout);
  };

  before(async () => {
    h = await startHarness({}, (s) => [simMachines(s)]);
    await h.image('http:latest', { args: '/server' });
    token = await h.user('bob');
    env = { UKC_METRO: h.url, UKC_TOKEN: token };
  });
  after(async () => h?.close());

  test('service create, list, get, delete; instances join with -g', async () => {
    const c = await cli('service', 'create', '-n', 'web', '-p', '443:8080', '-p', '80:443/http+redirect');
    assert.equal(c.code, 0, c.stderr);
    assert.match(c.stdout, /^name: +web$/m);
    assert.match(c.stdout, /^domains: +web\S*\.unihost\.localhost$/m);
    assert.equal((await cli('instance', 'create', '-n', 'w1', '-g', 'web', '--start', 'http:latest')).code, 0);
    const t = await cli('service', 'list');
    assert.match(t.stdout, /^NAME +FQDN +SERVICES +INSTANCES +PERSISTENT +AUTOSCALE +CREATED$/m);
    assert.match(
      t.stdout,
      /^web +web\S*\.unihost\.localhost +443:8080\/tls\+http,80:443\/http\+redirect +w1 +true +false /m,
    );
    const g = await json('service', 'get', 'web');
    assert.deepEqual(
      g.services.map((s: any) => [s.port, s.destination_port]),
      [
        [443, 8080],
        [80, 443],
      ],
    );
    const busy = await cli('service', 'delete', 'web');
    assert.equal(busy.code, 1);
    assert.match(busy.stderr, /^unihost: service group 'web' still has 1 attached instance\(s\)\n$/);
    assert.equal((await cli('instance', 'delete', 'w1')).code, 0);
    assert.equal((await cli('service', 'rm', 'web')).stdout, 'deleted web\n');
    assert.equal((await cli('service', 'list')).stdout, 'no service groups\n');
  });

  test('volume create, attach, detach, list, delete', async () => {
    const v = await json('volume', 'create', '-n', 'data', '-s', '16');
    assert.equal(v.name, 'data');
    assert.equal((await cli('instance', 'create', '-n', 'db', 'http:latest')).code, 0);
    await h.until(async () => (await json('volume', 'get', 'data')).state === 'available');
    const a = await cli('volume', 'attach', 'data', '--to', 'db', '--at', '/var/db');
    assert.equal(a.code, 0, a.stderr);
    assert.equal(a.stdout, 'attached data to db at /var/db\n');
    const inst = await json('instance', 'get', 'db');
    assert.deepEqual(inst.volumes, [{ uuid: v.uuid, name: 'data', at: '/var/db', readonly: false }]);
    const l = await cli('volume', 'list');
    assert.match(l.stdout, new RegExp(`^data +\\S+ +16 MiB +${inst.uuid} +true +`, 'm'));
    const attached = await cli('volume', 'delete', 'data');
    assert.equal(attached.code, 1);
    assert.match(attached.stderr, /still attached/);
    assert.equal((await cli('volume', 'detach', 'data')).code, 0);
    assert.equal((await cli('volume', 'delete', 'data')).stdout, 'deleted data\n');
    assert.equal((await cli('instance', 'delete', 'db')).code, 0);
    const missing = await cli('volume', 'get', 'data');
    assert.equal(missing.code, 3);
  });

  test('scale init, add-policy, get, remove-policy, reset', async () => {
    assert.equal((await cli('service', 'create', '-n', 'api', '-p', '443:8080')).code, 0);
    assert.equal((await cli('instance', 'create', '-n', 'api-1', '-g', 'api', '--start', 'http:latest')).code, 0);
    const i = await cli('scale', 'init', 'api', '--master', 'api-1', '--min', '1', '--max', '3', '--cooldown', '2s');
    assert.equal(i.code, 0, i.stderr);
    const p = await cli(
      'scale',
      'add-policy',
      'api',
      'cpu',
      '--step',
      ':200=-1',
      '--step',
      '200:800=0',
      '--step',
      '800:=2',
    );
    assert.equal(p.code, 0, p.stderr);
    const g = await json('scale', 'get', 'api');
    assert.equal(g.max_size, 3);
    assert.equal(g.cooldown_time_ms, 2000);
    assert.equal(g.master.name, 'api-1');
    assert.deepEqual(g.policies[0].steps, [
      { lower_bound: null, upper_bound: 200, adjustment: -1 },
      { lower_bound: 200, upper_bound: 800, adjustment: 0 },
      { lower_bound: 800, upper_bound: null, adjustment: 2 },
    ]);
    const t = await cli('scale', 'get', 'api');
    assert.match(
      t.stdout,
      /^POLICY +METRIC +ADJUSTMENT +STEP +CHANGE\ncpu +cpu +change +\[, 200\) +-1\n +\[200, 800\) +0\n +\[800, \) +2$/m,
    );
    const bad = await cli('scale', 'add-policy', 'api', 'x', '--step', '1-2');
    assert.equal(bad.code, 2);
    assert.equal((await cli('scale', 'remove-policy', 'api', 'cpu')).code, 0);
    assert.deepEqual((await json('scale', 'get', 'api')).policies, []);
    assert.equal((await cli('scale', 'reset', 'api')).code, 0);
    assert.match((await cli('scale', 'get', 'api')).stdout, /autoscale is not configured for api/);
  });

  test('cert list and get show the certificate of a custom domain; delete is refused while used', async () => {
    assert.equal((await cli('service', 'create', '-n', 'site', '-p', '443:80', '-d', 'www.example.com.')).code, 0);
    const l = await cli('cert', 'list');
    assert.equal(l.code, 0, l.stderr);
    assert.match(
      l.stdout,
      /^NAME +COMMON NAME +STATE +VALID UNTIL +SERVICES +CREATED\n\S+ +www\.example\.com +\w+ +.*site/m,
    );
    const [c] = await json('cert', 'list');
    assert.equal(c.common_name, 'www.example.com');
    const used = await cli('cert', 'delete', c.name);
    assert.equal(used.code, 1);
    assert.match(used.stderr, /still used by domain\(s\) 'www\.example\.com'/);
    assert.equal((await cli('cert', 'get', 'nope')).code, 3);
  });

  test('image list (API) and quota', async () => {
    const t = await cli('image', 'list');
    assert.equal(t.code, 0, t.stderr);
    assert.match(
      t.stdout,
      /^TAGS +DIGEST +SIZE +INITRD +ARGS\nhttp:latest +sha256:[0-9a-f]{12} +1234 B +no +\/server\n$/,
    );
    const q = await json('quota');
    assert.equal(typeof q.hard.live_instances, 'number');
    const text = await cli('quota');
    assert.match(text.stdout, /^RESOURCE +USED +LIMIT$/m);
    assert.match(text.stdout, /^instances +\d+ +\d+$/m);
    assert.match(text.stdout, /^max_memory_mb +\d+$/m);
  });

  test('profiles: the current one, --profile, and flags over both', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'unihost-profile-'));
    try {
      const file = join(dir, 'config.json');
      writeFileSync(
        file,
        JSON.stringify({
          current: 'local',
          profiles: { local: { metro: `${h.url}/v1`, token }, broken: { metro: h.url, token: 'nope' } },
        }),
      );
      const p = { UNIHOST_CLIENT_CONFIG: file };
      assert.equal((await runCli(['quota', '-o', 'json'], p)).code, 0);
      assert.equal((await runCli(['quota', '--profile', 'broken'], p)).code, 4);
      // the explicit profile wins over the environment, a flag over the profile
      assert.equal((await runCli(['quota', '--profile', 'broken'], { ...p, UKC_TOKEN: token })).code, 4);
      assert.equal((await runCli(['quota', '--profile', 'broken', '--token', token], p)).code, 0);
      const none = await runCli(['quota', '--profile', 'nope'], p);
      assert.equal(none.code, 2);
      assert.match(none.stderr, /no profile 'nope' in /);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('completion bash completes nouns, verbs and options', async () => {
    const r = await cli('completion', 'bash');
    assert.equal(r.code, 0, r.stderr);
    const dir = mkdtempSync(join(tmpdir(), 'unihost-comp-'));
    try {
      const script = join(dir, 'c.sh');
      writeFileSync(script, r.stdout);
      assert.ok(statSync(script).size > 0);
      const complete = (words: string[]) =>
        execFileSync('bash', [
          '-c',
          `source ${script}; COMP_WORDS=(${words.join(' ')}); COMP_CWORD=${words.length - 1}; _unihost; echo "\${COMPREPLY[*]}"`,
        ])
          .toString()
          .trim();
      assert.equal(complete(['unihost', 'vol']), 'volume volumes');
      assert.equal(complete(['unihost', 'instance', 'lo']), 'logs');
      assert.equal(complete(['unihost', 'instance', 'logs', '--fo']), '--follow');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    assert.match((await cli('completion', 'zsh')).stdout, /bashcompinit/);
    assert.equal((await cli('completion', 'fish')).code, 2);
  });
});
