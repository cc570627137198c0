import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import {
  chmodSync,
  existsSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  statSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { list } from 'tar';
import { decideMachine, imageBootFiles, readChoice, readImage } from './boot-files.js';
import { buildKernelImage } from './build.js';
import { ImageLayout } from './layout.js';
import type { Index, Manifest } from './oci.js';
import { elf64Kernel, multibootKernel } from './testing/fixtures.js';

const sha = (b: Buffer) => `sha256:${createHash('sha256').update(b).digest('hex')}`;

describe('image layout: packing kernels', () => {
  let dir: string;
  let layout: ImageLayout;
  let kernel: string;
  let initrd: string;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'uh-layout-'));
    layout = await new ImageLayout(join(dir, 'images')).init();
    kernel = join(dir, 'vmlinux');
    initrd = join(dir, 'initrd.cpio');
    writeFileSync(kernel, elf64Kernel(true));
    writeFileSync(initrd, Buffer.from('070701 fake cpio archive'));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  test('creates a valid OCI layout', () => {
    assert.deepEqual(JSON.parse(readFileSync(join(layout.root, 'oci-layout'), 'utf8')), {
      imageLayoutVersion: '1.0.0',
    });
    assert.equal(JSON.parse(readFileSync(join(layout.root, 'index.json'), 'utf8')).schemaVersion, 2);
  });

  test('the same files give the same digest, whatever their mtime and mode', async () => {
    const spec = { name: 'app', kernel, initrd, args: ['-c', 'a b'], kernelArgs: 'console=ttyS0', env: { A: '1' } };
    const a = await buildKernelImage(layout, spec);
    utimesSync(kernel, new Date('2001-01-01'), new Date('2001-01-01'));
    chmodSync(kernel, 0o700);
    const b = await buildKernelImage(layout, spec);
    assert.equal(a.digest, b.digest);
    const c = await buildKernelImage(layout, { ...spec, args: ['-c', 'a', 'b'] });
    assert.notEqual(c.digest, a.digest, 'different default args make a different image');
    const d = await buildKernelImage(layout, { ...spec, name: 'alice/app' });
    assert.notEqual(d.digest, a.digest, 'the repository name is part of the image');
    const index = JSON.parse(readFileSync(join(layout.root, 'index.json'), 'utf8')) as Index;
    assert.equal(index.manifests.filter((m) => m.digest === a.digest).length, 1, 'listed once');
    assert.deepEqual(index.manifests.find((m) => m.digest === a.digest)!.platform, {
      architecture: 'x86_64',
      os: 'qemu',
    });
  });

  test('every blob is stored under the sha256 of its content', () => {
    const names = readdirSync(layout.blobs);
    assert.ok(names.length >= 5);
    for (const n of names) assert.equal(sha(readFileSync(join(layout.blobs, n))), `sha256:${n}`);
    assert.deepEqual(readdirSync(layout.tmp), [], 'no temp files left');
  });

  test("manifest, config and layers follow kraftkit's layout", async () => {
    const { digest, machine } = await buildKernelImage(layout, {
      name: 'alice/web',
      kernel,
      initrd,
      args: ['/bin/httpd', '-p', '80'],
      kernelArgs: 'console=ttyS0 quiet',
      env: { PORT: '80', MODE: 'a b' },
      minMemoryMb: 64,
      kernelVersion: '6.1.0',
    });
    assert.equal(machine, 'microvm');
    const m = JSON.parse((await layout.readBlob(digest)).toString()) as Manifest;
    assert.equal(m.mediaType, 'application/vnd.oci.image.manifest.v1+json');
    assert.deepEqual(m.annotations, {
      'org.unihost.kernel.args': 'console=ttyS0 quiet',
      'org.unihost.machine': 'microvm',
      'org.unihost.min-memory-mb': '64',
      'org.unikraft.image.name': 'alice/web',
      'org.unikraft.kernel.version': '6.1.0',
    });
    assert.deepEqual(m.layers[0]!.annotations, { 'org.unikraft.kernel.image': '/unikraft/bin/kernel' });
    assert.deepEqual(m.layers[1]!.annotations, { 'org.unikraft.kernel.initrd': '/unikraft/bin/initrd' });
    const cfg = JSON.parse((await layout.readBlob(m.config.digest)).toString());
    assert.deepEqual(cfg.config, { Cmd: ['/bin/httpd', '-p', '80'], Env: ['PORT=80', 'MODE=a b'] });
    assert.deepEqual(
      cfg.rootfs.diff_ids,
      m.layers.map((l) => l.digest),
    );
    assert.equal(cfg.architecture, 'x86_64');

    const entries: { path: string; mode?: number; uid?: number; gid?: number; mtime?: Date; size: number }[] = [];
    await list({
      file: layout.blobPath(m.layers[0]!.digest),
      onReadEntry: (e) => entries.push({ ...e.header, path: e.path, size: e.size }),
    });
    assert.equal(entries.length, 1);
    assert.equal(entries[0]!.path, 'unikraft/bin/kernel');
    assert.equal(entries[0]!.size, statSync(kernel).size);
    assert.equal(entries[0]!.uid, 0);
    assert.equal(entries[0]!.gid, 0);
    assert.equal(entries[0]!.mode, 0o644);
    assert.equal(entries[0]!.mtime!.getTime(), 0);

    const info = await readImage(layout, digest);
    assert.deepEqual(info.env, { PORT: '80', MODE: 'a b' });
    assert.equal(info.minMemoryMb, 64);
  });

  test('boot files are unpacked once, atomically, with the image settings', async () => {
    const { digest } = await buildKernelImage(layout, {
      name: 'boot',
      kernel,
      initrd,
      args: ['x'],
      kernelArgs: 'ka',
      env: { K: 'v' },
    });
    const b = await imageBootFiles({ images: layout.root }, digest);
    assert.equal(b.kernel, join(layout.unpacked, digest.slice(7), 'kernel'));
    assert.deepEqual(readFileSync(b.kernel), readFileSync(kernel));
    assert.deepEqual(readFileSync(b.initrd!), readFileSync(initrd));
    assert.deepEqual(
      { ...b, kernel: '', initrd: '' },
      {
        kernel: '',
        initrd: '',
        kernelArgs: 'ka',
        args: ['x'],
        env: { K: 'v' },
        machine: 'microvm',
        firmware: 'seabios',
        contract: 'unihost',
        shutdown: 'acpi',
        minMemoryMb: 0,
        ports: [],
        choosable: false,
      },
    );
    const ino = statSync(b.kernel).ino;
    const again = await Promise.all([1, 2, 3].map(() => imageBootFiles({ images: layout.root }, digest)));
    for (const a of again) assert.equal(statSync(a.kernel).ino, ino, 'not unpacked a second time');
    assert.deepEqual(readdirSync(layout.tmp), []);
  });

  test('an image without initrd has no initrd boot file; machine override wins over detection', async () => {
    const mb = join(dir, 'unikraft');
    writeFileSync(mb, multibootKernel());
    const detected = await buildKernelImage(layout, { name: 'uk', kernel: mb });
    assert.equal(detected.machine, 'pc');
    const forced = await buildKernelImage(layout, { name: 'uk', kernel: mb, machine: 'microvm' });
    assert.notEqual(forced.digest, detected.digest);
    const b = await imageBootFiles({ images: layout.root }, forced.digest);
    assert.equal(b.machine, 'microvm');
    assert.equal(b.initrd, undefined);
    assert.ok(!existsSync(join(layout.unpacked, forced.digest.slice(7), 'initrd')));
  });

  test("a Unikraft kernel without a machine: this host's choice by trial boots, made once, bound to the VMM", async () => {
    const mb = join(dir, 'unikraft-choice');
    writeFileSync(mb, multibootKernel());
    const { digest } = await buildKernelImage(layout, { name: 'ukc', kernel: mb, args: ['c'] });
    const paths = { images: layout.root };
    const before = await imageBootFiles(paths, digest);
    assert.equal(before.choosable, true);
    assert.equal(before.machine, 'pc', 'no choice yet and no chooser: the safe default');
    // a fake of the driver's trial boots (the real ones: test/vm/unikraft.test.ts)
    let runs = 0;
    const chooser = (vmm: string, pick: 'microvm' | 'pc') => ({
      vmm,
      run: async () => {
        runs++;
        await new Promise((r) => setTimeout(r, 30));
        return { choice: { machine: pick, firmware: 'seabios' as const }, trials: [{ pick }] };
      },
    });
    const a = chooser('qemu 7.2; tcg', 'microvm');
    // boots that come together share one decision
    const boots = await Promise.all([1, 2, 3].map(() => imageBootFiles(paths, digest, a)));
    assert.equal(runs, 1);
    for (const b of boots) assert.equal(b.machine, 'microvm');
    assert.equal(boots[0]!.contract, 'unikraft', 'still booted as Unikraft');
    const stored = await readChoice(paths, digest);
    assert.deepEqual(stored?.trials, [{ pick: 'microvm' }]);
    assert.equal((await imageBootFiles(paths, digest)).machine, 'microvm', 'read without a chooser too');
    assert.equal((await decideMachine(paths, digest, a))?.fresh, false);
    assert.equal(runs, 1);
    // another QEMU build or accelerator decides again
    const b = chooser('qemu 8.0; kvm', 'pc');
    assert.equal((await imageBootFiles(paths, digest, b)).machine, 'pc');
    assert.equal(runs, 2);
    // an image that names its machine needs no choice
    const named = await buildKernelImage(layout, { name: 'ukn', kernel: mb, machine: 'pc' });
    assert.equal(await decideMachine(paths, named.digest, a), undefined);
    assert.equal(runs, 2);
    // a decision another process holds (its lock) is waited for, not made twice
    const other = await buildKernelImage(layout, { name: 'uko', kernel: mb, args: ['o'] });
    const hex = other.digest.slice(7);
    await imageBootFiles(paths, other.digest); // unpacked
    writeFileSync(join(layout.unpacked, hex, 'choice.json.lock'), '');
    const waiting = decideMachine(paths, other.digest, a);
    await new Promise((r) => setTimeout(r, 150));
    writeFileSync(
      join(layout.unpacked, hex, 'choice.json'),
      JSON.stringify({ machine: 'pc', firmware: 'qboot', vmm: a.vmm, trials: [], decided_at: '' }),
    );
    assert.equal((await waiting)?.firmware, 'qboot');
    assert.equal(runs, 2);
  });

  test('bad input is refused before anything is stored', async () => {
    const before = readdirSync(layout.blobs).length;
    await assert.rejects(
      buildKernelImage(layout, { name: 'x', kernel: join(dir, 'missing') }),
      /kernel file .*missing does not exist/,
    );
    const junk = join(dir, 'junk');
    writeFileSync(junk, 'not a kernel');
    await assert.rejects(buildKernelImage(layout, { name: 'x', kernel: junk }), /cannot tell how to boot kernel/);
    await assert.rejects(
      buildKernelImage(layout, { name: 'x', kernel, env: { 'A-B': '1' } }),
      /environment variable name 'A-B'/,
    );
    await assert.rejects(buildKernelImage(layout, { name: 'x', kernel, minMemoryMb: 0 }), /minimum memory/);
    assert.equal(readdirSync(layout.blobs).length, before);
  });

  test('imageBootFiles of an unknown digest fails clearly', async () => {
    await assert.rejects(
      imageBootFiles({ images: layout.root }, `sha256:${'0'.repeat(64)}`),
      /image store has no blob sha256:0000/,
    );
  });
});
