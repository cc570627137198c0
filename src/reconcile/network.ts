import type { Controller, ControllerDeps } from './deps.js';
import { bridgeMacFor, hostGateway, macFor, parseSubnet } from '../network/address.js';
import { InternalDns } from '../network/dns.js';
import { NameTable } from './dns-names.js';
import { follow, RetryingQueue } from './engine.js';
import type { NetworkDriver, Overlay, TapSpec } from '../network/driver.js';
import { tapName } from '../network/host.js';
import type { GuestAddress, InstanceRec } from '../store/types.js';

/** The name-table queue's key of the hosts' network. */
const OVERLAY = '#overlay';

/** What the machine controller needs from the network to boot a VM. */
export interface NetworkHooks {
  /**
   * Creates (idempotently) the instance's tap; returns the NIC (its MAC: the
   * guest's) and the `netdev.ip` value. `guest`: the address a restored guest
   * keeps (a clone of a template), translated to the instance's on the tap.
   */
  attach(inst: InstanceRec, guest?: GuestAddress): Promise<{ tap: string; mac: string; netdevIp: string }>;
  /** Removes the instance's tap once its VM is gone. */
  detach(instanceId: string): Promise<void>;
}

/**
 * The private network (docs/network.md): a bridge owned by the daemon, one tap
 * per running instance with per-user isolation rules, and the `.internal` DNS
 * server on the gateway address. On start it keeps the taps of VMs that are
 * still running (adopted) and removes the rest.
 */
export class NetworkController implements Controller, NetworkHooks {
  private dns: InternalDns | null = null;
  /** the `.internal` names, kept from the change feed (queries never read the store) */
  readonly names = new NameTable();
  private off: (() => void) | null = null;
  private offOverlay: (() => void) | null = null;
  private readonly queue: RetryingQueue;
  /** the overlay last given to the driver, as JSON ('' before the first) */
  private overlayKey = '';

  constructor(
    private readonly s: ControllerDeps,
    private readonly log: { info(o: object, m: string): void; warn(o: object, m: string): void },
    /** the host side of the network (src/drivers.ts picks it from `network.driver`) */
    readonly host: NetworkDriver,
  ) {
    this.queue = new RetryingQueue(
      (key) => this.refresh(key),
      (k, e) =>
        log.warn(
          { err: e },
          k === OVERLAY ? 'private network across hosts: update failed' : 'DNS name table: refresh failed',
        ),
    );
  }

  /** Re-reads one instance for the name table, or all of them (`*`); `overlay`: the hosts' network. */
  private async refresh(key: string): Promise<void> {
    if (key === OVERLAY) return this.refreshOverlay();
    if (key === '*') this.names.reset(await this.s.store.read((tx) => tx.instances.all()));
    else this.names.set(key, await this.s.store.read((tx) => tx.instances.getAny(key)));
  }

  /** The instance's tap; `guest` (a VM restored from a template's memory) is translated to the instance's address. */
  private spec(inst: InstanceRec, guest: GuestAddress | undefined): TapSpec {
    if (!inst.private_ip || !inst.nic_id) throw new Error(`instance ${inst.name} has no private address`);
    const own = {
      tap: tapName(inst.id),
      userId: inst.user_id,
      ip: inst.private_ip,
      mac: inst.mac ?? macFor(inst.nic_id),
    };
    return guest ? { ...own, guest } : own;
  }

  /**
   * This host's part in the private network across hosts (docs/hosts.md),
   * read from the store: the other hosts that are not dead, and the
   * instances placed on them. Only an agent with a host address joins.
   */
  private async overlay(): Promise<Overlay | null> {
    const { hosts, instances } = await this.s.store.read(async (tx) => ({
      hosts: await tx.hosts.list(),
      instances: await tx.instances.all(),
    }));
    const me = hosts.find((h) => h.id === this.s.hostId);
    if (!me?.address) return null;
    const subnet = parseSubnet(this.s.config.subnet);
    const peers = new Map(
      hosts.filter((h) => h.id !== me.id && h.address && h.state !== 'dead').map((h) => [h.id, h] as const),
    );
    const remote = instances.flatMap((i) => {
      const h = i.host_id ? peers.get(i.host_id) : undefined;
      if (!h || !i.private_ip || !i.nic_id) return [];
      return [{ ip: i.private_ip, mac: i.mac ?? macFor(i.nic_id), userId: i.user_id, host: h.address! }];
    });
    return {
      vni: this.s.config.network.vni,
      local: me.address,
      peers: [...peers.values()].map((h) => ({
        address: h.address!,
        gateway: hostGateway(subnet, h.net_slot ?? 0),
        mac: bridgeMacFor(this.s.config.network.bridge, h.net_slot ?? 0),
      })),
      remote: remote.sort((a, b) => a.ip.localeCompare(b.ip)),
    };
  }

  private async refreshOverlay(): Promise<void> {
    const o = await this.overlay();
    const key = JSON.stringify(o);
    if (key === this.overlayKey) return;
    await this.host.setOverlay(o);
    if (this.overlayKey === '' || (o === null) !== (this.overlayKey === 'null'))
      this.log.info({ hosts: o?.peers.length ?? 0, remote: o?.remote.length ?? 0 }, 'private network across hosts');
    this.overlayKey = key;
  }

  async start(): Promise<void> {
    await this.host.setup();
    const all = await this.s.store.read((tx) => tx.instances.all());
    // Every instance keeps its tap from its first boot until it is deleted (docs/network.md): taps of
    // VMs an earlier daemon started stay (QEMU holds them open), and a restart or wake needs no command.
    // a running clone of a template keeps its translation (its guest's address is in its runtime record)
    const expected = all
      .filter((i) => i.private_ip && i.nic_id && i.host_id === this.s.hostId)
      .map((i) => this.spec(i, (i.runtime as { guest?: GuestAddress }).guest)); // RuntimeRec.guest
    const r = await this.host.sync(expected);
    if (r.removed.length > 0) this.log.info({ removed: r.removed }, 'removed stray taps');
    // with a host address, the bridge joins the other hosts' (the store says which, and who runs where)
    if (this.s.config.host.address && this.s.hostId) {
      await this.queue.kick(OVERLAY);
      this.offOverlay = follow(this.s.store, {
        kinds: ['instance', 'host'],
        change: () => void this.queue.kick(OVERLAY),
        resync: () => void this.queue.kick(OVERLAY),
        resyncMs: this.s.config.store.resyncMs,
      });
    }
    if (this.s.config.network.dns && this.host.dnsHost) {
      this.off = follow(this.s.store, {
        kinds: ['instance'],
        change: (c) => void this.queue.kick(c.id),
        resync: () => void this.queue.kick('*'),
        resyncMs: this.s.config.store.resyncMs,
      });
      this.names.reset(all);
      this.dns = new InternalDns({
        host: this.host.dnsHost,
        port: this.s.config.network.dnsPort,
        resolve: (clientIp, name) => this.resolve(clientIp, name),
        onError: (e) => this.log.warn({ err: e }, 'DNS resolver failed'),
      });
      const a = await this.dns.start();
      this.log.info(a, '.internal DNS listening');
    }
  }

  async stop(): Promise<void> {
    this.off?.();
    this.offOverlay?.();
    await this.queue.stop();
    await this.dns?.stop();
  }

  /** `<name>.internal` for the asking instance's own user only: from memory, never a store read. */
  private resolve(clientIp: string, name: string): Promise<string | undefined> {
    return Promise.resolve(this.names.lookup(clientIp, name));
  }

  async attach(inst: InstanceRec, guest?: GuestAddress): Promise<{ tap: string; mac: string; netdevIp: string }> {
    const spec = this.spec(inst, guest);
    await this.host.ensureTap(spec);
    return { tap: spec.tap, mac: spec.guest?.mac ?? spec.mac, netdevIp: this.host.netdevIp(spec.ip) };
  }

  async detach(instanceId: string): Promise<void> {
    await this.host.removeTap(tapName(instanceId));
  }
}
