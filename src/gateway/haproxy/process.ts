import net from 'node:net';
import { spawn, execFile, type ChildProcess } from 'node:child_process';
import { readdir, readFile, rm } from 'node:fs/promises';
import { promisify } from 'node:util';
import type { Logger } from 'pino';
import type { PlaneFiles } from './config.js';
import { RuntimeApi } from './runtime.js';
import { cpuWeightGroup, joinCgroup } from '../../machines/cgroups.js';

const run = promisify(execFile);
export const HAPROXY_BIN = process.env.UNIHOST_HAPROXY ?? '/usr/sbin/haproxy';

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * Whether `pid` is a HAProxy serving `config` (its command line, from
 * /proc): a pid file outlives its process, and the number may belong to
 * any other process by now. Serving: master-worker mode (`-W`, which its
 * workers inherit), not a `haproxy -c` checking the file before a reload.
 */
export async function isHaproxyOf(pid: number, config: string): Promise<boolean> {
  const argv = (await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '')).split('\0');
  const f = argv.indexOf('-f');
  return /(^|\/)haproxy$/.test(argv[0] ?? '') && f > 0 && argv[f + 1] === config && argv.includes('-W');
}

/**
 * HAProxy processes of `config` other than `keep` and its children: a
 * master started by a daemon killed before HAProxy wrote its pid file, or
 * the workers of a master that died, would otherwise serve the same ports
 * beside the one this daemon runs (SO_REUSEPORT lets both bind).
 */
export async function strayHaproxies(config: string, keep = 0): Promise<number[]> {
  const out: number[] = [];
  for (const e of await readdir('/proc').catch(() => [] as string[])) {
    const pid = Number(e);
    if (!Number.isInteger(pid) || pid <= 0 || pid === keep || pid === process.pid) continue;
    if (!(await isHaproxyOf(pid, config))) continue;
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    if (keep > 0 && ppid === keep) continue;
    out.push(pid);
  }
  return out;
}

/**
 * One HAProxy in master-worker mode (`-W -S <master socket>`), started
 * detached so that it outlives a daemon crash: the next daemon adopts it
 * through its pid file and master socket instead of starting another.
 * Configuration changes go through the master's `reload` (the old worker
 * finishes its connections, the new one takes the listeners over the admin
 * socket's `expose-fd listeners`).
 */
export class HaproxyProcess {
  readonly admin: RuntimeApi;
  readonly master: RuntimeApi;
  private child: ChildProcess | null = null;
  private masterPid = 0;
  /** set by stop(): an exit is then expected */
  private stopping = false;
  /** the last 4000 characters HAProxy wrote to stderr, and how many it wrote in all (a master we started only) */
  private errTail = '';
  private errWritten = 0;
  onExit: (() => void) | null = null;
  /** `cgroup.procs` of the gateway's CPU group, once made; a refusal is said once */
  private cpuGroup = '';
  private saidNoCpuGroup = false;

  /**
   * `cpuWeight`: HAProxy's processes go into the cgroup `unihost-gateway`
   * with this CPU weight (cgroup v2's scale; 100 = a plain process's share),
   * beside the VMs' `unihost/`: when tenant VMs keep the cores busy, the
   * gateway that serves every tenant still gets its share (docs/gateway.md).
   */
  constructor(
    private readonly f: PlaneFiles,
    private readonly log: Logger,
    private readonly cpuWeight = 0,
    private readonly logErrors = false,
  ) {
    this.admin = new RuntimeApi(f.admin);
    this.master = new RuntimeApi(f.master);
  }

  get pid(): number {
    return this.masterPid;
  }

  /** Checks the configuration file without touching the running process. */
  async check(): Promise<void> {
    try {
      await run(HAPROXY_BIN, ['-c', '-f', this.f.config]);
    } catch (e) {
      const err = e as { stderr?: string; message: string };
      const alerts = (err.stderr ?? '').split('\n').filter((l) => l.includes('ALERT'));
      throw new Error(`haproxy rejected its configuration: ${(alerts.join('; ') || err.message).trim()}`);
    }
  }

  /** Adopts a running HAProxy of this data dir, or starts one. Resolves once its worker answers. */
  async start(): Promise<'adopted' | 'started'> {
    this.stopping = false;
    const pid = Number((await readFile(this.f.pid, 'utf8').catch(() => '')).trim().split('\n')[0]);
    const ours = pid > 0 && alive(pid) && (await isHaproxyOf(pid, this.f.config));
    // Adopted only when it is the data dir's one HAProxy: a second one (started by a daemon killed before
    // HAProxy wrote its pid file) has taken over the shared sockets' paths, so both go and one starts afresh.
    const answers = ours && (await this.master.send('show proc').catch(() => '')).includes('master');
    if (answers && (await strayHaproxies(this.f.config, pid)).length === 0) {
      this.masterPid = pid;
      this.log.info({ pid }, 'gateway: adopted the running haproxy');
      this.confine(pid);
      await this.reload();
      return 'adopted';
    }
    if (answers)
      this.log.warn({ pid }, 'gateway: another haproxy of this data dir runs beside the one to adopt; restarting both');
    // a HAProxy of ours whose master socket does not answer: a stuck leftover. Any other process that has
    // the pid now is left alone (the file is stale).
    if (ours) process.kill(pid, 'SIGKILL');
    else if (pid > 0) this.log.info({ pid }, 'gateway: a stale haproxy.pid names another process; ignored');
    // one we started earlier that never answered (its pid file may not exist yet): never leave two
    if (this.masterPid > 0 && alive(this.masterPid)) killGroup(this.masterPid);
    await this.killStrays(0);
    await rm(this.f.master, { force: true });
    await rm(this.f.admin, { force: true });
    const child = spawn(HAPROXY_BIN, ['-W', '-S', `${this.f.master},mode,600`, '-f', this.f.config, '-p', this.f.pid], {
      detached: true,
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    this.child = child;
    this.masterPid = child.pid ?? 0;
    // before it forks its worker (it reads its configuration first), which then inherits the cgroup
    this.confine(this.masterPid);
    const from = this.errWritten;
    child.stderr?.on('data', (d: Buffer) => {
      const out = d.toString();
      this.errTail = (this.errTail + out).slice(-4000);
      this.errWritten += out.length;
      const text = d.toString().trim().slice(0, 2000);
      // startup notices and server state changes are routine; alerts are not
      if (text.includes('[ALERT]') && !/no server available|exited with code/.test(text))
        this.log.warn({ haproxy: text }, 'gateway: haproxy says');
      else if (this.logErrors && !text.includes('[NOTICE]') && !text.includes('[WARNING]'))
        this.log.warn({ haproxy: text }, 'gateway: abnormal request or connection');
      else this.log.debug({ haproxy: text }, 'gateway: haproxy says');
    });
    child.once('exit', (code, signal) => {
      if (this.child === child) this.child = null;
      if (this.stopping) return;
      this.log.error({ code, signal }, 'gateway: haproxy exited');
      this.onExit?.();
    });
    child.unref();
    (child.stderr as { unref?: () => void } | null)?.unref?.();
    try {
      await this.waitWorker(0, () => this.stderrSince(from));
      // a worker forked before the master was moved (it is not moved with it)
      this.confine(await this.workerPid());
    } catch (e) {
      this.stopping = true; // its exit is ours, not a crash to supervise
      killGroup(this.masterPid);
      throw e;
    }
    return 'started';
  }

  /** Ends every HAProxy of this data dir but `keep` (the master this daemon runs) and its workers. */
  private async killStrays(keep: number): Promise<void> {
    for (const pid of await strayHaproxies(this.f.config, keep)) {
      this.log.warn({ pid }, 'gateway: ending a stray haproxy of this data dir (a master nobody runs, or its worker)');
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        /* gone meanwhile */
      }
    }
  }

  /** Moves `pid` into the gateway's CPU group (when a weight is set); a host that refuses is said once. */
  private confine(pid: number): void {
    if (this.cpuWeight <= 0 || pid <= 0) return;
    try {
      this.cpuGroup ||= cpuWeightGroup('unihost-gateway', this.cpuWeight);
      joinCgroup(this.cpuGroup, pid);
    } catch (e) {
      if (this.saidNoCpuGroup) return;
      this.saidNoCpuGroup = true;
      this.log.warn(
        { err: (e as Error).message },
        'gateway: no CPU weight for haproxy (cgroup refused); it shares the CPU as a plain process',
      );
    }
  }

  /** The current worker's pid (from the admin socket), or 0 when it does not answer. */
  async workerPid(): Promise<number> {
    const info = await this.admin.send('show info').catch(() => '');
    return Number(/^Pid: (\d+)/m.exec(info)?.[1] ?? 0);
  }

  /** What HAProxy wrote to stderr since `from` (a count of characters written), as far as the kept tail reaches. */
  private stderrSince(from: number): string {
    const n = Math.min(this.errTail.length, this.errWritten - from);
    return n > 0 ? this.errTail.slice(-n) : '';
  }

  /**
   * Waits for a worker other than `oldPid` to answer. `why` is HAProxy's
   * output since the start or reload: a refused configuration or a port it
   * could not bind ends the wait at once with that output.
   */
  private async waitWorker(oldPid: number, why: () => string = () => ''): Promise<void> {
    const end = Date.now() + 10_000;
    for (;;) {
      const pid = await this.workerPid();
      if (pid > 0 && pid !== oldPid) return;
      const failed = /cannot bind socket|failed to start their listeners|Fatal errors|Loading failure/.test(why());
      if (failed || Date.now() > end || !alive(this.masterPid))
        throw new Error(`haproxy did not come up: ${why().trim() || 'no answer on its admin socket'}`);
      await sleep(20);
    }
  }

  /** Makes the master load the configuration file again; resolves once the new worker answers. */
  async reload(): Promise<void> {
    const old = await this.workerPid();
    const from = this.errWritten;
    await this.master.send('reload');
    await this.waitWorker(old, () => this.stderrSince(from));
  }

  /** True when the master process still runs (supervision). */
  running(): boolean {
    return this.masterPid > 0 && alive(this.masterPid);
  }

  /** Stops HAProxy (master and workers) and waits for it to go. */
  async stop(): Promise<void> {
    this.stopping = true;
    const pid = this.masterPid;
    if (pid <= 0 || !alive(pid)) return;
    process.kill(pid, 'SIGTERM');
    const end = Date.now() + 5000;
    while (alive(pid) && Date.now() < end) await sleep(20);
    if (alive(pid)) process.kill(pid, 'SIGKILL');
    // workers follow the master; wait for the ones sharing its process group too
    killGroup(pid);
    await rm(this.f.pid, { force: true });
  }
}

/** SIGKILL to a detached HAProxy's process group (master and workers). */
function killGroup(pid: number): void {
  try {
    process.kill(-pid, 'SIGKILL');
  } catch {
    // group already gone
  }
}

/** A free port on the listen address, for public ports mapped to 0 (tests): HAProxy cannot report one it chose. */
export function freePort(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen({ host, port: 0 }, () => {
      const p = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(p));
    });
  });
}
