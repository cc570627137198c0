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
