import { netdevIpArg, parseSubnet } from './address.js';
import type { NetworkDriver, TapSpec } from './driver.js';
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
  /** whether `setup` ran */
  ready = false;

  constructor(subnet: string) {
    const s = parseSubnet(subnet);
    this.gateway = s.gateway;
    this.prefixLength = s.prefix;
  }

  async setup(): Promise<void> {
    this.ready = true;
  }

  async sync(expected: TapSpec[]): Promise<{ created: string[]; removed: string[] }> {
    expected.forEach(checkTapSpec);
    const want = new Set(expected.map((t) => t.tap));
    const created = expected.filter((t) => !this.taps.has(t.tap)).map((t) => t.tap);
    const removed = [...this.taps.keys()].filter((t) => !want.has(t));
    this.taps.clear();
    for (const t of expected) this.taps.set(t.tap, t);
    return { created, removed };
  }

  async ensureTap(spec: TapSpec): Promise<void> {
    if (!this.ready) throw new Error('the network is not set up (setup() first)');
    checkTapSpec(spec);
    this.taps.set(spec.tap, spec);
  }

  async removeTap(tap: string): Promise<void> {
    this.taps.delete(tap);
  }

  async waitForPort(ip: string, port: number, signal: AbortSignal): Promise<void> {
    signal.throwIfAborted();
    if (![...this.taps.values()].some((t) => t.ip === ip)) throw new Error(`no tap has address ${ip} (port ${port})`);
  }

  netdevIp(ip: string): string {
    return netdevIpArg(ip, this.prefixLength, this.gateway);
  }
}
