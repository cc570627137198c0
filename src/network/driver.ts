import type { TapSpec } from './rules.js';

export type { TapSpec } from './rules.js';

/**
 * This host's part in one private network across hosts (docs/hosts.md): its
 * bridge joined to the other hosts' by a VXLAN port, with forwarding
 * entries from the store. Written by the network controller whenever hosts
 * or the placement of instances change.
 */
export interface Overlay {
  /** the VXLAN network identifier (config `network.vni`) */
  vni: number;
  /** this host's address on the hosts' network (`--host-address`) */
  local: string;
  /** the other hosts that are not dead */
  peers: { address: string; gateway: string; mac: string }[];
  /** the instances placed on other hosts, with the address of the host they are on */
  remote: { ip: string; mac: string; userId: string; host: string }[];
}

/** How a tap is attached for a boot (`NetworkDriver.attachTap`). */
export interface AttachOpts {
  /** a tap device that becomes the instance's (a warm VM's) */
  from?: string;
  /** the VM resumes a memory snapshot: the host learns the guest's MAC from the platform, not from the guest */
  restored?: boolean;
}

/**
 * What the network controller (src/reconcile/network.ts) drives: the host
 * side of the private network. `HostNetwork` (host.ts) is the real one: a
 * bridge, taps and nftables rules; `MemoryNetwork` (memory.ts) keeps the
 * same bookkeeping in memory for unit tests. The config's `network.driver`
 * chooses (src/drivers.ts).
 */
export interface NetworkDriver {
  /** the host's address on the private network: the guests' gateway and DNS server */
  readonly gateway: string;
  /** where the `.internal` DNS server listens: the gateway address on the host; null when no interface carries it */
  readonly dnsHost: string | null;
  /** creates or repairs what every tap needs (the bridge, the rules); idempotent */
  setup(): Promise<void>;
  /**
   * Makes the set of taps exactly `expected` (after a daemon restart): keeps
   * those present, creates the missing, removes the others.
   */
  sync(expected: TapSpec[]): Promise<{ created: string[]; removed: string[] }>;
  /** creates the tap of one instance if missing and admits it; idempotent */
  ensureTap(spec: TapSpec): Promise<void>;
  /**
   * `ensureTap` for a boot: resolves once the tap exists (frames from it are
   * dropped until the rules admit it), `admitted` when they do; a VM may
   * start on it in between. `admitted` rejecting means the VM must go.
   * `from`: a tap device that becomes this one (renamed, attached, raised):
   * the one a VM started in advance holds open (docs/snapshots.md, "Warm
   * restores"); the instance's own device is replaced. Rejects, with the
   * instance's tap left as it was, when `from` is not there.
   * `restored`: the VM resumes a memory snapshot. Its guest does not announce
   * its address as a booting one does (a gratuitous ARP), so the host's
   * neighbour entry for the address is set to the MAC once the tap is
   * admitted (docs/network.md, "Address resolution").
   */
  attachTap(spec: TapSpec, opts?: AttachOpts): Promise<{ admitted: Promise<void> }>;
  /** removes a tap and its rules; a tap already gone is fine */
  removeTap(tap: string): Promise<void>;
  /**
   * takes a tap off the bridge and down, keeping it and its rules (a
   * stopped instance's: a bridge has 1,023 ports); the next `attachTap`
   * with the same spec puts it back. An unknown tap is left alone.
   */
  parkTap(tap: string): Promise<void>;
  /** joins this host's bridge to the other hosts' (null: a host alone, no VXLAN port); idempotent */
  setOverlay(o: Overlay | null): Promise<void>;
  /** the guest's `netdev.ip` value for its address */
  netdevIp(ip: string): string;
  /** resolves once `ip:port` of a guest accepts a TCP connection (readiness); rejects when `signal` aborts */
  waitForPort(ip: string, port: number, signal: AbortSignal): Promise<void>;
}
