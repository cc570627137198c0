import { connect } from 'node:net';

/**
 * Resolves when `host:port` accepts a TCP connection, trying every
 * `intervalMs` (default 2: a guest's port opens between two tries, and the
 * wait for the next one is on the boot's path) until `signal` aborts (then
 * it rejects with the abort reason). A try of a port that is not open yet
 * is a SYN answered by a RST: no connection is left in the guest.
 * Each try opens and closes a connection without sending a byte, so the
 * application sees at most an empty connection (docs/guest-contract.md §6).
 */
export function waitForPort(
  host: string,
  port: number,
  signal: AbortSignal,
  o: { intervalMs?: number; connectTimeoutMs?: number } = {},
): Promise<void> {
  const interval = o.intervalMs ?? 2;
  const connectTimeout = o.connectTimeoutMs ?? 100;
  return new Promise((resolve, reject) => {
    let timer: NodeJS.Timeout | undefined;
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const attempt = (): void => {
      if (signal.aborted) return;
      const s = connect({ host, port });
      s.setTimeout(connectTimeout);
      const retry = (): void => {
        s.destroy();
        if (!signal.aborted) timer = setTimeout(attempt, interval);
      };
      s.once('connect', () => {
        s.destroy();
        signal.removeEventListener('abort', onAbort);
        resolve();
      });
      s.once('error', retry);
      s.once('timeout', retry);
    };
    if (signal.aborted) return reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    attempt();
  });
}
