import { request } from 'undici';
import { err } from '../errors.js';
import type { ConsoleChunk, ConsoleReader } from '../figures.js';
import type { Store } from '../store/types.js';

/** How long an API server waits for another host's agent to answer a console read. */
const REMOTE_TIMEOUT_MS = 5000;

/**
 * Console logs wherever they are kept (docs/hosts.md, "Console logs"): the
 * host that ran an instance keeps its log. This process's own host (or a
 * single host, or a host without an address) is read from the data dir;
 * another host's agent is asked over the hosts' network
 * (src/agent-server.ts), with its agent key from the store as the token.
 */
export class HostConsoles implements ConsoleReader {
  constructor(
    private readonly o: {
      store: Store;
      /** this process's host ('' without the agent role): read locally */
      hostId: () => string;
      local: ConsoleReader;
    },
  ) {}

  async read(instanceId: string, offset: number, limit: number, hostId?: string | null): Promise<ConsoleChunk> {
    // this host's own instances (a single host's all) are read without a store read
    if (hostId === null || (hostId !== undefined && hostId === this.o.hostId()))
      return this.o.local.read(instanceId, offset, limit);
    const host = await this.o.store.read(async (tx) => {
      const at = hostId ?? (await tx.instances.getAny(instanceId))?.host_id;
      return at ? tx.hosts.get(at) : undefined;
    });
    if (!host || host.id === this.o.hostId() || !host.address || !host.agent_port || !host.holder)
      return this.o.local.read(instanceId, offset, limit);
    const addr = host.address.includes(':') ? `[${host.address}]` : host.address;
    const url = `http://${addr}:${host.agent_port}/agent/v1/consoles/${instanceId}?offset=${offset}&limit=${limit}`;
    let status: number;
    let body: {
      output?: string;
      available?: ConsoleChunk['available'];
      range?: ConsoleChunk['range'];
      message?: string;
    };
    try {
      const r = await request(url, {
        headers: { authorization: `Bearer ${host.holder}` },
        headersTimeout: REMOTE_TIMEOUT_MS,
        bodyTimeout: REMOTE_TIMEOUT_MS,
      });
      status = r.statusCode;
      body = (await r.body.json()) as typeof body;
    } catch (e) {
      throw err(
        'UH_UNAVAILABLE',
        `the console log is kept by host '${host.name}' (${host.address}), which did not answer: ${(e as Error).message}`,
      );
    }
    if (status === 404) {
      // the instance never ran there (or its directory went): nothing logged yet
      const none = { start: 0, end: 0 };
      return { output: Buffer.alloc(0), available: none, range: none };
    }
    if (status !== 200 || body.output === undefined || !body.available || !body.range)
      throw err('UH_UNAVAILABLE', `host '${host.name}' could not read the console log: ${body.message ?? status}`);
    return { output: Buffer.from(body.output, 'base64'), available: body.available, range: body.range };
  }
}
