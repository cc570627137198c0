import { hostGateway, netdevIpArg, parseSubnet } from './address.js';
import type { AttachOpts, NetworkDriver, Overlay, TapSpec } from './driver.js';
import { checkTapSpec } from './rules.js';

/**
 * The network driver of unit tests and of a daemon run without host
 * networking changes (`network.driver: "memory"`): it checks and records
 * taps like `HostNetwork` does, but creates no device and no rule, so guests
 * get no real connectivity. A guest of an existing tap accepts on every port
 * at once (what the memory machine driver's "applications" do).
 */
export class MemoryNetwork implements NetworkDriver {
  readonly gateway: string;
  /** no interface carries the gateway address: no DNS server */
  readonly dnsHost = null;
  private readonly prefixLength: number;
  /** the taps that exist, by name */
  readonly taps = new Map<string, TapSpec>();
  /** the overlay last set (null: a host alone) */
  overlay: Overlay | null = null;

  constructor(subnet: string, slot = 0) {
    const s = parseSubnet(subnet);
    this.gateway = hostGateway(s, slot);
    this.prefixLength = s.prefix;
  }

  async setup(): Promise<void> {}

  async sync(expected: TapSpec[]): Promise<{ created: string[]; removed: string[] }> {
    for (const t of expected) {
      checkTapSpec(t);
      checkPrefix(t.tap);
    }
    const want = new Set(expected.map((t) => t.tap));
    const created = expected.filter((t) => !this.taps.has(t.tap)).map((t) => t.tap);
    const removed = [...this.taps.keys()].filter((t) => !want.has(t));
    this.taps.clear();
    for (const t of expected) this.taps.set(t.tap, t);
    return { created, removed };
  }

  async ensureTap(spec: TapSpec): Promise<void> {
    checkTapSpec(spec);
    checkPrefix(spec.tap);
    this.taps.set(spec.tap, spec);
  }

  async attachTap(spec: TapSpec, opts: AttachOpts = {}): Promise<{ admitted: Promise<void> }> {
    if (opts.from !== undefined && !/^[a-z0-9]{1,15}$/.test(opts.from)) throw new Error(`bad tap name '${opts.from}'`);
    await this.ensureTap(spec);
    return { admitted: Promise.resolve() };
  }

  async setOverlay(o: Overlay | null): Promise<void> {
    this.overlay = o;
  }

  async removeTap(tap: string): Promise<void> {
    checkPrefix(tap);
    this.taps.delete(tap);
  }

  async parkTap(tap: string): Promise<void> {
    checkPrefix(tap);
  }

  /**
   * A memory guest answers on every port of its tap's address at once;
   * nothing answers on any other address, so the probe waits, like the real
   * one, until its signal aborts.
   */
  async waitForPort(ip: string, _port: number, signal: AbortSignal): Promise<void> {
    signal.throwIfAborted();
    if ([...this.taps.values()].some((t) => t.ip === ip)) return;
    await new Promise<never>((_, reject) =>
      signal.addEventListener('abort', () => reject(signal.reason as Error), { once: true }),
    );
  }

  netdevIp(ip: string): string {
    return netdevIpArg(ip, this.prefixLength, this.gateway);
  }
}

/** Tap names are `tapName(id)`: `uh` and 12 hex digits (HostNetwork refuses others too). */
function checkPrefix(tap: string): void {
  if (!tap.startsWith('uh')) throw new Error(`tap '${tap}' does not start with 'uh'`);
}
