import type { ConsoleChunk, ConsoleReader } from '../figures.js';
import {
  closeSync,
  existsSync,
  fstatSync,
  mkdirSync,
  openSync,
  readFileSync,
  readSync,
  renameSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { join } from 'node:path';

/**
 * A bounded console log with absolute byte offsets. Bytes are appended to
 * `console.log`; when it grows past `max` the oldest half is dropped and
 * `console.base` records the absolute offset of the file's first byte, so
 * offsets stay valid across trims and instance restarts.
 */
export class ConsoleLog {
  readonly file: string;
  private readonly baseFile: string;
  /** console.log, open for appending while this writer appends (a VM's pump) */
  private fd: number | null = null;

  /** `hold`: keep the file open between appends, until `close` (a VM's pump: many small appends) */
  constructor(
    dir: string,
    private readonly max = 1024 * 1024,
    private readonly hold = false,
  ) {
    mkdirSync(dir, { recursive: true });
    this.file = join(dir, 'console.log');
    this.baseFile = join(dir, 'console.base');
  }

  base(): number {
    if (!existsSync(this.baseFile)) return 0;
    const n = Number(readFileSync(this.baseFile, 'utf8'));
    return Number.isFinite(n) ? n : 0;
  }

  /**
   * Appends bytes, trimming the oldest half when the file exceeds the
   * bound. With `hold` the file stays open between appends (a booting
   * guest's console comes in many small pieces) until `close`; another
   * writer's trim replaces the file (the old one has no link left), and the
   * next append opens the new one.
   */
  append(data: Buffer): void {
    if (this.fd !== null && fstatSync(this.fd).nlink === 0) this.close();
    this.fd ??= openSync(this.file, 'a');
    try {
      writeSync(this.fd, data);
      if (fstatSync(this.fd).size > this.max) {
        this.close();
        this.trim();
      }
    } finally {
      if (!this.hold) this.close();
    }
  }

  /** Closes the file kept open by `append` (the next append opens it again). */
  close(): void {
    if (this.fd !== null) closeSync(this.fd);
    this.fd = null;
  }

  private trim(): void {
    const buf = readFileSync(this.file);
    const keep = buf.subarray(buf.length - Math.floor(this.max / 2));
    const base = this.base() + (buf.length - keep.length);
    writeFileSync(`${this.baseFile}.tmp`, String(base));
    writeFileSync(`${this.file}.tmp`, keep);
    // base first: a crash in between leaves offsets off by at most one trim, never bytes lost twice
    renameSync(`${this.baseFile}.tmp`, this.baseFile);
    renameSync(`${this.file}.tmp`, this.file);
  }

  /**
   * Reads up to `limit` bytes from absolute `offset` (negative: from the end).
   * Returns the bytes and the available and returned ranges (inclusive; an
   * empty range has `end = start - 1`).
   */
  read(offset: number, limit: number) {
    const base = this.base();
    let size = 0;
    let fd: number | null = null;
    if (existsSync(this.file)) {
      fd = openSync(this.file, 'r');
      size = fstatSync(fd).size;
    }
    try {
      const end = base + size; // exclusive
      let start = offset < 0 ? end + offset : offset;
      start = Math.max(start, base);
      start = Math.min(start, end);
      const n = Math.max(0, Math.min(limit, end - start));
      const out = Buffer.alloc(n);
      if (fd !== null && n > 0) readSync(fd, out, 0, n, start - base);
      return {
        output: out,
        available: { start: base, end: end - 1 },
        range: { start, end: start + n - 1 },
      };
    } finally {
      if (fd !== null) closeSync(fd);
    }
  }
}

/** Console logs of the instances this host runs, read from their directories (src/figures.ts, `ConsoleReader`). */
export class LocalConsoles implements ConsoleReader {
  constructor(private readonly dirOf: (instanceId: string) => string) {}

  async read(instanceId: string, offset: number, limit: number): Promise<ConsoleChunk> {
    return new ConsoleLog(this.dirOf(instanceId)).read(offset, limit);
  }
}
