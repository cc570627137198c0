import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { existsSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from 'pino';
import type { MachineController } from './reconcile/machines.js';

/** Where a daemon with the agent role listens for `unihost admin` (root only: the data dir is 0700). */
export const controlSocketPath = (dataDir: string): string => join(dataDir, 'control.sock');

/** How long one hold may last before the daemon lets the VM run on by itself. */
export const MAX_HOLD_MS = 3600_000;

const HOLD = /^\/v1\/volumes\/([0-9a-f-]{36})\/hold$/;

/**
 * The daemon's local control socket: what `unihost admin` asks of the
 * daemon that runs this host's VMs (docs/operations.md, "Backups"). One
 * call today: `POST /v1/volumes/<uuid>/hold` pauses the VM that has the
 * volume open (its disks drained and flushed) and keeps boots from
 * attaching it; the answer's first line (JSON) says what was paused, and
 * the hold lasts while the caller keeps the connection open: a backup that
 * dies lets the VM run on at once. Reached through the file system only
 * (a Unix socket in the root-only data dir), so it needs no token.
 */
export class ControlSocket {
  private server: Server | undefined;
  private readonly holds = new Set<ServerResponse>();

  constructor(
    private readonly path: string,
    private readonly machines: MachineController,
    private readonly log: Logger,
  ) {}

  async start(): Promise<void> {
    // a socket file left by a daemon that was killed
    if (existsSync(this.path)) rmSync(this.path, { force: true });
    const server = createServer((req, res) => void this.handle(req, res));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.path, () => resolve());
    });
    this.server = server;
  }

  async stop(): Promise<void> {
    for (const res of this.holds) res.destroy();
    if (this.server) await new Promise<void>((r) => this.server!.close(() => r()));
    rmSync(this.path, { force: true });
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const m = HOLD.exec(req.url ?? '');
    if (req.method !== 'POST' || !m) return answer(res, 404, { message: `no control call ${req.method} ${req.url}` });
    const volumeId = m[1]!;
    let hold: Awaited<ReturnType<MachineController['holdVolume']>>;
    try {
      hold = await this.machines.holdVolume(volumeId);
    } catch (e) {
      return answer(res, 409, { message: (e as Error).message });
    }
    let released = false;
    const release = (why: string): void => {
      if (released) return;
      released = true;
      clearTimeout(timer);
      this.holds.delete(res);
      void hold.release().then(
        () => this.log.info({ volume: volumeId, paused: hold.paused, why }, 'backup hold released'),
        (e: unknown) => this.log.warn({ volume: volumeId, err: e }, 'releasing a backup hold failed'),
      );
      if (!res.writableEnded) res.end();
    };
    const timer = setTimeout(() => release(`held longer than ${MAX_HOLD_MS / 60_000} min`), MAX_HOLD_MS);
    this.holds.add(res);
    // the caller ends the hold by closing the connection (or by dying)
    res.on('close', () => release('the caller closed the connection'));
    res.writeHead(200, { 'content-type': 'application/x-ndjson' });
    res.write(`${JSON.stringify({ held: volumeId, paused: hold.paused })}\n`);
  }
}

function answer(res: ServerResponse, status: number, body: object): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}
