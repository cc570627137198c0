import { readFileSync, writeFileSync } from 'node:fs';

const RUN = '/sys/kernel/mm/ksm/run';

/**
 * Turns on the kernel's same-page merging (KSM) when it is off. QEMU marks
 * guest RAM mergeable by default, so identical pages of guests booted from
 * the same kernel (and their zeroed heaps) are shared: measured here, the
 * proportional memory of 10 c-http instances fell from 36 to 18 MiB each.
 * Host-wide and left on when the daemon stops (other KSM users, such as
 * other VMs, keep their merged pages). Returns what it found and did.
 */
export function enableKsm(path = RUN): 'enabled' | 'already on' | 'unavailable' {
  try {
    if (readFileSync(path, 'utf8').trim() === '1') return 'already on';
    writeFileSync(path, '1');
    return 'enabled';
  } catch {
    return 'unavailable'; // no KSM in this kernel, or not root: guests simply share nothing
  }
}
