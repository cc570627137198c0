import { execFileSync } from 'node:child_process';
import {
  chmodSync,
  chownSync,
  closeSync,
  createReadStream,
  createWriteStream,
  fsyncSync,
  openSync,
  renameSync,
  rmSync,
  statSync,
} from 'node:fs';
import { createConnection, createServer, type Socket } from 'node:net';
import { readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import type { QmpClient } from './qmp.js';

/**
 * Memory snapshots of a QEMU VM (docs/snapshots.md). A snapshot is QEMU's
 * migration stream of a paused VM: RAM page by page, where a page of zeros
 * is a flag of a few bytes and not 4 KiB, so the file holds about the
 * memory the guest touched; then every device's state. It is written over
 * a unix socket the daemon listens on (inside the VM's chroot when it is
 * confined: QEMU may not spawn programs, and cannot reach files outside its
 * jail) and read back on restore from a descriptor QEMU inherits
 * (`-incoming fd:3`).
 */

/** The socket QEMU writes a snapshot to, as the daemon sees it and as QEMU (maybe chrooted) names it. */
export function snapshotSocket(jail: string | null, dir: string): { path: string; uri: string } {
  return jail
    ? { path: join(jail, 'snapshot.sock'), uri: 'unix:/snapshot.sock' }
    : { path: join(dir, 'snapshot.sock'), uri: `unix:${join(dir, 'snapshot.sock')}` };
}

/** How long one snapshot may take before it is given up (and the VM resumed). */
const SNAPSHOT_TIMEOUT_MS = 60_000;

interface MigrationInfo {
  status?: string;
  'error-desc'?: string;
}

/**
 * Pauses the VM and writes its snapshot to `path` (through `path.part`,
 * synced and renamed: the file is whole or absent). On failure the VM runs
 * on (`cont`) and the error says why. Does not end the VM.
 */
export async function writeSnapshot(
  qmp: QmpClient,
  o: { path: string; socket: { path: string; uri: string }; uid?: number },
): Promise<{ bytes: number }> {
  const part = `${o.path}.part`;
  rmSync(o.socket.path, { force: true });
  rmSync(part, { force: true });
  const server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(o.socket.path, () => resolve());
  });
  // QEMU runs as the VM's own uid: it may pass through its (empty, root-owned) jail to this socket and
  // connect to it, and no other VM can see it (each has its own chroot)
  if (o.uid !== undefined) {
    chmodSync(dirname(o.socket.path), 0o711);
    chownSync(o.socket.path, o.uid, o.uid);
  }
  let conn: Socket | undefined;
  const received = new Promise<void>((resolve, reject) => {
    server.once('connection', (s: Socket) => {
      conn = s;
      server.close();
      pipeline(s, createWriteStream(part, { mode: 0o600 })).then(resolve, reject);
    });
  });
  received.catch(() => undefined);
  let paused = false;
  try {
    // QEMU's default bandwidth cap (32 MiB/s) is for live migration over a network; a local file takes all.
    await qmp.execute('migrate-set-parameters', { 'max-bandwidth': 64 * 1024 * 1024 * 1024 });
    await qmp.execute('stop');
    paused = true;
    await qmp.execute('migrate', { uri: o.socket.uri });
    const deadline = Date.now() + SNAPSHOT_TIMEOUT_MS;
    for (;;) {
      const m = await qmp.execute<MigrationInfo>('query-migrate');
      if (m.status === 'completed') break;
      if (m.status === 'failed' || m.status === 'cancelled')
        throw new Error(`QEMU could not write the snapshot: ${m['error-desc'] ?? m.status}`);
      if (Date.now() > deadline) {
        await qmp.execute('migrate_cancel').catch(() => undefined);
        throw new Error(`the snapshot took longer than ${SNAPSHOT_TIMEOUT_MS / 1000} s`);
      }
      await sleep(2);
    }
    await Promise.race([
      received,
      sleep(10_000).then(() => Promise.reject(new Error('the snapshot stream did not end'))),
    ]);
    syncFile(part);
    renameSync(part, o.path);
    syncFile(dirname(o.path));
    return { bytes: statSync(o.path).size };
  } catch (e) {
    conn?.destroy();
    rmSync(part, { force: true });
    if (paused) await qmp.execute('cont').catch(() => undefined);
    throw e;
  } finally {
    server.close();
    rmSync(o.socket.path, { force: true });
  }
}

/**
 * After `-incoming`: waits until QEMU has loaded the snapshot and the guest
 * runs. A snapshot taken without the run state (argv.ts,
 * `migration.store-global-state=off`) runs by itself at the end of the load
 * (QEMU's RESUME event says so, no polling on the way); one that carries
 * the paused state it was saved in (taken before that option) is resumed
 * with `cont`. Rejects when the load failed or `timeoutMs` passed.
 */
export async function resumeRestored(qmp: QmpClient, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  // an event may come in the same read as an answer, before the code awaiting that answer runs again
  let resumed = false;
  let stopped = false;
  let wake: () => void = () => undefined;
  const onEvent = (name: string): void => {
    if (name === 'RESUME') resumed = true;
    else if (name === 'STOP') stopped = true;
    else return;
    wake();
  };
  qmp.on('event', onEvent);
  try {
    for (;;) {
      if (resumed) return; // the guest runs: QEMU said so, no need to ask
      stopped = false;
      const s = await qmp.execute<{ status: string }>('query-status');
      if (s.status === 'running') return;
      if (s.status === 'paused' || s.status === 'postmigrate' || s.status === 'prelaunch') {
        await qmp.execute('cont');
        return;
      }
      if (s.status !== 'inmigrate') throw new Error(`the snapshot did not load (QEMU state ${s.status})`);
      if (Date.now() > deadline) throw new Error(`the snapshot did not load within ${timeoutMs} ms`);
      // the end of the load is an event (RESUME, or STOP for a paused one); a slower poll backs it up
      if (!resumed && !stopped)
        await new Promise<void>((resolve) => {
          const t = setTimeout(resolve, RESUME_POLL_MS);
          wake = () => {
            clearTimeout(t);
            resolve();
          };
        });
    }
  } finally {
    qmp.off('event', onEvent);
  }
}

/** How often resumeRestored asks QEMU's state while it waits for the load's end event. */
const RESUME_POLL_MS = 10;

/**
 * Sends a snapshot file to a QEMU that listens for it (`-incoming unix:`,
 * a warm VM: warm.ts). QEMU reads as it loads; the stream ends
 * when the file is sent.
 */
export async function streamSnapshot(file: string, socket: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let s: Socket | undefined;
  // QEMU listens once `migrate-incoming` answers; a few retries cover a slow start
  for (;;) {
    try {
      s = await new Promise<Socket>((resolve, reject) => {
        const c = createConnection(socket);
        c.once('connect', () => {
          c.off('error', reject);
          resolve(c);
        });
        c.once('error', reject);
      });
      break;
    } catch (e) {
      if (Date.now() > deadline) throw e;
      await sleep(1);
    }
  }
  const sock = s;
  // a snapshot of a unikernel is a few MB: read whole and written at once, libuv sends it without a
  // turn of JavaScript per chunk; a large one is sent in 4 MiB reads
  if (statSync(file).size <= WHOLE_SEND_BYTES) {
    const data = await readFile(file);
    await new Promise<void>((resolve, reject) => {
      sock.once('error', reject);
      sock.end(data, () => resolve());
    });
  } else await pipeline(createReadStream(file, { highWaterMark: 4 * 1024 * 1024 }), sock);
}

/** Snapshots up to this size are sent in one write (streamSnapshot). */
const WHOLE_SEND_BYTES = 64 * 1024 * 1024;

function syncFile(path: string): void {
  const fd = openSync(path, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** QEMU's version line (`QEMU emulator version 7.2.22 (Debian ...)`): a snapshot restores only into the same build. */
export function qemuVersion(qemu: string): string {
  try {
    return execFileSync(qemu, ['--version'], { encoding: 'utf8', timeout: 10_000 }).split('\n')[0]!.trim();
  } catch {
    return 'unknown';
  }
}
