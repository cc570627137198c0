import { closeSync, fstatSync, openSync, readSync } from 'node:fs';

/**
 * A file a VM's QEMU appends to (its serial console, its control channel),
 * kept open for reading while the VM lives. The console pump reads it at
 * every change the guest makes, and an open, a stat and a close per read
 * were most of the daemon's CPU while a guest booted (bench/boot, profiled:
 * 6 ms of a c-http boot's 11, on the core the guest boots on). Opened on
 * first use (QEMU makes it as it starts); truncated in place, never
 * replaced, so one descriptor serves the VM's life.
 */
export class HeldFile {
  private fd: number | null = null;

  constructor(readonly path: string) {}

  /** Its size in bytes; -1 while it does not exist (or once closed). */
  size(): number {
    const fd = this.open();
    return fd === null ? -1 : fstatSync(fd).size;
  }

  /**
   * Its bytes from `pos` on, at most `max`; none while it does not exist.
   * `size`: its size if the caller has just read it (one `fstat` less).
   */
  readFrom(pos: number, max = Infinity, size = this.size()): Buffer {
    const fd = this.open();
    if (fd === null || size <= pos) return Buffer.alloc(0);
    const buf = Buffer.alloc(Math.min(max, size - pos));
    let n = 0;
    while (n < buf.length) {
      const r = readSync(fd, buf, n, buf.length - n, pos + n);
      if (r === 0) break;
      n += r;
    }
    return buf.subarray(0, n);
  }

  close(): void {
    if (this.fd !== null && this.fd >= 0) closeSync(this.fd);
    this.fd = -1;
  }

  private open(): number | null {
    if (this.fd === -1) return null;
    if (this.fd === null) {
      try {
        this.fd = openSync(this.path, 'r');
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
        throw e;
      }
    }
    return this.fd;
  }
}
