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
}
