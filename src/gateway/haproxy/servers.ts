import type { Backend } from '../types.js';
import { serverName, serverOptions } from './config.js';
import { refused, type RuntimeApi } from './runtime.js';
import type { Slot } from './slots.js';

/** One server as HAProxy has it: address and admin state. */
export interface ServerState {
  instanceId: string;
  groupId: string;
  addr: string;
  /** options of `add server` (the group's limits) */
  opts: string;
  /** `maint`: taken out ahead of a stop (HaproxyDataPlane.leave), until a sync removes it or enables it again */
  state: 'running' | 'draining' | 'maint';
}
/** backend -> server name -> state */
export type ServerTable = Map<string, Map<string, ServerState>>;

/**
 * The servers every backend should have now: a slot's group's instances at
 * its destination port; none for spare slots (so a freed slot loses its
 * servers) and for redirect backends.
 */
export function wantedServers(ports: Map<number, Slot[]>, backends: (groupId: string) => Backend[]): ServerTable {
  const t: ServerTable = new Map();
  for (const slots of ports.values())
    for (const slot of slots) {
      if (slot.flavor === 'redirect') continue;
      const m = new Map<string, ServerState>();
      const r = slot.route;
      for (const b of r ? backends(r.groupId) : []) {
        if (b.state === 'other') continue;
        m.set(serverName(b.instanceId), {
          instanceId: b.instanceId,
          groupId: r!.groupId,
          addr: `${b.host}:${r!.destinationPort}`,
          opts: serverOptions(r),
          state: b.state,
        });
      }
      t.set(slot.name, m);
    }
  return t;
}

/** A Runtime API command HAProxy refused (the caller re-renders and reloads). */
export class RejectedCommand extends Error {}

/** Sends a command whose refusal must not pass unnoticed. */
export async function cmd(api: RuntimeApi, c: string): Promise<void> {
  const answer = await api.send(c);
  if (refused(answer)) throw new RejectedCommand(`haproxy refused "${c}": ${answer}`);
}

/**
 * Brings HAProxy's servers from `have` to `want` through the Runtime API:
 * new instances are added and enabled, draining ones get `state drain` (no
 * new connections or requests, open ones go on), gone ones are put in
 * maintenance, their sessions cut and the server deleted. Mutates `have` as
 * commands succeed so a failure leaves it true.
 */
export async function applyServers(
  api: RuntimeApi,
  have: ServerTable,
  want: ServerTable,
  /** instances taken out (HaproxyDataPlane.leave) after `want` was read: they stay in maintenance */
  left: (instanceId: string) => boolean = () => false,
): Promise<void> {
  const haproxyState = { running: 'ready', draining: 'drain', maint: 'maint' } as const;
  for (const [be, servers] of want) {
    const cur = have.get(be) ?? new Map<string, ServerState>();
    have.set(be, cur);
    for (const [name, s] of cur) {
      const w = servers.get(name);
      if (w && w.addr === s.addr && w.opts === s.opts) continue;
      await cmd(api, `set server ${be}/${name} state maint`);
      await api.send(`shutdown sessions server ${be}/${name}`);
      await cmd(api, `del server ${be}/${name}`);
      cur.delete(name);
    }
    for (const [name, wanted] of servers) {
      const w: ServerState = left(wanted.instanceId) ? { ...wanted, state: 'maint' } : wanted;
      const s = cur.get(name);
      if (!s) {
        await cmd(api, `add server ${be}/${name} ${w.addr}${w.opts}`);
        cur.set(name, { ...w, state: 'draining' });
        await cmd(api, `set server ${be}/${name} state ${haproxyState[w.state]}`);
        cur.set(name, w);
      } else if (s.state !== w.state) {
        await cmd(api, `set server ${be}/${name} state ${haproxyState[w.state]}`);
        cur.set(name, w);
      }
    }
  }
}

/** Cuts every session of an instance's servers. */
export async function shutdownInstance(api: RuntimeApi, have: ServerTable, instanceId: string): Promise<void> {
  for (const [be, servers] of have)
    for (const [name, s] of servers)
      if (s.instanceId === instanceId) await api.send(`shutdown sessions server ${be}/${name}`);
}
