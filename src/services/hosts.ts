import { randomBytes, randomUUID } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { join } from 'node:path';
import type { Clock } from '../clock.js';
import type { Config } from '../config.js';
import { err } from '../errors.js';
import type { HostRec, HostState, Store, Tx } from '../store/types.js';
import { ADMISSION, hostMemoryBudgetMb, hostVcpuBudget } from './capacity.js';
import { leaseHeld } from '../domain/hosts.js';
import { hostGateway, parseSubnet, type Subnet } from '../network/address.js';

/** What an agent says of its host when it takes the lease. */
export interface HostClaim {
  name: string;
  /** address on the hosts' network; '' = none */
  address: string;
  /** the key of this agent's data dir: the same agent restarting takes its lease back at once */
  holder: string;
  leaseMs: number;
  memoryMb: number;
  /** null: no CPU limit */
  vcpus: number | null;
  /** the private network: the host's slot gives its gateway address in it */
  subnet: Subnet;
  /** the port its agent serves console logs on (src/agent-server.ts); null: none */
  agentPort: number | null;
  /** its private network settings, `subnet=… bridge=… vni=…`: every live host's must be the same */
  network: string;
}

/** The settings of the private network that every host of one platform must share (docs/hosts.md). */
export function networkSettings(config: Config): string {
  return `subnet=${config.subnet} bridge=${config.network.bridge} vni=${config.network.vni}`;
}

/**
 * Refuses an agent whose private network settings differ from those of a
 * live host: a different subnet, bridge name or VXLAN id would split the
 * network (addresses taken twice, frames dropped) without an error anywhere.
 */
function checkSameNetwork(claim: HostClaim, hosts: HostRec[], now: number): void {
  const mine = new Map(claim.network.split(' ').map((kv) => kv.split('=') as [string, string]));
  for (const h of hosts) {
    if (h.name === claim.name || !h.network || h.network === claim.network) continue;
    if (h.state === 'dead' || !leaseHeld(h, now)) continue;
    const theirs = new Map(h.network.split(' ').map((kv) => kv.split('=') as [string, string]));
    const diff = [...mine]
      .filter(([k, v]) => theirs.get(k) !== v)
      .map(
        ([k, v]) =>
          `${k === 'subnet' ? k : `network.${k}`} is ${v} here, ${theirs.get(k) ?? 'unset'} on host '${h.name}'`,
      );
    throw new Error(
      `this host's private network does not match the live host '${h.name}': ${diff.join('; ')}. ` +
        'Every host of one platform uses the same subnet, network.bridge and network.vni (docs/hosts.md)',
    );
  }
}

/**
 * The key of a data dir's agent (`<data dir>/host.key`, made at its first
 * start): an agent restarting on the same data dir is the same host's and
 * takes its lease back at once; another data dir with the same host name
 * is refused while the lease runs.
 */
export function holderKey(dataDir: string): string {
  const file = join(dataDir, 'host.key');
  try {
    return readFileSync(file, 'utf8').trim();
  } catch {
    mkdirSync(dataDir, { recursive: true });
    const key = randomBytes(16).toString('hex');
    try {
      writeFileSync(file, key + '\n', { mode: 0o600, flag: 'wx' });
      return key;
    } catch {
      return readFileSync(file, 'utf8').trim(); // another process made it first
    }
  }
}

/** What this agent claims of its host, from its settings: its name, address, key and budgets. */
export function hostClaim(config: Config): HostClaim {
  const vcpus = hostVcpuBudget(config.capacity);
  return {
    name: config.host.name,
    address: config.host.address,
    holder: holderKey(config.dataDir),
    leaseMs: config.host.leaseMs,
    memoryMb: hostMemoryBudgetMb(config.capacity),
    vcpus: Number.isFinite(vcpus) ? vcpus : null,
    subnet: parseSubnet(config.subnet),
    agentPort: null,
    network: networkSettings(config),
  };
}

/**
 * Takes this agent's host lease (docs/hosts.md): registers the host by name
 * the first time, and on every start takes a new epoch, so writes of an
 * earlier holder are fenced. A name whose lease another agent (another data
 * dir) still holds is refused: two agents never act as one host. A dead
 * host comes back live; a cordoned or draining one stays so. Places on it
 * the instances and volumes no host holds yet (a data dir written before
 * placement existed).
 */
export async function registerHost(store: Store, claim: HostClaim, clock: Clock): Promise<HostRec> {
  if (claim.address && !isIP(claim.address))
    throw new Error(`host address '${claim.address}' is not an IP address (--host-address, UNIHOST_HOST_ADDRESS)`);
  return store.tx(async (tx) => {
    await tx.lock(ADMISSION);
    const now = Date.now(); // leases are on the wall clock (src/domain/hosts.ts)
    const lease = new Date(now + claim.leaseMs).toISOString();
    checkSameNetwork(claim, await tx.hosts.list(), now);
    const figures = {
      address: claim.address || null,
      memory_mb: claim.memoryMb,
      vcpus: claim.vcpus,
      agent_port: claim.agentPort,
      network: claim.network,
    };
    let host = await tx.hosts.getByName(claim.name);
    if (!host) {
      host = {
        id: randomUUID(),
        name: claim.name,
        created_at: new Date(clock.now()).toISOString(),
        state: 'live',
        epoch: 1,
        holder: claim.holder,
        lease_expires_at: lease,
        ...figures,
        net_slot: await freeSlot(tx, claim.subnet),
      };
      await tx.hosts.insert(host);
    } else {
      if (host.holder !== null && host.holder !== claim.holder && host.state !== 'dead' && leaseHeld(host, now)) {
        const secs = Math.ceil((Date.parse(host.lease_expires_at!) - now) / 1000);
        throw new Error(
          `host name '${claim.name}' is held by another agent (another data dir; its lease runs ${secs} s more): ` +
            'give this one another --host-name, or stop the other',
        );
      }
      const patch = {
        ...figures,
        epoch: host.epoch + 1,
        holder: claim.holder,
        lease_expires_at: lease,
        state: host.state === 'dead' ? ('live' as const) : host.state,
        net_slot: host.net_slot ?? (await freeSlot(tx, claim.subnet)),
      };
      await tx.hosts.update(host.id, patch);
      host = { ...host, ...patch };
    }
    for (const i of await tx.instances.all())
      if (i.host_id === null) await tx.instances.updateSpec(i.id, { host_id: host.id });
    for (const v of await tx.volumes.all()) if (v.host_id === null) await tx.volumes.update(v.id, { host_id: host.id });
    return host;
  });
}

/**
 * The lowest network slot no other host has and whose gateway address no
 * instance holds (docs/hosts.md): the first host takes slot 0, the subnet's
 * first address, as a single host always did.
 */
async function freeSlot(tx: Tx, subnet: Subnet): Promise<number> {
  const used = new Set((await tx.hosts.list()).map((h) => h.net_slot));
  for (let slot = 0; slot <= Math.min(1023, subnet.last - subnet.first); slot++) {
    if (used.has(slot)) continue;
    if (slot > 0 && (await tx.instances.ipTaken(hostGateway(subnet, slot)))) continue;
    return slot;
  }
  throw err('UH_NO_FREE', 'no network slot left for another host: remove dead hosts, or use a larger subnet');
}

/**
 * A restored one-host backup (`unihost admin restore`): its instances go to
 * the host that starts on it first, whatever its name (registerHost places
 * them). A backup of several hosts keeps its placement.
 */
export async function unplaceOneHost(store: Store): Promise<void> {
  await store.tx(async (tx) => {
    const hosts = await tx.hosts.list();
    if (hosts.length > 1) return;
    for (const i of await tx.instances.all())
      if (i.host_id !== null) await tx.instances.updateSpec(i.id, { host_id: null });
    for (const v of await tx.volumes.all()) if (v.host_id !== null) await tx.volumes.update(v.id, { host_id: null });
    for (const h of hosts) await tx.hosts.delete(h.id);
  });
}

/** A host as `unihost admin host list` and GET /v1/nodes show it. */
export interface HostView {
  id: string;
  name: string;
  address: string | null;
  /** `dead` also when the lease ran out and no one has marked it yet */
  state: HostState;
  epoch: number;
  /** ms since the lease was last renewed (its expiry minus the lease length); null: never */
  lease_expires_in_ms: number | null;
  memory_mb: number;
  vcpus: number | null;
  /** guest memory and VMs of its live instances */
  used_memory_mb: number;
  vms: number;
  /** instances placed there, running or not */
  instances: number;
  /** names of its live instances */
  running: string[];
  /** volumes whose files are there */
  volumes: number;
}

const LIVE = new Set(['starting', 'running', 'draining', 'stopping', 'standby']);

/** What an operator does to hosts (`unihost admin host`): list, cordon, uncordon, drain, remove. */
export class HostService {
  constructor(private readonly deps: { store: Store; clock: Clock }) {}

  async list(): Promise<HostView[]> {
    const now = Date.now();
    return this.deps.store.read(async (tx) => {
      const out: HostView[] = [];
      const vols = await tx.volumes.all();
      for (const h of await tx.hosts.list()) {
        const insts = await tx.instances.onHost(h.id);
        const live = insts.filter((i) => LIVE.has(i.state));
        out.push({
          id: h.id,
          name: h.name,
          address: h.address,
          state: h.state !== 'dead' && !leaseHeld(h, now) ? 'dead' : h.state,
          epoch: h.epoch,
          lease_expires_in_ms: h.lease_expires_at === null ? null : Date.parse(h.lease_expires_at) - now,
          memory_mb: h.memory_mb,
          vcpus: h.vcpus,
          used_memory_mb: live.reduce((a, i) => a + i.memory_mb, 0),
          vms: live.length,
          instances: insts.length,
          running: live.map((i) => i.name),
          volumes: vols.filter((v) => v.host_id === h.id).length,
        });
      }
      return out;
    });
  }

  private async find(tx: Tx, name: string): Promise<HostRec> {
    const h = (await tx.hosts.getByName(name)) ?? (await tx.hosts.get(name));
    if (!h) {
      const known = (await tx.hosts.list()).map((x) => x.name);
      throw err('UH_NOT_FOUND', `no host '${name}' (hosts: ${known.join(', ') || 'none'})`);
    }
    return h;
  }

  /**
   * Sets what the operator made of a host: `cordoned` takes no new
   * instances, `draining` has them moved elsewhere (src/reconcile/hosts.ts),
   * `live` takes them again. A dead host cannot be changed: its agent brings
   * it back when it starts.
   */
  async mark(name: string, state: 'live' | 'cordoned' | 'draining'): Promise<HostRec> {
    return this.deps.store.tx(async (tx) => {
      const h = await this.find(tx, name);
      if (h.state === 'dead')
        throw err('UH_WRONG_STATE', `host '${h.name}' is dead: it comes back when its agent starts; or remove it`);
      await tx.hosts.update(h.id, { state });
      return { ...h, state };
    });
  }

  /**
   * Forgets a host. Refused while it runs instances unless it is dead (its
   * lease ran out: they were moved or stopped), and while volume files are
   * on a host that is not dead. Its stopped instances are placed again at
   * their next start; the volumes of a dead host are marked `error` (their
   * files were there).
   */
  async remove(name: string): Promise<void> {
    const now = Date.now();
    await this.deps.store.tx(async (tx) => {
      const h = await this.find(tx, name);
      const dead = h.state === 'dead' || !leaseHeld(h, now);
      const insts = await tx.instances.onHost(h.id);
      const live = insts.filter((i) => LIVE.has(i.state));
      if (!dead && live.length > 0)
        throw err(
          'UH_WRONG_STATE',
          `host '${h.name}' runs ${live.length} instance(s) (${live.map((i) => i.name).join(', ')}): ` +
            'drain it first (unihost admin host drain), or remove it once it is dead',
        );
      const vols = (await tx.volumes.all()).filter((v) => v.host_id === h.id);
      if (!dead && vols.length > 0)
        throw err(
          'UH_WRONG_STATE',
          `the files of ${vols.length} volume(s) are on host '${h.name}' (${vols.map((v) => v.name).join(', ')}): ` +
            'delete them first, or remove the host once it is dead',
        );
      for (const v of vols)
        await tx.volumes.update(v.id, {
          host_id: null,
          state: 'error',
          message: `its file was on host '${h.name}', which was removed`,
        });
      for (const i of insts) await tx.instances.updateSpec(i.id, { host_id: null });
      await tx.hosts.delete(h.id);
    });
  }
}
