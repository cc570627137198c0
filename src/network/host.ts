import { createHash } from 'node:crypto';
import { isIP } from 'node:net';
import { bridgeMacFor, hostGateway, netdevIpArg, parseSubnet } from './address.js';
import { CommandError, hostRunner, NET_COMMAND_TIMEOUT_MS, type Runner } from './cmd.js';
import { BatchError, IpBatch } from './ip-batch.js';
import { NftBatch } from './nft-batch.js';
import type { AttachOpts, NetworkDriver, Overlay } from './driver.js';
import { waitForPort } from './probe.js';
import { VM_UID_BASE, VM_UIDS } from '../machines/qemu/jail.js';
import {
  renderDelete,
  renderRules,
  renderTapChanges,
  type OverlayRules,
  type RulesOptions,
  type TapSpec,
  checkTapSpec,
  IFNAME,
} from './rules.js';
import pLimit from 'p-limit';

export type { TapSpec } from './rules.js';

export interface HostNetworkOptions {
  /** the private subnet (config `subnet`); the bridge gets its gateway address */
  subnet: string;
  /** this host's network slot (services/hosts.ts): which gateway address and bridge MAC it has; default 0 */
  slot?: number;
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
  linkinfo?: { info_kind?: string; info_data?: { id?: number; local?: string; port?: number; learning?: boolean } };
}

/** VXLAN's IANA port: the hosts' network must carry UDP to it between hosts (docs/hosts.md). */
export const VXLAN_PORT = 4789;

/**
 * The daemon's side of the private network: one Linux bridge carrying the
 * gateway address, one tap per instance (QEMU opens it with
 * `-netdev tap,ifname=<tap>,script=no,downscript=no`), and the nftables
 * rules isolating users (see rules.ts and docs/network.md).
 *
 * Every method is idempotent. Changes of one tap run in order, changes of
 * different taps side by side, and bridge-wide changes (setup, sync,
 * overlay, teardown) alone; `nft` runs one at a time, merging the updates
 * that queue behind it. Taps are persistent
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
  /** the bridge's VXLAN port when it is joined to other hosts (`vx` + bridge: never a tap name) */
  readonly vxlan: string;
  private overlay: Overlay | null = null;
  /** the VXLAN forwarding entries as last written (`"<mac> <dst>"`); null: read them from the kernel first */
  private fdb: Set<string> | null = null;
  /**
   * What the rules last applied say (null: unknown): their taps, the other hosts' instances (with the
   * overlay), their options (the ruleset without taps: the other hosts' gateways included), and the
   * whole ruleset when it went whole. An unchanged ruleset is not applied again, except to repair; a
   * change of taps or of instances elsewhere alone starts from `taps` and `remote`.
   */
  private lastApplied: {
    taps: TapSpec[];
    remote: OverlayRules['remote'];
    base: string;
    script: string | null;
  } | null = null;
  private readonly run: Runner;
  private readonly guestToHost: { udp: number[]; tcp: number[] };
  private readonly taps = new Map<string, TapSpec>();
  /** taps of stopped instances, kept (and admitted) but off the bridge and down: parkTap */
  private readonly parked = new Set<string>();
  /** the bridge, the overlay and whole-set changes (setup, sync, teardown): one at a time, alone */
  private readonly exclusive = pLimit(1);
  /** set while an exclusive change runs or waits for tap changes to end; resolves when it is done */
  private gate: Promise<void> | null = null;
  /** tap changes under way (each tap's own run one after the other, different taps' side by side) */
  private tapOps = 0;
  private tapOpsDone: (() => void) | null = null;
  private readonly tapChains = new Map<string, Promise<unknown>>();
  /**
   * `nft` runs one at a time, each rendering the state as it is when it
   * starts: updates asked for while one runs are applied together by the
   * next (and any after it find the same script and skip it).
   */
  private readonly rulesLock = pLimit(1);
  private readonly batch: { make: IpBatch; remove: IpBatch; bridge: IpBatch; nft: NftBatch } | undefined;

  constructor(opts: HostNetworkOptions) {
    const subnet = parseSubnet(opts.subnet);
    this.gateway = hostGateway(subnet, opts.slot ?? 0);
    this.prefixLength = subnet.prefix;
    this.bridge = opts.bridge ?? 'uhbr0';
    this.table = opts.table ?? 'unihost';
    this.tapPrefix = opts.tapPrefix ?? 'uh';
    this.bridgeMac = bridgeMacFor(this.bridge, opts.slot ?? 0);
    this.vxlan = `vx${this.bridge}`.slice(0, 15);
    this.guestToHost = opts.guestToHost ?? { udp: [53], tcp: [53] };
    this.run = opts.run ?? hostRunner(opts.netns);
    // The tap commands go to two running `ip`s (ip-batch.ts; a given runner, e.g. a test's, gets them all):
    // one makes taps, one removes them, as a removal takes 20-40 ms in the kernel and a tap made behind it
    // in one process would wait for it (measured: 0.7 ms to make a tap beside a removal, 18.5 ms behind it).
    // The ruleset goes to a running `nft -i` too (nft-batch.ts): a spawned `nft` cost 15-25 ms per update;
    // and the forwarding entries to a running `bridge`: spawned, they were a third of an agent's CPU.
    if (!opts.run) {
      const ns = opts.netns ? ['ip', 'netns', 'exec', opts.netns] : [];
      this.batch = {
        make: new IpBatch([...ns, 'ip'], NET_COMMAND_TIMEOUT_MS),
        remove: new IpBatch([...ns, 'ip'], NET_COMMAND_TIMEOUT_MS),
        bridge: new IpBatch([...ns, 'bridge'], NET_COMMAND_TIMEOUT_MS, 'bridge'),
        nft: new NftBatch([...ns, 'nft'], NET_COMMAND_TIMEOUT_MS),
      };
    }
  }

  /** `ip` commands, one per line: to a running `ip`, or one `ip -batch` through the runner. */
  private async ipLines(lines: string[], to: 'make' | 'remove' = 'make'): Promise<void> {
    if (this.batch) return this.batch[to].run(lines);
    await this.run(['ip', '-batch', '-'], lines.join('\n') + '\n');
  }

  /** `bridge` commands, one per line: to a running `bridge`, or one `bridge -batch` through the runner. */
  private async bridgeLines(lines: string[]): Promise<void> {
    if (!this.batch) return void (await this.run(['bridge', '-batch', '-'], lines.join('\n') + '\n'));
    try {
      await this.batch.bridge.run(lines);
    } catch (e) {
      // A device made again under a name the running `bridge` knew (the VXLAN port; a tap renamed at a
      // warm restore) is an unknown index to it: those lines go to a new `bridge`, and the running one is
      // replaced (IpBatch.renew).
      if (!(e instanceof BatchError) || !/unknown ifindex/i.test(e.stderr)) throw e;
      this.batch.bridge.renew();
      await this.run(['bridge', '-batch', '-'], e.failed.join('\n') + '\n');
    }
  }

  /** Runs `f` alone: after the tap changes under way, with none starting until it ends. */
  private serial<T>(f: () => Promise<T>): Promise<T> {
    return this.exclusive(async () => {
      let open!: () => void;
      this.gate = new Promise<void>((r) => (open = r));
      try {
        if (this.tapOps > 0) await new Promise<void>((r) => (this.tapOpsDone = r));
        return await f();
      } finally {
        this.gate = null;
        open();
      }
    });
  }

  /**
   * Runs `f` after every earlier change of `tap`, beside changes of other
   * taps (a boot's tap never waits for another instance's tap to go), and
   * never while an exclusive change runs.
   */
  private perTap<T>(tap: string, f: () => Promise<T>): Promise<T> {
    const prev = this.tapChains.get(tap) ?? Promise.resolve();
    const run = prev.then(async () => {
      while (this.gate) await this.gate;
      this.tapOps++; // in the same turn as the check: an exclusive change sees it
      try {
        return await f();
      } finally {
        if (--this.tapOps === 0 && this.tapOpsDone) {
          this.tapOpsDone();
          this.tapOpsDone = null;
        }
      }
    });
    const tail = run.then(
      () => undefined,
      () => undefined,
    );
    this.tapChains.set(tap, tail);
    void tail.then(() => {
      if (this.tapChains.get(tap) === tail) this.tapChains.delete(tap);
    });
    return run;
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
      if (this.overlay) {
        await this.ensureVxlanPort(this.overlay);
        this.fdb = null;
        await this.syncFdb(this.overlay);
      }
      await this.applyRules(true);
    });
  }

  /**
   * Joins the bridge to the other hosts' (docs/hosts.md): a VXLAN port
   * (unicast, no learning, no multicast) whose forwarding entries are
   * exactly `o`'s: one all-zero entry per peer (broadcasts such as ARP are
   * sent to each) and one per MAC on another host. The rules then let each
   * user's frames cross only to and from that user's addresses. null
   * removes the port: a host alone.
   */
  async setOverlay(o: Overlay | null): Promise<void> {
    if (o) {
      if (!Number.isInteger(o.vni) || o.vni < 1 || o.vni > 0xffffff) throw new Error(`bad VXLAN id ${o.vni}`);
      const ips = [
        o.local,
        ...o.peers.flatMap((p) => [p.address, p.gateway]),
        ...o.remote.flatMap((r) => [r.ip, r.host]),
      ];
      for (const ip of ips) if (isIP(ip) !== 4) throw new Error(`bad IPv4 address '${ip}' in the overlay`);
      for (const mac of [...o.peers, ...o.remote].map((x) => x.mac))
        if (!/^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/.test(mac)) throw new Error(`bad MAC '${mac}' in the overlay`);
    }
    return this.serial(async () => {
      const prev = this.overlay;
      this.overlay = o;
      try {
        if (o) {
          // the port is made once (again when its id or address changes); later changes are forwarding entries
          if (!prev || prev.vni !== o.vni || prev.local !== o.local || this.fdb === null) {
            await this.ensureVxlanPort(o);
            this.fdb = null;
          }
          await this.syncFdb(o);
        } else {
          this.fdb = null;
          if (await this.linkExists(this.vxlan)) await this.ip('link', 'del', 'dev', this.vxlan);
        }
        await this.applyRules();
      } catch (e) {
        this.fdb = null; // read back from the kernel at the next try
        throw e;
      }
    });
  }

  /**
   * Creates the tap if missing, attaches it to the bridge, brings it up, and
   * admits it in the rules. A tap this object made for the same spec is taken
   * as it is: no command runs (the boot path of a restart or a wake).
   */
  async ensureTap(spec: TapSpec): Promise<void> {
    const { admitted } = await this.attachTap(spec);
    await admitted;
  }

  /**
   * `ensureTap` in two steps, for the boot of a new instance: resolves once
   * the tap device is on the bridge and up; `admitted` settles when the rules
   * admit it (and, with the overlay on, its MAC is pinned to it). Until then
   * the bridge drops every frame from the tap (an unknown tap: `rules.ts`),
   * so a VM may start on it at once; its QEMU's own start covers the `nft`
   * run. `admitted` rejects if the tap could not be admitted: the VM must go.
   */
  async attachTap(spec: TapSpec, opts: AttachOpts = {}): Promise<{ admitted: Promise<void> }> {
    checkTapSpec(spec);
    this.checkPrefix(spec.tap);
    const from = opts.from;
    if (from !== undefined && !IFNAME.test(from)) throw new Error(`bad tap name '${from}'`);
    // Only the map and the device are made in the queue: the next boot's tap never waits for an `nft` run.
    const step = await this.perTap(spec.tap, async () => {
      const old = this.taps.get(spec.tap);
      const sameGuest = old?.guest?.ip === spec.guest?.ip && old?.guest?.mac === spec.guest?.mac;
      const same = old && old.ip === spec.ip && old.mac === spec.mac && old.userId === spec.userId && sameGuest;
      if (same && from === undefined) {
        // a parked tap (its instance stopped) goes back on the bridge: one command, the rules admit it already
        if (!this.parked.delete(spec.tap)) return null;
        await this.ipLines([`link set dev ${spec.tap} master ${this.bridge} up`]);
        return 'unparked' as const;
      }
      this.parked.delete(spec.tap);
      this.taps.set(spec.tap, spec);
      // The rules name taps, not devices: they are applied while the device is made (or renamed).
      const rules = this.applyRules();
      rules.catch(() => undefined); // awaited below, or superseded by the next update
      try {
        if (from !== undefined) await this.takeTapDevice(spec.tap, from);
        else if (!old) await this.addTapDevice(spec.tap);
        else await this.ensureTapDevices([spec.tap]);
      } catch (e) {
        this.forget(spec, old);
        throw e;
      }
      return { old, rules, rec: spec };
    });
    if (!step) return { admitted: opts.restored ? this.learnNeighbour(spec) : Promise.resolve() };
    if (step === 'unparked') {
      // off the bridge, the tap lost its pinned MAC (with the overlay): pinned again
      const admitted = (async () => {
        if (this.overlay) await this.bridgeLines([pinLine(spec)]);
        if (opts.restored) await this.learnNeighbour(spec);
      })();
      admitted.catch(() => undefined); // the caller awaits it
      return { admitted };
    }
    const admitted = (async () => {
      try {
        await step.rules;
      } catch (e) {
        // Updates merge: a later run may already have admitted the tap, or the failure was passing. One
        // more (a no-op when that later run applied these rules); if it fails too, the tap goes from the
        // rules again, so none is left admitted for a VM that was stopped as not admitted.
        try {
          if (this.taps.get(spec.tap) !== step.rec) throw e;
          await this.applyRules();
        } catch {
          this.forget(step.rec, step.old);
          this.applyRules().catch(() => undefined); // the next update, or a repair, tries again if this fails
          throw e;
        }
      }
      if (step.old && step.old.ip !== spec.ip) await this.forgetNeighbour(step.old.ip);
      if (this.overlay) await this.bridgeLines([pinLine(spec)]);
      if (opts.restored) await this.learnNeighbour(spec);
    })();
    admitted.catch(() => undefined); // the caller awaits it; no unhandled rejection meanwhile
    return { admitted };
  }

  /** Undoes `taps.set(spec)` of a tap that could not be made or admitted (unless a later call replaced it). */
  private forget(spec: TapSpec, old: TapSpec | undefined): void {
    if (this.taps.get(spec.tap) !== spec) return;
    if (old) this.taps.set(spec.tap, old);
    else this.taps.delete(spec.tap); // the next rules update drops it again
  }

  /** Creates, attaches and raises a tap in one `ip -batch`; one that exists already takes the slower path. */
  private async addTapDevice(tap: string): Promise<void> {
    try {
      await this.ipLines([
        `tuntap add dev ${tap} mode tap`,
        `link set dev ${tap} addrgenmode none`,
        `link set dev ${tap} master ${this.bridge} up`,
      ]);
    } catch (e) {
      if (!(e instanceof CommandError)) throw e;
      // left over from a crash, or made by hand: attach what is there
      await this.ensureTapDevices([tap]);
    }
  }

  /**
   * Makes the device `from` (a tap a VM started in advance holds open, down
   * and on no bridge: docs/snapshots.md, "Warm restores") the tap `tap`: it
   * is renamed, attached and raised in one `ip -batch`. The instance's own
   * device, kept since its last boot, is set aside under another name first
   * and deleted afterwards, off the restore's path (deleting a device waits
   * for the kernel: 20-40 ms here). Rejects when `from` is not there; the
   * instance's tap then exists as before.
   */
  private async takeTapDevice(tap: string, from: string): Promise<void> {
    const take = [
      `link set dev ${from} name ${tap}`,
      `link set dev ${tap} addrgenmode none`,
      `link set dev ${tap} master ${this.bridge} up`,
    ];
    // `uh` + 12 hex digits -> `uhx` + the same 12: still ours (a crash leaves it to `sync`), and 15 characters
    const aside = `${this.tapPrefix}x${tap.slice(this.tapPrefix.length)}`.slice(0, 15);
    let setAside = false;
    try {
      await this.ipLines([
        `link set dev ${tap} down`,
        `link set dev ${tap} nomaster`,
        `link set dev ${tap} name ${aside}`,
      ]);
      setAside = true;
    } catch (e) {
      if (!(e instanceof CommandError)) throw e; // none yet (a first boot here), or the name taken (below)
    }
    try {
      await this.ipLines(take);
    } catch (e) {
      if (!(e instanceof CommandError)) throw e;
      try {
        // the device could not be set aside (an earlier one, being deleted, has that name): deleted now
        await this.ipLines([`link del dev ${tap}`], 'remove').catch(() => undefined);
        await this.ipLines(take);
      } catch (e2) {
        // `from` is gone: the instance keeps its own tap (back from aside), for a VM that is not the warm one
        const back = [`link set dev ${aside} name ${tap}`, `link set dev ${tap} master ${this.bridge} up`];
        await (setAside ? this.ipLines(back) : Promise.reject(e2))
          .catch(() => this.ensureTapDevices([tap]))
          .catch(() => undefined);
        throw e2;
      }
    }
    // not awaited; one left (a failure, a crash) is an unexpected tap the next `sync` deletes
    if (setAside) this.deleteTapDevice(aside).catch(() => undefined);
  }

  /**
   * Takes a known tap off the bridge and down, keeping the device and its
   * rules: a stopped instance's, so that it takes none of the bridge's
   * 1,023 ports while its next start puts it back with one command
   * (attachTap). Deleting it instead would make that start wait for the
   * kernel's deletion (20-40 ms). An unknown tap is left alone.
   */
  async parkTap(tap: string): Promise<void> {
    this.checkPrefix(tap);
    await this.perTap(tap, async () => {
      if (!this.taps.has(tap) || this.parked.has(tap)) return;
      await this.ipLines([`link set dev ${tap} down`, `link set dev ${tap} nomaster`]);
      this.parked.add(tap);
    });
  }

  /** Deletes the tap (if present) and its rules. A running QEMU on it loses its network. */
  async removeTap(tap: string): Promise<void> {
    this.checkPrefix(tap);
    const rules = await this.perTap(tap, async () => {
      const spec = this.taps.get(tap);
      this.taps.delete(tap);
      this.parked.delete(tap);
      // the rules are updated outside the queue: the next tap to be made does not wait for them
      const update = this.applyRules();
      update.catch(() => undefined); // awaited below
      await Promise.all([this.deleteTapDevice(tap), spec ? this.forgetNeighbour(spec.ip) : undefined]);
      return update;
    });
    await rules;
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
      await this.applyRules(true);
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
      this.overlay = null;
      this.fdb = null;
      this.lastApplied = null;
      if (await this.linkExists(this.vxlan)) await this.ip('link', 'del', 'dev', this.vxlan);
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

  /** The VXLAN port as `o` wants it (made again when its id or address changed), on the bridge and up. */
  private async ensureVxlanPort(o: Overlay): Promise<void> {
    const vx = this.vxlan;
    const [have] = (await this.linkExists(vx)) ? await this.links('dev', vx) : [];
    const d = have?.linkinfo?.info_data;
    if (have && (have.linkinfo?.info_kind !== 'vxlan' || d?.id !== o.vni || d?.local !== o.local)) {
      await this.ip('link', 'del', 'dev', vx);
    }
    if (!have || d?.id !== o.vni || d?.local !== o.local) {
      // MTU 1500 like the guests' NICs: the hosts' network must carry 1550-byte packets (docs/hosts.md)
      const args = ['type', 'vxlan', 'id', String(o.vni), 'local', o.local, 'dstport', String(VXLAN_PORT)];
      await this.ip('link', 'add', vx, 'mtu', '1500', ...args, 'nolearning');
    }
    if (have?.master !== this.bridge) await this.ip('link', 'set', 'dev', vx, 'addrgenmode', 'none');
    await this.ip('link', 'set', 'dev', vx, 'master', this.bridge, 'up');
  }

  /**
   * Makes the VXLAN port's forwarding entries (those with a `dst`) exactly
   * the overlay's, in one `bridge -batch`: against those last written, or
   * those the kernel has (at the first call, and after a repair or failure).
   */
  private async syncFdb(o: Overlay): Promise<void> {
    const zero = '00:00:00:00:00:00';
    const want = new Set<string>();
    for (const p of o.peers) want.add(`${zero} ${p.address}`).add(`${p.mac} ${p.address}`);
    for (const r of o.remote) want.add(`${r.mac} ${r.host}`);
    const fromKernel = this.fdb === null;
    let have = this.fdb ? [...this.fdb] : [];
    if (fromKernel) {
      const out = await this.run(['bridge', '-j', 'fdb', 'show', 'dev', this.vxlan]);
      have = (out.trim() ? (JSON.parse(out) as { mac: string; dst?: string }[]) : [])
        .filter((e) => e.dst)
        .map((e) => `${e.mac} ${e.dst}`);
    }
    const lines: string[] = [];
    for (const e of have) if (!want.has(e)) lines.push(fdbLine('del', e, this.vxlan));
    const haveSet = new Set(have);
    for (const e of want)
      if (!haveSet.has(e)) lines.push(fdbLine(e.startsWith(zero) ? 'append' : 'replace', e, this.vxlan));
    // An instance that moved here from another host: the bridge learned its MAC on the VXLAN port
    // and would send its frames there until it speaks first. Its tap's entry is pinned instead.
    // (taps made while the overlay is on are pinned as they are made: ensureTap)
    // (a parked tap is on no bridge: pinned when it is put back, attachTap)
    if (fromKernel) for (const t of this.taps.values()) if (!this.parked.has(t.tap)) lines.push(pinLine(t));
    if (lines.length) await this.bridgeLines(lines);
    this.fdb = want;
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
    await this.ipLines(lines);
  }

  private async deleteTapDevice(tap: string): Promise<void> {
    try {
      // `ip link del`, not `ip tuntap del`: the latter fails (EBUSY) while a
      // QEMU still holds the tap, this one removes it at once.
      await this.ipLines([`link del dev ${tap}`], 'remove');
    } catch (e) {
      // a device that is not there is what was wanted (no second process to ask)
      if (e instanceof CommandError && e.code !== null && /Cannot find device/.test(e.stderr)) return;
      if (await this.linkExists(tap)) throw e;
    }
  }

  /**
   * Sets the host's ARP entry for a tap's address to its MAC, for a VM that
   * resumes a snapshot: its guest sends no gratuitous ARP, as a booting one
   * does, and an entry that a stray packet left being resolved (a FIN sent
   * again to the address's last instance) held the first packets to the new
   * one until its next try, up to a second later (docs/network.md, "Address
   * resolution"). `stale`: used at once, and checked by the kernel as it is
   * used. A failure leaves the kernel's own resolution: no error.
   */
  private async learnNeighbour(spec: TapSpec): Promise<void> {
    await this.ipLines([`neigh replace ${spec.ip} lladdr ${spec.mac} dev ${this.bridge} nud stale`]).catch(
      () => undefined,
    );
  }

  /** Drops the host's ARP entry so a reused address is resolved afresh. */
  private async forgetNeighbour(ip: string): Promise<void> {
    await this.ipLines([`neigh flush to ${ip} dev ${this.bridge}`], 'remove').catch(() => undefined);
  }

  /**
   * Applies the ruleset of the known taps (and overlay); an unchanged one only when `force` (a repair).
   * A change of taps alone goes as elements added and deleted (`renderTapChanges`); if nft refuses
   * those (the kernel's ruleset is not what we last applied), the whole ruleset goes at once.
   */
  private applyRules(force = false): Promise<void> {
    return this.rulesLock(async () => {
      const o: RulesOptions = {
        bridge: this.bridge,
        bridgeMac: this.bridgeMac,
        table: this.table,
        tapPrefix: this.tapPrefix,
        hostTcpPorts: this.guestToHost.tcp,
        hostUdpPorts: this.guestToHost.udp,
        vmUids: [VM_UID_BASE, VM_UID_BASE + VM_UIDS - 1],
        ...(this.overlay && {
          overlay: {
            port: this.vxlan,
            gateways: this.overlay.peers.map((p) => p.gateway),
            remote: this.overlay.remote,
          },
        }),
      };
      const taps = [...this.taps.values()];
      const base = renderRules(o, []);
      const last = force ? null : this.lastApplied;
      // '' when nothing changed; null when only the whole ruleset says what did
      const changes = last?.base === base ? renderTapChanges(o, last.taps, taps, last.remote) : null;
      if (changes === '') return;
      const whole = (): string => renderRules(o, taps);
      const script = changes === null ? whole() : null;
      if (script !== null && script === last?.script) return;
      this.lastApplied = null;
      const apply = (s: string): Promise<unknown> =>
        this.batch && NftBatch.fits(s) ? this.batch.nft.run(s) : this.run(['nft', '-f', '-'], s);
      let applied = script;
      try {
        await apply(changes ?? script!);
      } catch (e) {
        if (changes === null) throw e;
        applied = whole();
        await apply(applied);
      }
      const remote = (o.overlay?.remote ?? []).map(({ ip, userId }) => ({ ip, userId }));
      this.lastApplied = { taps, remote, base, script: applied };
    });
  }
}

/** The `bridge -batch` line that pins a tap's MAC to it (learning never moves it to the VXLAN port). */
function pinLine(t: TapSpec): string {
  return `fdb replace ${t.mac} dev ${t.tap} master static`;
}

/** One `bridge -batch` line for a VXLAN forwarding entry `"<mac> <dst>"`. */
function fdbLine(op: 'append' | 'replace' | 'del', entry: string, dev: string): string {
  const [mac, dst] = entry.split(' ');
  return `fdb ${op} ${mac} dev ${dev} dst ${dst}`;
}
