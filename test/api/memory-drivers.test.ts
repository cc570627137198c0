/* eslint-disable @typescript-eslint/no-explicit-any -- API replies are JSON; the assertions check their shape. */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pino from 'pino';
import { DEFAULTS, type Config } from '../../src/config.js';
import { defaultControllers } from '../../src/controllers.js';
import { buildDrivers, checkDriverNames, type Drivers } from '../../src/drivers.js';
import { MemoryDataPlane } from '../../src/gateway/memory.js';
import { GatewayController } from '../../src/reconcile/gateway.js';
import { MEMORY_VM_STATS, MemoryMachines } from '../../src/machines/memory.js';
import { tapName } from '../../src/network/host.js';
import { MemoryNetwork } from '../../src/network/memory.js';
import type { Services } from '../../src/services/index.js';
import { MemoryVolumes } from '../../src/volumes/memory.js';
import { startHarness, type Harness } from '../helpers/harness.js';
import { holdVolume } from '../../src/cli/admin/backup.js';
import { controlSocketPath } from '../../src/control-socket.js';
import { replyAsserts } from '../helpers/replies.js';

/**
 * The daemon's own controllers (machines, network, volumes, gateway,
 * autoscale) over the in-memory drivers, through the real API and SQLite:
 * the path of src/drivers.ts that unit tests and API development use. The
 * same paths with QEMU, the host network, ext4 and HAProxy are in test/vm/.
 */
const log = pino({ level: process.env.UNIHOST_TEST_LOG ?? 'silent' });
const MEMORY = {
  machines: { ...DEFAULTS.machines, driver: 'memory' },
  network: { ...DEFAULTS.network, driver: 'memory' },
  volumes: { driver: 'memory' },
  gateway: { ...DEFAULTS.gateway, driver: 'memory' },
};

describe('drivers chosen by name in the configuration', () => {
  test('the memory names build the memory drivers', async () => {
    const s = { config: { ...DEFAULTS, ...MEMORY }, clock: { now: Date.now } } as unknown as Services;
    const d = await buildDrivers(s, log);
    assert.ok(d.network instanceof MemoryNetwork);
    assert.ok(d.volumes instanceof MemoryVolumes);
    assert.ok(d.machines(() => undefined) instanceof MemoryMachines);
    assert.ok(d.dataPlane({ backends: () => [] } as any) instanceof MemoryDataPlane);
  });

  test('an unknown name is refused with the setting and the known names', () => {
    for (const [over, re] of [
      [
        { machines: { ...DEFAULTS.machines, driver: 'firecracker' } },
        /machines\.driver 'firecracker'.*known: qemu, memory/,
      ],
      [{ network: { ...DEFAULTS.network, driver: 'ovs' } }, /network\.driver 'ovs'.*known: host, memory/],
      [{ volumes: { driver: 'zfs' } }, /volumes\.driver 'zfs'.*known: ext4, memory/],
      [{ gateway: { ...DEFAULTS.gateway, driver: 'nginx' } }, /gateway\.driver 'nginx'.*known: haproxy, memory/],
      [{ volumes: { driver: 'toString' } }, /volumes\.driver 'toString' is not a known driver/],
    ] as const)
      assert.throws(() => checkDriverNames({ ...DEFAULTS, ...over } as Config), re);
  });

  test('machines, network and volumes are memory together or not at all; the data plane goes with either', () => {
    const mixed = /does not go with machines\.driver .*'memory' together or not at all/;
    assert.throws(
      () => checkDriverNames({ ...DEFAULTS, ...MEMORY, volumes: { driver: 'ext4' } }),
      /volumes\.driver 'ext4'/,
    );
    assert.throws(() => checkDriverNames({ ...DEFAULTS, ...MEMORY, network: DEFAULTS.network }), mixed);
    assert.throws(() => checkDriverNames({ ...DEFAULTS, volumes: { driver: 'memory' } }), mixed);
    checkDriverNames({ ...DEFAULTS, ...MEMORY, network: { ...DEFAULTS.network, enabled: false } });
    checkDriverNames({ ...DEFAULTS, ...MEMORY, gateway: DEFAULTS.gateway });
    checkDriverNames({ ...DEFAULTS, gateway: MEMORY.gateway });
    checkDriverNames(DEFAULTS);
  });

  test('a daemon with an unknown driver name does not start, and says which setting', async () => {
    await assert.rejects(
      startHarness({ ...MEMORY, volumes: { driver: 'zfs' } }, (s) => defaultControllers(s, log)),
      /volumes\.driver 'zfs' is not a known driver/,
    );
  });
});

/** The memory network with one switch: the rules refuse the taps of the next boots (as `nft` failing would). */
class RefusingNetwork extends MemoryNetwork {
  refuse = false;
  override async attachTap(spec: Parameters<MemoryNetwork['attachTap']>[0]): Promise<{ admitted: Promise<void> }> {
    const r = await super.attachTap(spec);
    return this.refuse ? { admitted: Promise.reject(new Error('nft: the rules refused it')) } : r;
  }
}

describe('the controllers over the memory drivers', () => {
  let h: Harness;
  let alice: string;
  let vms!: MemoryMachines;
  let plane!: MemoryDataPlane;
  const net = new RefusingNetwork(DEFAULTS.subnet);
  const images = new MemoryVolumes();
  const { ok } = replyAsserts('instances');
  const get = (id: string) => h.daemon.store.read((tx) => tx.instances.getAny(id));
  const state = (id: string, want: string) => h.until(async () => (await get(id))?.state === want);
  /** creates and starts an instance, waiting until it runs; the reply's entry */
  const boot = async (name: string, extra: Record<string, unknown>) =>
    ok(
      await h.call('POST', '/v1/instances', alice, {
        name,
        image: 'app:latest',
        autostart: true,
        wait_timeout_ms: 5000,
        ...extra,
      }),
    )[0];
  const SERVICE = { services: [{ port: 443, handlers: ['http', 'tls'] }] };

  before(async () => {
    h = await startHarness(MEMORY, (s) => {
      const drivers: Drivers = {
        machines: (onEvent) => (vms = new MemoryMachines(onEvent, () => s.clock.now())),
        network: net,
        volumes: images,
        dataPlane: (o) => (plane = new MemoryDataPlane(o, () => s.clock.now())),
      };
      return defaultControllers(s, log, drivers);
    });
    alice = await h.user('alice', true);
    const kernel = join(h.dataDir, 'kernel');
    writeFileSync(kernel, 'a kernel the memory machine driver never reads');
    await h.daemon.services.images.importKernel('app:latest', { kernel, machine: 'microvm', args: ['serve'] });
  });
  after(async () => h?.close());

  test('a volume is formatted, an instance boots with it, gets a tap and a route, answers, stops and goes', async () => {
    const v = ok(await h.call('POST', '/v1/volumes', alice, { name: 'data', size_mb: 8 }), 'volumes')[0];
    await h.until(async () => (await h.daemon.store.read((tx) => tx.volumes.getAny(v.uuid)))?.state === 'available');
    assert.equal(images.images.get(v.uuid), 8, 'formatted at its size');

    const m = await boot('web', { volumes: [{ uuid: v.uuid, at: '/data' }], service_group: SERVICE });
    assert.equal(m.state, 'running', 'create-with-wait answers once the memory VM is ready');
    const inst = (await get(m.uuid))!;
    assert.deepEqual(net.taps.get(tapName(inst.id)), {
      tap: tapName(inst.id),
      userId: inst.user_id,
      ip: inst.private_ip,
      mac: inst.mac,
    });
    assert.equal(vms.stats(inst.id), MEMORY_VM_STATS);

    const fqdn = (await h.daemon.store.read((tx) => tx.domains.forGroup(inst.service_group_id!)))[0]!.fqdn;
    // the gateway has applied what the feed told it (a sync queued by the change to running)
    await (h.daemon.controllers.find((c) => c instanceof GatewayController) as GatewayController).settled();
    const route = plane.table().find((r) => r.groupId === inst.service_group_id);
    assert.deepEqual(route && { port: route.port, fqdns: route.fqdns }, { port: 443, fqdns: [fqdn] });
    assert.deepEqual(await plane.request(fqdn, 443), { status: 200, instanceId: inst.id });
    assert.deepEqual(await plane.request('nobody.example', 443), { status: 404 });
    assert.equal(plane.counters().instances[inst.id]?.requests, 1);

    const logText = (await h.call('GET', '/v1/instances/log', alice, { uuid: inst.id })).body.data.instances[0].output;
    assert.match(Buffer.from(logText, 'base64').toString(), /memory VM: booting .* with 128 MB \(.*serve/);

    ok(await h.call('PUT', '/v1/instances/stop', alice, { uuid: inst.id }));
    await state(inst.id, 'stopped');
    const stopped = (await get(inst.id))!;
    assert.deepEqual([stopped.stop_reason, stopped.exit_code], [15, 0], 'a clean stop the user asked for');
    assert.deepEqual(await plane.request(fqdn, 443), { status: 503 }, 'no running instance, no scale-to-zero');

    ok(await h.call('DELETE', '/v1/instances', alice, { uuid: inst.id }));
    await h.until(async () => !net.taps.has(tapName(inst.id)));
    ok(await h.call('DELETE', '/v1/volumes', alice, { uuid: v.uuid }), 'volumes');
    await h.until(async () => !images.images.has(v.uuid));
  });

  test('a VM whose tap the rules do not admit (they are applied while it starts) is stopped, and its log says why', async () => {
    net.refuse = true;
    try {
      const r = await h.call('POST', '/v1/instances', alice, {
        name: 'unadmitted',
        image: 'app:latest',
        autostart: true,
      });
      const id = ok(r)[0].uuid as string;
      await state(id, 'stopped');
      assert.equal(vms.inspect(id).running, false, 'its VM is gone');
      const log = (await h.call('GET', '/v1/instances/log', alice, { uuid: id })).body.data.instances[0].output;
      assert.match(
        Buffer.from(log, 'base64').toString(),
        /the network rules did not admit its tap: nft: the rules refused it; stopping it/,
      );
    } finally {
      net.refuse = false;
    }
  });

  test('an application that fails is restarted by its policy; a crash is told apart from an exit', async () => {
    const flaky = (await boot('flaky', { restart_policy: 'on-failure' })).uuid as string;
    vms.exit(flaky, 3);
    await h.until(async () => (await get(flaky))?.start_count === 2 && (await get(flaky))?.state === 'running');
    assert.equal(vms.boots.get(flaky), 2);
    assert.equal((await get(flaky))?.restart_attempt, 1);

    const fragile = (await boot('fragile', { restart_policy: 'never' })).uuid as string;
    vms.crash(fragile);
    await state(fragile, 'stopped');
    const i = (await get(fragile))!;
    assert.equal(i.exit_code, null, 'a kernel crash has no exit code');
    assert.equal(i.stop_code! & 0xff, 4, 'the page fault is the cause');
  });

  test('scale to zero: the idle master goes to standby, and a request wakes it', async () => {
    const m = await boot('sleepy', { scale_to_zero: { policy: 'on', cooldown_time_ms: 1000 }, service_group: SERVICE });
    await h.until(async () => (await get(m.uuid))?.state === 'standby', 15_000);
    const inst = (await get(m.uuid))!;
    assert.equal(inst.stop_reason, 7, 'stopped by the platform, cleanly');
    const fqdn = (await h.daemon.store.read((tx) => tx.domains.forGroup(inst.service_group_id!)))[0]!.fqdn;
    assert.deepEqual(await plane.request(fqdn, 443), { status: 200, instanceId: inst.id });
    const woken = (await get(m.uuid))!;
    assert.equal(woken.start_count, 2, 'the same instance started again');
  });

  test('suspend: only a running instance; a driver without snapshots falls back to a plain standby, and a notice says so', async () => {
    const m = await boot('pausable', { service_group: SERVICE });
    const r = await h.call('PUT', '/v1/instances/suspend', alice, { uuid: m.uuid });
    assert.equal(r.body.data.instances[0].previous_state, 'running', r.text);
    await h.until(async () => (await get(m.uuid))?.state === 'standby', 15_000);
    const inst = (await get(m.uuid))!;
    assert.equal(inst.snapshot, null);
    assert.equal(inst.stop_reason, 15, 'stopped cleanly at the request of its user');
    const hist = ok(await h.call('GET', '/v1/instances/history', alice, { uuid: m.uuid }))[0].history as any[];
    const notices = hist.filter((e) => e.event === 'notice').map((e) => e.message);
    assert.equal(notices.length, 1, JSON.stringify(hist));
    assert.match(
      notices[0],
      /no memory snapshot: the 'memory' machine driver cannot take snapshots; the instance will boot afresh/,
    );

    // not running (standby, stopped): refused with the state, nothing changes
    const again = await h.call('PUT', '/v1/instances/suspend', alice, { uuid: m.uuid });
    assert.equal(again.body.status, 'error', again.text);
    assert.match(again.text, /instance 'pausable' is standby: only a running instance can be suspended/);
    const started = await h.call('PUT', '/v1/instances/start', alice, { uuid: m.uuid, wait_timeout_ms: 5000 });
    assert.equal(started.body.data.instances[0].state, 'running', started.text);
    assert.equal((await get(m.uuid))!.start_count, 2);
  });

  test('templates: bad requests refused in words, nothing made; without snapshots an instance is stopped, not a template', async () => {
    const refused = async (method: string, path: string, body: object, re: RegExp, code?: number) => {
      const r = await h.call(method, path, alice, body);
      assert.equal(r.body.status, 'error', r.text);
      assert.match(r.text, re);
      if (code !== undefined) assert.equal(r.body.data.instances[0].error, code, r.text);
    };
    const count = async () => (await h.daemon.store.read((tx) => tx.instances.all())).length;
    const before = await count();
    await refused('POST', '/v1/instances', { name: 'x' }, /give one of 'image' .*, 'template' .* or 'checkpoint'/);
    await refused(
      'POST',
      '/v1/instances',
      { image: 'app:latest', template: { name: 'golden' } },
      /give one of 'image'/,
    );
    await refused('POST', '/v1/instances', { template: {} }, /parameter 'template': 'uuid' or 'name' is required/);
    await refused(
      'POST',
      '/v1/instances',
      { template: { name: 'golden' }, args: ['x'] },
      /parameter 'args': an instance created from a template has the template's/,
    );
    await refused(
      'POST',
      '/v1/instances',
      { template: { name: 'golden', prepare: true } },
      /'template.prepare': making a template at create time is not supported/,
    );
    await refused('POST', '/v1/instances', { template: { name: 'golden' } }, /No template instance with name 'golden'/);
    const plain = await boot('plain', {});
    await refused('POST', '/v1/instances', { template: { uuid: plain.uuid } }, /No template instance with UUID/);
    assert.equal(await count(), before + 1, 'nothing half-made');

    // not running: code 11 with the state; a volume: refused with what to do
    ok(await h.call('PUT', '/v1/instances/stop', alice, { uuid: plain.uuid }));
    await state(plain.uuid, 'stopped');
    await refused(
      'POST',
      '/v1/instances/templates',
      { uuid: plain.uuid },
      /'plain' is stopped: a template is made from a running instance/,
      11,
    );
    const v = ok(await h.call('POST', '/v1/volumes', alice, { name: 'tv', size_mb: 8 }), 'volumes')[0];
    await h.until(async () => (await h.daemon.store.read((tx) => tx.volumes.getAny(v.uuid)))?.state === 'available');
    const withVol = await boot('with-vol', { volumes: [{ uuid: v.uuid, at: '/data' }] });
    await refused(
      'POST',
      '/v1/instances/templates',
      { uuid: withVol.uuid },
      /cannot become a template: it has volume 'tv' attached/,
    );
    assert.equal((await get(withVol.uuid))!.state, 'running', 'left as it was');

    // the memory driver takes no snapshots: the instance stops, with a notice, and the wait says so
    const golden = await boot('golden', {});
    const r = await h.call('POST', '/v1/instances/templates', alice, { uuid: golden.uuid, timeout_s: 5 });
    assert.equal(r.body.status, 'error', r.text);
    assert.match(r.text, /'golden' stopped instead of becoming a template: no memory snapshot could be taken/);
    const g = (await h.call('GET', '/v1/instances', alice, { name: 'golden' })).body.data.instances[0];
    assert.equal(g.state, 'stopped');
    const hist = ok(await h.call('GET', '/v1/instances/history', alice, { name: 'golden' }))[0].history as any[];
    assert.match(
      hist
        .filter((e) => e.event === 'notice')
        .map((e) => e.message)
        .join('\n'),
      /no memory snapshot: the 'memory' machine driver cannot take snapshots; the instance did not become a template; it is stopped/,
    );
    const listed = await h.call('GET', '/v1/instances/templates', alice);
    assert.deepEqual(listed.body.data.instances, [], listed.text);

    // checkpoints: of a running instance only; without snapshots none is kept, the instance runs on with a notice
    await refused(
      'POST',
      '/v1/instances/checkpoints',
      { from: { uuid: plain.uuid } },
      /'plain' is stopped: a checkpoint is taken of a running instance/,
    );
    await refused('POST', '/v1/instances', { branch_from: { name: 'with-vol' } }, /give one of 'image'/);
    await refused(
      'POST',
      '/v1/instances',
      { image: 'app:latest', branch_from: { name: 'with-vol' } },
      /'branch_from': not supported; take a checkpoint/,
    );
    const live = await boot('live', {});
    const ck = await h.call('POST', '/v1/instances/checkpoints', alice, { from: { name: 'live' }, timeout_s: 5 });
    assert.equal(ck.body.status, 'error', ck.text);
    assert.match(ck.text, /checkpoint 'live-ckpt-[a-z0-9]{5}' could not be taken/);
    assert.equal((await get(live.uuid))!.state, 'running');
    const liveHist = ok(await h.call('GET', '/v1/instances/history', alice, { name: 'live' }))[0].history as any[];
    assert.match(
      liveHist
        .filter((e) => e.event === 'notice')
        .map((e) => e.message)
        .join('\n'),
      /checkpoint 'live-ckpt-[a-z0-9]{5}' was not taken: the 'memory' machine driver cannot take snapshots/,
    );
    assert.deepEqual((await h.call('GET', '/v1/instances/checkpoints', alice)).body.data.instances, []);
    ok(await h.call('DELETE', '/v1/instances', alice, { uuid: live.uuid }));
    for (const id of [plain.uuid, withVol.uuid, g.uuid])
      ok(await h.call('DELETE', '/v1/instances', alice, { uuid: id }));
    await h.until(async () => (await h.daemon.store.read((tx) => tx.volumes.getAny(v.uuid)))?.instance_id === null);
    ok(await h.call('DELETE', '/v1/volumes', alice, { uuid: v.uuid }), 'volumes');
  });

  test('a backup hold pauses the VM that has the volume and holds back boots that attach it, until the caller lets go', async () => {
    const sock = controlSocketPath(h.dataDir);
    const volume = async (name: string) => {
      const v = ok(await h.call('POST', '/v1/volumes', alice, { name, size_mb: 8 }), 'volumes')[0];
      await h.until(async () => (await h.daemon.store.read((tx) => tx.volumes.getAny(v.uuid)))?.state === 'available');
      return v.uuid as string;
    };
    const inUse = await volume('in-use');
    const m = await boot('holder', { volumes: [{ uuid: inUse, at: '/data' }] });
    const held = await holdVolume(sock, inUse);
    assert.deepEqual(held?.paused, [m.uuid], 'the VM with the volume open');
    assert.ok(vms.paused(m.uuid));

    const spare = await volume('spare');
    const held2 = (await holdVolume(sock, spare))!;
    assert.deepEqual(held2.paused, [], 'no VM has it');
    const w = ok(
      await h.call('POST', '/v1/instances', alice, {
        name: 'waiter',
        image: 'app:latest',
        volumes: [{ uuid: spare, at: '/d' }],
        autostart: true,
      }),
    )[0];
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(vms.boots.get(w.uuid), undefined, 'the boot waits while its volume is copied');
    assert.equal((await get(w.uuid))?.state, 'starting');

    // the caller goes (a backup that ends, or dies): both run on
    held.release();
    held2.release();
    await h.until(async () => !vms.paused(m.uuid));
    await state(w.uuid, 'running');
    assert.equal((await get(m.uuid))?.state, 'running', 'paused and resumed, not restarted');
    assert.equal(vms.boots.get(m.uuid), 1);

    await assert.rejects(holdVolume(sock, randomUUID()), /the daemon cannot hold volume .*: no volume/);
    for (const id of [m.uuid, w.uuid]) ok(await h.call('DELETE', '/v1/instances', alice, { uuid: id }));
  });
});
