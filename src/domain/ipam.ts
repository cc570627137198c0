import { createHash } from 'node:crypto';
import { err } from '../errors.js';
import type { Tx } from '../store/types.js';

export interface Subnet {
  /** network address as a 32-bit number */
  base: number;
  prefix: number;
  /** the gateway (bridge) address: the first host address */
  gateway: string;
  /** first and last address handed to instances */
  first: number;
  last: number;
}

const toNum = (ip: string): number => ip.split('.').reduce((a, o) => a * 256 + Number(o), 0);
export const toIp = (n: number): string => [24, 16, 8, 0].map((s) => Math.floor(n / 2 ** s) % 256).join('.');

export function parseSubnet(cidr: string): Subnet {
  const m = /^(\d{1,3}(?:\.\d{1,3}){3})\/(\d{1,2})$/.exec(cidr);
  if (!m || m[1]!.split('.').some((o) => Number(o) > 255) || Number(m[2]) > 30 || Number(m[2]) < 8) {
    throw new Error(`subnet '${cidr}' is not an IPv4 CIDR with a prefix between /8 and /30`);
  }
  const prefix = Number(m[2]);
  const size = 2 ** (32 - prefix);
  const base = toNum(m[1]!) - (toNum(m[1]!) % size);
  return { base, prefix, gateway: toIp(base + 1), first: base + 2, last: base + size - 2 };
}

/** A stable, locally administered unicast MAC for a NIC id. */
export function macFor(nicId: string): string {
  const h = createHash('sha256').update(nicId).digest();
  const b = [0x02, h[0]!, h[1]!, h[2]!, h[3]!, h[4]!];
  return b.map((x) => x.toString(16).padStart(2, '0')).join(':');
}

/**
 * Picks the next free address after the most recently allocated one, inside
 * the caller's transaction; the UNIQUE constraint on `private_ip` backs it.
 * Addresses are released when their instance row is deleted.
 */
export async function allocateIp(tx: Tx, subnet: Subnet): Promise<string> {
  const last = await tx.instances.lastIp();
  const span = subnet.last - subnet.first + 1;
  let n = last ? toNum(last) + 1 : subnet.first;
  for (let i = 0; i < span; i++, n++) {
    if (n > subnet.last || n < subnet.first) n = subnet.first;
    const ip = toIp(n);
    if (!(await tx.instances.ipTaken(ip))) return ip;
  }
  throw err('UH_NO_FREE', `no free private IP address left in ${toIp(subnet.base)}/${subnet.prefix}`);
}
