import { totalmem } from 'node:os';
import type { CapacityConfig } from '../config.js';
import { err } from '../errors.js';
import type { Tx } from '../store/types.js';

const MB = 1024 * 1024;

/** The guests' memory budget in MB: the configured one, or a fraction of the host's RAM. */
export function hostMemoryBudgetMb(c: CapacityConfig, hostBytes = totalmem()): number {
  return c.memoryMb > 0 ? c.memoryMb : Math.floor((hostBytes / MB) * c.memoryFraction);
}

/**
 * Host admission control, inside the transaction that makes instances
 * live: the memory of every live instance of every user (plus a per-VM
 * overhead) stays within the budget, so RAM over-commit is bounded.
 * Throws UH_HOST_FULL; the transaction then changes nothing.
 */
export async function assertHostCapacity(tx: Tx, c: CapacityConfig, vms: number, guestMb: number): Promise<void> {
  if (vms <= 0) return;
  const budget = hostMemoryBudgetMb(c);
  const live = await tx.instances.hostLive();
  const used = live.memory_mb + live.vms * c.vmOverheadMb;
  const need = guestMb + vms * c.vmOverheadMb;
  if (used + need > budget) {
    throw err(
      'UH_HOST_FULL',
      `host is full: starting needs ${need} MB (${guestMb} MB of guest memory + ${c.vmOverheadMb} MB per VM), ` +
        `${used} of the host's ${budget} MB guest memory budget are in use; try again after instances stop`,
    );
  }
}
