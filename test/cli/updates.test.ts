/**
 * The CLI's commands for the newer API: instance update and history,
 * service update, volume resize and clone, cert replace. Volumes are real
 * ext4 images (the volume controller over Ext4Volumes).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { runCli } from '../helpers/cli.js';
import { startHarness, type Harness } from '../helpers/harness.js';
import { simMachines } from '../helpers/sim-machines.js';
import { testCa, testLeaf } from '../helpers/certs.js';
import { VolumeController } from '../../src/reconcile/volumes.js';
import { Ext4Volumes } from '../../src/volumes/ext4.js';

describe('unihost instance update/history, service update, volume resize/clone, cert replace', () => {
  let h: Harness;
  let env: Record<string, string>;
  let images: Ext4Volumes;
  let dir: string;
  const cli = (...args: string[]) => runCli(args, env);
  const json = async (...args: string[]) => {
    const r = await cli(...args, '-o', 'json');
    assert.equal(r.code, 0, r.stderr);
    return JSON.parse(r.stdout);
  };

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'uh-cli-upd-'));
    h = await startHarness({}, (s) => {
      images = new Ext4Volumes(s.paths.volumes);
      const quiet = { info: () => {}, warn: () => {}, error: () => {} };
      return [simMachines(s, { volumes: false }), new VolumeController(s, quiet, images)];
    });
    await h.image('http:latest');
    env = { UKC_METRO: h.url, UKC_TOKEN: await h.user('carol') };
  });
  after(async () => {
    await h?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('instance update sets, adds and removes; a bad change is a usage error; history shows the states', async () => {
    assert.equal((await cli('instance', 'create', '-n', 'app', 'http:latest')).code, 0);
    const u = await cli('instance', 'update', 'app', 'memory_mb=256', 'tags+=blue', 'env={"MODE":"fast"}');
    assert.equal(u.code, 0, u.stderr);
    assert.match(u.stdout, /^PROPERTY +CHANGE$/m);
    assert.match(u.stdout, /^memory_mb +memory_mb set to 256/m);
    const got = await json('instance', 'get', 'app');
    assert.equal(got.memory_mb, 256);
    assert.deepEqual(got.tags, ['blue']);
    assert.deepEqual(got.env, { MODE: 'fast' });
    assert.equal((await cli('instance', 'update', 'app', 'tags-=blue')).code, 0);
    assert.deepEqual((await json('instance', 'get', 'app')).tags ?? [], []);

    const usage = await cli('instance', 'update', 'app', 'memory_mb');
    assert.equal(usage.code, 2);
    assert.match(usage.stderr, /'memory_mb' is not PROP=VALUE/);
    const refused = await cli('instance', 'update', 'app', 'vcpus=4');
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /vcpus.*one vCPU/);

    assert.equal((await cli('instance', 'start', 'app')).code, 0);
    assert.equal((await cli('instance', 'stop', 'app')).code, 0);
    const hist = await cli('instance', 'history', 'app');
    assert.equal(hist.code, 0, hist.stderr);
    assert.match(hist.stdout, /^TIME +EVENT +FROM +TO +STOP$/m);
    assert.match(hist.stdout, / created +stopped *$/m);
    assert.match(hist.stdout, / state +stopping +stopped +reason 15, exit code 0/m);
    const j = await json('instance', 'history', 'app');
    assert.equal(j.history[0].event, 'created');
  });

  test('service update: limits per instance; soft above hard refused', async () => {
    assert.equal((await cli('service', 'create', '-n', 'front', '-p', '443:8080')).code, 0);
    const u = await cli('service', 'update', 'front', 'soft_limit=5', 'hard_limit=20');
    assert.equal(u.code, 0, u.stderr);
    const g = await json('service', 'get', 'front');
    assert.equal(g.soft_limit, 5);
    assert.equal(g.hard_limit, 20);
    const bad = await cli('service', 'update', 'front', 'soft_limit=50');
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /soft_limit 50 would be above hard_limit 20/);
  });

  test('volume resize grows the image; clone copies it; errors name the problem', async () => {
    assert.equal((await cli('volume', 'create', '-n', 'vol', '-s', '32')).code, 0);
    // each poll runs the CLI (a Node start): on a loaded machine a few seconds each
    await h.until(async () => (await json('volume', 'get', 'vol')).state === 'available', 30_000);
    const r = await cli('volume', 'resize', 'vol', '-s', '64');
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /size_mb set to 64/);
    const v = await h.until(async () => {
      const x = await json('volume', 'get', 'vol');
      return x.state === 'available' ? x : undefined;
    }, 30_000);
    assert.equal(v.size_mb, 64);
    assert.equal(statSync(images.path(v.uuid)).size, 64 * 1024 * 1024);
    assert.equal((await cli('volume', 'resize', 'vol', '-s', 'big')).code, 2);

    const c = await cli('volume', 'clone', 'vol', '-n', 'vol-copy');
    assert.equal(c.code, 0, c.stderr);
    const copy = await h.until(async () => {
      const x = await json('volume', 'get', 'vol-copy');
      return x.state === 'available' ? x : undefined;
    }, 30_000);
    assert.equal(copy.size_mb, 64);
    assert.equal(await images.check(copy.uuid), null);
    assert.equal((await cli('volume', 'clone', 'nope')).code, 3);
  });

  test('cert replace reads the PEM files; a missing file is a usage error', async () => {
    const ca = await testCa();
    const a = await testLeaf(ca, ['cli.example.com'], { serial: '4001' });
    const r = await h.call('POST', '/v1/certificates', env.UKC_TOKEN!, {
      name: 'clicert',
      cn: 'cli.example.com',
      chain: a.cert,
      pkey: a.key,
    });
    assert.equal(r.body.status, 'success', r.text);
    const b = await testLeaf(ca, ['cli.example.com'], { serial: '4002' });
    writeFileSync(join(dir, 'chain.pem'), b.cert);
    writeFileSync(join(dir, 'key.pem'), b.key);
    const ok = await cli(
      'cert',
      'replace',
      'clicert',
      '--chain',
      join(dir, 'chain.pem'),
      '--key',
      join(dir, 'key.pem'),
    );
    assert.equal(ok.code, 0, ok.stderr);
    assert.equal((await json('cert', 'get', 'clicert')).serial_number.toLowerCase(), '4002');
    const missing = await cli(
      'cert',
      'replace',
      'clicert',
      '--chain',
      join(dir, 'nope.pem'),
      '--key',
      join(dir, 'key.pem'),
    );
    assert.equal(missing.code, 2);
    assert.match(missing.stderr, /--chain .*nope\.pem: no such file/);
  });
});
