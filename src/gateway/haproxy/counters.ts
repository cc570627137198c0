import type { Counter, Counters } from '../types.js';
import { ACTIVATOR_SERVER } from './config.js';
import { parseStat } from './runtime.js';
import type { ServerTable } from './servers.js';
import type { Slot } from './slots.js';

const counter = (): Counter => ({ openConnections: 0, requests: 0, bytesIn: 0, bytesOut: 0, lastActivity: 0 });

/** Which group and instance a stats row (proxy, server) belongs to. */
export interface StatNames {
  /** backend name -> group id */
  group(proxy: string): string | undefined;
  /** (backend, server) -> instance id */
  instance(proxy: string, server: string): string | undefined;
  /** frontend name -> public port */
  port(proxy: string): number | undefined;
}

interface Totals {
  requests: number;
  bytesIn: number;
  bytesOut: number;
}

/**
 * The `Counters` (types.ts), from HAProxy's `show stat`: requests
 * (`req_tot` for HTTP, sessions for TCP) per instance's server, summed per
 * group; bytes and current sessions per group backend and per server. HAProxy starts from zero after a reload or
 * restart; the totals here add what the previous process had counted so
 * they only grow. `lastActivity` moves when a total moved or sessions are
 * open, at the poll's resolution.
 */
export class StatCounters {
  private readonly groups = new Map<string, Counter>();
  private readonly instances = new Map<string, Counter & { groupId: string }>();
  /** per stats row: the last totals seen (the growth since is added at the next poll) */
  private readonly rows = new Map<string, { last: Totals }>();
  private readonly ports = new Map<number, number>();
  private readonly scur = new Map<string, number>();
  /** sessions open on a stats row (backend, or an instance's server) at its backend's last read; rows with none are left out */
  private readonly open = new Map<string, { backend: string; groupId: string; instanceId?: string; cur: number }>();
  /** connections the activator carries to an instance itself (a woken group's first ones), per instance */
  private readonly direct = new Map<string, number>();

  constructor(
    private readonly hooks: {
      onActivity?: (groupId: string, instanceId: string) => void;
      onIdle?: (instanceId: string) => void;
    },
  ) {}

  /**
   * Folds one `show stat` answer in. `partial`: it holds some backends only
   * (and every frontend); what was last read of the others stands.
   */
  update(csv: string, names: StatNames, now = Date.now(), partial = false): void {
    const rows = parseStat(csv);
    this.ports.clear();
    // the sessions of the backends this answer holds (all, when whole) are read again
    const read = new Set(rows.flatMap((r) => (r.svname === 'BACKEND' ? [r.pxname ?? ''] : [])));
    for (const [k, o] of this.open) if (!partial || read.has(o.backend)) this.open.delete(k);
    for (const r of rows) {
      const px = r.pxname ?? '';
      const sv = r.svname ?? '';
      const cur = Number(r.scur) || 0;
      if (sv === 'FRONTEND') {
        const p = names.port(px);
        if (p !== undefined) this.ports.set(p, cur);
        continue;
      }
      const groupId = names.group(px);
      if (!groupId) continue;
      const t = this.totals(`${px}/${sv}`, r);
      if (sv === 'BACKEND') {
        // bytes of everything the group's backend carried, the platform's own answers (its backup
        // server, the activator) included; requests are counted from the instances' rows below:
        // only requests routed to an instance count (docs/operations.md, metrics)
        if (cur > 0) this.open.set(`${px}/${sv}`, { backend: px, groupId, cur });
        this.add(this.group(groupId), { ...t, delta: { ...t.delta, requests: 0 } }, cur, now);
        continue;
      }
      if (sv === ACTIVATOR_SERVER) continue;
      const id = names.instance(px, sv);
      if (!id) continue;
      const i = this.instance(groupId, id);
      if (cur > 0) this.open.set(`${px}/${sv}`, { backend: px, groupId, instanceId: id, cur });
      this.group(groupId).requests += t.delta.requests;
      if (this.add(i, t, cur, now)) this.hooks.onActivity?.(groupId, id);
    }
    const groupOpen = new Map<string, number>();
    const instOpen = new Map<string, number>();
    for (const o of this.open.values())
      if (o.instanceId) instOpen.set(o.instanceId, (instOpen.get(o.instanceId) ?? 0) + o.cur);
      else groupOpen.set(o.groupId, (groupOpen.get(o.groupId) ?? 0) + o.cur);
    for (const [id, g] of this.groups) g.openConnections = groupOpen.get(id) ?? 0;
    for (const [id, i] of this.instances) {
      const was = this.scur.get(id) ?? 0;
      i.openConnections = instOpen.get(id) ?? 0;
      this.scur.set(id, i.openConnections);
      if (was > 0 && i.openConnections === 0 && !this.direct.has(id)) this.hooks.onIdle?.(id);
    }
  }

  /** Adds the row's growth since the last poll to a counter; true when anything moved. */
  private add(c: Counter, t: Totals & { delta: Totals }, cur: number, now: number): boolean {
    c.requests += t.delta.requests;
    c.bytesIn += t.delta.bytesIn;
    c.bytesOut += t.delta.bytesOut;
    const moved = t.delta.requests + t.delta.bytesIn + t.delta.bytesOut > 0 || cur > 0;
    if (moved) c.lastActivity = now;
    return moved;
  }

  private totals(key: string, r: Record<string, string>): Totals & { delta: Totals } {
    const http = r.req_tot !== undefined && r.req_tot !== '';
    const now: Totals = {
      requests: Number(http ? r.req_tot : r.stot) || 0,
      bytesIn: Number(r.bin) || 0,
      bytesOut: Number(r.bout) || 0,
    };
    let row = this.rows.get(key);
    if (!row) this.rows.set(key, (row = { last: { requests: 0, bytesIn: 0, bytesOut: 0 } }));
    // a counter going down means a new HAProxy process: it starts from zero
    const reset = now.requests < row.last.requests || now.bytesIn < row.last.bytesIn;
    const prev = reset ? { requests: 0, bytesIn: 0, bytesOut: 0 } : row.last;
    const delta = {
      requests: now.requests - prev.requests,
      bytesIn: now.bytesIn - prev.bytesIn,
      bytesOut: Math.max(0, now.bytesOut - prev.bytesOut),
    };
    row.last = now;
    return { ...now, delta };
  }

  /** Traffic the activator answered itself (no instance): bytes count for the group, requests do not. */
  addGroupBytes(groupId: string, bytesIn: number, bytesOut: number, now = Date.now()): void {
    const g = this.group(groupId);
    g.bytesIn += bytesIn;
    g.bytesOut += bytesOut;
    g.lastActivity = now;
  }

  group(groupId: string): Counter {
    let c = this.groups.get(groupId);
    if (!c) this.groups.set(groupId, (c = counter()));
    return c;
  }

  private instance(groupId: string, instanceId: string): Counter & { groupId: string } {
    let c = this.instances.get(instanceId);
    if (!c) this.instances.set(instanceId, (c = { ...counter(), groupId }));
    return c;
  }

  /**
   * A connection to an instance that HAProxy does not see: the activator
   * carries a woken group's first request (or TCP connection) itself. It
   * counts as open (scale-to-zero must not put the instance back to standby
   * under it, a drain waits for it) until the returned function is called;
   * then it is the instance's last activity.
   */
  openDirect(groupId: string, instanceId: string): () => void {
    this.instance(groupId, instanceId);
    this.direct.set(instanceId, (this.direct.get(instanceId) ?? 0) + 1);
    let open = true;
    return () => {
      if (!open) return;
      open = false;
      const n = (this.direct.get(instanceId) ?? 1) - 1;
      if (n > 0) this.direct.set(instanceId, n);
      else this.direct.delete(instanceId);
      const now = Date.now();
      const i = this.instances.get(instanceId);
      if (i) i.lastActivity = now;
      this.group(groupId).lastActivity = now;
      if (this.connections(instanceId) === 0) this.hooks.onIdle?.(instanceId);
    };
  }

  /** Whether the group's backend had sessions open at the last read of it. */
  groupBusy(groupId: string): boolean {
    return (this.groups.get(groupId)?.openConnections ?? 0) > 0;
  }

  connections(instanceId: string): number {
    return (this.instances.get(instanceId)?.openConnections ?? 0) + (this.direct.get(instanceId) ?? 0);
  }

  clientConnections(port: number): number {
    return this.ports.get(port) ?? 0;
  }

  forgetInstance(instanceId: string): void {
    if (this.connections(instanceId) > 0) return;
    this.instances.delete(instanceId);
    this.scur.delete(instanceId);
  }

  keepGroups(live: Set<string>): void {
    for (const [id, c] of this.groups) if (!live.has(id) && c.openConnections === 0) this.groups.delete(id);
  }

  snapshot(): Counters {
    const out: Counters = { groups: {}, instances: {} };
    for (const [id, c] of this.groups) out.groups[id] = { ...c };
    for (const [id, c] of this.instances)
      out.instances[id] = { ...c, openConnections: c.openConnections + (this.direct.get(id) ?? 0) };
    return out;
  }
}

/** What the stats' proxy and server names stand for, with these backends (slots) and servers. */
export function statNames(slots: Map<number, Slot[]>, servers: ServerTable): StatNames {
  const groups = new Map<string, string>();
  const ports = new Map<string, number>();
  for (const [port, ss] of slots) {
    ports.set(`p${port}`, port);
    for (const s of ss) if (s.route) groups.set(s.name, s.route.groupId);
  }
  return {
    group: (px: string) => groups.get(px),
    instance: (px: string, sv: string) => servers.get(px)?.get(sv)?.instanceId,
    port: (px: string) => ports.get(px),
  };
}
