import { err } from '../errors.js';
import { hostGateway, toIp, toNum, type Subnet } from '../network/address.js';
import type { Tx } from '../store/types.js';

/**
 * Picks the next free address after the most recently allocated one, inside
 * the caller's transaction; the UNIQUE constraint on `private_ip` backs it.
 * Addresses are released when their instance row is deleted. The gateway
 * addresses of hosts (one per host on the private network, docs/hosts.md)
 * are skipped.
 */
export async function allocateIp(tx: Tx, subnet: Subnet): Promise<string> {
  const hosts = new Set((await tx.hosts.list()).map((h) => hostGateway(subnet, h.net_slot ?? 0)));
  const last = await tx.instances.lastIp();
  const span = subnet.last - subnet.first + 1;
  let n = last ? toNum(last) + 1 : subnet.first;
  for (let i = 0; i < span; i++, n++) {
    if (n > subnet.last || n < subnet.first) n = subnet.first;
    const ip = toIp(n);
    if (!hosts.has(ip) && !(await tx.instances.ipTaken(ip))) return ip;
  }
  throw err('UH_NO_FREE', `no free private IP address left in ${toIp(subnet.base)}/${subnet.prefix}`);
}
