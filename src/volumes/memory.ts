import { join } from 'node:path';
import type { VolumeDriver } from './driver.js';

/**
 * The volume driver of unit tests (`volumes.driver: "memory"`): images are
 * entries in a map, with the same states as files (present, damaged,
 * missing) and no disk use. A VM of the memory machine driver never opens
 * `path`.
 */
export class MemoryVolumes implements VolumeDriver {
  /** size in MB of each image present, by volume id */
  readonly images = new Map<string, number>();
  /** images whose file system is damaged (`corrupt`) */
  private readonly damaged = new Set<string>();
  /** partial images a format cut short left behind (`<id>.ext4.tmp` on disk) */
  readonly partial = new Set<string>();
  /** makes the next `format` fail with this message (a full disk, say) */
  failNextFormat: string | null = null;

  constructor(private readonly dir = '/nonexistent/unihost-memory-volumes') {}

  path(id: string): string {
    return join(this.dir, `${id}.ext4`);
  }

  async format(id: string, sizeMb: number): Promise<void> {
    const fail = this.failNextFormat;
    this.failNextFormat = null;
    if (fail) throw new Error(fail);
    this.damaged.delete(id);
    this.partial.delete(id);
    this.images.set(id, sizeMb);
  }

  async check(id: string): Promise<string | null> {
    if (!this.images.has(id)) return `the image file ${this.path(id)} is missing`;
    return this.damaged.has(id) ? `the ext4 image is damaged: ${this.path(id)} has no valid superblock` : null;
  }

  /** Damages an image's file system, as an overwritten superblock would (tests). */
  corrupt(id: string): void {
    if (this.images.has(id)) this.damaged.add(id);
  }

  exists(id: string): boolean {
    return this.images.has(id);
  }

  async remove(id: string): Promise<void> {
    this.images.delete(id);
    this.damaged.delete(id);
  }

  /** MB each image's file system uses (tests set it; a new image uses 1) */
  readonly used = new Map<string, number>();

  async copy(from: string, to: string): Promise<void> {
    const size = this.images.get(from);
    if (size === undefined) throw new Error(`the image file ${this.path(from)} is missing`);
    this.images.set(to, size);
    this.used.set(to, this.used.get(from) ?? 1);
  }

  async resize(id: string, sizeMb: number): Promise<void> {
    if (!this.images.has(id)) throw new Error(`the image file ${this.path(id)} is missing`);
    if (sizeMb < (this.used.get(id) ?? 1)) throw new Error(`resize2fs: New size smaller than minimum`);
    this.images.set(id, sizeMb);
  }

  sizeMb(id: string): number | undefined {
    return this.images.get(id);
  }

  async usedMb(id: string): Promise<number> {
    if (!this.images.has(id)) throw new Error(`the image file ${this.path(id)} is missing`);
    return this.used.get(id) ?? 1;
  }

  prune(keep: ReadonlySet<string>): string[] {
    const removed = [...this.images.keys()].filter((id) => !keep.has(id));
    for (const id of removed) {
      this.images.delete(id);
      this.damaged.delete(id);
    }
    const partial = [...this.partial];
    this.partial.clear();
    return [...removed.map((id) => `${id}.ext4`), ...partial.map((id) => `${id}.ext4.tmp`)];
  }
}
