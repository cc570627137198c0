import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

/** Resource use of one host process (a QEMU): CPU time so far and resident memory. */
export interface ProcessStats {
  /** user + system CPU time of all its threads, in ms. */
  cpuMs: number;
  /** VmRSS; 0 for a zombie (exited, not yet reaped). */
  rssBytes: number;
}

let ticksPerSecond: number | undefined;

/** USER_HZ for /proc's tick counts: `getconf CLK_TCK` once; 100 on every Linux we know of. */
export function clockTicks(): number {
  if (ticksPerSecond === undefined) {
    try {
      const n = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8', timeout: 2000 }).trim());
      ticksPerSecond = Number.isInteger(n) && n > 0 ? n : 100;
    } catch {
      ticksPerSecond = 100;
    }
  }
  return ticksPerSecond;
}

function readProc(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return undefined; // ENOENT/ESRCH: the process or thread is gone
  }
}

/**
 * utime + stime (ms) from a /proc `stat` line. The command name (field 2)
 * is in parentheses and may itself contain spaces or ')', so fields are
 * counted from the last ')'.
 */
export function parseStatCpuMs(stat: string): number | undefined {
  const close = stat.lastIndexOf(')');
  if (close < 0) return undefined;
  // After ')' the fields start at #3 (state): utime is #14, stime #15.
  const fields = stat.slice(close + 2).split(' ');
  const utime = Number(fields[14 - 3]);
  const stime = Number(fields[15 - 3]);
  if (!Number.isFinite(utime) || !Number.isFinite(stime)) return undefined;
  return ((utime + stime) * 1000) / clockTicks();
}

/** VmRSS in bytes from /proc/<pid>/status; 0 when the line is missing (zombies, kernel threads). */
export function parseStatusRssBytes(status: string): number {
  const m = /^VmRSS:\s+(\d+)\s*kB/m.exec(status);
  return m ? Number(m[1]) * 1024 : 0;
}

/** CPU time and RSS of `pid`, or undefined when the process is gone. */
export function processStats(pid: number): ProcessStats | undefined {
  if (!Number.isInteger(pid) || pid <= 0) return undefined;
  const stat = readProc(`/proc/${pid}/stat`);
  const status = readProc(`/proc/${pid}/status`);
  if (stat === undefined || status === undefined) return undefined;
  const cpuMs = parseStatCpuMs(stat);
  if (cpuMs === undefined) return undefined;
  return { cpuMs, rssBytes: parseStatusRssBytes(status) };
}

/**
 * CPU time (ms) of one thread of `pid`, e.g. a vCPU thread from QMP
 * `query-cpus-fast` (`thread-id`); undefined when the thread is gone.
 */
export function threadCpuMs(pid: number, tid: number): number | undefined {
  if (!Number.isInteger(pid) || pid <= 0 || !Number.isInteger(tid) || tid <= 0) return undefined;
  const stat = readProc(`/proc/${pid}/task/${tid}/stat`);
  return stat === undefined ? undefined : parseStatCpuMs(stat);
}
