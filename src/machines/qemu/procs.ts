import { readdirSync, readFileSync, readlinkSync, realpathSync } from 'node:fs';
import { basename, join } from 'node:path';

export interface HostVm {
  /** instance id from `-name unihost-<id>` */
  id: string;
  pid: number;
}

const NAME = /^unihost-([0-9a-f-]{36})$/;
const UUID = /^[0-9a-f-]{36}$/;

/** The root directory of a process (a confined VM's is its jail), or undefined when it is gone or unknown. */
export function rootOf(pid: number): string | undefined {
  try {
    return readlinkSync(`/proc/${pid}/root`);
  } catch {
    return undefined;
  }
}

function realPath(p: string): string {
  try {
    return realpathSync(p);
  } catch {
    return p;
  }
}

/** Whether `pid` runs chrooted in `jail` (a VM adopted by its jail: a warm VM a restore took has another name). */
export function runsInJail(pid: number, jail: string): boolean {
  const root = rootOf(pid);
  return root !== undefined && root === realPath(jail);
}

/** The instance whose jail `pid` runs in (`<instancesDir>/<id>/jail`), if any: a warm VM restored into it carries another name. */
export function jailedIn(pid: number, instancesDir: string): string | undefined {
  const root = rootOf(pid);
  instancesDir = realPath(instancesDir);
  if (!root?.startsWith(`${instancesDir}/`) || !root.endsWith('/jail')) return undefined;
  const id = root.slice(instancesDir.length + 1, -'/jail'.length);
  return UUID.test(id) ? id : undefined;
}

/** Whether `pid` runs; a zombie (ended, not yet reaped by its parent) does not. */
export const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    return !/^\S+ \(.*\) Z/s.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
};

/**
 * Every running QEMU of this data dir: `qemu-system-*` processes whose
 * command line carries `-name unihost-<id>` and a file in
 * `<instancesDir>/<id>/` (another daemon's VMs, with another data dir, are
 * not ours), or whose jail is `<instancesDir>/<id>/jail` (a warm VM
 * a restore took: docs/snapshots.md). Read from /proc, so it also finds VMs
 * nothing tracks.
 */
export function hostVms(instancesDir: string): HostVm[] {
  const out: HostVm[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    let args: string[];
    try {
      args = readFileSync(`/proc/${name}/cmdline`, 'utf8').split('\0');
    } catch {
      continue; // ended meanwhile
    }
    if (!basename(args[0] ?? '').startsWith('qemu-system-')) continue;
    const pid = Number(name);
    const jailed = jailedIn(pid, instancesDir);
    if (jailed) {
      if (alive(pid)) out.push({ id: jailed, pid });
      continue;
    }
    const i = args.indexOf('-name');
    const id = NAME.exec(args[i + 1] ?? '')?.[1];
    if (i < 0 || !id) continue;
    const mark = `${join(instancesDir, id)}/`;
    if (!args.some((a) => a.includes(mark))) continue;
    if (alive(pid)) out.push({ id, pid });
  }
  return out;
}

/** SIGKILL to a VM's process group (QEMU runs detached in its own), or to the process when it has none. */
export function killGroup(pid: number): void {
  try {
    process.kill(-pid, 'SIGKILL');
  } catch {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      /* already gone */
    }
  }
}

/** Kills a VM's process group (QEMU runs detached in its own) and waits until it is gone (at most `waitMs`). */
export async function killVm(pid: number, waitMs = 5000): Promise<boolean> {
  killGroup(pid);
  for (const until = Date.now() + waitMs; Date.now() < until;) {
    if (!alive(pid)) return true;
    await new Promise((r) => setTimeout(r, 20));
  }
  return !alive(pid);
}
