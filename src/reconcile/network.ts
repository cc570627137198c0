import type { Controller, ControllerDeps } from './deps.js';
import { macFor } from '../network/address.js';
import { InternalDns } from '../network/dns.js';
import { NameTable } from './dns-names.js';
import { follow, RetryingQueue } from './engine.js';
import type { NetworkDriver, TapSpec } from '../network/driver.js';
import { tapName } from '../network/host.js';
import type { GuestAddress, InstanceRec } from '../store/types.js';

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
  private readonly queue: RetryingQueue;

  constructor(
    private readonly s: ControllerDeps,
    private readonly log: { info(o: object, m: string): void; warn(o: object, m: string): void },
    /** the host side of the network (src/drivers.ts picks it from `network.driver`) */
    readonly host: NetworkDriver,
  ) {
    this.queue = new RetryingQueue(
      (key) => this.refresh(key),
      (_k, e) => log.warn({ err: e }, 'DNS name table: refresh failed'),
    );
  }

  /** Re-reads one instance for the name table, or all of them (`*`). */
  private async refresh(key: string): Promise<void> {
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
