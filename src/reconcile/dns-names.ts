import type { InstanceRec } from '../store/types.js';

interface Entry {
  userId: string;
  name: string;
  ip: string;
}

/**
 * The `.internal` name table in memory (docs/network.md): who asks (by
 * private IP) and which names its user's instances have. The network
 * controller keeps it from the store's change feed, so a DNS query is two
 * map lookups and never a store read: a guest that floods the resolver
 * costs the daemon no database work (issue 26).
 */
export class NameTable {
  private readonly byId = new Map<string, Entry>();
  private readonly byIp = new Map<string, string>(); // ip -> user id
  private readonly byName = new Map<string, string>(); // user id \0 name -> ip

  private static key(userId: string, name: string): string {
    return `${userId}\0${name}`;
  }

  /** Sets what one instance contributes (undefined: it is gone). */
  set(id: string, inst: InstanceRec | undefined): void {
    const old = this.byId.get(id);
    if (old) {
      if (this.byIp.get(old.ip) === old.userId) this.byIp.delete(old.ip);
      if (this.byName.get(NameTable.key(old.userId, old.name)) === old.ip)
        this.byName.delete(NameTable.key(old.userId, old.name));
      this.byId.delete(id);
    }
    if (!inst?.private_ip) return;
    const e = { userId: inst.user_id, name: inst.name.toLowerCase(), ip: inst.private_ip };
    this.byId.set(id, e);
    this.byIp.set(e.ip, e.userId);
    this.byName.set(NameTable.key(e.userId, e.name), e.ip);
  }

  /** Replaces the whole table. */
  reset(all: InstanceRec[]): void {
    this.byId.clear();
    this.byIp.clear();
    this.byName.clear();
    for (const i of all) this.set(i.id, i);
  }

  /** `<name>.internal` for the asking instance's own user only. */
  lookup(clientIp: string, name: string): string | undefined {
    const user = this.byIp.get(clientIp);
    return user === undefined ? undefined : this.byName.get(NameTable.key(user, name.toLowerCase()));
  }

  get size(): number {
    return this.byId.size;
  }
}
