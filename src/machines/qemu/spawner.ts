/**
 * Starts VMMs through a long-lived helper that uses posix_spawn
 * (libexec/unihost-spawner.py) instead of `child_process.spawn`, which forks
 * the daemon: copying the daemon's page tables costs 8-18 ms per VM on the
 * machines unihost was measured on (docs/benchmarks.md), all of it on the
 * event loop and on the way to the guest's first instruction; posix_spawn
 * (a vfork) costs about 0.5 ms. The helper reaps its children and reports
 * how they ended, as a child's `exit` event would.
 *
 * Where python3 is missing the driver forks as before (`Spawner.usable`).
 * If the helper itself ends, the VMs it started live on (they are no one's
 * children then, as after a daemon restart): `lost` is called for each, and
 * the next start runs a new helper.
 */
import { spawn, spawnSync, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { closeSync, existsSync, openSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

export const SPAWNER_SCRIPT = fileURLToPath(new URL('../../../libexec/unihost-spawner.py', import.meta.url));
const PYTHON = '/usr/bin/python3';
let usable: boolean | undefined;

export interface ChildEnd {
  code: number | null;
  signal: NodeJS.Signals | null;
}

interface Started {
  resolve(pid: number): void;
  reject(e: Error): void;
}

export class Spawner {
  private proc: ChildProcessWithoutNullStreams | null = null;
  private seq = 0;
  private readonly starting = new Map<number, Started>();
  private readonly children = new Map<number, (end: ChildEnd) => void>();
  private closed = false;

  /**
   * @param lost called with the pid of each child still running when the helper ended
   * @param ended called once per helper that ended by itself (not by `close`), with the reason
   */
  constructor(
    private readonly lost: (pid: number) => void,
    private readonly ended?: (why: string) => void,
  ) {}

  /** Whether this host has what the helper needs (python3 3.9+ with posix_spawnp and pidfd_open); checked once. */
  static usable(): boolean {
    return (usable ??=
      existsSync(PYTHON) &&
      existsSync(SPAWNER_SCRIPT) &&
      spawnSync(PYTHON, ['-c', 'import os; os.posix_spawnp; os.pidfd_open'], { stdio: 'ignore' }).status === 0);
  }

  /**
   * Starts `argv` (stdin and stdout /dev/null, stderr the file `stderr`, fd 3
   * the file `fd3` if given, a session of its own); resolves its pid once it
   * runs, or rejects as `spawn` would (e.g. ENOENT). `onExit` is called once
   * when it ends (not if the helper ends first: then `lost` is).
   */
  start(argv: string[], o: { stderr: string; fd3?: string }, onExit: (end: ChildEnd) => void): Promise<number> {
    if (this.closed) return Promise.reject(new Error('the spawner is closed'));
    const p = this.helper();
    const n = ++this.seq;
    return new Promise<number>((resolve, reject) => {
      this.starting.set(n, {
        resolve: (pid) => {
          this.children.set(pid, onExit);
          resolve(pid);
        },
        reject,
      });
      // an answer awaited keeps the process alive; an idle helper does not
      if (this.starting.size === 1) this.hold(p, true);
      p.stdin.write(JSON.stringify({ n, argv, stderr: o.stderr, fd3: o.fd3 ?? null }) + '\n');
    });
  }

  /** The helper's pid while it runs (tests, diagnostics). */
  get helperPid(): number | undefined {
    return this.proc?.pid;
  }

  /** Ends the helper (the VMs it started live on). */
  close(): void {
    this.closed = true;
    this.proc?.stdin.end();
  }

  private helper(): ChildProcessWithoutNullStreams {
    if (this.proc) return this.proc;
    const p = spawn(PYTHON, ['-I', '-S', SPAWNER_SCRIPT], { stdio: ['pipe', 'pipe', 'pipe'] });
    this.proc = p;
    let stderr = '';
    p.stderr.on('data', (b: Buffer) => (stderr = (stderr + b.toString()).slice(-2000)));
    createInterface({ input: p.stdout }).on('line', (line) => this.onLine(line));
    const ended = (why: string) => {
      if (this.proc !== p) return;
      this.proc = null;
      const e = new Error(`the VM spawner ended (${why})${stderr ? `: ${stderr.trim()}` : ''}`);
      if (!this.closed) this.ended?.(e.message);
      for (const s of this.starting.values()) s.reject(e);
      this.starting.clear();
      const pids = [...this.children.keys()];
      this.children.clear();
      for (const pid of pids) this.lost(pid);
    };
    p.once('error', (e) => ended(e.message));
    p.once('exit', (code, signal) => ended(signal ?? `exit status ${code}`));
    // a write to a helper that just ended: its `exit` handles the requests
    p.stdin.on('error', () => undefined);
    this.hold(p, false);
    return p;
  }

  /** Whether the helper keeps the daemon's process alive: only while an answer is awaited. */
  private hold(p: ChildProcessWithoutNullStreams, on: boolean): void {
    if (on) p.ref();
    else p.unref();
    for (const s of [p.stdin, p.stdout, p.stderr] as unknown as { ref(): void; unref(): void }[])
      if (on) s.ref();
      else s.unref();
  }

  private onLine(line: string): void {
    let m: { n?: number; pid?: number; error?: string; exit?: number; code?: number | null; signal?: string | null };
    try {
      m = JSON.parse(line) as typeof m;
    } catch {
      return;
    }
    if (m.n !== undefined) {
      const s = this.starting.get(m.n);
      this.starting.delete(m.n);
      if (this.starting.size === 0 && this.proc) this.hold(this.proc, false);
      if (m.pid !== undefined) s?.resolve(m.pid);
      else s?.reject(Object.assign(new Error(m.error ?? 'spawn failed'), { code: 'SPAWN' }));
    } else if (m.exit !== undefined) {
      const cb = this.children.get(m.exit);
      this.children.delete(m.exit);
      cb?.({ code: m.code ?? null, signal: (m.signal ?? null) as NodeJS.Signals | null });
    }
  }
}

/**
 * Starts a VMM the way the driver starts every one (stdin and stdout
 * /dev/null, stderr the file `stderr`, fd 3 the file `fd3` if given, a
 * session of its own): through `spawner` when there is one, else by a fork
 * of the daemon. Resolves its pid. `onEnd` gets its exit status, never
 * before the caller's code that follows the `await` ran: a VMM that ends at
 * once is reported after its caller has recorded it.
 */
export async function launch(
  spawner: Spawner | null | undefined,
  argv: string[],
  o: { stderr: string; fd3?: string },
  onEnd: (code: number | null) => void,
): Promise<number> {
  let known = false;
  let early: { code: number | null } | undefined;
  const end = (code: number | null) => (known ? onEnd(code) : (early = { code }));
  const pid = spawner ? await spawner.start(argv, o, ({ code }) => end(code)) : await forkVmm(argv, o, end);
  known = true;
  if (early) setImmediate(() => onEnd(early!.code));
  return pid;
}

/** `launch` by a fork of the daemon (`child_process.spawn`, detached). */
async function forkVmm(
  argv: string[],
  o: { stderr: string; fd3?: string },
  onEnd: (code: number | null) => void,
): Promise<number> {
  const err = openSync(o.stderr, 'w');
  let fd3: number | undefined;
  let child;
  try {
    if (o.fd3 !== undefined) fd3 = openSync(o.fd3, 'r');
    const stdio = ['ignore', 'ignore', err, ...(fd3 === undefined ? [] : [fd3])];
    child = spawn(argv[0]!, argv.slice(1), { detached: true, stdio: stdio as ('ignore' | number)[] });
  } finally {
    closeSync(err);
    if (fd3 !== undefined) closeSync(fd3);
  }
  const c = child;
  const pid = await new Promise<number>((resolve, reject) => {
    c.once('spawn', () => resolve(c.pid!));
    c.once('error', reject);
  });
  c.unref();
  c.once('exit', (code) => onEnd(code));
  return pid;
}
