import { availableParallelism, totalmem } from 'node:os';
import type { CapacityConfig } from '../config.js';
import type { HostFigures } from '../figures.js';
import { err } from '../errors.js';
import type { Tx } from '../store/types.js';

const MB = 1024 * 1024;

/**
 * The lock of everything that reads and changes the host's shared totals
 * (live memory and vCPUs, the address pool): taken first by every create,
 * clone and start (src/store/types.ts, `Tx.lock`).
 */
export const ADMISSION = 'admission';

/** vCPUs of one VM (QEMU's `-smp 1`, src/machines/qemu/argv.ts). */
const VCPUS_PER_VM = 1;

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

/**
 * Host admission control, inside the transaction that makes instances
 * live: the memory of every live instance of every user (plus a per-VM
 * overhead) stays within the memory budget, and their vCPUs within the
 * CPU budget, so RAM and CPU over-commit are bounded. Standby instances
 * count as live: a wake never fails for capacity.
 * Throws UH_HOST_FULL; the transaction then changes nothing.
 */
export async function assertHostCapacity(tx: Tx, c: CapacityConfig, vms: number, guestMb: number): Promise<void> {
  if (vms <= 0) return;
  await tx.lock(ADMISSION);
  const live = await tx.instances.hostLive();
  const budget = hostMemoryBudgetMb(c);
  const used = live.memory_mb + live.vms * c.vmOverheadMb;
  const need = guestMb + vms * c.vmOverheadMb;
  if (used + need > budget) {
    throw err(
      'UH_HOST_FULL',
      `host is full: starting needs ${need} MB (${guestMb} MB of guest memory + ${c.vmOverheadMb} MB per VM), ` +
        `${used} of the host's ${budget} MB guest memory budget are in use; try again after instances stop`,
    );
  }
  const vcpus = hostVcpuBudget(c);
  const usedVcpus = live.vms * VCPUS_PER_VM;
  if (usedVcpus + vms * VCPUS_PER_VM > vcpus) {
    throw err(
      'UH_HOST_FULL',
      `host is full: starting needs ${vms * VCPUS_PER_VM} vCPU, ${usedVcpus} of the host's ${vcpus} vCPU budget ` +
        `(${c.vcpusPerCore} per core) are in use; try again after instances stop`,
    );
  }
}

/**
 * Placement, inside the creating transaction: the host a new instance runs
 * on. One host for now: the one host whose agent registered (the daemon's
 * own in the embedded default). Throws UH_NO_FREE when no agent ever
 * registered (only API servers run).
 */
export async function placeInTx(tx: Tx): Promise<string> {
  const [host] = await tx.hosts.list();
  if (!host) throw err('UH_NO_FREE', 'no host can run instances: no daemon with the agent role has registered');
  return host.id;
}
