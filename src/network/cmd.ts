import { spawn } from 'node:child_process';

/** Runs one host command (never through a shell); resolves with its stdout. */
export type Runner = (argv: string[], input?: string) => Promise<string>;

export class CommandError extends Error {
  constructor(
    readonly argv: string[],
    readonly code: number | null,
    readonly stderr: string,
  ) {
    super(`${argv.join(' ')} failed (${code ?? 'signal'}): ${stderr.trim() || 'no output'}`);
  }
}

/**
 * The default runner. With `netns`, every command runs inside that named
 * network namespace (`ip netns exec`), which is how tests and benchmarks keep
 * all traffic inside a namespace they own.
 */
export function hostRunner(netns?: string): Runner {
  return (argv, input) =>
    new Promise((resolve, reject) => {
      const full = netns ? ['ip', 'netns', 'exec', netns, ...argv] : argv;
      const p = spawn(full[0]!, full.slice(1), { stdio: [input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'] });
      let out = '';
      let errText = '';
      p.stdout!.setEncoding('utf8').on('data', (d: string) => (out += d));
      p.stderr!.setEncoding('utf8').on('data', (d: string) => (errText += d));
      p.on('error', (e) => reject(new CommandError(full, null, e.message)));
      p.on('close', (code) => (code === 0 ? resolve(out) : reject(new CommandError(full, code, errText))));
      if (p.stdin) {
        // a command that exits before reading its input must not crash the daemon (EPIPE)
        p.stdin.on('error', () => undefined);
        p.stdin.end(input);
      }
    });
}
