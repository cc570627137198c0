import { createHash } from 'node:crypto';
import { macFor, netdevIpArg, parseSubnet } from './address.js';
import { CommandError, hostRunner, type Runner } from './cmd.js';
import type { NetworkDriver } from './driver.js';
import { waitForPort } from './probe.js';
import { VM_UID_BASE, VM_UIDS } from '../machines/qemu/jail.js';
import { renderDelete, renderRules, type TapSpec, checkTapSpec } from './rules.js';
import pLimit from 'p-limit';

export type { TapSpec } from './rules.js';

export interface HostNetworkOptions {
  /** the private subnet (config `subnet`); the bridge gets its gateway address */
  subnet: string;
  /** bridge device name (default `uhbr0`) */
  bridge?: string;
  /** nftables table name in the `bridge` and `inet` families (default `unihost`) */
  table?: string;
  /** prefix of every tap name (default `uh`); must match `tapName`'s prefix */
  tapPrefix?: string;
  /** ports of the gateway address guests may connect to (default: DNS 53 on UDP and TCP) */
  guestToHost?: { udp: number[]; tcp: number[] };
  /** run every command inside this named network namespace (tests, benchmarks) */
  netns?: string;
  /** replaces the command runner (default: `hostRunner(netns)`) */
  run?: Runner;
}

/**
 * The tap device name of an instance: `uh` + 12 hex digits (≤ 15 chars, the
 * kernel's IFNAMSIZ). For a UUID these are its first 12 hex digits, so an
 * operator can match a tap to an instance at a glance; for other ids, a hash.
 */
export function tapName(instanceId: string, prefix = 'uh'): string {
  const hex = instanceId.toLowerCase().replace(/-/g, '');
  const id = /^[0-9a-f]{32}$/.test(hex) ? hex : createHash('sha256').update(instanceId).digest('hex');
  return prefix + id.slice(0, 12);
}

interface LinkInfo {
  ifname: string;
  master?: string;
  linkinfo?: { info_kind?: string };
}

/**
 * The daemon's side of the private network: one Linux bridge carrying the
 * gateway address, one tap per instance (QEMU opens it with
 * `-netdev tap,ifname=<tap>,script=no,downscript=no`), and the nftables
 * rules isolating users (see rules.ts and docs/network.md).
 *
 * Every method is idempotent and calls are serialized. Taps are persistent
 * devices: they outlive the daemon, and a running QEMU keeps its tap across
 * a daemon restart. After a restart call `setup()` then `sync()` with every
 * tap that should exist before any `ensureTap`/`removeTap`, because the
 * ruleset is always rebuilt from the taps this object knows.
 */
export class HostNetwork implements NetworkDriver {
  readonly bridge: string;
  readonly gateway: string;
  readonly prefixLength: number;
  readonly table: string;
  readonly tapPrefix: string;
  /** fixed, so the gateway MAC cached by guests never changes */
  readonly bridgeMac: string;
  private readonly run: Runner;
  private readonly guestToHost: { udp: number[]; tcp: number[] };
  private readonly taps = new Map<string, TapSpec>();
  /** host changes run one at a time */
  private readonly serial = pLimit(1);

  constructor(opts: HostNetworkOptions) {
    const subnet = parseSubnet(opts.subnet);
    this.gateway = subnet.gateway;
    this.prefixLength = subnet.prefix;
    this.bridge = opts.bridge ?? 'uhbr0';
    this.table = opts.table ?? 'unihost';
    this.tapPrefix = opts.tapPrefix ?? 'uh';
    this.bridgeMac = macFor(`bridge:${this.bridge}`);
    this.guestToHost = opts.guestToHost ?? { udp: [53], tcp: [53] };
    this.run = opts.run ?? hostRunner(opts.netns);
  }

  get dnsHost(): string {
    return this.gateway;
  }

  /** Connects from the daemon's namespace (the bridge's), as the gateway does. */
  waitForPort(ip: string, port: number, signal: AbortSignal): Promise<void> {
    return waitForPort(ip, port, signal);
  }

  /** The guest's `netdev.ip` value for an address (DNS server = gateway). */
  netdevIp(ip: string): string {
    return netdevIpArg(ip, this.prefixLength, this.gateway);
  }

  /**
   * Creates (or repairs) the bridge with the gateway address and applies the
   * rules for the known taps. Safe to call at any time, also while VMs run.
   */
  setup(): Promise<void> {
    return this.serial(async () => {
      await this.ensureBridge();
      await this.applyRules();
    });
  }

  /**
   * Creates the tap if missing, attaches it to the bridge, brings it up, and
   * admits it in the rules. A tap this object made for the same spec is taken
   * as it is: no command runs (the boot path of a restart or a wake).
   */
  async ensureTap(spec: TapSpec): Promise<void> {
    checkTapSpec(spec);
    this.checkPrefix(spec.tap);
    return this.serial(async () => {
      const old = this.taps.get(spec.tap);
      const sameGuest = old?.guest?.ip === spec.guest?.ip && old?.guest?.mac === spec.guest?.mac;
      if (old && old.ip === spec.ip && old.mac === spec.mac && old.userId === spec.userId && sameGuest) return;
      this.taps.set(spec.tap, spec);
      // The rules name taps, not devices: both commands run at once (the boot path of a new instance).
      const results = await Promise.allSettled([
        old ? this.ensureTapDevices([spec.tap]) : this.addTapDevice(spec.tap),
        this.applyRules(),
      ]);
      const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
      if (failed) {
        if (old) this.taps.set(spec.tap, old);
        else this.taps.delete(spec.tap); // the next rules update drops it again
        throw failed.reason;
      }
      if (old && old.ip !== spec.ip) await this.forgetNeighbour(old.ip);
    });
  }

  /** Creates, attaches and raises a tap in one `ip -batch`; one that exists already takes the slower path. */
  private async addTapDevice(tap: string): Promise<void> {
    try {
      await this.run(
        ['ip', '-batch', '-'],
        [
          `tuntap add dev ${tap} mode tap`,
          `link set dev ${tap} addrgenmode none`,
          `link set dev ${tap} master ${this.bridge} up`,
        ]
          .join('\n')
          .concat('\n'),
      );
    } catch (e) {
      if (!(e instanceof CommandError)) throw e;
      await this.ensureTapDevices([tap]); // left over from a crash, or made by hand: attach what is there
    }
  }

  /** Deletes the tap (if present) and its rules. A running QEMU on it loses its network. */
  async removeTap(tap: string): Promise<void> {
    this.checkPrefix(tap);
    return this.serial(async () => {
      const spec = this.taps.get(tap);
      this.taps.delete(tap);
      // independent of each other once the tap is out of the known set: run at once
      await Promise.all([
        this.applyRules(),
        this.deleteTapDevice(tap),
        spec ? this.forgetNeighbour(spec.ip) : undefined,
      ]);
    });
  }

  /**
   * Makes the host match `expected` exactly: creates/attaches missing taps,
   * deletes unexpected unihost taps (leftovers of crashes or deleted
   * instances), and rebuilds the rules. Expected taps are never deleted, so a
   * running QEMU keeps its network across daemon restarts.
   */
  async sync(expected: TapSpec[]): Promise<{ created: string[]; removed: string[] }> {
    expected.forEach((t) => {
      checkTapSpec(t);
      this.checkPrefix(t.tap);
    });
    return this.serial(async () => {
      await this.ensureBridge();
      const want = new Map(expected.map((t) => [t.tap, t]));
      const have = await this.ourTaps();
      const created: string[] = [];
      for (const t of want.keys()) if (!have.includes(t)) created.push(t);
      await this.ensureTapDevices([...want.keys()]);
      this.taps.clear();
      for (const [k, v] of want) this.taps.set(k, v);
      await this.applyRules();
      const removed = have.filter((t) => !want.has(t));
      for (const t of removed) await this.deleteTapDevice(t);
      return { created, removed };
    });
  }

  /** Removes every unihost tap, the bridge and the rules. Breaks running VMs' networks. */
  teardown(): Promise<void> {
    return this.serial(async () => {
      for (const t of await this.ourTaps()) await this.deleteTapDevice(t);
      this.taps.clear();
      if (await this.linkExists(this.bridge)) await this.ip('link', 'del', 'dev', this.bridge);
      await this.run(['nft', '-f', '-'], renderDelete(this.table));
    });
  }

  /** Names of the unihost taps present on the host (attached to our bridge or to none). */
  listTaps(): Promise<string[]> {
    return this.serial(() => this.ourTaps());
  }

  // ---- internals (run inside `serial`) ----

  private checkPrefix(tap: string): void {
    if (!tap.startsWith(this.tapPrefix)) throw new Error(`tap '${tap}' does not start with '${this.tapPrefix}'`);
  }

  private ip(...args: string[]): Promise<string> {
    return this.run(['ip', ...args]);
  }

  private async links(...filter: string[]): Promise<LinkInfo[]> {
    const out = await this.ip('-d', '-j', 'link', 'show', ...filter);
    return out.trim() ? (JSON.parse(out) as LinkInfo[]) : [];
  }

  private async linkExists(name: string): Promise<boolean> {
    try {
      await this.ip('-j', 'link', 'show', 'dev', name);
      return true;
    } catch (e) {
      if (e instanceof CommandError && /does not exist/.test(e.stderr)) return false;
      throw e;
    }
  }

  private async ourTaps(): Promise<string[]> {
    const all = await this.links();
    return all
      .filter((l) => l.ifname.startsWith(this.tapPrefix) && l.linkinfo?.info_kind === 'tun')
      .filter((l) => l.master === undefined || l.master === this.bridge)
      .map((l) => l.ifname)
      .sort();
  }

  private async ensureBridge(): Promise<void> {
    const br = this.bridge;
    if (!(await this.linkExists(br))) {
      try {
        await this.ip('link', 'add', 'name', br, 'type', 'bridge', 'stp_state', '0', 'forward_delay', '0');
      } catch (e) {
        if (!(await this.linkExists(br))) throw e; // lost a race with another creator: fine
      }
    }
    // A fixed MAC: otherwise a bridge takes the lowest port MAC, and the
    // gateway's MAC (cached by every guest) would change as taps come and go.
    await this.ip('link', 'set', 'dev', br, 'address', this.bridgeMac);
    // No IPv6 address on the bridge (set before `up`, flushed in case it was
    // up already): host services must not be reachable over link-local IPv6.
    await this.ip('link', 'set', 'dev', br, 'addrgenmode', 'none');
    await this.ip('-6', 'addr', 'flush', 'dev', br);
    await this.ip('link', 'set', 'dev', br, 'up');
    const want = `${this.gateway}/${this.prefixLength}`;
    const addrs = JSON.parse(await this.ip('-j', '-4', 'addr', 'show', 'dev', br)) as {
      addr_info?: { local: string; prefixlen: number }[];
    }[];
    for (const a of addrs[0]?.addr_info ?? []) {
      if (`${a.local}/${a.prefixlen}` !== want) await this.ip('addr', 'del', `${a.local}/${a.prefixlen}`, 'dev', br);
    }
    await this.ip('addr', 'replace', want, 'dev', br);
  }

  /**
   * Creates the missing taps and attaches/raises all of them with one
   * `ip -batch` (one process however many taps: matters for `sync` at start).
   */
  private async ensureTapDevices(taps: string[]): Promise<void> {
    if (!taps.length) return;
    const present = new Set((await this.links()).map((l) => l.ifname));
    const lines = taps.flatMap((t) => [
      ...(present.has(t) ? [] : [`tuntap add dev ${t} mode tap`]),
      `link set dev ${t} addrgenmode none`,
      `link set dev ${t} master ${this.bridge} up`,
    ]);
    await this.run(['ip', '-batch', '-'], lines.join('\n') + '\n');
  }

  private async deleteTapDevice(tap: string): Promise<void> {
    try {
      // `ip link del`, not `ip tuntap del`: the latter fails (EBUSY) while a
      // QEMU still holds the tap, this one removes it at once.
      await this.ip('link', 'del', 'dev', tap);
    } catch (e) {
      if (await this.linkExists(tap)) throw e;
    }
  }

  /** Drops the host's ARP entry so a reused address is resolved afresh. */
  private async forgetNeighbour(ip: string): Promise<void> {
    await this.ip('neigh', 'flush', 'to', ip, 'dev', this.bridge).catch(() => undefined);
  }

  private async applyRules(): Promise<void> {
    const script = renderRules(
      {
        bridge: this.bridge,
        bridgeMac: this.bridgeMac,
        table: this.table,
        tapPrefix: this.tapPrefix,
        hostTcpPorts: this.guestToHost.tcp,
        hostUdpPorts: this.guestToHost.udp,
        vmUids: [VM_UID_BASE, VM_UID_BASE + VM_UIDS - 1],
      },
      [...this.taps.values()],
    );
    await this.run(['nft', '-f', '-'], script);
  }
}
