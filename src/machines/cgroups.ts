import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** Where cgroups are mounted: v1 has one directory per controller, v2 one unified tree. */
export const CGROUP_ROOT = '/sys/fs/cgroup';

/** Whether `root` is a cgroup v2 (unified) hierarchy. */
export const isCgroupV2 = (root = CGROUP_ROOT): boolean => existsSync(join(root, 'cgroup.controllers'));

/** cgroup v2's CPU weight of a plain process or group (`cpu.weight`), v1's `cpu.shares` of the same. */
const V2_DEFAULT_WEIGHT = 100;
const V1_DEFAULT_SHARES = 1024;

/**
 * A cgroup `name` at the top of the hierarchy (beside `unihost/`, the
 * parent of every VM's cgroup) whose processes get CPU weight `weight`, on
 * cgroup v2's scale (1-10000; 100 is what a plain process or group gets, so
 * 400 is four times the share of the VMs together when both want the
 * CPU). On cgroup v1 it is the `cpu` controller's `cpu.shares` (weight /
 * 100 * 1024). Returns the `cgroup.procs` file to write pids into; throws
 * when the host has no cpu controller or refuses (the caller says so).
 */
export function cpuWeightGroup(name: string, weight: number, root = CGROUP_ROOT): string {
  if (isCgroupV2(root)) {
    const dir = join(root, name);
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(root, 'cgroup.subtree_control'), '+cpu');
    writeFileSync(join(dir, 'cpu.weight'), String(Math.min(10_000, Math.max(1, Math.round(weight)))));
    return join(dir, 'cgroup.procs');
  }
  const ctrl = join(root, 'cpu');
  if (!existsSync(join(ctrl, 'cgroup.procs'))) throw new Error(`no cgroup cpu controller at ${ctrl}`);
  const dir = join(ctrl, name);
  mkdirSync(dir, { recursive: true });
  const shares = Math.round((weight / V2_DEFAULT_WEIGHT) * V1_DEFAULT_SHARES);
  writeFileSync(join(dir, 'cpu.shares'), String(Math.min(262_144, Math.max(2, shares))));
  return join(dir, 'cgroup.procs');
}

/** Moves process `pid` (all its threads) into the cgroup whose `cgroup.procs` is `procs`. */
export function joinCgroup(procs: string, pid: number): void {
  writeFileSync(procs, String(pid));
}
