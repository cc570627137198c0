import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, type Harness } from '../helpers/harness.js';
import { SIM_STATS, simMachines } from '../helpers/sim-machines.js';
import { replyAsserts } from '../helpers/replies.js';

let h: Harness;
let alice: string;
let bob: string;

const { ok, entryError, bad } = replyAsserts('instances');

before(async () => {
  h = await startHarness({}, (s) => [simMachines(s)]);
  alice = await h.user('alice');
  bob = await h.user('bob');
  await h.image('app:latest');
});
after(async () => h.close());

const create = async (token: string, body: object) =>
  ok(await h.call('POST', '/v1/instances', token, { image: 'app:latest', ...body }))[0];

describe('GET /v1/instances/metrics', () => {
  test('a running instance reports its VM figures and boot times; global, local and batch agree', async () => {
    const i = await create(alice, { name: 'm1', autostart: true, wait_timeout_ms: 5000 });
    assert.equal(i.state, 'running');
    const [m] = ok(await h.call('GET', `/v1/instances/metrics?uuid=${i.uuid}`, alice));
    assert.equal(m.status, 'success');
    assert.equal(m.uuid, i.uuid);
    assert.equal(m.name, 'm1');
    assert.equal(m.state, 'running');
    assert.equal(m.rss_bytes, SIM_STATS.rssBytes);
    assert.equal(m.cpu_time_ms, SIM_STATS.cpuMs);
    // the simulated boot's timings (sim-machines.ts)
    assert.equal(m.boot_time_us, 1000);
    assert.equal(m.net_time_us, 400);
    const [local] = ok(await h.call('GET', `/v1/instances/${i.uuid}/metrics`, alice));
    assert.deepEqual(local, m);
    const [byName] = ok(await h.call('GET', '/v1/instances/metrics?name=m1', alice));
    assert.deepEqual(byName, m);
    const two = await create(alice, { name: 'm2' });
    const batch = ok(await h.call('GET', '/v1/instances/metrics', alice, [{ uuid: i.uuid }, { name: 'm2' }]));
    assert.deepEqual(
      batch.map((x) => x.uuid),
      [i.uuid, two.uuid],
    );
  });

  test('a stopped instance reports 0 for its VM figures; one never booted has 0 boot times', async () => {
    const i = await create(alice, { name: 'never' });
    const [m] = ok(await h.call('GET', `/v1/instances/metrics?uuid=${i.uuid}`, alice));
    assert.equal(m.state, 'stopped');
    assert.equal(m.rss_bytes, 0);
    assert.equal(m.cpu_time_ms, 0);
    assert.equal(m.boot_time_us, 0);
    assert.equal(m.rx_bytes, undefined, 'no tap, no network figures');

    const r = await create(alice, { name: 'ran', autostart: true, wait_timeout_ms: 5000 });
    ok(await h.call('PUT', `/v1/instances/${r.uuid}/stop`, alice));
    ok(await h.call('GET', `/v1/instances/wait?uuid=${r.uuid}&state=stopped&timeout_s=5`, alice));
    const [s] = ok(await h.call('GET', `/v1/instances/${r.uuid}/metrics`, alice));
    assert.equal(s.rss_bytes, 0);
    assert.equal(s.cpu_time_ms, 0);
    assert.equal(s.boot_time_us, 1000, 'the last boot time stays');
  });

  test("unknown, other users' and malformed targets", async () => {
    const i = await create(alice, { name: 'mine' });
    entryError(await h.call('GET', `/v1/instances/metrics?uuid=${i.uuid}`, bob), 8, /No instance/);
    entryError(await h.call('GET', '/v1/instances/metrics?name=nope', alice), 8, /No instance with name 'nope'/);
    bad(await h.call('GET', '/v1/instances/metrics', alice), /'uuid' or 'name' is required/);
    bad(await h.call('GET', '/v1/instances/metrics?uuid=xyz', alice), /not a valid UUID/);
    bad(await h.call('GET', `/v1/instances/metrics?uuid=${i.uuid}&cpu=1`, alice), /unknown query parameter 'cpu'/);
  });
});
