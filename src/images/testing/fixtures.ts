/**
 * Test fixtures: tiny synthetic kernels with the headers that machine
 * detection reads, and OCI layouts built the way kraftkit builds them.
 * Only tests import this file.
 */
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { create } from 'tar';

const le32 = (b: Buffer, o: number, v: number) => b.writeUInt32LE(v >>> 0, o);

/** An ELF32 file with a valid Multiboot v1 header at `at` (4-byte aligned, below 8 KiB). */
export function multibootKernel(payload = 'unikraft-app', at = 0x1000): Buffer {
  const b = Buffer.alloc(at + 64 + payload.length);
  b.write('\x7fELF', 0, 'latin1');
  b[4] = 1; // ELFCLASS32
  b[5] = 1; // little endian
  const magic = 0x1badb002;
  const flags = 0x00010003;
  le32(b, at, magic);
  le32(b, at + 4, flags);
  le32(b, at + 8, -(magic + flags));
  b.write(payload, at + 64);
  return b;
}

/** Builds one note: namesz, descsz, type, name (padded), desc (padded). */
function note(name: string, type: number, desc: Buffer): Buffer {
  const n = Buffer.from(`${name}\0`, 'latin1');
  const pad = (x: Buffer) => Buffer.concat([x, Buffer.alloc((4 - (x.length % 4)) % 4)]);
  const h = Buffer.alloc(12);
  h.writeUInt32LE(n.length, 0);
  h.writeUInt32LE(desc.length, 4);
  h.writeUInt32LE(type, 8);
  return Buffer.concat([h, pad(n), pad(desc)]);
}

/**
 * An ELF64 x86_64 file with a PT_LOAD and a PT_NOTE segment. With `pvh` the segment
 * holds a GNU note and then Xen's PHYS32_ENTRY note (type 18), as Linux's
 * vmlinux does; without, only notes that do not mark a PVH entry.
 */
export function elf64Kernel(pvh: boolean, payload = 'linux-vmlinux'): Buffer {
  const notes = Buffer.concat([
    note('GNU', 3, Buffer.alloc(20, 7)),
    note('Xen', pvh ? 18 : 6, Buffer.from([0x00, 0x10, 0x00, 0x01])),
  ]);
  const h = Buffer.alloc(64 + 2 * 56);
  h.write('\x7fELF', 0, 'latin1');
  h[4] = 2; // ELFCLASS64
  h[5] = 1;
  h[6] = 1;
  h.writeUInt16LE(2, 16); // ET_EXEC
  h.writeUInt16LE(0x3e, 18); // x86_64
  h.writeUInt32LE(1, 20);
  h.writeBigUInt64LE(64n, 32); // e_phoff
  h.writeUInt16LE(64, 52); // e_ehsize
  h.writeUInt16LE(56, 54); // e_phentsize
  h.writeUInt16LE(2, 56); // e_phnum
  h.writeUInt16LE(64, 58); // e_shentsize
  // program header 0: PT_LOAD of the whole file; 1: PT_NOTE right after the headers
  const notesAt = 64 + 2 * 56;
  h.writeUInt32LE(1, 64);
  h.writeBigUInt64LE(BigInt(notesAt + notes.length + payload.length), 64 + 32);
  h.writeUInt32LE(4, 120);
  h.writeBigUInt64LE(BigInt(notesAt), 120 + 8);
  h.writeBigUInt64LE(BigInt(notes.length), 120 + 32);
  h.writeBigUInt64LE(BigInt(notes.length), 120 + 40);
  return Buffer.concat([h, notes, Buffer.from(payload)]);
}

/** An ELF32 file whose PVH note is found only through its section headers (no program headers). */
export function elf32PvhBySection(): Buffer {
  const notes = note('Xen', 18, Buffer.from([1, 2, 3, 4]));
  const h = Buffer.alloc(52);
  h.write('\x7fELF', 0, 'latin1');
  h[4] = 1;
  h[5] = 1;
  h.writeUInt16LE(2, 16);
  h.writeUInt16LE(3, 18); // i386
  const shoff = 52 + notes.length;
  h.writeUInt32LE(shoff, 32);
  h.writeUInt16LE(52, 40);
  h.writeUInt16LE(40, 46); // e_shentsize
  h.writeUInt16LE(2, 48); // e_shnum: null section + .note
  const sh = Buffer.alloc(80);
  sh.writeUInt32LE(7, 40 + 4); // SHT_NOTE
  sh.writeUInt32LE(52, 40 + 16); // sh_offset
  sh.writeUInt32LE(notes.length, 40 + 20); // sh_size
  return Buffer.concat([h, notes, sh]);
}

/** A Linux bzImage header (boot sector signature and "HdrS"). */
export function bzImage(): Buffer {
  const b = Buffer.alloc(0x400, 0x90);
  b.writeUInt16LE(0xaa55, 0x1fe);
  b.write('HdrS', 0x202, 'latin1');
  return b;
}

const sha = (b: Buffer) => `sha256:${createHash('sha256').update(b).digest('hex')}`;

export interface KraftkitPlatform {
  os: string;
  architecture: string;
  kernel: Buffer;
  initrd?: Buffer;
  cmd?: string[];
  env?: string[];
  /** gzip the layers */
  gzip?: boolean;
  extraAnnotations?: Record<string, string>;
}

function blob(dir: string, data: Buffer): { digest: string; size: number } {
  const digest = sha(data);
  writeFileSync(join(dir, 'blobs', 'sha256', digest.slice(7)), data);
  return { digest, size: data.length };
}

/** A layer the way kraftkit's archive.TarFileTo makes it: one entry, leading slash stripped, times zeroed. */
async function fileLayer(path: string, data: Buffer, gzip: boolean): Promise<Buffer> {
  const stage = mkdtempSync(join(process.env.TMPDIR ?? '/tmp', 'kk-layer-'));
  try {
    mkdirSync(join(stage, 'unikraft', 'bin'), { recursive: true });
    writeFileSync(join(stage, path), data);
    const chunks: Buffer[] = [];
    const stream = create({ cwd: stage, portable: true, mtime: new Date(0), gzip }, [path]);
    for await (const c of stream) chunks.push(c as Buffer);
    return Buffer.concat(chunks);
  } finally {
    rmSync(stage, { recursive: true, force: true });
  }
}

async function manifestFor(dir: string, p: KraftkitPlatform, name: string) {
  const mt = p.gzip ? 'application/vnd.oci.image.layer.v1.tar+gzip' : 'application/vnd.oci.image.layer.v1.tar';
  const layers = [
    {
      mediaType: mt,
      ...blob(dir, await fileLayer('unikraft/bin/kernel', p.kernel, !!p.gzip)),
      annotations: { 'org.unikraft.kernel.image': '/unikraft/bin/kernel' },
    },
  ];
  if (p.initrd) {
    layers.push({
      mediaType: mt,
      ...blob(dir, await fileLayer('unikraft/bin/initrd', p.initrd, !!p.gzip)),
      annotations: { 'org.unikraft.kernel.initrd': '/unikraft/bin/initrd' } as never,
    });
  }
  const config = {
    architecture: p.architecture,
    os: p.os,
    config: { Cmd: p.cmd, Env: p.env },
    rootfs: { type: 'layers', diff_ids: layers.map((l) => l.digest) },
  };
  const cfg = blob(dir, Buffer.from(JSON.stringify(config)));
  const manifest = {
    schemaVersion: 2,
    mediaType: 'application/vnd.oci.image.manifest.v1+json',
    config: { mediaType: 'application/vnd.oci.image.config.v1+json', ...cfg },
    layers,
    annotations: {
      'org.opencontainers.image.ref.name': `unikraft.org/${name}`,
      'org.opencontainers.image.created': '2024-05-01T10:00:00Z',
      'sh.kraftkit.version': '0.9.0',
      'org.unikraft.image.name': `unikraft.org/${name}:latest`,
      'org.unikraft.kernel.version': '0.17.0',
      ...p.extraAnnotations,
    },
  };
  const m = Buffer.from(JSON.stringify(manifest));
  return {
    mediaType: manifest.mediaType,
    ...blob(dir, m),
    platform: { architecture: p.architecture, os: p.os, 'os.version': '0.17.0' },
  };
}

/** Writes an OCI layout with one manifest per platform (kraftkit's multi-platform index) into `dir`. */
export async function kraftkitLayout(
  dir: string,
  platforms: KraftkitPlatform[],
  name = 'nginx',
): Promise<{ digests: string[] }> {
  mkdirSync(join(dir, 'blobs', 'sha256'), { recursive: true });
  writeFileSync(join(dir, 'oci-layout'), JSON.stringify({ imageLayoutVersion: '1.0.0' }));
  const manifests = [];
  for (const p of platforms) manifests.push(await manifestFor(dir, p, name));
  writeFileSync(
    join(dir, 'index.json'),
    JSON.stringify({ schemaVersion: 2, mediaType: 'application/vnd.oci.image.index.v1+json', manifests }),
  );
  return { digests: manifests.map((m) => m.digest) };
}

/** Packs a layout directory into a tarball (what `oci-archive:` tools produce). */
export async function tarLayout(dir: string, file: string, gzip = false): Promise<void> {
  await create({ cwd: dir, file, portable: true, gzip }, ['oci-layout', 'index.json', 'blobs']);
}
