import type { HostRec } from '../store/types.js';

/**
 * The lock of everything that reads and changes the hosts' shared totals
 * (live memory and vCPUs, placement, the address pool): taken first by
 * every create, clone and start, and by failover (src/store/types.ts, `Tx.lock`).
 */
export const ADMISSION = 'admission';

/**
 * A host's lease has not run out at `now` (a host registered before leases
 * existed has none: live). Leases are kept on the wall clock of the hosts
 * (kept in step by NTP), never on a test's clock: docs/hosts.md.
 */
export function leaseHeld(h: Pick<HostRec, 'lease_expires_at'>, now = Date.now()): boolean {
  return h.lease_expires_at === null || Date.parse(h.lease_expires_at) > now;
}

/** A host takes new instances: an operator left it live, and its agent holds its lease. */
export function takesInstances(h: HostRec, now = Date.now()): boolean {
  return h.state === 'live' && leaseHeld(h, now);
}

/** Why a host takes no instances, in words (for refusals). */
export function hostUnavailable(h: HostRec, now = Date.now()): string {
  if (h.state === 'dead' || !leaseHeld(h, now)) return 'is down (its agent lost its lease)';
  if (h.state === 'cordoned') return 'is cordoned';
  if (h.state === 'draining') return 'is being drained';
  return 'takes instances';
}

/** What a placement asks for (src/services/capacity.ts placeInTx). */
export interface PlaceRequest {
  /** instances to place */
  count: number;
  /** guest memory of each, MB */
  memoryMb: number;
  /** they start now: the chosen host must have room (admission control) */
  live: boolean;
  /** their service group: members spread over hosts */
  groupId?: string | null;
  /** they must run on this host (their volume's file, their snapshot is there): why, in words */
  pinned?: { hostId: string; why: string } | null;
  /** the host to keep when it takes instances and has room (a restart stays where it ran) */
  prefer?: string | null;
}
