import type { Route } from '../types.js';

/** What a backend does, which fixes its rendered section: HTTP (per request), the 80→443 redirect, or TCP. */
export type Flavor = 'http' | 'redirect' | 'tcp';

export const flavorOf = (r: Route): Flavor =>
  r.handlers.includes('redirect') ? 'redirect' : r.handlers.includes('http') ? 'http' : 'tcp';

/** One rendered backend of a public port: its name and flavor, and the route it serves now (none: a spare). */
export interface Slot {
  name: string;
  port: number;
  flavor: Flavor;
  route?: Route;
}

/** Spare backends rendered per port and flavor at least; the pool doubles when it runs out. */
export const MIN_SLOTS = 8;

/**
 * The backends HAProxy has, as pools of interchangeable slots per public
 * port and flavor, and which service group each slot serves. HAProxy 2.6
 * cannot add a backend at run time, but a rendered spare can be handed to a
 * new group with runtime commands only (its servers by `add server`, its
 * names by `add map`): so a group created or deleted on a port that already
 * has its flavor costs no reload. Only a new port, a new flavor on a port or
 * a pool that runs out changes what is rendered (and a pool that grows
 * doubles, so that happens rarely). A freed slot is reused last (the one
 * freed longest ago first), so its old servers and counters are long gone.
 */
export class SlotPool {
  /** `${port}/${flavor}` -> slots rendered */
  private readonly capacity = new Map<string, number>();
  /** `${port}/${groupId}` -> slot name */
  private readonly byGroup = new Map<string, string>();
  /** slot name -> when it was freed (a sequence number; absent: never used) */
  private readonly freedAt = new Map<string, number>();
  private seq = 0;

  /** Gives every (port, group) of the route table a slot; returns every rendered slot of every port. */
  assign(byPort: Map<number, Route[]>): Map<number, Slot[]> {
    const want = new Map<string, Route>();
    for (const [port, routes] of byPort)
      for (const r of routes) if (!want.has(`${port}/${r.groupId}`)) want.set(`${port}/${r.groupId}`, r);
    const slotRoute = new Map<string, Route>();
    const before = this.seq;
    // keep what still fits; free the rest
    for (const [key, name] of this.byGroup) {
      const r = want.get(key);
      if (r && name.startsWith(slotPrefix(r.port, flavorOf(r)))) {
        slotRoute.set(name, r);
        continue;
      }
      this.byGroup.delete(key);
      this.freedAt.set(name, ++this.seq);
    }
    const gone = (name: string): boolean => !byPort.has(Number(/^g(\d+)_/.exec(name)?.[1]));
    for (const key of this.capacity.keys()) if (!byPort.has(Number(key.split('/')[0]))) this.capacity.delete(key);
    for (const name of this.freedAt.keys()) if (gone(name)) this.freedAt.delete(name);
    for (const [key, r] of want) {
      if (this.byGroup.has(key)) continue;
      const name = this.take(r.port, flavorOf(r), slotRoute, before);
      this.byGroup.set(key, name);
      this.freedAt.delete(name);
      slotRoute.set(name, r);
    }
    const out = new Map<number, Slot[]>();
    for (const port of [...byPort.keys()].sort((a, b) => a - b)) {
      const slots: Slot[] = [];
      for (const flavor of ['http', 'redirect', 'tcp'] as const) {
        const n = this.capacity.get(`${port}/${flavor}`) ?? 0;
        for (let i = 0; i < n; i++) {
          const name = slotName(port, flavor, i);
          slots.push({ name, port, flavor, route: slotRoute.get(name) });
        }
      }
      out.set(port, slots);
    }
    return out;
  }

  /** The slot serving a group on a port, if it has one. */
  slotOf(port: number, groupId: string): string | undefined {
    return this.byGroup.get(`${port}/${groupId}`);
  }

  /**
   * A free slot of the port and flavor (never used first, then the one freed
   * longest ago); grows the pool if none. A slot freed by this very
   * assignment is not handed on in it: its old names must be gone from
   * HAProxy before it serves another group.
   */
  private take(port: number, flavor: Flavor, used: Map<string, Route>, freedBefore: number): string {
    const key = `${port}/${flavor}`;
    const cap = this.capacity.get(key) ?? 0;
    let best: string | undefined;
    let bestAt = Infinity;
    for (let i = 0; i < cap; i++) {
      const name = slotName(port, flavor, i);
      if (used.has(name)) continue;
      const at = this.freedAt.get(name) ?? 0;
      if (at > freedBefore) continue;
      if (at < bestAt) [best, bestAt] = [name, at];
    }
    if (best) return best;
    this.capacity.set(key, Math.max(MIN_SLOTS, cap * 2));
    return slotName(port, flavor, cap);
  }
}

const slotPrefix = (port: number, flavor: Flavor): string => `g${port}_${flavor}`;
const slotName = (port: number, flavor: Flavor, i: number): string => `${slotPrefix(port, flavor)}${i}`;
