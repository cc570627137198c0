import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { existsSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { timingSafeEqual } from 'node:crypto';
import type { Logger } from 'pino';
import type { ConsoleReader } from './figures.js';

const CONSOLE = /^\/agent\/v1\/consoles\/([0-9a-f-]{36})\?offset=(-?\d{1,15})&limit=(\d{1,9})$/;

/**
 * What an agent with a host address serves to the API servers of other
 * hosts (docs/hosts.md, "Console logs"): the console logs it keeps of the
 * instances it ran, `GET /agent/v1/consoles/<uuid>?offset=&limit=`, with
 * the API's offset semantics. The caller proves it reads the store: it
 * sends the host's agent key (`hosts.holder`, kept in the store) as a bearer
 * token. Listens on the host's address only.
 */
export class AgentServer {
  private server: Server | undefined;

  constructor(
    private readonly o: {
      address: string;
      port: number;
      /** the agent key (`<data dir>/host.key`): the bearer token callers send */
      key: string;
      consoles: ConsoleReader;
      /** whether the instance's directory exists here (unknown ids get a 404, and no directory is made) */
      known: (instanceId: string) => boolean;
      log: Logger;
    },
  ) {}

  /** Listens; resolves with the port (the configured one, or the one the kernel chose for 0). */
  async start(): Promise<number> {
    const server = createServer((req, res) => void this.handle(req, res));
    server.headersTimeout = 10_000;
    server.requestTimeout = 30_000;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.o.port, this.o.address, () => resolve());
    });
    this.server = server;
    return (server.address() as AddressInfo).port;
  }

  async stop(): Promise<void> {
    const s = this.server;
    if (!s) return;
    s.closeAllConnections();
    await new Promise<void>((r) => s.close(() => r()));
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    try {
      const auth = Buffer.from(req.headers.authorization ?? '');
      const want = Buffer.from(`Bearer ${this.o.key}`);
      if (auth.length !== want.length || !timingSafeEqual(auth, want)) return answer(res, 401, { message: 'bad key' });
      const m = CONSOLE.exec(req.url ?? '');
      if (req.method !== 'GET' || !m) return answer(res, 404, { message: `no agent call ${req.method} ${req.url}` });
      const id = m[1]!;
      if (!this.o.known(id)) return answer(res, 404, { message: `no console log of instance ${id} on this host` });
      const c = await this.o.consoles.read(id, Number(m[2]), Number(m[3]));
      answer(res, 200, { output: c.output.toString('base64'), available: c.available, range: c.range });
    } catch (e) {
      this.o.log.warn({ err: e }, 'agent server: a console read failed');
      answer(res, 500, { message: (e as Error).message });
    }
  }
}

function answer(res: ServerResponse, status: number, body: object): void {
  res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
}

/** The instance directory test of a data dir's layout, for `AgentServer.known`. */
export const hasInstanceDir =
  (dirOf: (id: string) => string) =>
  (id: string): boolean =>
    existsSync(dirOf(id));
