import { existsSync, mkdirSync, readdirSync, renameSync, rmSync, statSync, truncateSync } from 'node:fs';
import { join } from 'node:path';
import { CommandError, FS_COMMAND_TIMEOUT_MS, runCommand } from '../network/cmd.js';
import type { VolumeDriver } from './driver.js';

/**
 * Checks a volume image before a VM mounts it (`e2fsck -fn`: read-only, no
 * repairs). Returns null when it is usable, else what is wrong. Exit status
 * 4 and above means errors left uncorrected or no file system at all.
 */
export async function checkVolumeFile(file: string, timeoutMs = FS_COMMAND_TIMEOUT_MS): Promise<string | null> {
  if (!existsSync(file)) return `the image file ${file} is missing`;
  try {
    await runCommand(['e2fsck', '-fn', file], { timeoutMs });
    return null;
  } catch (e) {
    if (!(e instanceof CommandError) || e.code === null)
      return `checking the ext4 image failed: ${(e as Error).message}`;
    if (e.code < 4) return null;
    const detail = `${e.stderr}${e.stdout}`.trim().split('\n').slice(0, 3).join(' / ');
    return `the ext4 image is damaged (e2fsck exit ${e.code}): ${detail}`;
  }
}

const SUFFIX = '.ext4';
const MiB = 1024 * 1024;

/** Volumes as ext4 image files `<dir>/<id>.ext4` (docs/volumes.md). */
export class Ext4Volumes implements VolumeDriver {
  constructor(private readonly dir: string) {}

  path(id: string): string {
    return join(this.dir, `${id}${SUFFIX}`);
  }

  async format(id: string, sizeMb: number): Promise<void> {
    mkdirSync(this.dir, { recursive: true });
    const file = this.path(id);
    const tmp = `${file}.tmp`;
    try {
      // -b 4096: small images would otherwise get 1 KiB blocks.
      await runCommand(['mkfs.ext4', '-q', '-F', '-b', '4096', '-E', 'root_owner=0:0', tmp, `${sizeMb}M`], {
        timeoutMs: FS_COMMAND_TIMEOUT_MS,
      });
      renameSync(tmp, file);
    } finally {
      rmSync(tmp, { force: true });
    }
  }

  check(id: string): Promise<string | null> {
    return checkVolumeFile(this.path(id));
  }

  exists(id: string): boolean {
    return existsSync(this.path(id));
  }

  async remove(id: string): Promise<void> {
    rmSync(this.path(id), { force: true });
  }

  async copy(from: string, to: string): Promise<void> {
    mkdirSync(this.dir, { recursive: true });
    const file = this.path(to);
    const tmp = `${file}.tmp`;
    try {
      // a reflink where the file system offers one (XFS, Btrfs), else a sparse full copy
      await runCommand(['cp', '--reflink=auto', '--sparse=always', this.path(from), tmp], {
        timeoutMs: FS_COMMAND_TIMEOUT_MS,
      });
      renameSync(tmp, file);
    } finally {
      rmSync(tmp, { force: true });
    }
  }

  async resize(id: string, sizeMb: number): Promise<void> {
    const file = this.path(id);
    const cur = this.sizeMb(id);
    if (cur === undefined) throw new Error(`the image file ${file} is missing`);
    // resize2fs wants a checked file system; -p repairs only what is safe without asking
    await runCommand(['e2fsck', '-fp', file], { timeoutMs: FS_COMMAND_TIMEOUT_MS }).catch((e: unknown) => {
      if (!(e instanceof CommandError) || e.code === null || e.code >= 4) throw e;
    });
    if (sizeMb > cur) {
      truncateSync(file, sizeMb * MiB);
      await runCommand(['resize2fs', file], { timeoutMs: FS_COMMAND_TIMEOUT_MS }).catch((e: unknown) => {
        truncateSync(file, cur * MiB); // the file system kept its size: so does its image
        throw e;
      });
    } else if (sizeMb < cur) {
      await runCommand(['resize2fs', file, `${sizeMb}M`], { timeoutMs: FS_COMMAND_TIMEOUT_MS });
      truncateSync(file, sizeMb * MiB);
    }
  }

  sizeMb(id: string): number | undefined {
    try {
      return Math.round(statSync(this.path(id)).size / MiB);
    } catch {
      return undefined;
    }
  }

  async usedMb(id: string): Promise<number> {
    const { stdout } = await runCommand(['dumpe2fs', '-h', this.path(id)], { timeoutMs: FS_COMMAND_TIMEOUT_MS });
    const field = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+)`, 'm').exec(stdout)?.[1]);
    const used = (field('Block count') - field('Free blocks')) * field('Block size');
    if (!Number.isFinite(used)) throw new Error(`dumpe2fs did not say how full ${this.path(id)} is`);
    return Math.ceil(used / MiB);
  }

  prune(keep: ReadonlySet<string>): string[] {
    if (!existsSync(this.dir)) return [];
    const removed: string[] = [];
    for (const f of readdirSync(this.dir)) {
      if (f.startsWith('.')) continue;
      // also `<id>.ext4.tmp`: a format a crash cut short (the next format starts over)
      if (f.endsWith(SUFFIX) && keep.has(f.slice(0, -SUFFIX.length))) continue;
      rmSync(join(this.dir, f), { force: true });
      removed.push(f);
    }
    return removed;
  }
}
