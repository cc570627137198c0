import type { ChildProcess } from 'node:child_process';
import { CommandError } from './cmd.js';
import { startLineProcess } from './line-process.js';

/** A script written to the running `nft`, waiting for its marker. */
interface Pending {
  errors: string[];
  /** the script's line as nft echoed it after an error (the carets below it point into it) */
  echo?: string;
  resolve: () => void;
  reject: (e: Error) => void;
  timer: NodeJS.Timeout;
}

/** A command that prints one fixed line and touches nothing: the marker that the script before it is done. */
const MARKER = 'describe meta mark';
const MARKER_OUT = /^meta expression, datatype mark\b/;

/**
 * One long-lived `nft -i` for the ruleset updates on a boot's path (a tap
 * admitted): a new `nft` process spawned by the daemon costs 15-25 ms here
 * (most of it the fork of a large process), a script written to a running
 * one a few ms. `nft -i` runs each input line as one transaction (all of it
 * or nothing) and prints a failed line's `Error:` message, on stderr
 * (joined to stdout here, so it comes before the next marker). So a script
 * is sent as one line (its lines joined by `;`, which nft reads as it reads
 * newlines), followed by a marker line whose one line of output says the
 * script is done.
 *
 * The process starts at the first script and again after it ended; a script
 * it did not finish (it died, or took longer than `timeoutMs`: it is then
 * killed) fails with a CommandError, as a spawned `nft -f -` would.
 */
export class NftBatch {
  private p: ChildProcess | undefined;
  private readonly pending: Pending[] = [];

  constructor(
    /** the command: `['nft']`, or `['ip', 'netns', 'exec', ns, 'nft']` */
    private readonly cmd: string[],
    private readonly timeoutMs: number,
  ) {}

  /** The running `nft`'s pid (none before the first script or after it ended). */
  get pid(): number | undefined {
    return this.p?.pid;
  }

  /** Whether `script` can be sent as one line: no comments (`#` would end the line's commands). */
  static fits(script: string): boolean {
    return !script.includes('#');
  }

  /** Applies `script` (what `nft -f -` reads) as one transaction; rejects with nft's message. */
  run(script: string): Promise<void> {
    if (!NftBatch.fits(script)) return Promise.reject(new Error('nft batch: a script with comments'));
    const line = script
      .split('\n')
      .map((l) => l.trim())
      .filter(Boolean)
      .join('; ');
    if (!line) return Promise.resolve();
    const p = this.process();
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => this.end(p, `no answer in ${this.timeoutMs} ms`, this.timeoutMs), this.timeoutMs);
      this.pending.push({ errors: [], resolve, reject, timer });
      p.stdin!.write(`${line}\n${MARKER}\n`);
    });
  }

  /** Ends the process; scripts under way fail. */
  close(): void {
    if (this.p) this.end(this.p, 'closed');
  }

  private process(): ChildProcess {
    if (this.p) return this.p;
    // stderr into stdout: a failed script's message comes before its marker, in one ordered stream.
    // HOME: `nft -i` keeps a history of its input lines in $HOME/.nft.history (whole rulesets here);
    // under /dev/null it can neither read nor write one
    const p: ChildProcess = startLineProcess([...this.cmd, '-i'], {
      name: 'nft',
      onLine: (l) => this.line(l),
      onEnd: (why) => this.end(p, why),
      env: { ...process.env, HOME: '/dev/null' },
    });
    this.p = p;
    return p;
  }

  /** One line of output: a marker (the oldest script is done), or part of its error message. */
  private line(l: string): void {
    const req = this.pending[0];
    if (MARKER_OUT.test(l)) {
      this.pending.shift();
      if (!req) return;
      clearTimeout(req.timer);
      if (req.errors.length === 0) req.resolve();
      else req.reject(new CommandError(['nft', '-i'], 1, req.errors.join('\n')));
      return;
    }
    if (!req) return;
    // `Error: ...`, then the script's line and carets under the fault: the message and the text at the carets
    if (l.startsWith('Error:') || req.errors.length === 0) {
      if (req.errors.length < 4) req.errors.push(l.slice(0, 500));
    } else if (/^\s*\^[~^]*\s*$/.test(l) && req.echo !== undefined) {
      const at = l.indexOf('^');
      req.errors.push(`at: ...${req.echo.slice(Math.max(0, at - 60), at + 60)}...`);
      req.echo = undefined;
    } else req.echo = l;
  }

  private end(p: ChildProcess, why: string, timeoutMs?: number): void {
    if (this.p !== p) return;
    this.p = undefined;
    p.kill('SIGKILL');
    for (const req of this.pending.splice(0)) {
      clearTimeout(req.timer);
      req.reject(new CommandError(['nft', '-i'], null, why, '', timeoutMs));
    }
  }
}
