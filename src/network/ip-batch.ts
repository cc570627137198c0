import type { ChildProcess } from 'node:child_process';
import { CommandError } from './cmd.js';
import { startLineProcess } from './line-process.js';

/** A request written to the running `ip`: its last input line, and what failed among its lines. */
interface Pending {
  /** the input line number of its marker */
  end: number;
  first: number;
  lines: string[];
  errors: string[];
  /** its lines that failed */
  failed: string[];
  resolve: () => void;
  reject: (e: Error) => void;
  timer: NodeJS.Timeout;
}

/**
 * How each tool runs batches: its flags, and a marker command whose one line
 * of output says that the lines before it are done. `ip -o link show dev lo`
 * prints lo's line; `bridge -j link show dev lo` prints `[]` (lo is never a
 * bridge port).
 */
const TOOLS = {
  ip: { flags: ['-o', '-force', '-batch', '-'], marker: 'link show dev lo', markerOut: /^\d+: lo[:@]/ },
  bridge: { flags: ['-j', '-force', '-batch', '-'], marker: 'link show dev lo', markerOut: /^\[\]$/ },
} as const;
const FAILED = /^Command failed -:(\d+)$/;

/**
 * One long-lived `ip -o -force -batch -` for the `ip` commands on a boot's
 * path (a tap made, a tap deleted): a new `ip` process costs 5-15 ms per
 * tap (more under load), a few lines to a running one well under 1 ms. The
 * same with `bridge` (`tool`): the hosts' forwarding entries and each tap's
 * pinned MAC, which a spawned `bridge` each cost an agent more CPU than any
 * other of its work (bench/hosts: a third of it, the spawn's fork of the
 * daemon's large process done on its event loop). `ip`
 * answers each input line in order and flushes after each; `-force` goes
 * on after a failed line and names it (`Command failed -:<line number>`,
 * after its message, on stderr: joined to stdout here, so both come in
 * order). So each request is its lines and a marker line whose one line of
 * output says that the request is done, and the failures whose line
 * numbers fall in its range are its own.
 *
 * The process starts at the first request and again after it ended; a
 * request it did not finish (it died, or took longer than `timeoutMs`: it is
 * then killed) fails with a CommandError, as a spawned `ip` would.
 */
export class IpBatch {
  private p: ChildProcess | undefined;
  /** input lines written to the current process */
  private written = 0;
  private readonly pending: Pending[] = [];
  private errLines: string[] = [];
  /** replace the process once its requests are answered (`renew`) */
  private renewing = false;

  constructor(
    /** the command: `['ip']`, or `['ip', 'netns', 'exec', ns, 'ip']` (`bridge` in place of `ip` for that tool) */
    private readonly cmd: string[],
    private readonly timeoutMs: number,
    private readonly tool: keyof typeof TOOLS = 'ip',
  ) {}

  /** Runs `lines` (commands without the leading `ip` or `bridge`); rejects naming the lines that failed. */
  run(lines: string[]): Promise<void> {
    // a request prints nothing when it works: output of its own would be taken for markers
    const bad = lines.find((l) => l.includes('\n') || /^\S+\s+(show|list|get|monitor)\b/.test(l));
    if (bad !== undefined)
      return Promise.reject(new Error(`${this.tool} batch: '${bad}' is not one command that prints nothing`));
    if (lines.length === 0) return Promise.resolve();
    const p = this.process();
    return new Promise<void>((resolve, reject) => {
      const first = this.written + 1;
      this.written += lines.length + 1;
      const timer = setTimeout(() => this.end(p, `no answer in ${this.timeoutMs} ms`, this.timeoutMs), this.timeoutMs);
      this.pending.push({ end: this.written, first, lines, errors: [], failed: [], resolve, reject, timer });
      p.stdin!.write(`${lines.join('\n')}\n${TOOLS[this.tool].marker}\n`);
    });
  }

  /**
   * Replaces the process once the requests it has are answered (at once when
   * it has none): `bridge` keeps the index of every device it named, so a
   * device made again under the same name (the VXLAN port; a tap that a warm
   * restore renamed) is an `unknown ifindex` to it from then on.
   */
  renew(): void {
    if (!this.p) return;
    if (this.pending.length === 0) this.end(this.p, 'renewed');
    else this.renewing = true;
  }

  /** Ends the process; requests under way fail. */
  close(): void {
    if (this.p) this.end(this.p, 'closed');
  }

  private process(): ChildProcess {
    if (this.p) return this.p;
    // stderr into stdout: a failed line's message comes before the next marker, in one ordered stream
    const p: ChildProcess = startLineProcess([...this.cmd, ...TOOLS[this.tool].flags], {
      name: this.tool,
      onLine: (l) => this.line(l),
      onEnd: (why) => this.end(p, why),
    });
    this.p = p;
    this.written = 0;
    this.errLines = [];
    this.renewing = false;
    return p;
  }

  /** One line of output: a marker (the oldest request is done), a failed line's number, or an error message. */
  private line(line: string): void {
    if (TOOLS[this.tool].markerOut.test(line)) {
      const req = this.pending.shift();
      if (!req) return;
      clearTimeout(req.timer);
      if (req.errors.length === 0) req.resolve();
      else req.reject(new BatchError(this.tool, req.errors.join('\n'), req.failed));
      if (this.renewing && this.pending.length === 0 && this.p) this.end(this.p, 'renewed');
      return;
    }
    const m = FAILED.exec(line);
    if (!m) {
      if (this.errLines.length < 20) this.errLines.push(line);
      return;
    }
    const n = Number(m[1]);
    const req = this.pending.find((r) => n >= r.first && n < r.end);
    req?.failed.push(req.lines[n - req.first]!);
    req?.errors.push(`${req.lines[n - req.first]}: ${this.errLines.join('; ') || 'failed'}`);
    this.errLines = [];
  }

  private end(p: ChildProcess, why: string, timeoutMs?: number): void {
    if (this.p !== p) return;
    this.p = undefined;
    p.kill('SIGKILL');
    for (const req of this.pending.splice(0)) {
      clearTimeout(req.timer);
      req.reject(new CommandError([this.tool, '-batch', '-'], null, why, '', timeoutMs));
    }
  }
}

/** A request's failed lines: the error names each with its message; `failed` holds the lines themselves. */
export class BatchError extends CommandError {
  constructor(
    tool: string,
    stderr: string,
    readonly failed: string[],
  ) {
    super([tool, '-batch', '-'], 1, stderr);
  }
}
