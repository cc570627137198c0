import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import { imageBootFiles } from '../../src/images/boot-files.js';
import { elf64Kernel, kraftkitLayout, multibootKernel, tarLayout } from '../../src/images/testing/fixtures.js';
import { startHarness, type Harness } from '../helpers/harness.js';
import { simMachines } from '../helpers/sim-machines.js';

const run = promisify(execFile);
const CLI = resolve(import.meta.dirname, '../../src/cli/index.ts');

/** Runs the real `unihost` CLI (through tsx) in a child process. */
async function cli(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const code = `const { main } = await import(${JSON.stringify(CLI)}); await main(['node', 'unihost', ...${JSON.stringify(args)}]);`;
  try {
    const r = await run(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code], {
      cwd: resolve(import.meta.dirname, '../..'),
    });
    return { code: 0, ...r };
  } catch (e) {
    const x = e as { code: number; stdout: string; stderr: string };
    return { code: x.code, stdout: x.stdout, stderr: x.stderr };
  }
}

const ENTRY_KEYS = ['args', 'digest', 'initrd', 'kernel_args', 'size_in_bytes', 'status', 'tags'];

describe('images API over real imports', () => {
  let h: Harness;
  let alice: string;
  let bob: string;
  let files: string;
  const d: Record<string, string> = {};
  const kernel = multibootKernel('unikraft nginx');
  const vmlinux = elf64Kernel(true, 'debian vmlinux');
  const initrd = Buffer.from('070701 initrd contents');

  const list = async (token: string, query = '', body?: unknown) => {
    const r = await h.call('GET', `/v1/images/list${query}`, token, body);
    assert.equal(r.status, 200, r.text);
    return r.body.data.images as Record<string, unknown>[];
  };
  const digests = (entries: Record<string, unknown>[]) => entries.map((e) => e.digest).sort();

  before(async () => {
    h = await startHarness({}, (s) => [simMachines(s)]);
    alice = await h.user('alice');
    bob = await h.user('bob');
    files = mkdtempSync(join(tmpdir(), 'uh-img-api-'));
    writeFileSync(join(files, 'kernel'), kernel);
    writeFileSync(join(files, 'vmlinux'), vmlinux);
    writeFileSync(join(files, 'initrd'), initrd);
    const img = h.daemon.services.images;
    d.base = (
      await img.importKernel('base:1', {
        kernel: join(files, 'vmlinux'),
        initrd: join(files, 'initrd'),
        args: ['-c', 'a b'],
        kernelArgs: 'console=ttyS0',
      })
    ).digest;
    d.aliceApp = (
      await img.importKernel('alice/app:v1', { kernel: join(files, 'kernel'), args: ['serve'], minMemoryMb: 32 })
    ).digest;
    d.aliceTool = (
      await img.importKernel('alice/tool:latest', { kernel: join(files, 'kernel'), args: ['tool'] })
    ).digest;
    d.bobApp = (await img.importKernel('bob/app:v1', { kernel: join(files, 'kernel'), args: ['serve'] })).digest;
  });
  after(async () => {
    await h.close();
    rmSync(files, { recursive: true, force: true });
  });

  test('a user lists official images and their own, with the spec fields', async () => {
    const entries = await list(alice);
    assert.deepEqual(digests(entries), [d.base, d.aliceApp, d.aliceTool].sort());
    const base = entries.find((e) => e.digest === d.base)!;
    assert.deepEqual(Object.keys(base).sort(), ENTRY_KEYS);
    assert.deepEqual(base, {
      status: 'success',
      digest: d.base,
      tags: ['base:1'],
      initrd: true,
      size_in_bytes: vmlinux.length + initrd.length,
      args: "-c 'a b'",
      kernel_args: 'console=ttyS0',
    });
    const app = entries.find((e) => e.digest === d.aliceApp)!;
    assert.deepEqual(
      [app.tags, app.initrd, app.size_in_bytes, app.args, app.kernel_args],
      [['alice/app:v1'], false, kernel.length, 'serve', ''],
    );
    assert.notEqual(d.aliceApp, d.bobApp, "same files under another user's name are another image");
    assert.deepEqual(digests(await list(bob)), [d.base, d.bobApp].sort(), "bob never sees alice's images");
  });

  test('GET /v1/images is the same list', async () => {
    const r = await h.call('GET', '/v1/images', alice);
    assert.equal(r.status, 200);
    assert.deepEqual(digests(r.body.data.images), [d.base, d.aliceApp, d.aliceTool].sort());
    const q = await h.call('GET', '/v1/images?namespace=official', bob);
    assert.deepEqual(digests(q.body.data.images), [d.base]);
  });

  test('namespace filter: official, own account, account/app, another account', async () => {
    assert.deepEqual(digests(await list(alice, '?namespace=official')), [d.base]);
    assert.deepEqual(digests(await list(alice, '?namespace=alice')), [d.aliceApp, d.aliceTool].sort());
    assert.deepEqual(digests(await list(alice, '?namespace=alice/app')), [d.aliceApp]);
    assert.deepEqual(digests(await list(alice, '?namespace=alice/nothing')), []);
    assert.deepEqual(digests(await list(alice, '?namespace=bob')), [], "another account's namespace shows nothing");
    assert.deepEqual(digests(await list(alice, '?namespace=bob/app')), []);
    assert.deepEqual(digests(await list(alice, '?namespace=Alice/App')), [d.aliceApp], 'names are lower case');
    const bad = await h.call('GET', '/v1/images/list?namespace=alice/app/x', alice);
    assert.equal(bad.status, 400, bad.text);
    assert.match(bad.body.message, /namespace/);
  });

  test('digest and tag filters (body), combined with namespace', async () => {
    assert.deepEqual(digests(await list(alice, '', { digest: d.aliceTool })), [d.aliceTool]);
    assert.deepEqual(digests(await list(alice, '', { digest: d.bobApp })), [], "another user's digest is not listed");
    assert.deepEqual(digests(await list(alice, '', { tag: 'alice/app:v1' })), [d.aliceApp]);
    assert.deepEqual(digests(await list(alice, '', { tag: 'base:1' })), [d.base]);
    assert.deepEqual(digests(await list(bob, '', { tag: 'v1' })), [d.bobApp]);
    assert.deepEqual(
      digests(await list(alice, '', { tag: 'alice/tool' })),
      [d.aliceTool],
      'a reference defaults to latest',
    );
    assert.deepEqual(digests(await list(alice, '', { tag: 'bob/app:v1' })), []);
    assert.deepEqual(digests(await list(alice, '?tag=base:1')), [d.base], 'GET parameters also come in the query');
    assert.deepEqual(
      digests(await list(alice, '?namespace=official', { tag: 'alice/app:v1' })),
      [],
      'all filters must match',
    );
    assert.deepEqual(digests(await list(alice, '?namespace=alice', { digest: d.aliceApp, tag: 'v1' })), [d.aliceApp]);
  });

  test("creating an instance from another user's image is a per-entry not found", async () => {
    for (const image of ['alice/app:v1', d.aliceApp!, `alice/app@${d.aliceApp}`]) {
      const r = await h.call('POST', '/v1/instances', bob, { image });
      assert.equal(r.body.status, 'error', r.text);
      const e = r.body.data.instances[0];
      assert.equal(e.status, 'error');
      assert.equal(e.error, 8, `${image}: ${r.text}`);
      assert.match(e.message, /No image/);
    }
    const ok = await h.call('POST', '/v1/instances', bob, { image: 'base:1' });
    assert.equal(ok.body.status, 'success', ok.text);
  });

  test('an instance stays pinned to its digest when the tag moves; the old image stays bootable', async () => {
    const created = await h.call('POST', '/v1/instances', alice, { image: 'alice/app:v1', memory_mb: 64 });
    assert.equal(created.body.status, 'success', created.text);
    const uuid = created.body.data.instances[0].uuid;
    const moved = await h.daemon.services.images.importKernel('alice/app:v1', {
      kernel: join(files, 'vmlinux'),
      args: ['serve', '--v2'],
    });
    assert.equal(moved.previous, d.aliceApp);
    assert.notEqual(moved.digest, d.aliceApp);

    const got = await h.call('GET', `/v1/instances/${uuid}`, alice);
    assert.equal(got.body.data.instances[0].image, d.aliceApp);
    const fresh = await h.call('POST', '/v1/instances', alice, { image: 'alice/app:v1' });
    const freshGot = await h.call('GET', `/v1/instances/${fresh.body.data.instances[0].uuid}`, alice);
    assert.equal(freshGot.body.data.instances[0].image, moved.digest);

    const all = await list(alice, '?namespace=alice/app');
    assert.deepEqual(digests(all), [moved.digest], 'the untagged image no longer matches an app');
    const untagged = (await list(alice)).find((e) => e.digest === d.aliceApp)!;
    assert.deepEqual(untagged.tags, [], 'the old image is listed untagged');
    assert.ok(!digests(await list(alice, '?tagged=true')).includes(d.aliceApp!));
    assert.ok(digests(await list(alice, '?tagged=true')).includes(moved.digest));
    // nothing is garbage-collected: the pinned instance can still boot its image
    const boot = await imageBootFiles(h.daemon.services.paths, d.aliceApp!);
    assert.deepEqual([boot.machine, boot.args, boot.minMemoryMb], ['pc', ['serve'], 32]);
  });

  test('the image minimum memory is enforced at instance creation', async () => {
    const r = await h.call('POST', '/v1/instances', alice, { image: 'alice/tool:latest', memory_mb: 16 });
    assert.equal(r.body.status, 'success', 'tool has no minimum');
    const v = await h.daemon.services.images.importKernel('alice/big:v1', {
      kernel: join(files, 'kernel'),
      minMemoryMb: 512,
    });
    const small = await h.call('POST', '/v1/instances', alice, { image: 'alice/big:v1', memory_mb: 128 });
    assert.equal(small.body.data.instances[0].error, 20, small.text);
    assert.ok(v.digest);
  });

  test('imports into a missing account or by digest are refused', async () => {
    const img = h.daemon.services.images;
    await assert.rejects(img.importKernel('carol/app:v1', { kernel: join(files, 'kernel') }), /no user 'carol'/);
    await assert.rejects(img.importKernel(`app@${d.base}`, { kernel: join(files, 'kernel') }), /needs a tag reference/);
    assert.deepEqual(await list(alice, '?namespace=carol'), []);
  });

  test('the CLI imports a kraftkit OCI tarball into the running daemon and lists it', async () => {
    const layoutDir = join(files, 'kk');
    const { digests: kk } = await kraftkitLayout(layoutDir, [
      { os: 'fc', architecture: 'x86_64', kernel: vmlinux },
      { os: 'qemu', architecture: 'x86_64', kernel, cmd: ['/nginx'], env: ['A=1'] },
    ]);
    const tarball = join(files, 'nginx.tar');
    await tarLayout(layoutDir, tarball);
    const r = await cli(
      'image',
      '--data-dir',
      h.dataDir,
      '--store',
      h.storeUrl,
      'import',
      '--oci',
      tarball,
      'alice/nginx:1.25',
    );
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, new RegExp(`imported alice/nginx:1\\.25\\n  digest +${kk[1]}`));
    assert.match(r.stdout, /machine +pc/);
    const entries = await list(alice, '?namespace=alice/nginx');
    assert.deepEqual(
      entries.map((e) => [e.digest, e.tags, e.args]),
      [[kk[1], ['alice/nginx:1.25'], '/nginx']],
    );
    assert.deepEqual(await list(bob, '', { digest: kk[1] }), []);
    const created = await h.call('POST', '/v1/instances', alice, { image: 'alice/nginx:1.25' });
    assert.equal(created.body.status, 'success', created.text);

    const ls = await cli('image', '--data-dir', h.dataDir, '--store', h.storeUrl, 'list', '--namespace', 'alice');
    assert.equal(ls.code, 0, ls.stderr);
    assert.match(ls.stdout, new RegExp(`alice/nginx:1\\.25 +${kk[1]}`));
    assert.doesNotMatch(ls.stdout, /bob\/app/);

    const bad = await cli(
      'image',
      '--data-dir',
      h.dataDir,
      '--store',
      h.storeUrl,
      'import',
      '--kernel',
      join(files, 'initrd'),
      'alice/x:1',
    );
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /cannot tell how to boot kernel .*initrd.*give the machine type explicitly/);
    const forced = await cli(
      'image',
      '--data-dir',
      h.dataDir,
      '--store',
      h.storeUrl,
      'import',
      '--kernel',
      join(files, 'kernel'),
      '--machine',
      'microvm',
      '--env',
      'K=v',
      'alice/x:1',
    );
    assert.equal(forced.code, 0, forced.stderr);
    assert.match(forced.stdout, /machine +microvm\n.*env +K=v/s);
  });
});
