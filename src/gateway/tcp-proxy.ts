import net from 'node:net';
import type { Ctx } from './context.js';
import type { Backend, Route } from './types.js';

/**
 * Connects to a running backend of the route's group, trying the next one
 * when a connect fails (nothing was sent yet, so that is always safe).
 * Resolves undefined when no backend could be reached; `tried` tells whether
 * any was tried (502) or none was running (503).
 */
export async function dialBackend(
  ctx: Ctx,
  route: Route,
  isGone: () => boolean,
): Promise<{ backend: Backend; socket: net.Socket } | { tried: number }> {
  const exclude = new Set<string>();
  for (;;) {
    const b = await ctx.balancer.pickOrWake(route.groupId, exclude);
    if (!b || isGone()) return { tried: exclude.size };
    try {
      return { backend: b, socket: await connect(b.host, route.destinationPort, ctx.limits.connectTimeoutMs) };
    } catch (e) {
      exclude.add(b.instanceId);
      ctx.log.warn(
        {
          group: route.groupId,
          instance: b.instanceId,
          backend: `${b.host}:${route.destinationPort}`,
          err: (e as Error).message,
        },
        'gateway: backend connect failed, trying another',
      );
    }
  }
}

function connect(host: string, port: number, timeoutMs: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const s = net.connect({ host, port, noDelay: true });
    const timer = setTimeout(() => s.destroy(new Error(`connect timeout after ${timeoutMs} ms`)), timeoutMs);
    s.once('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    s.once('connect', () => {
      clearTimeout(timer);
      s.removeAllListeners('error');
      resolve(s);
    });
  });
}

/**
 * Pipes two sockets both ways with backpressure, counting bytes into the
 * group's and instance's counters, until either side closes, errors or
 * stays silent for `idleMs`; then both are destroyed and `done` runs once.
 */
export function splice(
  ctx: Ctx,
  groupId: string,
  instanceId: string,
  client: net.Socket,
  upstream: net.Socket,
  idleMs: number,
  done: () => void,
): void {
  const g = ctx.stats.group(groupId);
  const i = ctx.stats.instance(groupId, instanceId);
  let finished = false;
  const finish = (): void => {
    if (finished) return;
    finished = true;
    client.destroy();
    upstream.destroy();
    done();
  };
  client.on('data', (d: Buffer) => {
    g.bytesIn += d.length;
    i.bytesIn += d.length;
    g.lastActivity = i.lastActivity = Date.now();
  });
  upstream.on('data', (d: Buffer) => {
    g.bytesOut += d.length;
    i.bytesOut += d.length;
    g.lastActivity = i.lastActivity = Date.now();
  });
  client.pipe(upstream);
  upstream.pipe(client);
  for (const s of [client, upstream]) {
    s.on('error', finish);
    s.on('close', finish);
    s.setTimeout(idleMs, finish);
  }
}

/** TCP mode: one client connection is one backend connection (per-connection balancing). */
export async function proxyTcp(ctx: Ctx, route: Route, client: net.Socket): Promise<void> {
  let gone = false;
  const onEarlyClose = (): void => {
    gone = true;
  };
  client.once('close', onEarlyClose);
  client.on('error', () => {}); // reported through 'close'
  const r = await dialBackend(ctx, route, () => gone);
  client.removeListener('close', onEarlyClose);
  if (!('backend' in r)) {
    if (!gone) {
      ctx.log.warn(
        { group: route.groupId, port: route.port, tried: r.tried },
        'gateway: no backend for TCP connection',
      );
    }
    client.destroy();
    return;
  }
  if (gone) {
    r.socket.destroy();
    return;
  }
  const { backend, socket } = r;
  const release = ctx.stats.acquire(route.groupId, backend.instanceId, () => {
    socket.destroy();
    client.destroy();
  });
  splice(ctx, route.groupId, backend.instanceId, client, socket, ctx.limits.tcpIdleTimeoutMs, release);
}
