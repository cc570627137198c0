/* eslint-disable @typescript-eslint/no-explicit-any -- API replies are JSON; the assertions check their shape. */
/**
 * Bad input to the newer API's calls (docs/api.md, "Updates"): read-only
 * properties, operations a property does not take, a shrink below what the
 * files use, a soft limit above the hard one, another user's history, a
 * replacement certificate for other names. Each gets an error that names the
 * problem, and nothing changes. Volumes are real ext4 images (the volume
 * controller over Ext4Volumes), filled with debugfs as a guest would.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { statSync, writeFileSync, rmSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { startHarness, type Harness } from '../helpers/harness.js';
import { simMachines } from '../helpers/sim-machines.js';
import { replyAsserts } from '../helpers/replies.js';
import { VolumeController } from '../../src/reconcile/volumes.js';
import { Ext4Volumes } from '../../src/volumes/ext4.js';
import { runCommand } from '../../src/network/cmd.js';
import { testCa, testLeaf } from '../helpers/certs.js';

let h: Harness;
let alice: string;
let bob: string;
let images: Ext4Volumes;

const volumes = replyAsserts('volumes');
const instances = replyAsserts('instances');
const groups = replyAsserts('service_groups');
const certs = replyAsserts('certificates');

before(async () => {
  h = await startHarness({}, (s) => {
    images = new Ext4Volumes(s.paths.volumes);
    const quiet = { info: () => {}, warn: () => {}, error: () => {} };
    return [simMachines(s, { volumes: false }), new VolumeController(s, quiet, images)];
  });
  alice = await h.user('alice');
  bob = await h.user('bob');
  await h.image('app:latest');
});
after(async () => h.close());

const getInstance = async (token: string, name: string) =>
  instances.ok(await h.call('GET', '/v1/instances', token, { name }))[0];
const getVolume = async (token: string, name: string) =>
  volumes.ok(await h.call('GET', '/v1/volumes', token, { name }))[0];

describe('instance updates', () => {
  test('read-only properties and unknown operations are refused with a 400; nothing changes', async () => {
    instances.ok(await h.call('POST', '/v1/instances', alice, { image: 'app:latest', name: 'ro', memory_mb: 128 }));
    for (const prop of ['uuid', 'name', 'state', 'created_at', 'private_ip'])
      instances.bad(
        await h.call('PATCH', '/v1/instances', alice, { name: 'ro', prop, op: 'set', value: 'x' }),
        /prop.*expected one of image, args/,
      );
    instances.bad(
      await h.call('PATCH', '/v1/instances', alice, { name: 'ro', prop: 'memory_mb', op: 'frobnicate', value: 1 }),
      /op.*expected one of set, add, del/,
    );
    // per entry: an operation the property does not take, a value of the wrong type
    instances.entryError(
      await h.call('PATCH', '/v1/instances', alice, { name: 'ro', prop: 'memory_mb', op: 'add', value: 64 }),
      7,
      /memory_mb.*set/,
    );
    instances.entryError(
      await h.call('PATCH', '/v1/instances', alice, { name: 'ro', prop: 'memory_mb', op: 'set', value: 'lots' }),
      7,
      /memory_mb/,
    );
    const after = await getInstance(alice, 'ro');
    assert.equal(after.memory_mb, 128);
    assert.equal(after.name, 'ro');
  });

  test('a batch applies the entries that are valid and says which were not', async () => {
    const r = await h.call('PATCH', '/v1/instances', alice, [
      { name: 'ro', prop: 'tags', op: 'set', value: ['a', 'b'] },
      { name: 'ro', prop: 'delete_lock', op: 'set', value: 'yes' },
    ]);
    assert.equal(r.body.status, 'partial_success', r.text);
    assert.deepEqual(
      r.body.data.instances.map((e: any) => e.status),
      ['success', 'error'],
    );
    assert.deepEqual((await getInstance(alice, 'ro')).tags, ['a', 'b']);
    assert.equal((await getInstance(alice, 'ro')).delete_lock ?? false, false, 'the refused entry changed nothing');
  });

  test('history: one’s own instance by name, uuid or path; another user’s is not found', async () => {
    const mine = await getInstance(alice, 'ro');
    const byName = instances.ok(await h.call('GET', '/v1/instances/history', alice, { name: 'ro' }))[0];
    assert.equal(byName.history[0].event, 'created');
    assert.equal(byName.history[0].uuid, mine.uuid);
    const byPath = instances.ok(await h.call('GET', `/v1/instances/${mine.uuid}/history`, alice))[0];
    assert.deepEqual(byPath.history, byName.history);
    instances.entryError(await h.call('GET', '/v1/instances/history', bob, { uuid: mine.uuid }), 8);
    instances.entryError(await h.call('GET', `/v1/instances/${mine.uuid}/history`, bob), 8);
    instances.entryError(await h.call('GET', '/v1/instances/history', bob, { name: 'ro' }), 8);
  });
});

describe('volume size', () => {
  /** Puts `mb` MiB of incompressible data into a volume's image, as a guest writing files would. */
  async function fill(uuid: string, mb: number): Promise<void> {
    const src = join(h.dataDir, `fill-${uuid}`);
    writeFileSync(src, randomBytes(mb * 1024 * 1024));
    await runCommand(['debugfs', '-w', '-R', `write ${src} data.bin`, images.path(uuid)], { timeoutMs: 30_000 });
    rmSync(src);
  }

  test('a shrink below what the files use is refused; a grow resizes the file system', async () => {
    const [v] = volumes.ok(await h.call('POST', '/v1/volumes', alice, { name: 'data', size_mb: 64 }));
    await h.until(async () => (await getVolume(alice, 'data')).state === 'available');
    await fill(v.uuid, 30);
    // attached to a stopped instance: the controller measures the use while no VM has it
    instances.ok(await h.call('POST', '/v1/instances', alice, { image: 'app:latest', name: 'holder' }));
    volumes.ok(
      await h.call('PUT', '/v1/volumes/attach', alice, { name: 'data', attach_to: { name: 'holder' }, at: '/d' }),
    );
    const measured = await h.until(async () => {
      const got = await getVolume(alice, 'data');
      return got.state === 'idle' && got.free_mb !== undefined && got.free_mb < 40 ? got : undefined;
    });
    assert.ok(measured.free_mb <= 34, `free ${measured.free_mb} MB after 30 MB of files`);

    volumes.entryError(
      await h.call('PATCH', '/v1/volumes', alice, { name: 'data', prop: 'size_mb', op: 'set', value: 16 }),
      7,
      /cannot shrink to 16 MB: its file system uses \d+ MB/,
    );
    assert.equal((await getVolume(alice, 'data')).size_mb, 64, 'nothing changed');
    assert.equal(statSync(images.path(v.uuid)).size, 64 * 1024 * 1024);

    volumes.ok(await h.call('PATCH', '/v1/volumes', alice, { name: 'data', prop: 'size_mb', op: 'set', value: 96 }));
    const grown = await h.until(async () => {
      const got = await getVolume(alice, 'data');
      return got.state === 'idle' ? got : undefined;
    });
    assert.equal(grown.size_mb, 96);
    assert.equal(grown.message, undefined);
    assert.equal(statSync(images.path(v.uuid)).size, 96 * 1024 * 1024);
    assert.equal(await images.check(v.uuid), null);
    // and a shrink that keeps the files fits
    volumes.ok(await h.call('PATCH', '/v1/volumes', alice, { name: 'data', prop: 'size_mb', op: 'set', value: 48 }));
    await h.until(async () => (await getVolume(alice, 'data')).state === 'idle');
    assert.equal(statSync(images.path(v.uuid)).size, 48 * 1024 * 1024);
    assert.equal(await images.check(v.uuid), null);
  });

  test('a running instance’s volume is not resized; delete_lock refuses deletes', async () => {
    instances.ok(await h.call('PUT', '/v1/instances/start', alice, { name: 'holder' }));
    await h.until(async () => (await getInstance(alice, 'holder')).state === 'running');
    volumes.entryError(
      await h.call('PATCH', '/v1/volumes', alice, { name: 'data', prop: 'size_mb', op: 'set', value: 128 }),
      11,
      /holder.*running; stop it first|mounted/,
    );
    volumes.ok(
      await h.call('PATCH', '/v1/volumes', alice, { name: 'data', prop: 'delete_lock', op: 'set', value: true }),
    );
    instances.ok(await h.call('PUT', '/v1/instances/stop', alice, { name: 'holder' }));
    await h.until(async () => (await getInstance(alice, 'holder')).state === 'stopped');
    volumes.ok(await h.call('PUT', '/v1/volumes/detach', alice, { name: 'data' }));
    volumes.entryError(await h.call('DELETE', '/v1/volumes', alice, { name: 'data' }), 14, /delete_lock/);
    assert.equal((await getVolume(alice, 'data')).name, 'data');
  });
});

describe('service group limits', () => {
  test('a soft limit above the hard one, zero or too large is refused; nothing changes', async () => {
    groups.ok(
      await h.call('POST', '/v1/services', alice, {
        name: 'web',
        services: [{ port: 443, handlers: ['http', 'tls'] }],
        hard_limit: 10,
      }),
    );
    groups.bad(
      await h.call('POST', '/v1/services', alice, {
        name: 'web2',
        services: [{ port: 443, handlers: ['http', 'tls'] }],
        soft_limit: 20,
        hard_limit: 10,
      }),
      /soft_limit 20 would be above hard_limit 10/,
    );
    groups.entryError(
      await h.call('PATCH', '/v1/services', alice, { name: 'web', prop: 'soft_limit', op: 'set', value: 11 }),
      7,
      /soft_limit 11 would be above hard_limit 10/,
    );
    for (const value of [0, 70_000, 2.5])
      groups.entryError(
        await h.call('PATCH', '/v1/services', alice, { name: 'web', prop: 'hard_limit', op: 'set', value }),
        7,
        /hard_limit/,
      );
    const g = groups.ok(await h.call('GET', '/v1/services', alice, { name: 'web' }))[0];
    assert.equal(g.hard_limit, 10);
    assert.equal(g.soft_limit, undefined);
    groups.entryError(await h.call('GET', '/v1/services', alice, { name: 'web2' }), 8);
  });
});

describe('certificate replacement', () => {
  test('a chain for other names, or a key that is not its own, is refused and the old pair stays', async () => {
    const ca = await testCa();
    const a = await testLeaf(ca, ['pay.example.net']);
    const [c] = certs.ok(
      await h.call('POST', '/v1/certificates', alice, {
        name: 'pay',
        cn: 'pay.example.net',
        chain: a.cert,
        pkey: a.key,
      }),
    );
    const other = await testLeaf(ca, ['else.example.net']);
    certs.entryError(
      await h.call('PUT', '/v1/certificates', alice, { uuid: c.uuid, chain: other.cert, pkey: other.key }),
      30,
      /pay\.example\.net/,
    );
    const b = await testLeaf(ca, ['pay.example.net']);
    certs.entryError(
      await h.call('PUT', `/v1/certificates/${c.uuid}`, alice, { chain: b.cert, pkey: a.key }),
      7,
      /key/,
    );
    const got = certs.ok(await h.call('GET', '/v1/certificates', alice, { uuid: c.uuid }))[0];
    assert.equal(got.serial_number.toLowerCase(), a.serial.toLowerCase());
    certs.entryError(await h.call('PUT', '/v1/certificates', bob, { uuid: c.uuid, chain: b.cert, pkey: b.key }), 8);
  });
});
