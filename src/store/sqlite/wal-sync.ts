import { open, type FileHandle } from 'node:fs/promises';

/**
 * Makes a SQLite write-ahead log durable off the event loop. The write
 * connection runs at `synchronous = NORMAL`: COMMIT appends to the WAL and
 * returns without an fsync, and a transaction that must survive a power loss
 * waits for `sync()`, an `fdatasync` of the WAL on libuv's thread pool,
 * before it is acknowledged. Commits that arrive while one runs share the
 * next (group commit): at most one runs and one waits.
 *
 * A `kill -9` loses nothing either way (the WAL is in the page cache). The
 * WAL is the same file for the connection's life (SQLite restarts it in
 * place after a checkpoint, and deletes it only when the last connection
 * closes), so one descriptor serves; a checkpoint syncs the WAL itself before
 * it copies pages into the database.
 */
export class WalSync {
  private fh: Promise<Pick<FileHandle, 'datasync' | 'close'>> | null = null;
  private inFlight: Promise<void> | null = null;
  private queued: Promise<void> | null = null;

  constructor(
    private readonly walPath: string,
    /** how the WAL is opened (a test counts the syncs) */
    private readonly openFile: (path: string) => Promise<Pick<FileHandle, 'datasync' | 'close'>> = (p) => open(p, 'r'),
  ) {}

  /** Resolves once everything written to the WAL before the call is on disk. */
  sync(): Promise<void> {
    if (this.queued) return this.queued;
    if (!this.inFlight) return this.start();
    // the one under way may have begun before the caller's commit: the next one covers it
    const q = this.inFlight
      .catch(() => undefined)
      .then(() => {
        this.queued = null;
        return this.start();
      });
    this.queued = q;
    return q;
  }

  /** Closes the descriptor, after a sync under way. */
  async close(): Promise<void> {
    await (this.queued ?? this.inFlight)?.catch(() => undefined);
    const fh = this.fh;
    this.fh = null;
    if (fh) await (await fh.catch(() => null))?.close();
  }

  private start(): Promise<void> {
    const p: Promise<void> = this.flush().finally(() => {
      if (this.inFlight === p) this.inFlight = null;
    });
    this.inFlight = p;
    return p;
  }

  private async flush(): Promise<void> {
    this.fh ??= this.openFile(this.walPath);
    try {
      await (await this.fh).datasync();
    } catch (e) {
      this.fh = null; // opened again by the next sync
      throw e;
    }
  }
}
