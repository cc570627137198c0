/**
 * Source ports of HAProxy's connections to instances (`source ADDR:LOW-HIGH`
 * on a server line).
 *
 * An lwIP guest (every Unikraft network application) that closed a
 * connection first keeps it in TIME_WAIT for 120 s of its own running time
 * and answers a new SYN from the same source port with a bare ACK, never a
 * SYN-ACK. The host's kernel picks connect ports with a small random stride
 * and comes back to a port after about 3,000 connections to one address and
 * port: at a few dozen connections a second to one guest that is well inside
 * 120 s, and tries and requests then fail in bursts (docs/network.md,
 * "Connections to guests"). With a port range on its line, a server takes
 * ports from its own FIFO ring: a port comes back only after every other
 * one of the ring's window was used.
 *
 * A ring starts at its window's first port, and a server is added again
 * often: every server at a reload (a new worker), an instance woken from a
 * snapshot (which still holds the TIME_WAITs of before its snapshot, its
 * clock stopped meanwhile). So each address keeps a cursor: a new ring
 * starts where the last one stopped (the connects HAProxy's stats counted,
 * plus a margin for those since the last poll), and goes back to the range's
 * start only once the cursor has gone through it. A second server to an
 * address that has a live ring (two public ports to one instance port) gets
 * no range: the kernel picks its ports, as before.
 */
export interface SourcePortRange {
  /** the host's address on the instances' network (the bridge's gateway address) */
  address: string;
  low: number;
  high: number;
}

/** The fewest ports a range may have: two halves of 1,024. */
export const MIN_SOURCE_PORTS = 2048;

/**
 * Parses `gateway.sourcePorts` (`LOW-HIGH`, or empty for none: the kernel
 * picks); an error names the setting and what is wrong.
 */
export function parseSourcePorts(spec: string): { low: number; high: number } | null {
  if (spec === '') return null;
  const m = /^(\d{1,5})-(\d{1,5})$/.exec(spec);
  const low = Number(m?.[1]);
  const high = Number(m?.[2]);
  if (!m || low < 1024 || high > 65535 || high - low + 1 < MIN_SOURCE_PORTS)
    throw new Error(
      `gateway.sourcePorts '${spec}' is not a range LOW-HIGH of at least ${MIN_SOURCE_PORTS} ports within ` +
        `1024-65535 (e.g. 16384-32767), or '' to let the kernel pick`,
    );
  return { low, high };
}

/** Connects a ring is assumed to have made since HAProxy's stats last counted them. */
export const CURSOR_MARGIN = 256;

/** Hands out the servers' `source` options: one ring per instance address, each going on where the last stopped. */
export class SourcePorts {
  /** ports in a ring's window: half the range */
  readonly window: number;
  /** address -> its last ring: where it started, the connects counted, the server it belongs to */
  private readonly rings = new Map<string, { start: number; used: number; server: string; live: boolean }>();

  constructor(
    private readonly r: SourcePortRange,
    /** where an address never seen starts (random: a restarted daemon does not know where rings stopped) */
    private readonly first: (low: number, high: number) => number = (low, high) =>
      low + Math.floor(Math.random() * (high - low + 1)),
  ) {
    this.window = Math.floor((r.high - r.low + 1) / 2);
  }

  /** A new worker is about to load: every ring of the old one ends (its counts stay, for the cursors). */
  reload(): void {
    for (const ring of this.rings.values()) ring.live = false;
  }

  /**
   * The ` source ADDR:LOW-HIGH` option of server `server` (backend/name) to
   * `addr` (the instance's address and port), about to be added or rendered
   * for a new worker; '' when another server to `addr` has a live ring.
   */
  option(addr: string, server: string): string {
    const last = this.rings.get(addr);
    if (last?.live && last.server !== server) return '';
    const lastStart = this.r.high - this.window + 1;
    let start = last ? last.start + ((last.used + CURSOR_MARGIN) % this.window) : this.first(this.r.low, lastStart);
    if (start > lastStart) start = this.r.low;
    this.rings.set(addr, { start, used: 0, server, live: true });
    return ` source ${this.r.address}:${start}-${start + this.window - 1}`;
  }

  /** A server was deleted: its ring ends. */
  removed(addr: string, server: string): void {
    const ring = this.rings.get(addr);
    if (ring?.server === server) ring.live = false;
  }

  /** HAProxy's stats counted `connects` connection attempts of `server` to `addr` (its ring's ports used). */
  observe(addr: string, server: string, connects: number): void {
    const ring = this.rings.get(addr);
    if (ring?.live && ring.server === server && connects > ring.used) ring.used = connects;
  }
}
