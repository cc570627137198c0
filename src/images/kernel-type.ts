import { open, type FileHandle } from 'node:fs/promises';
import { err } from '../errors.js';

/**
 * QEMU machine type an image boots on:
 * - `pc`: Multiboot v1 kernels (Unikraft's x86_64 QEMU builds) and Linux
 *   bzImages; `pc` is the machine they are known to boot on.
 * - `microvm`: ELF kernels with a Xen PVH entry note (e.g. Debian's vmlinux).
 */
export type Machine = 'microvm' | 'pc';
export const MACHINES: readonly Machine[] = ['microvm', 'pc'];

export type KernelFormat = 'multiboot' | 'pvh' | 'bzimage';

/** Firmware of machine `pc`: QEMU's default SeaBIOS, or qboot (~40 ms faster; some kernels fail on it). */
export type Firmware = 'seabios' | 'qboot';
export const FIRMWARES: readonly Firmware[] = ['seabios', 'qboot'];

/** How the guest reports to the host (docs/guest-contract.md): control channel, or console + exit port. */
export type Contract = 'unihost' | 'unikraft';
export const CONTRACTS: readonly Contract[] = ['unihost', 'unikraft'];

/** Whether the kernel reacts to a shutdown request (ACPI power button). */
export type Shutdown = 'acpi' | 'none';
export const SHUTDOWNS: readonly Shutdown[] = ['acpi', 'none'];

/** How an image boots when its metadata says nothing: by kernel format (docs/images.md). */
export interface BootDefaults {
  machine: Machine;
  firmware: Firmware;
  contract: Contract;
  shutdown: Shutdown;
}

/**
 * Multiboot kernels are Unikraft's: console + isa-debug-exit, and stock
 * Unikraft ignores the ACPI power button. The others are Linux kernels that
 * run the project's init (control channel, acpid).
 */
export function bootDefaults(f: KernelFormat | null, machine?: Machine): BootDefaults {
  const unikraft = f === 'multiboot' || (f === null && machine === 'pc');
  return {
    machine: machine ?? (f === 'pvh' ? 'microvm' : 'pc'),
    firmware: 'seabios',
    contract: unikraft ? 'unikraft' : 'unihost',
    shutdown: unikraft ? 'none' : 'acpi',
  };
}

const MULTIBOOT_MAGIC = 0x1badb002;
/** The Multiboot v1 spec places the header 4-byte aligned in the first 8 KiB. */
const MULTIBOOT_SEARCH = 8192;
/** XEN_ELFNOTE_PHYS32_ENTRY: the 32-bit PVH entry point QEMU's -kernel uses. */
const XEN_ELFNOTE_PHYS32_ENTRY = 18;
const PT_NOTE = 4;
const SHT_NOTE = 7;
/** Notes are small; a bigger "note" is a corrupt file, not something to read whole. */
const MAX_NOTE_BYTES = 1 << 20;

async function readAt(fh: FileHandle, pos: number, len: number): Promise<Buffer> {
  const buf = Buffer.alloc(len);
  const { bytesRead } = await fh.read(buf, 0, len, pos);
  return buf.subarray(0, bytesRead);
}

function hasMultibootHeader(head: Buffer): boolean {
  for (let off = 0; off + 12 <= head.length; off += 4) {
    if (head.readUInt32LE(off) !== MULTIBOOT_MAGIC) continue;
    const flags = head.readUInt32LE(off + 4);
    const checksum = head.readUInt32LE(off + 8);
    // magic + flags + checksum must be 0 mod 2^32; rules out stray matches.
    if ((MULTIBOOT_MAGIC + flags + checksum) >>> 0 === 0) return true;
  }
  return false;
}

/** Linux x86 boot protocol: "HdrS" at 0x202 (what QEMU loads as a bzImage). */
const isBzImage = (head: Buffer): boolean =>
  head.length >= 0x206 && head.toString('latin1', 0x202, 0x206) === 'HdrS' && head.readUInt16LE(0x1fe) === 0xaa55;

/** Walks one note area: namesz, descsz, type, name (4-aligned), desc (4-aligned). */
function notesHavePvh(buf: Buffer, le: boolean): boolean {
  const u32 = (o: number) => (le ? buf.readUInt32LE(o) : buf.readUInt32BE(o));
  const align4 = (n: number) => (n + 3) & ~3;
  let off = 0;
  while (off + 12 <= buf.length) {
    const namesz = u32(off);
    const descsz = u32(off + 4);
    const type = u32(off + 8);
    const nameEnd = off + 12 + namesz;
    if (nameEnd > buf.length) return false;
    const name = buf.toString('latin1', off + 12, nameEnd).replace(/\0+$/, '');
    if (name === 'Xen' && type === XEN_ELFNOTE_PHYS32_ENTRY) return true;
    off = off + 12 + align4(namesz) + align4(descsz);
  }
  return false;
}

interface Area {
  offset: number;
  size: number;
}

/** Note areas of an ELF file: PT_NOTE segments, else SHT_NOTE sections (stripped program headers are rare). */
function noteAreas(
  h: Buffer,
  fileSize: number,
  tables: { ph: Buffer; sh: Buffer },
  is64: boolean,
  le: boolean,
): Area[] {
  const u16 = (b: Buffer, o: number) => (le ? b.readUInt16LE(o) : b.readUInt16BE(o));
  const u32 = (b: Buffer, o: number) => (le ? b.readUInt32LE(o) : b.readUInt32BE(o));
  const uN = (b: Buffer, o: number) => (is64 ? Number(le ? b.readBigUInt64LE(o) : b.readBigUInt64BE(o)) : u32(b, o));
  const out: Area[] = [];
  const phentsize = u16(h, is64 ? 54 : 42);
  for (let o = 0; o + phentsize <= tables.ph.length && phentsize > 0; o += phentsize) {
    if (u32(tables.ph, o) !== PT_NOTE) continue;
    out.push({ offset: uN(tables.ph, o + (is64 ? 8 : 4)), size: uN(tables.ph, o + (is64 ? 32 : 16)) });
  }
  const shentsize = u16(h, is64 ? 58 : 46);
  for (let o = 0; out.length === 0 && o + shentsize <= tables.sh.length && shentsize > 0; o += shentsize) {
    if (u32(tables.sh, o + 4) !== SHT_NOTE) continue;
    out.push({ offset: uN(tables.sh, o + (is64 ? 24 : 16)), size: uN(tables.sh, o + (is64 ? 32 : 20)) });
  }
  return out.filter((a) => a.size > 0 && a.size <= MAX_NOTE_BYTES && a.offset + a.size <= fileSize);
}

async function elfHasPvhNote(fh: FileHandle, h: Buffer, fileSize: number): Promise<boolean> {
  const is64 = h[4] === 2;
  const le = h[5] === 1;
  if (h.length < (is64 ? 64 : 52)) return false;
  const u16 = (o: number) => (le ? h.readUInt16LE(o) : h.readUInt16BE(o));
  const off = (o: number) =>
    is64 ? Number(le ? h.readBigUInt64LE(o) : h.readBigUInt64BE(o)) : le ? h.readUInt32LE(o) : h.readUInt32BE(o);
  const phoff = off(is64 ? 32 : 28);
  const shoff = off(is64 ? 40 : 32);
  const phLen = u16(is64 ? 54 : 42) * u16(is64 ? 56 : 44);
  const shLen = u16(is64 ? 58 : 46) * u16(is64 ? 60 : 48);
  const tables = {
    ph: phoff > 0 ? await readAt(fh, phoff, phLen) : Buffer.alloc(0),
    sh: shoff > 0 ? await readAt(fh, shoff, shLen) : Buffer.alloc(0),
  };
  for (const a of noteAreas(h, fileSize, tables, is64, le)) {
    if (notesHavePvh(await readAt(fh, a.offset, a.size), le)) return true;
  }
  return false;
}

/**
 * Tells how a kernel file boots, reading only its headers and notes.
 * Multiboot wins over a PVH note: Unikraft builds may carry both, and `pc`
 * is the machine the public service boots every multiboot build on.
 * Returns null for anything else (the caller must be told the machine).
 */
export async function detectKernelFormat(path: string): Promise<KernelFormat | null> {
  const fh = await open(path, 'r');
  try {
    const { size } = await fh.stat();
    const head = await readAt(fh, 0, MULTIBOOT_SEARCH);
    if (hasMultibootHeader(head)) return 'multiboot';
    if (isBzImage(head)) return 'bzimage';
    if (
      head.length >= 16 &&
      head.readUInt32BE(0) === 0x7f454c46 &&
      (await elfHasPvhNote(fh, head.subarray(0, 64), size))
    ) {
      return 'pvh';
    }
    return null;
  } finally {
    await fh.close();
  }
}

export const machineFor = (f: KernelFormat): Machine => (f === 'pvh' ? 'microvm' : 'pc');

/** The machine a kernel boots on; throws a readable error when it cannot tell. */
export async function detectMachine(path: string, what = path): Promise<Machine> {
  const f = await detectKernelFormat(path);
  if (f === null) {
    throw err(
      'UH_INVALID',
      `cannot tell how to boot kernel ${what}: it has no Multiboot v1 header, no Xen PVH ELF note and no Linux boot header; give the machine type explicitly (microvm or pc)`,
    );
  }
  return machineFor(f);
}
