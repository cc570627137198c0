import { existsSync, mkdirSync, readdirSync, renameSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { Controller, ControllerDeps } from './deps.js';
import { CommandError, FS_COMMAND_TIMEOUT_MS, runCommand } from '../network/cmd.js';
import { RetryingQueue } from './engine.js';

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

/**
 * Makes volume image files match the store: formats new volumes with
 * `mkfs.ext4` (initializing → available, or idle when attached), removes the
 * files of deleted volumes, and marks a volume whose file went missing as
 * `error` with a message.
 */
export class VolumeController implements Controller {
  private readonly queue: RetryingQueue;
  private off: (() => void) | null = null;

  constructor(
    private readonly s: ControllerDeps,
    private readonly log: { warn(o: object, m: string): void; error(o: object, m: string): void },
  ) {
    this.queue = new RetryingQueue(
      (id) => this.reconcile(id),
      (id, e, failures, retryMs) => log.error({ id, err: e, failures, retry_ms: retryMs }, 'volume reconcile failed'),
    );
  }

  async start(): Promise<void> {
    this.off = this.s.store.onChange((c) => {
      if (c.kind === 'volume') void this.queue.kick(c.id);
    });
    const all = await this.s.store.read((tx) => tx.volumes.all());
    for (const v of all) void this.queue.kick(v.id);
    const dir = dirname(this.s.paths.volume('x'));
    if (existsSync(dir)) {
      const known = new Set(all.map((v) => `${v.id}.ext4`));
      for (const f of readdirSync(dir)) if (!known.has(f) && !f.startsWith('.')) rmSync(join(dir, f), { force: true });
    }
  }

  async stop(): Promise<void> {
    this.off?.();
    await this.queue.stop();
  }

  private async reconcile(id: string): Promise<void> {
    const v = await this.s.store.read((tx) => tx.volumes.getAny(id));
    const file = this.s.paths.volume(id);
    if (!v) {
      rmSync(file, { force: true });
      return;
    }
    if (v.state === 'initializing' || v.state === 'uninitialized') {
      mkdirSync(dirname(file), { recursive: true });
      const tmp = `${file}.tmp`;
      try {
        // -b 4096: small images would otherwise get 1 KiB blocks.
        await runCommand(['mkfs.ext4', '-q', '-F', '-b', '4096', '-E', 'root_owner=0:0', tmp, `${v.size_mb}M`], {
          timeoutMs: FS_COMMAND_TIMEOUT_MS,
        });
        renameSync(tmp, file);
      } catch (e) {
        rmSync(tmp, { force: true });
        await this.s.store.tx((tx) =>
          tx.volumes.update(id, { state: 'error', message: `formatting failed: ${(e as Error).message}` }),
        );
        return;
      }
      await this.s.store.tx(async (tx) => {
        const cur = await tx.volumes.getAny(id);
        if (cur && (cur.state === 'initializing' || cur.state === 'uninitialized')) {
          await tx.volumes.update(id, { state: cur.instance_id ? 'idle' : 'available' });
        }
      });
      return;
    }
    if (v.state !== 'error' && !existsSync(file)) {
      this.log.warn({ id }, 'volume image file is missing');
      await this.s.store.tx((tx) =>
        tx.volumes.update(id, { state: 'error', message: `the image file ${file} is missing` }),
      );
    }
  }
}
