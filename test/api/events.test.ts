/**
 * GET /v1/events: the durable log of instance state changes as server-sent
 * events. The ground truth is the store's log itself; a client that
 * reconnects with Last-Event-ID (or `from`) must see it exactly once, in order.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createParser, type EventSourceMessage } from 'eventsource-parser';
import { Agent, fetch } from 'undici';
import { startHarness, type Harness } from '../helpers/harness.js';
import { simMachines } from '../helpers/sim-machines.js';
import { replyAsserts } from '../helpers/replies.js';

let h: Harness;
let alice: string;
let bob: string;
let aliceId: string;
/** the streams' HTTP client */
const client = new Agent();

const { ok, bad } = replyAsserts('instances');

before(async () => {
  h = await startHarness({}, (s) => [simMachines(s)]);
  alice = await h.user('alice');
  bob = await h.user('bob');
  aliceId = (await h.daemon.store.read((tx) => tx.users.getByName('alice')))!.id;
  await h.image('app:latest');
});
after(async () => {
  await client.close(); // its pooled sockets, so the daemon's close need not wait for them
  await h.close();
});

interface Stream {
  status: number;
  events: EventSourceMessage[];
  /** resolves once `check` holds for the events received so far */
  until(check: (es: EventSourceMessage[]) => boolean, what: string): Promise<void>;
  close(): void;
}

/** Opens the stream with a real HTTP client and parses it with an SSE parser. */
async function open(token: string, query = '', headers: Record<string, string> = {}): Promise<Stream> {
  const ac = new AbortController();
  const res = await fetch(`${h.url}/v1/events${query}`, {
    headers: { authorization: `Bearer ${token}`, ...headers },
    signal: ac.signal,
    dispatcher: client,
  });
  const events: EventSourceMessage[] = [];
  const waiters = new Set<() => void>();
  const parser = createParser({
    onEvent: (e) => {
      events.push(e);
      for (const w of waiters) w();
    },
  });
  if (res.ok) {
    void (async () => {
      const dec = new TextDecoder();
      try {
        for await (const chunk of res.body!) parser.feed(dec.decode(chunk as Uint8Array, { stream: true }));
      } catch {
        /* aborted by close() */
      }
    })();
  }
  return {
    status: res.status,
    events,
    until: (check, what) =>
      new Promise((resolve, reject) => {
        const t = setTimeout(() => reject(new Error(`events: ${what} not seen; got ${JSON.stringify(events)}`)), 5000);
        const w = () => {
          if (!check(events)) return;
          clearTimeout(t);
          waiters.delete(w);
          resolve();
        };
        waiters.add(w);
        w();
      }),
    close: () => ac.abort(),
  };
}

const log = () => h.daemon.store.read((tx) => tx.events.after(aliceId, 0, {}, 10_000));
const ids = (es: EventSourceMessage[]) => es.map((e) => Number(e.id));

describe('GET /v1/events', () => {
  test('a client that reconnects with Last-Event-ID gets every event exactly once, in order', async () => {
    const first = await open(alice, '?from=0');
    assert.equal(first.status, 200);
    ok(
      await h.call('POST', '/v1/instances', alice, { image: 'app:latest', name: 'e1', autostart: true, timeout_s: 5 }),
    );
    await first.until((es) => es.some((e) => JSON.parse(e.data).to_state === 'running'), 'e1 running');
    first.close();
    const lastSeen = first.events.at(-1)!.id!;

    // while the client is away
    ok(await h.call('PUT', '/v1/instances/stop', alice, { name: 'e1' }));
    ok(await h.call('GET', '/v1/instances/wait', alice, { name: 'e1', state: 'stopped', timeout_s: 5 }));
    ok(await h.call('POST', '/v1/instances', alice, { image: 'app:latest', name: 'e2' }));

    const second = await open(alice, '', { 'last-event-id': lastSeen });
    ok(await h.call('DELETE', '/v1/instances', alice, { name: 'e2' })); // and one more while connected
    const truth = await log();
    await second.until((es) => es.length > 0 && Number(es.at(-1)!.id) === truth.at(-1)!.id, 'the last event');
    second.close();

    assert.deepEqual(
      [...ids(first.events), ...ids(second.events)],
      truth.map((e) => e.id),
    );
    const e1 = truth.filter((e) => e.instance_name === 'e1').map((e) => [e.type, e.from_state, e.to_state]);
    assert.deepEqual(e1[0]?.[0], 'created');
    assert.ok(
      e1.some(([t, f, to]) => t === 'state' && f === 'starting' && to === 'running'),
      JSON.stringify(e1),
    );
    assert.ok(e1.some(([, , to]) => to === 'stopped'));
    const last = JSON.parse(second.events.at(-1)!.data);
    assert.equal(last.type, 'deleted');
    assert.equal(last.instance.name, 'e2');
    assert.equal(second.events.at(-1)!.event, 'deleted');
  });

  test("ids are each user's own, 1, 2, 3 ...: nobody learns how busy the others are", async () => {
    const mine = (await log()).map((e) => e.id);
    assert.deepEqual(
      mine,
      mine.map((_, i) => i + 1),
    );
    const dora = await h.user('dora');
    const doraId = (await h.daemon.store.read((tx) => tx.users.getByName('dora')))!.id;
    ok(await h.call('POST', '/v1/instances', dora, { image: 'app:latest', name: 'd-count' }));
    const hers = await h.daemon.store.read((tx) => tx.events.after(doraId, 0, {}, 10_000));
    assert.deepEqual(
      hers.map((e) => e.id),
      [1],
      "dora's first event is her 1, whatever alice did",
    );
  });

  test('`from` resumes like Last-Event-ID; without either only new events come', async () => {
    const truth = await log();
    const mid = truth[1]!.id;
    const s = await open(alice, `?from=${mid}`);
    await s.until((es) => es.length === truth.length - 2, 'the backlog after from');
    assert.deepEqual(
      ids(s.events),
      truth.slice(2).map((e) => e.id),
    );
    s.close();

    const fresh = await open(alice);
    ok(await h.call('POST', '/v1/instances', alice, { image: 'app:latest', name: 'e3' }));
    await fresh.until((es) => es.length === 1, 'the new event');
    assert.equal(JSON.parse(fresh.events[0]!.data).instance.name, 'e3');
    fresh.close();
  });

  test('filters by instance and group; other users see nothing of it', async () => {
    const [g] = ok(await h.call('POST', '/v1/services', alice, { name: 'grp', services: [] }), 'service_groups');
    const byGroup = await open(alice, '?from=0&group=grp');
    const byName = await open(alice, '?from=0&instance=e3');
    const bobs = await open(bob, '?from=0');
    const [inGroup] = ok(
      await h.call('POST', '/v1/instances', alice, { image: 'app:latest', name: 'g1', service_group: { name: 'grp' } }),
    );
    ok(await h.call('PUT', '/v1/instances/start', alice, { name: 'e3', timeout_s: 5 }));
    await byName.until((es) => es.some((e) => JSON.parse(e.data).to_state === 'running'), 'e3 running');
    await byGroup.until((es) => es.length === 1, 'g1 created');
    assert.deepEqual(JSON.parse(byGroup.events[0]!.data).service_group, { uuid: g.uuid });
    assert.equal(JSON.parse(byGroup.events[0]!.data).instance.uuid, inGroup.uuid);
    assert.ok(byName.events.every((e) => JSON.parse(e.data).instance.name === 'e3'));
    const byUuid = await open(alice, `?from=0&instance=${inGroup.uuid}`);
    await byUuid.until((es) => es.length === 1, 'g1 by uuid');
    // a positive control: an event of bob's own, committed after alice's, reaches his stream; by then
    // every event before it would have too, and none of alice's did
    ok(await h.call('POST', '/v1/instances', bob, { image: 'app:latest', name: 'bobs-own' }));
    await bobs.until((es) => es.length >= 1, "bob's own event");
    assert.deepEqual(
      bobs.events.map((e) => JSON.parse(e.data).instance.name),
      ['bobs-own'],
      "bob's stream carries his event only",
    );
    for (const s of [byGroup, byName, bobs, byUuid]) s.close();
  });

  test('bad input is a clear error before the stream starts', async () => {
    bad(await h.call('GET', '/v1/events?from=abc', alice), /'abc' is not an event id/);
    bad(await h.call('GET', '/v1/events?from=1', alice, undefined, { 'last-event-id': 'x' }), /'x'/);
    bad(await h.call('GET', '/v1/events?since=1', alice), /unknown query parameter 'since'/);
    const r = await h.call('GET', '/v1/events?group=nope', alice);
    assert.equal(r.status, 404, r.text);
    assert.match(r.body.message, /nope/);
    assert.equal((await h.call('GET', '/v1/events', null)).status, 401);
  });

  test('a user holds at most 8 streams: the ninth is 429 in words; other users are not counted; a closed one frees its place', async () => {
    const carol = await h.user('carol');
    const held = await Promise.all(Array.from({ length: 8 }, () => open(carol)));
    try {
      assert.deepEqual(
        held.map((x) => x.status),
        Array(8).fill(200),
      );
      const r = await h.call('GET', '/v1/events', carol);
      assert.equal(r.status, 429, r.text);
      assert.match(r.body.message, /too many event streams: this user has 8 open \(at most 8\)/);
      const other = await open(bob);
      assert.equal(other.status, 200);
      other.close();
      held.pop()!.close();
      const deadline = Date.now() + 5000;
      let again = await open(carol);
      while (again.status !== 200 && Date.now() < deadline) {
        await new Promise((res) => setTimeout(res, 50));
        again = await open(carol);
      }
      assert.equal(again.status, 200, 'the closed stream’s place is taken again');
      again.close();
    } finally {
      for (const x of held) x.close();
    }
  });
});

describe('events retention', () => {
  test('old events are pruned, each user keeping its newest (its numbering goes on from there)', async () => {
    const { pruneEvents } = await import('../../src/daemon.js');
    const before = await log();
    assert.ok(before.length >= 3);
    // everything is "old" for a retention of 0 days seen from an hour ahead
    const gone = await pruneEvents(h.daemon.store, 0, Date.now() + 3600_000);
    assert.ok(gone >= before.length - 1, `${gone} pruned`);
    const after = await log();
    assert.deepEqual(
      after.map((e) => e.id),
      [before.at(-1)!.id],
    );
    ok(await h.call('POST', '/v1/instances', alice, { image: 'app:latest', name: 'after-prune' }));
    assert.equal((await log()).at(-1)!.id, before.at(-1)!.id + 1, 'ids are not reused after a prune');
    // a retention that keeps everything removes nothing
    assert.equal(await pruneEvents(h.daemon.store, 30, Date.now()), 0);
  });
});
