import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { CGROUP_ROOT, isCgroupV2 } from '../cgroups.js';

/**
 * Per-VM confinement (docs/security.md): QEMU drops to a uid of its own,
 * chroots into an empty directory and loads a seccomp filter once it has
 * opened everything it needs (kernel, images, taps, chardev files and the
 * QMP socket are opened as root before the drop, so no file needs to be
 * readable by that uid); rlimits and cgroup v1 limits bound its resources.
 */

/** First uid (and gid) of VMs: far above any regular or system user. */
export const VM_UID_BASE = 0x40000000;
const MiB = 1024 * 1024;
/** Address space QEMU needs above guest RAM (measured: VmPeak 560 MB for a 128 MB TCG guest). */
const AS_OVERHEAD_MB = 1536;
/** Memory (RSS + page cache) QEMU may use above guest RAM (measured: RSS ~200 MB for 128 MB). */
const MEM_OVERHEAD_MB = 512;
/**
 * CPU time per 100 ms period a VM may use: its one vCPU thread (a whole
 * core at most) plus half a core for QEMU's main loop and I/O, so that one
 * busy guest cannot take every core of the host.
 */
const CPU_PERIOD_US = 100_000;
const CPU_QUOTA_US = 150_000;

/** How many uids VMs use above VM_UID_BASE (2^24). */
export const VM_UIDS = 0x1000000;

/**
 * A uid per VM: VMs do not share a uid, so one compromised QEMU cannot
 * signal, ptrace or read the memory of another. It starts from 24 random
 * bits of the instance's v4 uuid (the same instance usually gets the same
 * uid) and moves on to the next free one when a live VM has it (`taken`),
 * so two live VMs never share one, however many run.
 */
export function vmUid(id: string, taken: ReadonlySet<number> = new Set()): number {
  const n = parseInt(id.replace(/-/g, '').slice(0, 6), 16);
  const start = Number.isFinite(n) ? n : 0;
  for (let i = 0; i < VM_UIDS; i++) {
    const uid = VM_UID_BASE + ((start + i) % VM_UIDS);
    if (!taken.has(uid)) return uid;
  }
  throw new Error('no free VM uid');
}

/** The uid a running process runs as (its real uid, from /proc), or undefined when it is gone. */
export function processUid(pid: number): number | undefined {
  try {
    const m = /^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) : undefined;
  } catch {
    return undefined;
  }
}

/** The empty directory QEMU chroots into. */
export const jailRoot = (dir: string): string => join(dir, 'jail');

/** QEMU options of the confinement (QEMU 7.2). */
export function jailArgv(dir: string, uid: number): string[] {
  return [
    // elevateprivileges must stay `allow`: QEMU 7.2 loads the filter before it drops to -runas, so
    // `deny` kills it at its own setuid (SIGSYS). Once it is an unprivileged uid under no_new_privs,
    // set*id calls cannot gain anything.
    '-sandbox',
    'on,obsolete=deny,elevateprivileges=allow,spawn=deny,resourcecontrol=deny',
    '-runas',
    `${uid}:${uid}`,
    '-chroot',
    jailRoot(dir),
  ];
}

/** The shell's `ulimit` commands (soft and hard): no core dumps (guest memory), bounded fds and address space (KiB). */
export function rlimitCommands(memoryMb: number): string {
  return `ulimit -c 0 && ulimit -n 256 && ulimit -v ${((memoryMb + AS_OVERHEAD_MB) * MiB) / 1024}`;
}

const saidNoCgroups = new Set<string>();

/**
 * Creates the VM's cgroups and returns their directories, which the VM
 * joins before it execs QEMU: on cgroup v1, `memory`, `pids` and `cpu` where
 * mounted and writable; on v2, one cgroup `unihost/<id>` with
 * `memory.max`, `memory.swap.max`, `pids.max` and `cpu.max` (the
 * controllers are enabled for `unihost/` first). Empty when the host has
 * none, or refuses (logged, never silent): rlimits still apply.
 */
export function makeCgroups(
  id: string,
  memoryMb: number,
  log?: (o: object, m: string) => void,
  root = CGROUP_ROOT,
): string[] {
  const mem = String((memoryMb + MEM_OVERHEAD_MB) * MiB);
  if (isCgroupV2(root)) return makeCgroupV2(root, id, mem, log);
  const out: string[] = [];
  const limits: Record<string, Record<string, string>> = {
    memory: { 'memory.limit_in_bytes': mem },
    pids: { 'pids.max': '64' },
    cpu: { 'cpu.cfs_period_us': String(CPU_PERIOD_US), 'cpu.cfs_quota_us': String(CPU_QUOTA_US) },
  };
  let found = 0;
  for (const [ctrl, files] of Object.entries(limits)) {
    if (!existsSync(join(root, ctrl, 'cgroup.procs'))) continue;
    found++;
    const dir = join(root, ctrl, 'unihost', id);
    try {
      mkdirSync(dir, { recursive: true });
      for (const [f, v] of Object.entries(files)) writeFileSync(join(dir, f), v);
      out.push(dir);
    } catch (e) {
      log?.({ id, ctrl, err: e }, 'cgroup limits not applied');
    }
  }
  if (found === 0 && !saidNoCgroups.has(root)) {
    // once per hierarchy and process: the same for every VM (e.g. a daemon in a network namespace whose /sys has no cgroups)
    saidNoCgroups.add(root);
    log?.({ id, root }, 'no cgroup memory, pids or cpu controller found: VMs are bounded by rlimits only');
  }
  return out;
}

function makeCgroupV2(root: string, id: string, mem: string, log?: (o: object, m: string) => void): string[] {
  const parent = join(root, 'unihost');
  const dir = join(parent, id);
  try {
    mkdirSync(dir, { recursive: true });
    // controllers reach a child only when every ancestor enables them for its children
    for (const d of [root, parent]) writeFileSync(join(d, 'cgroup.subtree_control'), '+memory +pids +cpu');
    writeFileSync(join(dir, 'memory.max'), mem);
    writeFileSync(join(dir, 'memory.swap.max'), '0');
    writeFileSync(join(dir, 'pids.max'), '64');
    writeFileSync(join(dir, 'cpu.max'), `${CPU_QUOTA_US} ${CPU_PERIOD_US}`);
    return [dir];
  } catch (e) {
    log?.({ id, dir, err: (e as Error).message }, 'cgroup v2 limits not applied: the VM is bounded by rlimits only');
    try {
      rmdirSync(dir);
    } catch {
      /* not made, or not empty */
    }
    return [];
  }
}

/** Removes a VM's cgroups (possible only once its processes are gone). */
export function removeCgroups(id: string, root = CGROUP_ROOT): void {
  const dirs = isCgroupV2(root)
    ? [join(root, 'unihost', id)]
    : ['memory', 'pids', 'cpu'].map((ctrl) => join(root, ctrl, 'unihost', id));
  for (const d of dirs) {
    try {
      rmdirSync(d);
    } catch {
      /* not there, or not empty yet */
    }
  }
}

/**
 * The command that starts QEMU: a shell joins the cgroups (so QEMU's
 * memory is charged from its first page), sets the rlimits with its own
 * `ulimit` (soft and hard; `prlimit` as a second exec cost about 3 ms of
 * each boot here) and `exec`s QEMU, so the pid is QEMU's. A cgroup it cannot
 * join or a limit it cannot set ends it with status 125 before QEMU runs.
 */
export function confinedCommand(qemu: string, argv: string[], memoryMb: number, cgroups: string[]): string[] {
  const enter = 'for g in "$@"; do [ "$g" = -- ] && break; echo $$ > "$g/cgroup.procs" || exit 125; done';
  const limits = `${rlimitCommands(memoryMb)} || exit 125`;
  const script = `${enter}; ${limits}; while [ "$1" != -- ]; do shift; done; shift; exec "$@"`;
  return ['/bin/sh', '-c', script, 'sh', ...cgroups, '--', qemu, ...argv];
}
