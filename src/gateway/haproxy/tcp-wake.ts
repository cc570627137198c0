import net from 'node:net';
import type { Logger } from 'pino';
import type { Backend } from '../types.js';
import { connectWithRetries, type ConnectPolicy } from './connect.js';
import { listenLoopback } from './loopback.js';

interface Target {
  groupId: string;
  destinationPort: number;
}

/**
 * The activator's TCP side: one listener on 127.0.0.1 per TCP backend
 * (slots.ts; a spare one's closes what reaches it), rendered as that
 * backend's `backup` server, so HAProxy sends a connection
 * here only when the group has no usable instance. The connection is held
 * while `onNoBackend(group)` runs (scale to zero wakes an instance there);
 * when it says one runs, the connection is piped to it from here (later ones
 * go through HAProxy, which gets the server at the next sync); otherwise it
 * is closed.
 */
export class TcpWake {
  private readonly listeners = new Map<string, { server: net.Server; port: number; target?: Target }>();

  constructor(
    private readonly o: {
      backends(groupId: string): Backend[];
      onNoBackend?(groupId: string): Promise<boolean>;
      /** a connection piped from here to an instance: open until the returned function is called */
      onForward?(groupId: string, instanceId: string): () => void;
      /** how a woken instance is connected to (HAProxy's own connect timeout and retries) */
      connect: ConnectPolicy;
      log: Logger;
    },
  ) {}

  /** The listener port for a backend, opened on first use; its target follows the latest route (none: a spare). */
  async port(backend: string, target: Target | undefined): Promise<number> {
    const have = this.listeners.get(backend);
    if (have) {
      have.target = target;
      return have.port;
    }
    const entry: { server: net.Server; port: number; target?: Target } = {
      server: net.createServer((c) => void this.hold(c, entry.target)),
      port: 0,
      target,
    };
    entry.port = await listenLoopback(entry.server);
    this.listeners.set(backend, entry);
    return entry.port;
  }

  /** Closes the listeners of backends no longer rendered. */
  keep(backends: Set<string>): void {
    for (const [name, l] of this.listeners) {
      if (backends.has(name)) continue;
      l.server.close();
      this.listeners.delete(name);
    }
  }

  private async hold(client: net.Socket, t: Target | undefined): Promise<void> {
    client.on('error', () => {});
    if (!t) {
      client.destroy();
      return;
    }
    client.pause();
    const woke = this.o.onNoBackend ? await this.o.onNoBackend(t.groupId).catch(() => false) : false;
    const b = woke ? this.o.backends(t.groupId).find((x) => x.state === 'running') : undefined;
    if (!b || client.destroyed) {
      client.destroy();
      return;
    }
    const done = this.o.onForward?.(t.groupId, b.instanceId);
    if (done) client.once('close', done);
    let up: net.Socket;
    try {
      up = await connectWithRetries(b.host, t.destinationPort, {
        ...this.o.connect,
        onRetry: (e) =>
          this.o.log.info(
            { instance: b.instanceId, err: e.message },
            'gateway: a connect to the woken instance is made again',
          ),
      });
    } catch (e) {
      this.o.log.warn(
        { instance: b.instanceId, err: (e as Error).message },
        'gateway: woken instance refused the connection',
      );
      client.destroy();
      return;
    }
    if (client.destroyed) return void up.destroy();
    up.on('error', () => client.destroy());
    client.on('close', () => up.destroy());
    up.on('close', () => client.destroy());
    client.pipe(up);
    up.pipe(client);
    client.resume();
  }

  close(): void {
    for (const l of this.listeners.values()) l.server.close();
    this.listeners.clear();
  }
}
