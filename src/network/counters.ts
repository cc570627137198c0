import { readFileSync } from 'node:fs';
import type { NetCounters } from '../figures.js';
import { tapName } from './host.js';

/**
 * Byte and packet counters of the instance's tap, seen from the guest: what
 * the tap transmits the guest received. Undefined without a tap (network
 * disabled, VM not up).
 */
export function tapCounters(instanceId: string, sysNet = '/sys/class/net'): NetCounters | undefined {
  const dir = `${sysNet}/${tapName(instanceId)}/statistics`;
  try {
    const read = (f: string) => Number(readFileSync(`${dir}/${f}`, 'utf8').trim());
    return {
      rx_bytes: read('tx_bytes'),
      rx_packets: read('tx_packets'),
      tx_bytes: read('rx_bytes'),
      tx_packets: read('rx_packets'),
    };
  } catch {
    return undefined;
  }
}
