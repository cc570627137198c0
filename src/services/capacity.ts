import { availableParallelism, totalmem } from 'node:os';
import type { CapacityConfig } from '../config.js';
import type { HostFigures } from '../figures.js';
import { err } from '../errors.js';
import type { HostRec, InstanceRec, Tx } from '../store/types.js';
import { ADMISSION, hostUnavailable, leaseHeld, takesInstances, type PlaceRequest } from '../domain/hosts.js';

const MB = 1024 * 1024;

export { ADMISSION };

/** vCPUs of one VM (QEMU's `-smp 1`, src/machines/qemu/argv.ts). */
const VCPUS_PER_VM = 1;

/**
 * Live instances one host holds at most: each has a tap on the private
 * network's bridge (a standby's too), and a Linux bridge has 1,023 ports,
 * one of them the hosts' network (VXLAN) when there is one
 * (docs/network.md).
 */
export const MAX_LIVE_PER_HOST = 1022;

/** The guests' memory budget in MB: the configured one, or a fraction of the host's RAM. */
export function hostMemoryBudgetMb(
  c: Pick<CapacityConfig, 'memoryMb' | 'memoryFraction' | 'vmOverheadMb'>,
  hostBytes = totalmem(),
): number {
  return c.memoryMb > 0 ? c.memoryMb : Math.floor((hostBytes / MB) * c.memoryFraction);
}

/** The guests' vCPU budget: cores × allocation ratio; Infinity when the ratio is 0 (no CPU limit). */
export function hostVcpuBudget(
  c: Pick<CapacityConfig, 'vcpusPerCore' | 'cores'>,
  hostCores = availableParallelism(),
): number {
  if (c.vcpusPerCore <= 0) return Infinity;
  return (c.cores > 0 ? c.cores : hostCores) * c.vcpusPerCore;
}

/** This machine and its guest budgets, as its agent publishes them (GET /v1/nodes). */
export function hostFigures(c: CapacityConfig, id: string, startedAt: string): HostFigures {
  const vcpus = hostVcpuBudget(c);
  return {
    id,
    vcpus: availableParallelism(),
    memory_mib: Math.floor(totalmem() / MB),
    guest_vcpus: Number.isFinite(vcpus) ? vcpus : null,
    guest_memory_mib: hostMemoryBudgetMb(c),
    started_at: startedAt,
  };
}

export interface HostUse {
  host: HostRec;
  vms: number;
  memoryMb: number;
  /** members of the group being placed */
  members: number;
}

/**
 * Placement and host admission control, inside the transaction that
 * creates or starts instances (under the ADMISSION lock, so concurrent
 * creates through several API servers never overcommit a host): each
 * instance goes to a live host whose agent holds its lease, pinned ones to
 * their host; members of one service group spread over hosts (fewest
 * members first), then the host with the most free memory. Live instances
 * (standby ones count: a wake never fails for capacity) fit the host's
 * memory budget with a per-VM overhead, and its vCPU budget. Returns one
 * host id per instance. Throws UH_HOST_FULL or UH_NO_FREE naming the limit;
 * the transaction then changes nothing. docs/hosts.md.
 */
export async function placeInTx(tx: Tx, c: CapacityConfig, r: PlaceRequest): Promise<string[]> {
  await tx.lock(ADMISSION);
  const now = Date.now(); // leases are on the wall clock
  const hosts = await tx.hosts.list();
  if (hosts.length === 0)
    throw err('UH_NO_FREE', 'no host can run instances: no daemon with the agent role has registered');
  const live = new Map((await tx.instances.hostLive()).map((l) => [l.host_id, l]));
  const members = new Map<string, number>();
  if (r.groupId)
    for (const m of await tx.instances.inGroup(r.groupId))
      if (m.host_id) members.set(m.host_id, (members.get(m.host_id) ?? 0) + 1);
  const use = (h: HostRec): HostUse => ({
    host: h,
    vms: live.get(h.id)?.vms ?? 0,
    memoryMb: live.get(h.id)?.memory_mb ?? 0,
    members: members.get(h.id) ?? 0,
  });
  let candidates: HostUse[];
  if (r.pinned) {
    const h = hosts.find((x) => x.id === r.pinned!.hostId);
    if (!h) throw err('UH_NO_FREE', `${r.pinned.why}, a host that was removed`);
    // a pinned instance may start on a cordoned host (it runs nowhere else); not on a dead or draining one
    if (h.state === 'dead' || h.state === 'draining' || !leaseHeld(h, now))
      throw err('UH_NO_FREE', `${r.pinned.why}: host '${h.name}' ${hostUnavailable(h, now)}`);
    candidates = [use(h)];
  } else {
    candidates = hosts.filter((h) => takesInstances(h, now)).map(use);
    if (candidates.length === 0) {
      const cordoned = hosts.filter((h) => leaseHeld(h, now) && h.state !== 'dead');
      throw err(
        'UH_NO_FREE',
        cordoned.length > 0
          ? `no host takes new instances: ${cordoned.map((h) => `'${h.name}' ${hostUnavailable(h, now)}`).join(', ')}` +
              ' (an operator lets one take instances again: unihost admin host uncordon NAME)'
          : `no host can run instances: every host's agent is down (${hosts.map((h) => h.name).join(', ')})`,
      );
    }
  }
  const single = hosts.length === 1;
  const out: string[] = [];
  for (let k = 0; k < r.count; k++) {
    const fits = r.live ? candidates.filter((u) => room(c, u, r.memoryMb) === undefined) : candidates;
    if (fits.length === 0) throw full(c, candidates, r.memoryMb, single);
    fits.sort(
      (a, b) => a.members - b.members || free(c, b) - free(c, a) || hosts.indexOf(a.host) - hosts.indexOf(b.host),
    );
    const u = fits.find((f) => f.host.id === r.prefer) ?? fits[0]!;
    out.push(u.host.id);
    u.members++;
    if (r.live) {
      u.vms++;
      u.memoryMb += r.memoryMb;
    }
  }
  return out;
}

/** A host's guest memory budget: what its agent published, else this process's setting. */
function budgetMb(c: CapacityConfig, h: HostRec): number {
  return h.memory_mb > 0 ? h.memory_mb : hostMemoryBudgetMb(c);
}

/** A host's guest vCPU budget: what its agent published (null: no limit), else this process's setting. */
function vcpuBudget(c: CapacityConfig, h: HostRec): number {
  return h.memory_mb > 0 ? (h.vcpus ?? Infinity) : hostVcpuBudget(c);
}

/** Free guest memory of a host in MB (after the per-VM overhead of what runs there). */
function free(c: CapacityConfig, u: HostUse): number {
  return budgetMb(c, u.host) - u.memoryMb - u.vms * c.vmOverheadMb;
}

/** Why one more VM of `memoryMb` does not fit on the host, or undefined when it does. */
function room(c: CapacityConfig, u: HostUse, memoryMb: number): 'memory' | 'vcpus' | 'ports' | undefined {
  if (u.vms + 1 > MAX_LIVE_PER_HOST) return 'ports';
  if (free(c, u) < memoryMb + c.vmOverheadMb) return 'memory';
  if ((u.vms + 1) * VCPUS_PER_VM > vcpuBudget(c, u.host)) return 'vcpus';
  return undefined;
}

/** The refusal when no candidate host has room: the limit, and the most any host has free. */
export function full(c: CapacityConfig, candidates: HostUse[], memoryMb: number, single: boolean): Error {
  const need = memoryMb + c.vmOverheadMb;
  const ports = `a host's private network has ports for ${MAX_LIVE_PER_HOST} live instances (a Linux bridge's limit)`;
  if (single) {
    // one host: the figures of that host, as the embedded default always said them
    const u = candidates[0]!;
    if (room(c, u, memoryMb) === 'ports')
      return err('UH_HOST_FULL', `host is full: ${ports}, all taken; try again after instances stop`);
    const budget = budgetMb(c, u.host);
    const used = u.memoryMb + u.vms * c.vmOverheadMb;
    if (room(c, u, memoryMb) === 'vcpus') {
      const vcpus = vcpuBudget(c, u.host);
      return err(
        'UH_HOST_FULL',
        `host is full: starting needs ${VCPUS_PER_VM} vCPU, ${u.vms * VCPUS_PER_VM} of the host's ${vcpus} vCPU budget ` +
          `(${c.vcpusPerCore} per core) are in use; try again after instances stop`,
      );
    }
    return err(
      'UH_HOST_FULL',
      `host is full: starting needs ${need} MB (${memoryMb} MB of guest memory + ${c.vmOverheadMb} MB per VM), ` +
        `${used} of the host's ${budget} MB guest memory budget are in use; try again after instances stop`,
    );
  }
  const best = [...candidates].sort((a, b) => free(c, b) - free(c, a))[0]!;
  if (candidates.every((u) => room(c, u, memoryMb) === 'ports'))
    return err(
      'UH_HOST_FULL',
      `no host has room: ${ports}, and every host's are taken; try again after instances stop`,
    );
  if (candidates.every((u) => room(c, u, memoryMb) === 'vcpus')) {
    const most = Math.max(...candidates.map((u) => vcpuBudget(c, u.host)));
    return err(
      'UH_HOST_FULL',
      `no host has room: starting needs ${VCPUS_PER_VM} vCPU, and every host that takes instances has its whole ` +
        `vCPU budget in use (at most ${most} vCPU on one host, \`capacity.vcpusPerCore\` per core); ` +
        `try again after instances stop`,
    );
  }
  return err(
    'UH_HOST_FULL',
    `no host has room: starting needs ${need} MB (${memoryMb} MB of guest memory + ${c.vmOverheadMb} MB per VM) ` +
      `and a vCPU; the largest free guest memory on a host that takes instances is ${Math.max(0, free(c, best))} MB ` +
      `(host '${best.host.name}'); try again after instances stop`,
  );
}

/**
 * Admission of a start of an instance that is not live (PUT start, a
 * restart by policy): it starts on its host when that host takes instances
 * and has room, else on another host (a move: no VM runs anywhere while it
 * is stopped), unless a volume or a snapshot pins it to its host. Writes the
 * new host. Throws as placeInTx.
 */
export async function admitStartInTx(tx: Tx, c: CapacityConfig, inst: InstanceRec): Promise<void> {
  const vol = (await tx.volumes.forInstance(inst.id)).find((v) => v.host_id !== null);
  const pinned = vol
    ? { hostId: vol.host_id!, why: `volume '${vol.name}' is on one host (volumes are files there)` }
    : inst.snapshot && inst.host_id
      ? { hostId: inst.host_id, why: `the memory of '${inst.name}' is a file on one host` }
      : null;
  const [hostId] = await placeInTx(tx, c, {
    count: 1,
    memoryMb: inst.memory_mb,
    live: true,
    groupId: inst.service_group_id,
    pinned,
    prefer: inst.host_id,
  });
  if (hostId !== inst.host_id) await tx.instances.updateSpec(inst.id, { host_id: hostId! });
}

/**
 * Moves an instance that has no VM (standby) to another host that takes
 * instances and has room, its group spread as placement does; writes and
 * returns its new host (failover and drain, src/reconcile/hosts.ts).
 */
export async function moveInTx(tx: Tx, c: CapacityConfig, inst: InstanceRec): Promise<string> {
  const [to] = await placeInTx(tx, c, {
    count: 1,
    memoryMb: inst.memory_mb,
    live: true,
    groupId: inst.service_group_id,
  });
  await tx.instances.updateSpec(inst.id, { host_id: to! });
  return to!;
}
