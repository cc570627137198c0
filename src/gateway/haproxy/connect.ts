import net from 'node:net';

export interface ConnectPolicy {
  /** time each try may take */
  timeoutMs: number;
  /** further tries after a failed one (a new connection, so a new source port, each) */
  retries: number;
  /** pause before trying again after a refusal (a timeout is tried again at once) */
  refusedDelayMs?: number;
  /** told of each try that failed and is made again */
  onRetry?: (e: Error) => void;
}

/**
 * Connects to an instance the way HAProxy's backends do (`timeout connect`
 * and `retries`, GatewayLimits): a try that is not answered within
 * `timeoutMs` is given up and made again from a new source port. lwIP
 * ignores a SYN from a source port it still holds in TIME_WAIT, and a
 * restored guest still holds those of its life before the snapshot
 * (docs/network.md, "Connections to guests"), so one unanswered connect must
 * not hold a woken request for the kernel's whole SYN back-off (over 2
 * minutes). Resolves with the connected socket; rejects with the last error.
 */
export function connectWithRetries(
  host: string,
  port: number,
  p: ConnectPolicy,
  dial: (o: { host: string; port: number }) => net.Socket = net.connect,
): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    let left = p.retries;
    const attempt = (): void => {
      const s = dial({ host, port });
      const timer = setTimeout(
        () => fail(new Error(`no answer from ${host}:${port} within ${p.timeoutMs} ms`)),
        p.timeoutMs,
      );
      const fail = (e: Error): void => {
        clearTimeout(timer);
        s.removeAllListeners('connect');
        s.on('error', () => {}); // late errors of a socket given up
        s.destroy();
        if (left-- <= 0) return reject(e);
        p.onRetry?.(e);
        const refused = (e as NodeJS.ErrnoException).code === 'ECONNREFUSED';
        setTimeout(attempt, refused ? (p.refusedDelayMs ?? 1000) : 0);
      };
      s.once('error', fail);
      s.once('connect', () => {
        clearTimeout(timer);
        s.removeListener('error', fail);
        resolve(s);
      });
    };
    attempt();
  });
}
