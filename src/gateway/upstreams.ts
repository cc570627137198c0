import { Pool } from 'undici';
import type { GatewayLimits } from './types.js';

interface Entry {
  pool: Pool;
  instanceId: string;
  lastUsed: number;
}

/** Pools unused this long are closed, so that stopped instances leave no sockets behind. */
const UNUSED_MS = 60_000;

/**
 * Keep-alive connection pools to backends, one undici Pool per
 * (instance address, destination port). Pools are created on first use and
 * closed when unused, when their instance is cut off, or at shutdown.
 */
export class Upstreams {
  private readonly pools = new Map<string, Entry>();
  private readonly timer: NodeJS.Timeout;

  constructor(private readonly limits: GatewayLimits) {
    this.timer = setInterval(() => this.sweep(), UNUSED_MS / 2);
    this.timer.unref();
  }

  get(instanceId: string, host: string, port: number): Pool {
    const key = `${host}:${port}`;
    let e = this.pools.get(key);
    if (!e || e.instanceId !== instanceId) {
      // The same address may now belong to a new instance (IPs are reused): start afresh.
      if (e) void e.pool.destroy().catch(() => {});
      e = { pool: this.create(host, port), instanceId, lastUsed: 0 };
      this.pools.set(key, e);
    }
    e.lastUsed = Date.now();
    return e.pool;
  }

  private create(host: string, port: number): Pool {
    const l = this.limits;
    return new Pool(`http://${host.includes(':') ? `[${host}]` : host}:${port}`, {
      connections: l.upstreamConnections,
      pipelining: 1,
      connect: { timeout: l.connectTimeoutMs, noDelay: true },
      headersTimeout: l.upstreamHeadersTimeoutMs,
      bodyTimeout: l.idleTimeoutMs,
      maxHeaderSize: l.maxHeaderSize * 4,
      keepAliveTimeout: 4_000,
      keepAliveMaxTimeout: 60_000,
    });
  }

  /** Closes the instance's pools: idle sockets at once, busy ones after their request (graceful). */
  closeInstance(instanceId: string, destroy = false): void {
    for (const [key, e] of this.pools) {
      if (e.instanceId !== instanceId) continue;
      this.pools.delete(key);
      void (destroy ? e.pool.destroy() : e.pool.close()).catch(() => {});
    }
  }

  private sweep(): void {
    const old = Date.now() - UNUSED_MS;
    for (const [key, e] of this.pools) {
      if (e.lastUsed >= old) continue;
      this.pools.delete(key);
      void e.pool.close().catch(() => {});
    }
  }

  async close(): Promise<void> {
    clearInterval(this.timer);
    const all = [...this.pools.values()];
    this.pools.clear();
    await Promise.all(all.map((e) => e.pool.destroy().catch(() => {})));
  }
}
