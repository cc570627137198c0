import { spawn, type ChildProcess } from 'node:child_process';

/**
 * A long-lived command the daemon writes lines to and reads lines from
 * (ip-batch.ts, nft-batch.ts): stderr joined to stdout, so a message comes
 * in order with the output around it; split into lines; never keeping the
 * daemon alive while idle (it ends at EOF when the daemon does). `onEnd`
 * says once why it ended (it died, or `kill`).
 */
export function startLineProcess(
  argv: string[],
  o: { name: string; onLine(line: string): void; onEnd(why: string): void; env?: NodeJS.ProcessEnv },
): ChildProcess {
  const p = spawn('/bin/sh', ['-c', 'exec "$@" 2>&1', 'sh', ...argv], {
    stdio: ['pipe', 'pipe', 'ignore'],
    ...(o.env ? { env: o.env } : {}),
  });
  p.stdin!.on('error', () => undefined); // it died: 'close' says so
  // an idle process keeps no event loop alive (a request's timer does while it runs)
  p.unref();
  for (const s of [p.stdin, p.stdout] as unknown as { unref?: () => void }[]) s.unref?.();
  let out = '';
  p.stdout!.setEncoding('utf8').on('data', (d: string) => {
    out += d;
    for (let nl = out.indexOf('\n'); nl >= 0; nl = out.indexOf('\n')) {
      const line = out.slice(0, nl);
      out = out.slice(nl + 1);
      o.onLine(line);
    }
  });
  let ended = false;
  const end = (why: string) => {
    if (ended) return;
    ended = true;
    o.onEnd(why);
  };
  p.on('error', (e) => end(e.message));
  p.on('close', (code) => end(`${o.name} ended (${code ?? 'signal'})`));
  return p;
}
