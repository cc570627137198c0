import type { Controller, ControllerDeps } from './deps.js';
import { isLive } from '../domain/instance-states.js';
import { bridgeMacFor, hostGateway, macFor, parseSubnet } from '../network/address.js';
import { InternalDns } from '../network/dns.js';
import { NameTable } from './dns-names.js';
import { follow, RetryingQueue } from './engine.js';
import type { NetworkDriver, Overlay, TapSpec } from '../network/driver.js';
import { tapName } from '../network/host.js';
import type { GuestAddress, HostRec, InstanceRec } from '../store/types.js';

/** The queue's keys of the hosts' network and of the hosts (instance ids are the others). */
const OVERLAY = '#overlay';
const HOSTS = '#hosts';

/** What the machine controller needs from the network to boot a VM. */
export interface NetworkHooks {
  /**
   * Creates (idempotently) the instance's tap; returns the NIC (its MAC: the
   * guest's) and the `netdev.ip` value. `guest`: the address a restored guest
   * keeps (a clone of a template), translated to the instance's on the tap.
   * It returns once the tap exists; `admitted` settles when the rules admit
   * it (the VM may start in between: NetworkDriver.attachTap). `from`: the
   * tap a VM started in advance holds open, which becomes the instance's (a
   * warm VM: MachineDriver.reserveWarm). `restored`: the VM resumes a
   * memory snapshot (NetworkDriver.attachTap).
   */
  attach(
    inst: InstanceRec,
    opts: { guest?: GuestAddress; from?: string; restored?: boolean },
  ): Promise<{ tap: string; mac: string; netdevIp: string; admitted: Promise<void> }>;
  /** Removes the instance's tap once its VM is gone. */
  detach(instanceId: string): Promise<void>;
  /** Takes the tap of an instance stopped for good off the bridge (NetworkDriver.parkTap). */
  park(instanceId: string): Promise<void>;
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
  /** this agent's host is joined to the others (it has an address) */
  private overlayOn = false;
  /** the hosts, and where each instance with an address is: kept from the change feed for the overlay */
  private hosts: HostRec[] = [];
  private readonly placed = new Map<string, { ip: string; mac: string; userId: string; hostId: string }>();
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

  /**
   * Re-reads one instance for the name table and the overlay's placement,
   * or all of them (`*`); `HOSTS`: the hosts; `OVERLAY`: writes the hosts'
   * network from what is kept (no store read).
   */
  private async refresh(key: string): Promise<void> {
    if (key === OVERLAY) return this.refreshOverlay();
    if (key === HOSTS) {
      this.hosts = await this.s.store.read((tx) => tx.hosts.list());
      void this.queue.kick(OVERLAY);
    } else if (key === '*') {
      const [all, hosts] = await this.s.store.read(
        async (tx) => [await tx.instances.all(), this.overlayOn ? await tx.hosts.list() : []] as const,
      );
      this.names.reset(all);
      this.hosts = hosts;
      this.placed.clear();
      for (const i of all) this.place(i.id, i);
      if (this.overlayOn) void this.queue.kick(OVERLAY);
    } else {
      const inst = await this.s.store.read((tx) => tx.instances.getAny(key));
      this.names.set(key, inst);
      if (this.place(key, inst) && this.overlayOn) void this.queue.kick(OVERLAY);
    }
  }

  /** Keeps where an instance with an address is; true when that changed (the overlay must follow). */
  private place(id: string, inst: InstanceRec | undefined): boolean {
    const old = this.placed.get(id);
    if (!inst?.private_ip || !inst.nic_id || !inst.host_id) {
      this.placed.delete(id);
      return old !== undefined;
    }
    const p = { ip: inst.private_ip, mac: inst.mac ?? macFor(inst.nic_id), userId: inst.user_id, hostId: inst.host_id };
    this.placed.set(id, p);
    return !old || old.ip !== p.ip || old.mac !== p.mac || old.userId !== p.userId || old.hostId !== p.hostId;
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
   * from what the change feed keeps here: the other hosts that are not
   * dead, and the instances placed on them. Only an agent with a host
   * address joins.
   */
  private overlay(): Overlay | null {
    const hosts = this.hosts;
    const me = hosts.find((h) => h.id === this.s.hostId);
    if (!me?.address) return null;
    const subnet = parseSubnet(this.s.config.subnet);
    const peers = new Map(
      hosts.filter((h) => h.id !== me.id && h.address && h.state !== 'dead').map((h) => [h.id, h] as const),
    );
    const remote = [...this.placed.values()].flatMap((i) => {
      const h = peers.get(i.hostId);
      return h ? [{ ip: i.ip, mac: i.mac, userId: i.userId, host: h.address! }] : [];
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
    const o = this.overlay();
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
    // An instance has a tap from its boot until it stops for good or is deleted (docs/network.md): taps
    // of VMs an earlier daemon started stay (QEMU holds them open), a standby's stays for its wake; a
    // stopped instance gets none (a bridge has ports for 1,023 taps), its next start makes it.
    // a running clone of a template keeps its translation (its guest's address is in its runtime record)
    const expected = all
      .filter((i) => i.private_ip && i.nic_id && i.host_id === this.s.hostId && isLive(i.state))
      .map((i) => this.spec(i, (i.runtime as { guest?: GuestAddress }).guest)); // RuntimeRec.guest
    const r = await this.host.sync(expected);
    if (r.removed.length > 0) this.log.info({ removed: r.removed }, 'removed stray taps');
    // with a host address, the bridge joins the other hosts' (the store says which, and who runs where)
    this.overlayOn = this.s.config.host.address !== '' && this.s.hostId !== '';
    const dnsOn = this.s.config.network.dns && this.host.dnsHost !== null;
    this.names.reset(all);
    for (const i of all) this.place(i.id, i);
    if (this.overlayOn) {
      this.hosts = await this.s.store.read((tx) => tx.hosts.list());
      await this.queue.kick(OVERLAY);
    }
    if (dnsOn || this.overlayOn)
      this.off = follow(this.s.store, {
        kinds: this.overlayOn ? ['instance', 'host'] : ['instance'],
        change: (c) => void this.queue.kick(c.kind === 'host' ? HOSTS : c.id),
        resync: () => void this.queue.kick('*'),
        resyncMs: this.s.config.store.resyncMs,
      });
    if (dnsOn && this.host.dnsHost) {
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
    await this.queue.stop();
    await this.dns?.stop();
  }

  /** `<name>.internal` for the asking instance's own user only: from memory, never a store read. */
  private resolve(clientIp: string, name: string): Promise<string | undefined> {
    return Promise.resolve(this.names.lookup(clientIp, name));
  }

  async attach(
    inst: InstanceRec,
    { guest, from, restored }: { guest?: GuestAddress; from?: string; restored?: boolean },
  ): Promise<{ tap: string; mac: string; netdevIp: string; admitted: Promise<void> }> {
    const spec = this.spec(inst, guest);
    const { admitted } = await this.host.attachTap(spec, {
      ...(from === undefined ? {} : { from }),
      ...(restored ? { restored } : {}),
    });
    return { tap: spec.tap, mac: spec.guest?.mac ?? spec.mac, netdevIp: this.host.netdevIp(spec.ip), admitted };
  }

  async detach(instanceId: string): Promise<void> {
    await this.host.removeTap(tapName(instanceId));
  }

  async park(instanceId: string): Promise<void> {
    await this.host.parkTap(tapName(instanceId));
  }
}
