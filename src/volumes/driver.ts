/**
 * What the volume controller (src/reconcile/volumes.ts) and the boot path
 * drive: the images behind persistent volumes. `Ext4Volumes` (ext4.ts) is
 * the real one: ext4 image files made by `mkfs.ext4`, checked by `e2fsck`;
 * `MemoryVolumes` (memory.ts) keeps the same states in memory for unit
 * tests. The config's `volumes.driver` chooses (src/drivers.ts).
 */
export interface VolumeDriver {
  /** the file a VM attaches as a block device */
  path(id: string): string;
  /** creates a formatted, empty image of `sizeMb` (replacing a partial one); whole or not at all */
  format(id: string, sizeMb: number): Promise<void>;
  /** null when the image is usable, else what is wrong with it (missing, damaged) */
  check(id: string): Promise<string | null>;
  /** whether the image exists */
  exists(id: string): boolean;
  /** deletes the image; one already gone is fine */
  remove(id: string): Promise<void>;
  /** removes every image (and partial one) whose volume is not in `keep`; returns the file names removed (for the log) */
  prune(keep: ReadonlySet<string>): string[];
  /**
   * Makes `to`'s image a copy of `from`'s (copy-on-write where the file
   * system can: a reflink on XFS or Btrfs, a full copy on ext4); whole or
   * not at all. `from` must not be mounted meanwhile.
   */
  copy(from: string, to: string): Promise<void>;
  /** Grows or shrinks the image and its file system to `sizeMb`, offline (no VM may have it). */
  resize(id: string, sizeMb: number): Promise<void>;
  /** the image's size in MB (undefined when it is missing) */
  sizeMb(id: string): number | undefined;
  /** MB the file system uses, read from its superblock (no VM may have it mounted) */
  usedMb(id: string): Promise<number>;
}
