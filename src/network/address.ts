import { createHash } from 'node:crypto';

/** Address arithmetic of the private network: pure, shared by the IP allocation (domain/ipam.ts) and the host setup. */
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

export const toNum = (ip: string): number => ip.split('.').reduce((a, o) => a * 256 + Number(o), 0);
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

/**
 * The gateway address of the host with network slot `slot` (docs/hosts.md):
 * slot 0 (a single host, or the first of several) has the subnet's first
 * address, as it always had; slot k > 0 the k-th address from the top, so the
 * addresses instances get from the bottom up meet them last. The allocation
 * skips the addresses hosts hold (domain/ipam.ts), and a host takes no slot
 * whose address an instance holds (services/hosts.ts).
 */
export function hostGateway(subnet: Subnet, slot: number): string {
  if (!Number.isInteger(slot) || slot < 0 || slot > subnet.last - subnet.first)
    throw new Error(`network slot ${slot} is outside the subnet`);
  return slot === 0 ? subnet.gateway : toIp(subnet.last - (slot - 1));
}

/** The fixed MAC of a host's bridge: slot 0 keeps the one a single host always had, so guests' ARP caches stay true. */
export function bridgeMacFor(bridge: string, slot: number): string {
  return macFor(slot === 0 ? `bridge:${bridge}` : `bridge:${bridge}:${slot}`);
}

/** A stable, locally administered unicast MAC for a NIC id. */
export function macFor(nicId: string): string {
  const h = createHash('sha256').update(nicId).digest();
  const b = [0x02, h[0]!, h[1]!, h[2]!, h[3]!, h[4]!];
  return b.map((x) => x.toString(16).padStart(2, '0')).join(':');
}

/** The guest's `netdev.ip` kernel argument for `ip` on a subnet: address/prefix, gateway, DNS server (the gateway). */
export function netdevIpArg(ip: string, prefix: number, gateway: string): string {
  return `${ip}/${prefix}:${gateway}:${gateway}`;
}
