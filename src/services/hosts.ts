import { randomUUID } from 'node:crypto';
import type { Clock } from '../clock.js';
import type { HostRec, Store } from '../store/types.js';

/**
 * Registers the host of this process's agent by name (once; a restart finds
 * its record) and places on it the instances no host holds yet: those of a
 * data dir written before placement existed. One host for now: placement
 * (src/services/capacity.ts) puts every new instance on it.
 */
export async function registerHost(store: Store, name: string, clock: Clock): Promise<HostRec> {
  return store.tx(async (tx) => {
    let host = await tx.hosts.getByName(name);
    if (!host) {
      host = { id: randomUUID(), name, created_at: new Date(clock.now()).toISOString() };
      await tx.hosts.insert(host);
    }
    for (const i of await tx.instances.all())
      if (i.host_id === null) await tx.instances.updateSpec(i.id, { host_id: host.id });
    return host;
  });
}

/**
 * A restored one-host backup (`unihost admin restore`): its instances go to
 * the host that starts on it first, whatever its name (registerHost places
 * them). A backup of several hosts keeps its placement.
 */
export async function unplaceOneHost(store: Store): Promise<void> {
  await store.tx(async (tx) => {
    if ((await tx.hosts.list()).length > 1) return;
    for (const i of await tx.instances.all())
      if (i.host_id !== null) await tx.instances.updateSpec(i.id, { host_id: null });
  });
}
