/**
 * The crash harness's clients: seeded random operations through the HTTP
 * API, and the ledger of what every acknowledged answer promised. A write
 * whose answer never came (the daemon died under it) may or may not have
 * happened: the objects it touched become uncertain until the next
 * acknowledged write on them.
 */
import { request } from 'undici';

/** mulberry32: a small seeded PRNG, so a run can be replayed with its seed. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const UNKNOWN = '?' as const;
type Maybe<T> = T | typeof UNKNOWN;

/** Each client works on its own objects only, so the order of its acknowledged writes is the order they happened. */
export interface InstanceModel {
  owner: number;
  name: string;
  exists: Maybe<boolean>;
  /** `standby`: the last acknowledged write was a suspend (memory to a snapshot) */
  desired: Maybe<'running' | 'stopped' | 'standby'>;
}
export interface VolumeModel {
  owner: number;
  name: string;
  exists: Maybe<boolean>;
  attachedTo: Maybe<string | null>;
}
export interface GroupModel {
  owner: number;
  name: string;
  exists: Maybe<boolean>;
  /** its custom domain (a certificate from the harness's ACME authority), if it has one */
  custom?: string;
}

/** What the acknowledged writes promise, by uuid. */
export class Ledger {
  readonly instances = new Map<string, InstanceModel>();
  readonly volumes = new Map<string, VolumeModel>();
  readonly groups = new Map<string, GroupModel>();
  ops = 0;
  acknowledged = 0;
  unanswered = 0;
  refused = 0;
  /** acknowledged suspends (each a memory snapshot the daemon had to take or fall back from) */
  suspends = 0;
  /** requests sent and not answered yet (a kill now interrupts them) */
  inFlight = 0;
}

type Reply = { ok: true; entry: Record<string, unknown> } | { ok: false; answered: boolean };
/** an operation that has nothing to work on (no such object yet): another one is drawn */
const NOTHING = null;

export interface ClientOptions {
  url: string;
  token: string;
  rnd: () => number;
  ledger: Ledger;
  /** at most this many instances of this client believed to exist (VMs are heavy under TCG) */
  maxInstances: number;
  /** resolves while the daemon is up; the harness swaps it during a restart */
  up: () => Promise<void>;
  /** a domain under which half of the new groups get a custom name (ACME on); none: metro names only */
  customDomain?: string;
  id: number;
}

/** One client: `run(n)` performs operations until the shared budget is spent. */
export class Client {
  private seq = 0;

  constructor(private readonly o: ClientOptions) {}

  private async call(method: string, path: string, body: unknown, plural: string): Promise<Reply> {
    await this.o.up();
    this.o.ledger.inFlight++;
    try {
      const r = await request(this.o.url + path, {
        method: method as 'GET',
        headers: { authorization: `Bearer ${this.o.token}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
        headersTimeout: 60_000,
        bodyTimeout: 60_000,
      });
      const b = (await r.body.json()) as { status?: string; data?: Record<string, Record<string, unknown>[]> };
      const entry = b.data?.[plural]?.[0];
      if (r.statusCode === 200 && b.status === 'success' && entry) return { ok: true, entry };
      return { ok: false, answered: true };
    } catch {
      return { ok: false, answered: false }; // the daemon died under the request
    } finally {
      this.o.ledger.inFlight--;
    }
  }

  private pick<T extends { owner: number }>(m: Map<string, T>, where: (v: T) => boolean): [string, T] | undefined {
    const c = [...m].filter(([, v]) => v.owner === this.o.id && where(v));
    return c.length === 0 ? undefined : c[Math.floor(this.o.rnd() * c.length)];
  }

  private name(kind: string): string {
    return `c${this.o.id}-${kind}${this.seq++}`;
  }

  /** One random operation; records what its answer promised. */
  async step(): Promise<void> {
    const L = this.o.ledger;
    const live = [...L.instances.values()].filter((i) => i.owner === this.o.id && i.exists !== false).length;
    let done: Reply | null = null;
    while (!done) {
      const r = this.o.rnd();
      if (r < 0.2) done = live < this.o.maxInstances ? await this.createInstance() : NOTHING;
      else if (r < 0.33) done = await this.startStop('start');
      else if (r < 0.41) done = await this.startStop('stop');
      else if (r < 0.5) done = await this.suspend();
      else if (r < 0.6) done = await this.deleteInstance();
      else if (r < 0.7) done = await this.createVolume();
      else if (r < 0.75) done = await this.deleteVolume();
      else if (r < 0.83) done = await this.attach();
      else if (r < 0.9) done = await this.detach();
      else if (r < 0.96) done = await this.createGroup();
      else done = await this.deleteGroup();
    }
    L.ops++;
    if (done.ok) L.acknowledged++;
    else if (done.answered) L.refused++;
    else L.unanswered++;
  }

  private async createInstance(): Promise<Reply> {
    const L = this.o.ledger;
    const name = this.name('i');
    const autostart = this.o.rnd() < 0.6;
    const g = this.o.rnd() < 0.4 ? this.pick(L.groups, (x) => x.exists === true) : undefined;
    const r = await this.call(
      'POST',
      '/v1/instances',
      {
        name,
        image: 'http:latest',
        memory_mb: 96,
        restart_policy: 'always',
        autostart,
        ...(g ? { service_group: { uuid: g[0] } } : {}),
      },
      'instances',
    );
    if (r.ok)
      L.instances.set(String(r.entry.uuid), {
        owner: this.o.id,
        name,
        exists: true,
        desired: autostart ? 'running' : 'stopped',
      });
    return r;
  }

  private async startStop(verb: 'start' | 'stop'): Promise<Reply | null> {
    const L = this.o.ledger;
    const t = this.pick(L.instances, (x) => x.exists === true);
    if (!t) return NOTHING;
    const force = verb === 'stop' && this.o.rnd() < 0.3;
    const r = await this.call('PUT', `/v1/instances/${verb}`, { uuid: t[0], ...(force ? { force } : {}) }, 'instances');
    if (r.ok) t[1].desired = verb === 'start' ? 'running' : 'stopped';
    else if (!r.answered) t[1].desired = UNKNOWN;
    return r;
  }

  /** PUT suspend of a running instance: memory to a snapshot, then standby (a refusal when it is not running). */
  private async suspend(): Promise<Reply | null> {
    const t = this.pick(this.o.ledger.instances, (x) => x.exists === true && x.desired === 'running');
    if (!t) return NOTHING;
    // as a client would: suspend what runs (a boot takes seconds under TCG); a read changes nothing
    const w = await this.call(
      'GET',
      '/v1/instances/wait',
      { uuid: t[0], state: 'running', timeout_ms: 20_000 },
      'instances',
    );
    if (!w.ok || w.entry.state !== 'running') return w.ok ? { ok: false, answered: true } : w;
    const r = await this.call('PUT', '/v1/instances/suspend', { uuid: t[0] }, 'instances');
    if (r.ok) {
      t[1].desired = 'standby';
      this.o.ledger.suspends++;
    } else if (!r.answered) t[1].desired = UNKNOWN;
    return r;
  }

  private async deleteInstance(): Promise<Reply | null> {
    const L = this.o.ledger;
    const t = this.pick(L.instances, (x) => x.exists === true);
    if (!t) return NOTHING;
    const r = await this.call('DELETE', '/v1/instances', { uuid: t[0] }, 'instances');
    if (r.ok || !r.answered) {
      t[1].exists = r.ok ? false : UNKNOWN;
      // its volumes are detached by the delete (or maybe, if the answer was lost)
      for (const v of L.volumes.values()) if (v.attachedTo === t[0]) v.attachedTo = r.ok ? null : UNKNOWN;
    }
    return r;
  }

  private async createVolume(): Promise<Reply> {
    const name = this.name('v');
    const r = await this.call('POST', '/v1/volumes', { name, size_mb: 4 }, 'volumes');
    if (r.ok)
      this.o.ledger.volumes.set(String(r.entry.uuid), { owner: this.o.id, name, exists: true, attachedTo: null });
    return r;
  }

  private async deleteVolume(): Promise<Reply | null> {
    const t = this.pick(this.o.ledger.volumes, (x) => x.exists === true);
    if (!t) return NOTHING;
    const r = await this.call('DELETE', '/v1/volumes', { uuid: t[0] }, 'volumes');
    if (r.ok) t[1].exists = false;
    else if (!r.answered) t[1].exists = UNKNOWN;
    return r;
  }

  private async attach(): Promise<Reply | null> {
    const L = this.o.ledger;
    const v = this.pick(L.volumes, (x) => x.exists === true && x.attachedTo === null);
    const i = this.pick(L.instances, (x) => x.exists === true);
    if (!v || !i) return NOTHING;
    const r = await this.call(
      'PUT',
      '/v1/volumes/attach',
      { uuid: v[0], attach_to: { uuid: i[0] }, at: '/data' },
      'volumes',
    );
    if (r.ok) v[1].attachedTo = i[0];
    else if (!r.answered) v[1].attachedTo = UNKNOWN;
    return r;
  }

  private async detach(): Promise<Reply | null> {
    const v = this.pick(this.o.ledger.volumes, (x) => x.exists === true && typeof x.attachedTo === 'string');
    if (!v) return NOTHING;
    const r = await this.call('PUT', '/v1/volumes/detach', { uuid: v[0] }, 'volumes');
    if (r.ok) v[1].attachedTo = null;
    else if (!r.answered) v[1].attachedTo = UNKNOWN;
    return r;
  }

  private async createGroup(): Promise<Reply> {
    const name = this.name('g');
    // with ACME on, half the groups get a custom name too (an order), and half of those publish port 80
    // (HTTP-01; the others are validated over TLS-ALPN-01 on 443)
    const custom = this.o.customDomain && this.o.rnd() < 0.5 ? `${name}.${this.o.customDomain}` : undefined;
    const http01 = custom !== undefined && this.o.rnd() < 0.5;
    const r = await this.call(
      'POST',
      '/v1/services',
      {
        name,
        services: [
          { port: 443, destination_port: 8080, handlers: ['tls', 'http'] },
          ...(http01 ? [{ port: 80, destination_port: 443, handlers: ['http', 'redirect'] }] : []),
        ],
        ...(custom ? { domains: [{ name }, { name: `${custom}.` }] } : {}),
      },
      'service_groups',
    );
    if (r.ok)
      this.o.ledger.groups.set(String(r.entry.uuid), {
        owner: this.o.id,
        name,
        exists: true,
        ...(custom ? { custom } : {}),
      });
    return r;
  }

  private async deleteGroup(): Promise<Reply | null> {
    const t = this.pick(this.o.ledger.groups, (x) => x.exists === true);
    if (!t) return NOTHING;
    const r = await this.call('DELETE', '/v1/services', { uuid: t[0] }, 'service_groups');
    if (r.ok) t[1].exists = false;
    else if (!r.answered) t[1].exists = UNKNOWN;
    return r;
  }
}
