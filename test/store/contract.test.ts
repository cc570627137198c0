/**
 * One contract, two stores: the same assertions against SQLite (a temp
 * file) and PostgreSQL (a database of a throwaway server on a unix socket,
 * test/helpers/postgres.ts). Two store objects on one database stand for two
 * processes (two daemons, a daemon and the admin CLI).
 */
import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { openStore } from '../../src/store/open.js';
import type { FeedEvent, HostRec, InstanceRec, LeaseRenewal, Store, Tx } from '../../src/store/types.js';
import { NEVER_RUN, fire, specDefaults } from '../../src/domain/instance-states.js';
import { postgresMissing, testPostgres } from '../helpers/postgres.js';
import { requirePart } from '../helpers/require.js';
import { poll } from '../helpers/vm.js';

/** Host h-1 under epoch 3 with its lease ending at `until` (the lease tests). */
const leasedHost = (until: string): HostRec => ({
  id: 'h-1',
  name: 'h1',
  created_at: new Date(0).toISOString(),
  address: null,
  state: 'live',
  epoch: 3,
  holder: 'k',
  lease_expires_at: until,
  memory_mb: 1024,
  vcpus: null,
  net_slot: 1,
  agent_port: null,
  network: null,
});

const dirs: string[] = [];
after(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

interface Kind {
  name: 'sqlite' | 'postgres';
  /** a new empty database; `open` opens one more store object (another process) on it */
  fresh(): Promise<{ open: () => Promise<Store> }>;
}

const KINDS: Kind[] = [
  {
    name: 'sqlite',
    async fresh() {
      const dir = mkdtempSync(join(tmpdir(), 'uh-store-'));
      dirs.push(dir);
      return { open: () => openStore('', join(dir, 'unihost.db')) };
    },
  },
  {
    name: 'postgres',
    async fresh() {
      const url = await testPostgres().createDb();
      return { open: () => openStore(url, '/nonexistent/unused.db') };
    },
  },
];

const user = (name: string) => ({ id: randomUUID(), name, developer: false, created_at: '', quotas: {} });

function instance(userId: string, name: string, hostId: string | null = null): InstanceRec {
  return {
    id: randomUUID(),
    user_id: userId,
    name,
    created_at: new Date().toISOString(),
    image: 'sha256:0',
    image_ref: 'app:latest',
    memory_mb: 16,
    args: ['a b', 'c'],
    env: { K: 'v' },
    features: [],
    restart_policy: 'never',
    desired: 'stopped',
    service_group_id: null,
    private_ip: null,
    mac: null,
    nic_id: null,
    autoscale_group_id: null,
    host_id: hostId,
    state: 'stopped',
    ...NEVER_RUN,
    ...specDefaults(),
    runtime: {},
  };
}

/** Collects feed events until `until` holds (or 5 s). */
function collect(store: Store, from: number | 'now'): { events: FeedEvent[]; off: () => void } {
  const events: FeedEvent[] = [];
  const off = store.watch(from, (e) => events.push(e));
  return { events, off };
}

async function eventually(cond: () => boolean, what: string, ms = 5000): Promise<void> {
  const t0 = Date.now();
  while (!cond()) {
    if (Date.now() - t0 > ms) assert.fail(`not within ${ms} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

for (const kind of KINDS) {
  const missing = kind.name === 'postgres' ? postgresMissing() : undefined;
  describe(`store contract: ${kind.name}`, { skip: requirePart(missing) }, () => {
    test('records round-trip: JSON, booleans, nulls, the spec and status halves of an instance', async () => {
      const db = await kind.fresh();
      const s = await db.open();
      try {
        const u = user('alice');
        const i = instance(u.id, 'web');
        await s.tx(async (tx) => {
          await tx.users.insert(u);
          await tx.instances.insert(i);
        });
        const got = await s.read((tx) => tx.instances.getAny(i.id));
        assert.deepEqual(got, i);
        assert.deepEqual(await s.read((tx) => tx.users.getByName('alice')), u);
        await s.tx((tx) => tx.instances.updateStatus(i.id, { runtime: { pid: 7 }, uptime_ms: 2 ** 40 }));
        const after1 = (await s.read((tx) => tx.instances.getAny(i.id)))!;
        assert.deepEqual([after1.runtime, after1.uptime_ms], [{ pid: 7 }, 2 ** 40]);
        await assert.rejects(
          s.tx((tx) => tx.instances.updateStatus(i.id, { desired: 'running' } as never)),
          /'desired' is not a field a reconciler may write/,
        );
        await assert.rejects(
          s.tx((tx) => tx.instances.updateSpec(i.id, { state: 'running' } as never)),
          /'state' is not a field a service may write/,
        );
        await assert.rejects(
          s.read((tx) => tx.users.insert(user('bob'))),
          /write outside a transaction/,
        );
      } finally {
        await s.close();
      }
    });

    test('a host lease is renewed only under its epoch, outside any transaction', async () => {
      const db = await kind.fresh();
      const s = await db.open();
      try {
        const h = leasedHost('2026-01-01T00:00:00.000Z');
        await s.tx((tx) => tx.hosts.insert(h));
        assert.equal(await s.renewHostLease('h-1', 3, '2026-01-01T00:00:10.000Z'), true);
        assert.equal((await s.read((tx) => tx.hosts.get('h-1')))!.lease_expires_at, '2026-01-01T00:00:10.000Z');
        // the host was declared dead meanwhile (a new epoch): the old holder's renewal moves nothing
        await s.tx((tx) => tx.hosts.update('h-1', { epoch: 4, state: 'dead' }));
        assert.equal(await s.renewHostLease('h-1', 3, '2026-01-01T00:00:20.000Z'), false);
        assert.equal((await s.read((tx) => tx.hosts.get('h-1')))!.lease_expires_at, '2026-01-01T00:00:10.000Z');
        assert.equal(await s.renewHostLease('no-such-host', 3, '2026-01-01T00:00:20.000Z'), false);
      } finally {
        await s.close();
      }
    });

    test('host lease renewals of their own (leaseRenewals) go on while the event loop is busy', async (t) => {
      const db = await kind.fresh();
      const s = await db.open();
      if (!s.leaseRenewals) {
        await s.close();
        return t.skip(`${kind.name}: renewed from the daemon's timer (one host, no other may take over)`);
      }
      const outcomes: LeaseRenewal[] = [];
      const expires = async () => Date.parse((await s.read((tx) => tx.hosts.get('h-1')))!.lease_expires_at!);
      // the host watchdog's file (src/machines/watchdog.ts): until when this host's VMs may run
      const dir = mkdtempSync(join(tmpdir(), 'uh-lease-'));
      dirs.push(dir);
      const file = join(dir, 'lease-until');
      const vmsUntil = () => Number(readFileSync(file, 'utf8'));
      let r: ReturnType<NonNullable<typeof s.leaseRenewals>> | undefined;
      try {
        await s.tx((tx) => tx.hosts.insert(leasedHost(new Date().toISOString())));
        r = s.leaseRenewals(
          { hostId: 'h-1', epoch: 3, leaseMs: 2000, everyMs: 100, vmsUntil: { file, afterMs: 1500 } },
          (o) => outcomes.push(o),
        );
        await poll('a first renewal', () => outcomes.length > 0, 10_000, 10);
        // this thread does nothing else for 1 s (an agent busy with a burst of boots)
        const blockedAt = performance.now();
        const wall = Date.now();
        while (performance.now() - blockedAt < 1000);
        // renewed meanwhile: a lease that ends 2 s after a renewal sent during the block
        assert.ok((await expires()) > wall + 2000 + 500, 'renewed while this thread was busy');
        assert.ok(vmsUntil() > wall + 1500 + 500, "the watchdog's deadline moved on while this thread was busy");
        await new Promise((res) => setTimeout(res, 50));
        const during = outcomes.filter((o) => o.at > blockedAt && o.at < blockedAt + 1000);
        assert.ok(during.length >= 5, `renewals sent during the block: ${during.length}`);
        assert.ok(during.every((o) => 'ok' in o && o.ok && o.epoch === 3));
        // declared dead by another process (a new epoch): the renewals under the old one fail
        await s.tx((tx) => tx.hosts.update('h-1', { epoch: 4 }));
        const n = outcomes.length;
        await poll(
          'a failed renewal',
          () => outcomes.slice(n).some((o) => 'ok' in o && !o.ok && o.epoch === 3),
          10_000,
          10,
        );
        // renewals that fail leave the watchdog's deadline where it was
        const lastHeld = vmsUntil();
        await new Promise((res) => setTimeout(res, 300));
        assert.equal(vmsUntil(), lastHeld, 'not moved by failed renewals');
        // taken again: the renewals name the new epoch
        r.epoch(4);
        const m = outcomes.length;
        await poll(
          'renewed under the new epoch',
          () => outcomes.slice(m).some((o) => 'ok' in o && o.ok && o.epoch === 4),
          10_000,
          10,
        );
        assert.ok(vmsUntil() > lastHeld, 'moved again under the new epoch');
      } finally {
        await r?.stop();
        await s.close();
      }
    });

    test("the autoscaler's reads: enabled configurations, and the instances of their groups only", async () => {
      const db = await kind.fresh();
      const s = await db.open();
      try {
        const a = user('alice');
        const group = (name: string) => ({
          id: randomUUID(),
          user_id: a.id,
          name,
          created_at: new Date().toISOString(),
          persistent: false,
          services: [],
          soft_limit: null,
          hard_limit: null,
        });
        const [on, off, none] = [group('on'), group('off'), group('none')];
        const member = (name: string, g: { id: string }) => ({ ...instance(a.id, name), service_group_id: g.id });
        const [m1, m2, m3, m4] = [member('m1', on), member('m2', on), member('m3', off), member('m4', none)];
        const conf = (g: { id: string }, master: { id: string }, enabled: boolean) => ({
          group_id: g.id,
          user_id: a.id,
          enabled,
          min_size: 1,
          max_size: 3,
          warmup_time_ms: 0,
          cooldown_time_ms: 1000,
          master_id: master.id,
          policies: [],
        });
        await s.tx(async (tx) => {
          await tx.users.insert(a);
          for (const g of [on, off, none]) await tx.groups.insert(g);
          for (const i of [m1, m2, m3, m4, instance(a.id, 'loose')]) await tx.instances.insert(i);
          await tx.autoscale.insert(conf(on, m1, true));
          await tx.autoscale.insert(conf(off, m3, false));
        });
        const { enabled, members } = await s.read(async (tx) => ({
          enabled: await tx.autoscale.enabled(),
          members: await tx.instances.autoscaled(),
        }));
        assert.deepEqual(enabled, [conf(on, m1, true)]);
        assert.deepEqual(
          members.map((i) => i.name),
          ['m1', 'm2'],
        );
        assert.deepEqual(members[0], m1, 'whole records');
      } finally {
        await s.close();
      }
    });

    test("certificates by common name: any user's, only that name", async () => {
      const db = await kind.fresh();
      const s = await db.open();
      try {
        const a = user('alice');
        const b = user('bob');
        const cert = (userId: string, name: string, cn: string) => ({
          id: randomUUID(),
          user_id: userId,
          name,
          created_at: new Date().toISOString(),
          common_name: cn,
          state: 'pending' as const,
          validation_attempt: 0,
          validation_next: null,
          subject: null,
          issuer: null,
          serial_number: null,
          not_before: null,
          not_after: null,
          message: null,
          source: 'acme' as const,
          names: [],
          proven: false,
        });
        const mine = cert(a.id, 'c1', 'app.example.com');
        const theirs = cert(b.id, 'c2', 'app.example.com');
        await s.tx(async (tx) => {
          await tx.users.insert(a);
          await tx.users.insert(b);
          await tx.certificates.insert(mine);
          await tx.certificates.insert(theirs);
          await tx.certificates.insert(cert(a.id, 'c3', 'www.example.com'));
        });
        const got = await s.read((tx) => tx.certificates.named('app.example.com'));
        assert.deepEqual(
          got.map((c) => c.id),
          [mine.id, theirs.id],
        );
        assert.deepEqual(await s.read((tx) => tx.certificates.named('example.com')), []);
      } finally {
        await s.close();
      }
    });

    test('state changes through setState only, from the stored state; each appends its event', async () => {
      const db = await kind.fresh();
      const s = await db.open();
      try {
        const u = user('alice');
        const i = instance(u.id, 'web');
        await s.tx(async (tx) => {
          await tx.users.insert(u);
          await tx.instances.insert(i);
        });
        await s.tx(async (tx) => {
          const cur = (await tx.instances.getAny(i.id))!;
          await fire(tx, cur, 'start', { stop_request: null });
        });
        // a decision made on a stale read (it still thinks `stopped`) is refused, nothing changes
        await assert.rejects(
          s.tx((tx) => tx.instances.setState(i.id, 'stopped', 'starting', {})),
          (e: Error & { code?: string }) => e.code === 'UH_CONFLICT' && /is starting, not stopped/.test(e.message),
        );
        const events = await s.read((tx) => tx.events.after(u.id, 0, {}, 10));
        assert.deepEqual(
          events.map((e) => [e.type, e.from_state, e.to_state]),
          [
            ['created', null, 'stopped'],
            ['state', 'stopped', 'starting'],
          ],
        );
        await s.tx((tx) => tx.instances.delete(i.id));
        const all = await s.read((tx) => tx.events.after(u.id, 0, {}, 10));
        assert.deepEqual(all.at(-1)?.type, 'deleted');
        assert.ok(
          all.every((e, k) => k === 0 || e.id > all[k - 1]!.id),
          'event ids increase',
        );
      } finally {
        await s.close();
      }
    });

    test('transactions with events of one user, all at once (PostgreSQL: from two processes): each numbered 1..n, none retried', async () => {
      const db = await kind.fresh();
      const a = await db.open();
      // SQLite's writers are processes that wait for its file lock: two in one process would block each other
      const b = kind.name === 'sqlite' ? a : await db.open();
      try {
        const u = user('erin');
        const insts = Array.from({ length: 24 }, (_, k) => instance(u.id, `w${k}`));
        await a.tx(async (tx) => {
          await tx.users.insert(u);
          for (const i of insts) await tx.instances.insert(i);
        });
        let attempts = 0;
        await Promise.all(
          insts.map((i, k) =>
            (k % 2 ? a : b).tx(async (tx) => {
              attempts++;
              tx.events.notice(i, `note ${k}`);
            }),
          ),
        );
        // reading the user's newest event number inside a serializable transaction made these conflict
        // pairwise (PostgreSQL: 16 of them took 75 attempts); numbered after commit, none does
        assert.equal(attempts, insts.length, 'no transaction ran twice');
        const seen = await b.read((tx) => tx.events.after(u.id, 0, {}, 100));
        const notes = seen.filter((e) => e.type === 'notice');
        assert.equal(notes.length, insts.length);
        assert.deepEqual(
          seen.map((e) => e.id),
          seen.map((_, k) => k + 1),
          'the ids a client sees: 1, 2, 3 ... in order',
        );
        assert.equal(await a.read((tx) => tx.events.lastId(u.id)), seen.length);
      } finally {
        await a.close();
        if (b !== a) await b.close();
      }
    });

    test('the change feed: every commit of any process, once, in commit order', async () => {
      const db = await kind.fresh();
      const a = await db.open();
      const b = await db.open();
      try {
        const seen = collect(a, 'now');
        const u = user('alice');
        await b.tx((tx) => tx.users.insert(u)); // another process
        const ids: string[] = [];
        for (let k = 0; k < 20; k++) {
          const i = instance(u.id, `i${k}`);
          ids.push(i.id);
          await (k % 2 ? a : b).tx((tx) => tx.instances.insert(i));
        }
        await eventually(() => seen.events.length >= 21, 'all 21 changes reach the watcher');
        const changes = seen.events.filter((e) => e.type === 'change');
        assert.deepEqual(
          changes.map((e) => e.type === 'change' && `${e.kind}:${e.id}`),
          [`user:${u.id}`, ...ids.map((id) => `instance:${id}`)],
        );
        assert.ok(
          changes.every((e, k) => k === 0 || e.rev > changes[k - 1]!.rev),
          'revisions increase',
        );
        // a late watcher replays from a revision
        const late = collect(a, changes[10]!.rev);
        await eventually(() => late.events.length >= 10, 'the backlog after revision 11');
        assert.deepEqual(
          late.events.map((e) => e.type === 'change' && e.id),
          ids.slice(10),
        );
        seen.off();
        late.off();
      } finally {
        await a.close();
        await b.close();
      }
    });

    test('concurrent transactions are serializable: a quota checked inside holds under 30 racing inserts', async () => {
      const db = await kind.fresh();
      const a = await db.open();
      // SQLite serializes writers with a file lock that blocks the thread: two store objects in one
      // process would wait on each other; its writers are the transactions of one object (one process)
      const b = kind.name === 'sqlite' ? a : await db.open();
      try {
        const u = user('alice');
        await a.tx((tx) => tx.users.insert(u));
        const LIMIT = 7;
        const tryCreate = async (s: Store, k: number): Promise<'ok' | 'quota' | 'exists'> =>
          s.tx(async (tx: Tx) => {
            if ((await tx.usage(u.id)).instances >= LIMIT) return 'quota';
            const name = `n${k % 10}`; // names repeat: uniqueness under the same race
            if (await tx.instances.getByName(u.id, name)) return 'exists';
            await tx.instances.insert(instance(u.id, name));
            return 'ok';
          });
        const results = await Promise.all(Array.from({ length: 30 }, (_, k) => tryCreate(k % 2 ? a : b, k)));
        const n = (await a.read((tx) => tx.instances.listIds(u.id))).length;
        assert.equal(n, LIMIT, `exactly the quota: ${JSON.stringify(results)}`);
        assert.equal(results.filter((r) => r === 'ok').length, LIMIT);
        const names = (await a.read((tx) => tx.instances.listIds(u.id))).map((r) => r.name);
        assert.equal(new Set(names).size, names.length, 'no name twice');
      } finally {
        await a.close();
        if (b !== a) await b.close();
      }
    });

    test('two processes opening a new database together migrate it once', async () => {
      const db = await kind.fresh();
      const [a, b, c] = await Promise.all([db.open(), db.open(), db.open()]);
      try {
        const u = user('alice');
        await a.tx((tx) => tx.users.insert(u));
        assert.deepEqual(await c.read((tx) => tx.users.getByName('alice')), u);
      } finally {
        await Promise.all([a.close(), b.close(), c.close()]);
      }
    });

    test("another process's commit moves the external version (caches of tokens drop)", async () => {
      const db = await kind.fresh();
      const a = await db.open();
      const b = await db.open();
      try {
        const v0 = a.externalVersion();
        await b.tx((tx) => tx.users.insert(user('carol')));
        await eventually(() => a.externalVersion() !== v0, 'the external version moves');
      } finally {
        await a.close();
        await b.close();
      }
    });
  });
}

describe(
  "PostgreSQL: a transaction on one instance's own record (TxOptions.instance)",
  { skip: requirePart(postgresMissing()) },
  () => {
    /**
     * A placement's shape against an agent's record of a boot: A reads every instance and, once B committed,
     * inserts one; B reads one instance and writes its status. Serializable both, that is a write skew
     * (A read what B wrote, B read the index page A writes) and A runs again; with B on its own row, A
     * runs once.
     */
    /** A store on a new database with one user and one instance of theirs. */
    async function oneInstance(name: string): Promise<{ store: Store; u: ReturnType<typeof user>; x: InstanceRec }> {
      const store = await openStore(await testPostgres().createDb(), '/nonexistent/unused.db');
      const u = user(name);
      const x = instance(u.id, 'x');
      await store.tx(async (tx) => {
        await tx.users.insert(u);
        await tx.instances.insert(x);
      });
      return { store, u, x };
    }

    async function skew(own: boolean): Promise<{ attempts: number; status: InstanceRec | undefined }> {
      const { store, u, x } = await oneInstance('gil');
      try {
        let attempts = 0;
        let read!: () => void;
        const aRead = new Promise<void>((r) => (read = r));
        let go!: () => void;
        const bDone = new Promise<void>((r) => (go = r));
        const a = store.tx(async (tx) => {
          attempts++;
          await tx.instances.all();
          read();
          await bDone;
          await tx.instances.insert(instance(u.id, `y${attempts}`));
        });
        await aRead;
        const b = async (tx: Tx) => {
          const cur = await tx.instances.getAny(x.id);
          await tx.instances.updateStatus(x.id, { uptime_ms: (cur?.uptime_ms ?? 0) + 1 });
        };
        await (own ? store.tx(b, { instance: x.id }) : store.tx(b));
        go();
        await a;
        return { attempts, status: await store.read((tx) => tx.instances.getAny(x.id)) };
      } finally {
        await store.close();
      }
    }

    test('it never conflicts with a transaction that read every instance; serializable, it did', async () => {
      const own = await skew(true);
      assert.equal(own.attempts, 1, 'the wide reader ran once');
      assert.equal(own.status?.uptime_ms, 1, 'the own-row write is kept');
      const serializable = await skew(false);
      assert.ok(serializable.attempts >= 2, `serializable, the wide reader ran again (${serializable.attempts})`);
      assert.equal(serializable.status?.uptime_ms, 1);
    });

    test('a serializable writer of the same row waits for it, then runs again on what it committed', async () => {
      const { store, x } = await oneInstance('hal');
      try {
        let locked!: () => void;
        const rowLocked = new Promise<void>((r) => (locked = r));
        let release!: () => void;
        const released = new Promise<void>((r) => (release = r));
        const mine = store.tx(
          async (tx) => {
            locked();
            await released;
            await tx.instances.updateStatus(x.id, { uptime_ms: 10 });
          },
          { instance: x.id },
        );
        await rowLocked;
        const seen: number[] = [];
        const theirs = store.tx(async (tx) => {
          const cur = (await tx.instances.getAny(x.id))!;
          seen.push(cur.uptime_ms);
          await tx.instances.updateStatus(x.id, { uptime_ms: cur.uptime_ms + 1 });
        });
        await new Promise((r) => setTimeout(r, 200));
        release();
        await Promise.all([mine, theirs]);
        assert.equal((await store.read((tx) => tx.instances.getAny(x.id)))?.uptime_ms, 11, 'no write lost');
        assert.equal(seen.at(-1), 10, 'the last run read the own-row commit');
      } finally {
        await store.close();
      }
    });
  },
);

describe(
  'PostgreSQL: a process that dies between its commit and its publish',
  { skip: requirePart(postgresMissing()) },
  () => {
    test('its events get their numbers and its changes reach watchers at the next commit of any process, or at open', async () => {
      const url = await testPostgres().createDb();
      const store = await openStore(url, '/nonexistent/unused.db');
      const other = new pg.Client({ connectionString: url });
      try {
        const u = user('fay');
        const i = instance(u.id, 'web');
        await store.tx(async (tx) => {
          await tx.users.insert(u);
          await tx.instances.insert(i);
        });
        const last = await store.read((tx) => tx.events.lastId(u.id));
        const seen = collect(store, 'now');
        // what such a process leaves: its transaction committed (an event without its number, a change
        // above the published head), its publish never ran
        await other.connect();
        await other.query('BEGIN');
        await other.query(
          `INSERT INTO events (id, user_seq, at, user_id, instance_id, instance_name, type, message)
           VALUES (nextval('event_ids'), NULL, now()::text, $1, $2, 'web', 'notice', 'left behind')`,
          [u.id, i.id],
        );
        const left = (
          await other.query(
            `INSERT INTO changes (rev, kind, id) VALUES (nextval('revisions'), 'instance', $1) RETURNING rev`,
            [i.id],
          )
        ).rows[0].rev;
        await other.query('COMMIT');
        await new Promise((r) => setTimeout(r, 1500)); // more than the feed's poll
        assert.equal(await store.read((tx) => tx.events.lastId(u.id)), last, 'not visible: no number yet');
        assert.ok(!seen.events.some((e) => e.type === 'change' && e.rev === Number(left)), 'not published');
        // a store opened now publishes it
        const reopened = await openStore(url, '/nonexistent/unused.db');
        await reopened.close();
        await eventually(
          () => seen.events.some((e) => e.type === 'change' && e.rev === Number(left)),
          'published at open',
        );
        const events = await store.read((tx) => tx.events.after(u.id, last, {}, 10));
        assert.deepEqual(
          events.map((e) => [e.id, e.message]),
          [[last + 1, 'left behind']],
        );
        seen.off();
      } finally {
        await other.end();
        await store.close();
      }
    });
  },
);

describe(
  'PostgreSQL: a rolling upgrade changes the schema under prepared statements',
  { skip: requirePart(postgresMissing()) },
  () => {
    test('a column another process adds breaks no read or transaction of this one', async () => {
      const url = await testPostgres().createDb();
      const store = await openStore(url, '/nonexistent/unused.db');
      const other = new pg.Client({ connectionString: url });
      try {
        await store.tx((tx) => tx.users.insert(user('dora')));
        // every pooled connection prepares `SELECT * FROM users ...`
        await Promise.all(Array.from({ length: 8 }, () => store.read((tx) => tx.users.getByName('dora'))));
        await store.tx((tx) => tx.users.getByName('dora'));
        await other.connect();
        await other.query('ALTER TABLE users ADD COLUMN added_by_a_newer_version integer');
        for (let k = 0; k < 12; k++) assert.equal((await store.read((tx) => tx.users.getByName('dora')))?.name, 'dora');
        for (let k = 0; k < 4; k++) assert.equal((await store.tx((tx) => tx.users.getByName('dora')))?.name, 'dora');
      } finally {
        await other.end();
        await store.close();
      }
    });
  },
);
