import { spawn } from 'node:child_process';

/** Runs one host command (never through a shell); resolves with its stdout. */
export type Runner = (argv: string[], input?: string) => Promise<string>;

/** `ip` and `nft` answer in milliseconds; longer means they hang (a stuck netlink lock, a wedged module). */
export const NET_COMMAND_TIMEOUT_MS = 15_000;
/** `mkfs.ext4` and `e2fsck -fn` on the largest allowed volume, on a slow disk, with a wide margin. */
export const FS_COMMAND_TIMEOUT_MS = 300_000;
/** Output kept per stream: enough for any answer the daemon parses, bounded whatever a command prints. */
const MAX_OUTPUT = 8 * 1024 * 1024;

export class CommandError extends Error {
  constructor(
    readonly argv: string[],
    /** exit status; null when the command did not start, was killed or timed out */
    readonly code: number | null,
    readonly stderr: string,
    readonly stdout = '',
    /** set when the command was killed at its deadline */
    readonly timeoutMs?: number,
  ) {
    super(
      timeoutMs !== undefined
        ? `${argv.join(' ')} timed out after ${timeoutMs} ms (killed with its process group)`
        : `${argv.join(' ')} failed (${code ?? 'signal'}): ${stderr.trim() || 'no output'}`,
    );
  }
}

export interface RunOptions {
  /** written to the command's stdin (else stdin is /dev/null) */
  input?: string;
  /** the command and everything it started are killed after this long */
  timeoutMs: number;
}

/**
 * Runs a host command with a deadline. The command gets its own process
 * group, so a timeout kills it and whatever it spawned (`ip netns exec`
 * wrappers, helpers), and the caller gets a CommandError naming the command
 * instead of a promise that never settles.
 */
export function runCommand(argv: string[], o: RunOptions): Promise<{ stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const p = spawn(argv[0]!, argv.slice(1), {
      stdio: [o.input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
      detached: true,
    });
    let out = '';
    let errText = '';
    let timedOut = false;
    const keep = (acc: string, d: string): string => (acc.length < MAX_OUTPUT ? acc + d : acc);
    p.stdout!.setEncoding('utf8').on('data', (d: string) => (out = keep(out, d)));
    p.stderr!.setEncoding('utf8').on('data', (d: string) => (errText = keep(errText, d)));
    const timer = setTimeout(() => {
      timedOut = true;
      try {
        process.kill(-p.pid!, 'SIGKILL');
      } catch {
        // already gone
      }
    }, o.timeoutMs);
    p.on('error', (e) => {
      clearTimeout(timer);
      reject(new CommandError(argv, null, e.message));
    });
    p.on('close', (code) => {
      clearTimeout(timer);
      if (timedOut) reject(new CommandError(argv, null, errText, out, o.timeoutMs));
      else if (code === 0) resolve({ stdout: out, stderr: errText });
      else reject(new CommandError(argv, code, errText, out));
    });
    if (p.stdin) {
      // a command that exits before reading its input must not crash the daemon (EPIPE)
      p.stdin.on('error', () => undefined);
      p.stdin.end(o.input);
    }
  });
}

/**
 * The default runner. With `netns`, every command runs inside that named
 * network namespace (`ip netns exec`), which is how tests and benchmarks keep
 * all traffic inside a namespace they own.
 */
export function hostRunner(netns?: string, timeoutMs = NET_COMMAND_TIMEOUT_MS): Runner {
  return async (argv, input) => {
    const full = netns ? ['ip', 'netns', 'exec', netns, ...argv] : argv;
    return (await runCommand(full, { input, timeoutMs })).stdout;
  };
}
