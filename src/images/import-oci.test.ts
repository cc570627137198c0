import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { imageBootFiles } from './boot-files.js';
import { importOciLayout } from './import-oci.js';
import { ImageLayout } from './layout.js';
import type { Index, Manifest } from './oci.js';
import { elf64Kernel, kraftkitLayout, multibootKernel, tarLayout } from './testing/fixtures.js';

const blobFile = (dir: string, digest: string) => join(dir, 'blobs', 'sha256', digest.slice(7));

describe('importing OCI layouts (kraftkit unikernel packages)', () => {
  let dir: string;
  let layout: ImageLayout;
  const qemuKernel = multibootKernel('qemu build');
  const fcKernel = elf64Kernel(true, 'fc build');
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'uh-oci-'));
    layout = await new ImageLayout(join(dir, 'store')).init();
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  const platforms = () => [
    { os: 'fc', architecture: 'x86_64', kernel: fcKernel },
    { os: 'qemu', architecture: 'arm64', kernel: Buffer.from('arm kernel') },
    {
      os: 'qemu',
      architecture: 'x86_64',
      kernel: qemuKernel,
      initrd: Buffer.from('cpio!'),
      cmd: ['/nginx', '-g', 'daemon off;'],
      env: ['PATH=/bin', 'X=a=b'],
    },
  ];

  test('picks the x86_64 qemu manifest of a directory layout and keeps its digest', async () => {
    const src = join(dir, 'kk1');
    const { digests } = await kraftkitLayout(src, platforms());
    const r = await importOciLayout(layout, src);
    assert.equal(r.digest, digests[2]);
    assert.deepEqual(r.platform, { architecture: 'x86_64', os: 'qemu', 'os.version': '0.17.0' });
    for (const n of readdirSync(join(src, 'blobs', 'sha256'))) {
      // every blob of the chosen image is in the store; the other platforms' are not
      const m = JSON.parse(readFileSync(blobFile(src, digests[2]!), 'utf8')) as Manifest;
      const wanted = [digests[2], m.config.digest, ...m.layers.map((l) => l.digest)].includes(`sha256:${n}`);
      assert.equal(await layout.hasBlob(`sha256:${n}`), wanted, n);
    }
    const b = await imageBootFiles({ images: layout.root }, r.digest);
    assert.deepEqual(readFileSync(b.kernel), qemuKernel);
    assert.equal(readFileSync(b.initrd!, 'utf8'), 'cpio!');
    assert.deepEqual(b.args, ['/nginx', '-g', 'daemon off;']);
    assert.deepEqual(b.env, { PATH: '/bin', X: 'a=b' });
    assert.equal(b.machine, 'pc', 'detected from the multiboot header (no unihost annotation)');
    assert.equal(b.kernelArgs, '');
    const index = JSON.parse(readFileSync(join(layout.root, 'index.json'), 'utf8')) as Index;
    assert.ok(index.manifests.some((m) => m.digest === r.digest));
  });

  test('kraftcloud is preferred over qemu; fc is taken when it is the only x86_64 one', async () => {
    const a = join(dir, 'kk2');
    const { digests } = await kraftkitLayout(a, [
      ...platforms(),
      { os: 'kraftcloud', architecture: 'x86_64', kernel: multibootKernel('kc') },
    ]);
    assert.equal((await importOciLayout(layout, a)).digest, digests[3]);
    const b = join(dir, 'kk3');
    const fcOnly = await kraftkitLayout(b, [platforms()[0]!, platforms()[1]!]);
    const r = await importOciLayout(layout, b);
    assert.equal(r.digest, fcOnly.digests[0]);
    assert.equal((await imageBootFiles({ images: layout.root }, r.digest)).machine, 'microvm');
  });

  test('an index nested in index.json (multi-platform copy) is followed', async () => {
    const src = join(dir, 'kk10');
    const { digests } = await kraftkitLayout(src, platforms());
    const inner = readFileSync(join(src, 'index.json'));
    const d = `sha256:${createHash('sha256').update(inner).digest('hex')}`;
    writeFileSync(blobFile(src, d), inner);
    const ref = { 'org.opencontainers.image.ref.name': 'latest' };
    const outer = {
      schemaVersion: 2,
      manifests: [
        { mediaType: 'application/vnd.oci.image.index.v1+json', digest: d, size: inner.length, annotations: ref },
      ],
    };
    writeFileSync(join(src, 'index.json'), JSON.stringify(outer));
    assert.equal((await importOciLayout(layout, src)).digest, digests[2]);
  });

  test('a tarball (plain or gzip, gzip layers) imports the same image', async () => {
    const src = join(dir, 'kk4');
    const { digests } = await kraftkitLayout(src, [{ ...platforms()[2]!, gzip: true }]);
    for (const gz of [false, true]) {
      const file = join(dir, `layout${gz ? '.tgz' : '.tar'}`);
      await tarLayout(src, file, gz);
      const r = await importOciLayout(layout, file);
      assert.equal(r.digest, digests[0]);
      assert.deepEqual(readFileSync((await imageBootFiles({ images: layout.root }, r.digest)).kernel), qemuKernel);
    }
    assert.deepEqual(readdirSync(layout.tmp), [], 'the unpacked tarball is removed');
  });

  test('unihost annotations are honoured', async () => {
    const src = join(dir, 'kk5');
    const extra = {
      'org.unihost.machine': 'microvm',
      'org.unihost.kernel.args': 'a=1',
      'org.unihost.min-memory-mb': '32',
    };
    const { digests } = await kraftkitLayout(src, [{ ...platforms()[2]!, extraAnnotations: extra }]);
    const b = await imageBootFiles({ images: layout.root }, (await importOciLayout(layout, src)).digest);
    assert.equal(digests.length, 1);
    assert.deepEqual([b.machine, b.kernelArgs, b.minMemoryMb], ['microvm', 'a=1', 32]);
  });

  test('a corrupt blob is rejected and not stored', async () => {
    const src = join(dir, 'kk6');
    const { digests } = await kraftkitLayout(src, [{ ...platforms()[2]!, kernel: multibootKernel('corrupt me') }]);
    const m = JSON.parse(readFileSync(blobFile(src, digests[0]!), 'utf8')) as Manifest;
    const layer = blobFile(src, m.layers[0]!.digest);
    const bytes = readFileSync(layer);
    bytes[600] = bytes[600]! ^ 0xff;
    writeFileSync(layer, bytes);
    await assert.rejects(importOciLayout(layout, src), (e: Error & { code?: string }) => {
      assert.equal(e.code, 'UH_INVALID');
      assert.match(
        e.message,
        new RegExp(`corrupt blob ${m.layers[0]!.digest}: its content \\(\\d+ bytes\\) hashes to sha256:`),
      );
      return true;
    });
    assert.equal(await layout.hasBlob(m.layers[0]!.digest), false);
    assert.equal(await layout.hasBlob(digests[0]!), false, 'the manifest is not stored either');
  });

  test('a manifest whose bytes do not match its index descriptor is rejected', async () => {
    const src = join(dir, 'kk7');
    const { digests } = await kraftkitLayout(src, [platforms()[2]!]);
    writeFileSync(
      blobFile(src, digests[0]!),
      readFileSync(blobFile(src, digests[0]!), 'utf8').replace('nginx', 'evil!'),
    );
    await assert.rejects(importOciLayout(layout, src), /corrupt blob sha256:/);
  });

  test('layouts without a usable image are refused with the reason', async () => {
    const arm = join(dir, 'kk8');
    await kraftkitLayout(arm, [platforms()[1]!]);
    await assert.rejects(
      importOciLayout(layout, arm),
      /no x86_64 image for kraftcloud, qemu, fc \(found: qemu\/arm64\)/,
    );
    const empty = join(dir, 'empty');
    mkdirSync(empty);
    await assert.rejects(importOciLayout(layout, empty), /is not an OCI image layout: it has no oci-layout file/);
    await assert.rejects(importOciLayout(layout, join(dir, 'nope')), /nope does not exist/);
    const notTar = join(dir, 'not.tar');
    writeFileSync(notTar, 'hello');
    await assert.rejects(importOciLayout(layout, notTar), /not\.tar/);
    const noKernel = join(dir, 'kk9');
    const { digests } = await kraftkitLayout(noKernel, [platforms()[2]!]);
    // a layout whose layer holds something else than /unikraft/bin/kernel
    const m = JSON.parse(readFileSync(blobFile(noKernel, digests[0]!), 'utf8')) as Manifest;
    m.layers = m.layers.slice(1);
    const buf = Buffer.from(JSON.stringify(m));
    const d = `sha256:${createHash('sha256').update(buf).digest('hex')}`;
    writeFileSync(blobFile(noKernel, d), buf);
    const idx = JSON.parse(readFileSync(join(noKernel, 'index.json'), 'utf8')) as Index;
    idx.manifests[0] = { ...idx.manifests[0]!, digest: d, size: buf.length };
    writeFileSync(join(noKernel, 'index.json'), JSON.stringify(idx));
    const r = await importOciLayout(layout, noKernel);
    await assert.rejects(
      imageBootFiles({ images: layout.root }, r.digest),
      /has no \/unikraft\/bin\/kernel in its layers/,
    );
  });
});
