import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { detectKernelFormat, detectMachine } from './kernel-type.js';
import { bzImage, elf32PvhBySection, elf64Kernel, multibootKernel } from './testing/fixtures.js';

describe('kernel type detection', () => {
  const dir = mkdtempSync(join(tmpdir(), 'uh-ktype-'));
  after(() => rmSync(dir, { recursive: true, force: true }));
  const file = (name: string, data: Buffer) => {
    const p = join(dir, name);
    writeFileSync(p, data);
    return p;
  };

  test('Multiboot v1 header in the first 8 KiB: pc', async () => {
    const p = file('mb', multibootKernel());
    assert.equal(await detectKernelFormat(p), 'multiboot');
    assert.equal(await detectMachine(p), 'pc');
  });

  test('Multiboot magic with a bad checksum or past 8 KiB is not multiboot', async () => {
    const bad = multibootKernel();
    bad.writeUInt32LE(0x12345678, 0x1000 + 8);
    assert.equal(await detectKernelFormat(file('mb-bad', bad)), null);
    assert.equal(await detectKernelFormat(file('mb-far', multibootKernel('x', 0x2000))), null);
  });

  test('ELF64 with a Xen PHYS32_ENTRY note: microvm', async () => {
    const p = file('pvh', elf64Kernel(true));
    assert.equal(await detectKernelFormat(p), 'pvh');
    assert.equal(await detectMachine(p), 'microvm');
  });

  test('ELF64 with other notes only is not bootable as PVH', async () => {
    assert.equal(await detectKernelFormat(file('nopvh', elf64Kernel(false))), null);
  });

  test('the PVH note is found through section headers too', async () => {
    assert.equal(await detectKernelFormat(file('pvh32', elf32PvhBySection())), 'pvh');
  });

  test('multiboot wins over a PVH note (pc is the safe machine for Unikraft builds)', async () => {
    const both = Buffer.concat([elf64Kernel(true), Buffer.alloc(0x1000 - elf64Kernel(true).length)]);
    const mb = multibootKernel('x', 0x1000).subarray(0x1000);
    assert.equal(await detectKernelFormat(file('both', Buffer.concat([both, mb]))), 'multiboot');
  });

  test('a Linux bzImage boots on pc', async () => {
    assert.equal(await detectMachine(file('bz', bzImage())), 'pc');
  });

  test('anything else is refused with an explanation', async () => {
    const p = file('junk', Buffer.from('#!/bin/sh\necho not a kernel\n'));
    assert.equal(await detectKernelFormat(p), null);
    await assert.rejects(detectMachine(p), (e: Error & { code?: string }) => {
      assert.equal(e.code, 'UH_INVALID');
      assert.match(e.message, /cannot tell how to boot kernel .*junk.*microvm or pc/);
      return true;
    });
  });
});
