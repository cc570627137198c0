/**
 * The official JS SDK (`@unikraft/cloud`, pinned in devDependencies) drives a
 * real daemon unchanged, as a new user would: every call it offers, but the
 * control plane's provisioning. Any SDK error fails the test. Machines are
 * simulated (the SDK sees the API only), volumes are real ext4 files; test/vm/sdk-boot.test.ts boots a
 * real guest through it.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { UnikraftCloud, collect } from '@unikraft/cloud';
import { startHarness, type Harness } from '../helpers/harness.js';
import { SIM_STATS, simMachines } from '../helpers/sim-machines.js';
import { FiguresPublisher, LocalFigures } from '../../src/reconcile/figures.js';
import { hostFigures } from '../../src/services/capacity.js';
import { VolumeController } from '../../src/reconcile/volumes.js';
import { Ext4Volumes } from '../../src/volumes/ext4.js';

let h: Harness;
let ukc: UnikraftCloud;
let userId: string;
let sdkToken: string;

before(async () => {
  // the agent's figures publisher too: GET /v1/nodes shows what it publishes of its host
  // volumes are real: ext4 image files (resize and clone run e2fsck, resize2fs, cp --reflink)
  h = await startHarness({}, (s) => [
    simMachines(s, { volumes: false }),
    new VolumeController(s, { info: () => {}, warn: () => {}, error: () => {} }, new Ext4Volumes(s.paths.volumes)),
    new FiguresPublisher(
      s,
      new LocalFigures({ host: (at) => hostFigures(s.config.capacity, s.hostId, at) }),
      'sdk-test',
      { warn: () => {} },
    ),
  ]);
  const token = await h.user('sdk');
  sdkToken = token;
  userId = (await h.daemon.store.read((tx) => tx.users.getByName('sdk')))!.id;
  await h.image('app:latest');
  // A metro that is an http:// URL is used as is (compat-notes.md); no proxy from the environment.
  ukc = new UnikraftCloud({ token, metro: h.url, proxyFromEnv: false });
});
after(async () => h.close());

/** The raw ("plumbing") client: envelopes as the API sends them. */
const raw = () => ukc.api.platform;

describe('instances', () => {
  test('create with timeout_s, get, list (paged), wait, logs, metrics, stop, start, delete', async () => {
    const made = await ukc.instances.create({ image: 'app:latest', name: 'web', autostart: true, timeout_s: 5 });
    assert.equal(made.state, 'running');
    for (const n of ['b1', 'b2']) await ukc.instances.create({ image: 'app:latest', name: n });

    const got = await ukc.instances.get({ name: 'web' });
    assert.equal(got.uuid, made.uuid);
    assert.equal(got.state, 'running');
    const refreshed = await ukc.instances.get({ uuid: made.uuid }).refresh();
    assert.equal(refreshed.name, 'web');

    // a page size of 2 makes the SDK follow `from` across pages
    const all = await collect(ukc.instances.list({ pageSize: 2 }));
    assert.deepEqual(all.map((i) => i.name).sort(), ['b1', 'b2', 'web']);
    const brief = await collect(ukc.instances.list({ details: false }));
    assert.equal(brief.length, 3);

    const waited = await ukc.instances.wait({ name: 'web' }, { state: 'running', timeoutSeconds: 5 });
    assert.equal(waited.uuid, made.uuid);
    const logs = await ukc.instances.logs({ name: 'web' }, { offset: 0, limit: 100 });
    assert.equal(logs.uuid, made.uuid);
    const m = await ukc.instances.metrics({ name: 'web' });
    assert.equal(m.rss_bytes, SIM_STATS.rssBytes);
    assert.equal(m.cpu_time_ms, SIM_STATS.cpuMs);

    const stopped = await ukc.instances.stop({ name: 'web' });
    assert.equal(stopped[0]?.uuid, made.uuid);
    await ukc.instances.get({ name: 'web' }).wait({ state: 'stopped', timeoutSeconds: 5 });
    const started = await ukc.instances.start([{ name: 'web' }, { name: 'b1' }]);
    assert.equal(started.length, 2);
    await ukc.instances.each({ name: 'web' }).wait({ state: 'running', timeoutSeconds: 5 });
    const handle = ukc.instances.get({ name: 'b2' });
    await handle.start();
    await ukc.instances.get({ name: 'b2' }).stop();
    await ukc.instances.get({ name: 'b2' }).logs();
    await ukc.instances.get({ name: 'b2' }).metrics();

    const deleted = await ukc.instances.delete([{ name: 'web' }, { name: 'b1' }]);
    assert.equal(deleted.length, 2);
    await ukc.instances.get({ name: 'b2' }).delete();
    assert.deepEqual(await collect(ukc.instances.list()), []);
  });

  test('the raw by-UUID forms', async () => {
    const i = await ukc.instances.create({ image: 'app:latest', name: 'rawi' });
    const api = raw().instances;
    assert.equal((await api.getInstanceByUuid(i.uuid, { details: true })).data?.instances?.[0]?.name, 'rawi');
    await api.startInstanceByUuid(i.uuid, { body: {} });
    await api.waitInstanceByUuid(i.uuid);
    const metrics = await api.getInstanceMetricsByUuid(i.uuid);
    assert.equal(metrics.data?.instances?.[0]?.uuid, i.uuid);
    await api.getInstanceLogsByUuid(i.uuid);
    await api.stopInstanceByUuid(i.uuid, { body: {} });
    await api.deleteInstanceByUuid(i.uuid);
  });

  test('suspend: the handle, the plural call and the raw by-UUID form; start resumes', async () => {
    const i = await ukc.instances.create({ image: 'app:latest', name: 'napper', autostart: true, timeout_s: 5 });
    const until = async (state: string) => {
      for (let n = 0; n < 100 && (await ukc.instances.get({ uuid: i.uuid }).refresh()).state !== state; n++)
        await new Promise((r) => setTimeout(r, 20));
      assert.equal((await ukc.instances.get({ uuid: i.uuid }).refresh()).state, state);
    };
    await until('running');
    const s = await ukc.instances.get({ name: 'napper' }).suspend();
    assert.equal(s.previous_state, 'running');
    await until('standby');
    await ukc.instances.get({ name: 'napper' }).start();
    await until('running');
    const [p] = await ukc.instances.suspend([{ uuid: i.uuid }]);
    assert.equal(p!.uuid, i.uuid);
    await until('standby');
    await ukc.instances.get({ name: 'napper' }).start();
    await until('running');
    await raw().instances.suspendInstanceByUuid(i.uuid, { body: { drain_timeout_ms: 0 } });
    await until('standby');
    await ukc.instances.get({ name: 'napper' }).delete();
  });

  test('instance templates (raw client): make, list, get, update, create from one, delete', async () => {
    const golden = await ukc.instances.create({ image: 'app:latest', name: 'golden', autostart: true, timeout_s: 5 });
    const made = await raw().instances.createTemplateInstances({ body: [{ name: 'golden', timeout_s: 5 }] });
    assert.equal(made.data?.instances?.[0]?.state, 'template');
    // a suspended instance (its memory already in a snapshot) becomes a template at once
    const dozer = await ukc.instances.create({ image: 'app:latest', name: 'dozer', autostart: true, timeout_s: 5 });
    await ukc.instances.get({ uuid: dozer.uuid }).suspend();
    for (let n = 0; n < 100 && (await ukc.instances.get({ uuid: dozer.uuid }).refresh()).state !== 'standby'; n++)
      await new Promise((r) => setTimeout(r, 20));
    const direct = await raw().instances.createTemplateInstances({ body: [{ uuid: dozer.uuid }] });
    assert.equal(direct.data?.instances?.[0]?.state, 'template');
    const asTemplate = (await h.call('GET', '/v1/instances', sdkToken, { uuid: dozer.uuid })).body.data.instances[0];
    assert.deepEqual([asTemplate.state, asTemplate.snapshot.reason], ['template', 'template']);
    await raw().instances.deleteTemplateInstanceByUuid(dozer.uuid);
    const listed = await raw().instances.getTemplateInstances();
    assert.deepEqual(
      listed.data?.instances?.map((i) => i.name),
      ['golden'],
    );
    const one = await raw().instances.getTemplateInstanceByUuid(golden.uuid);
    assert.equal(one.data?.instances?.[0]?.state, 'template');
    await raw().instances.updateTemplateInstances({
      body: [{ name: 'golden', prop: 'tags', op: 'set', value: ['v1'] }],
    });
    await raw().instances.updateTemplateInstanceByUuid(golden.uuid, {
      body: { prop: 'delete_lock', op: 'set', value: true },
    });
    assert.deepEqual((await ukc.instances.get({ uuid: golden.uuid }).refresh()).tags, ['v1']);
    // what boots is the template's memory: it does not change, and a template neither starts nor stops
    const grow = await raw().instances.updateInstances({
      body: [{ uuid: golden.uuid, prop: 'memory_mb', op: 'set', value: 256 }],
    });
    assert.match(grow.message ?? '', /'golden' is a template: only tags, annotations and delete_lock change/);
    const stop = await raw().instances.stopInstances({ body: [{ uuid: golden.uuid }] });
    assert.match(stop.message ?? '', /'golden' is a template and is never stopped/);

    // another user's template is not there for anyone else (as a missing one)
    const eve = await h.user('eve');
    const foreign = await h.call('POST', '/v1/instances', eve, { template: { uuid: golden.uuid }, autostart: true });
    assert.match(foreign.text, /No template instance with UUID '[0-9a-f-]{36}'/);
    const copy = await ukc.instances.create({
      name: 'copy',
      template: { name: 'golden' },
      autostart: true,
      timeout_s: 5,
    });
    const c = await ukc.instances.get({ uuid: copy.uuid }).refresh();
    assert.equal(c.state, 'running');
    assert.equal(c.image, (await ukc.instances.get({ uuid: golden.uuid }).refresh()).image);
    assert.notEqual(c.private_ip, undefined);

    // the raw client hands back the envelope of a refusal
    const locked = await raw().instances.deleteTemplateInstanceByUuid(golden.uuid);
    assert.equal(locked.status, 'error');
    assert.match(locked.message ?? '', /'golden' has delete_lock set/);
    await raw().instances.updateTemplateInstances({
      body: [{ uuid: golden.uuid, prop: 'delete_lock', op: 'set', value: false }],
    });
    await raw().instances.deleteTemplateInstances({ body: [{ uuid: golden.uuid }] });
    assert.deepEqual((await raw().instances.getTemplateInstances()).data?.instances ?? [], []);
    await ukc.instances.get({ name: 'copy' }).delete();
  });

  test('checkpoints (raw client): take, list, get, update, history, create from one, delete', async () => {
    const src = await ukc.instances.create({ image: 'app:latest', name: 'busy', autostart: true, timeout_s: 5 });
    const made = await raw().instances.createCheckpointInstances({
      body: [{ from: { name: 'busy' }, name: 'busy-1', tags: ['nightly'], timeout_s: 5 }],
    });
    assert.equal(made.status, 'success', JSON.stringify(made));
    const ck = made.data!.instances![0]!;
    assert.deepEqual([ck.name, ck.state], ['busy-1', 'checkpoint']);
    await raw().instances.createCheckpointInstances({ body: [{ from: { uuid: src.uuid }, timeout_s: 5 }] });
    const listed = await raw().instances.getCheckpointInstances();
    assert.equal(listed.data?.instances?.length, 2);
    const one = await raw().instances.getCheckpointInstanceByUuid(ck.uuid);
    assert.deepEqual(one.data?.instances?.[0]?.tags, ['nightly']);
    assert.equal(
      (await ukc.instances.get({ uuid: src.uuid }).refresh()).state,
      'running',
      'the instance runs on after a checkpoint',
    );
    const hist = await raw().instances.getCheckpointHistory({ uuid: [src.uuid] });
    const entries = hist.data?.instances?.[0]?.history ?? [];
    assert.equal(entries.length, 2);
    assert.equal(entries[0]!.name, 'busy-1');
    const byUuid = await raw().instances.getCheckpointHistoryByUuid(src.uuid);
    assert.deepEqual(byUuid.data?.instances?.[0]?.history, entries);
    await raw().instances.updateCheckpointInstances({
      body: [{ name: 'busy-1', prop: 'tags', op: 'add', value: ['kept'] }],
    });
    await raw().instances.updateCheckpointInstanceByUuid(ck.uuid, {
      body: { prop: 'delete_lock', op: 'set', value: true },
    });

    const copy = await ukc.instances.create({
      name: 'from-ck',
      checkpoint: { name: 'busy-1' },
      autostart: true,
      timeout_s: 5,
    });
    assert.equal((await ukc.instances.get({ uuid: copy.uuid }).refresh()).state, 'running');

    const locked = await raw().instances.deleteCheckpointInstanceByUuid(ck.uuid);
    assert.match(locked.message ?? '', /'busy-1' has delete_lock set/);
    await raw().instances.updateCheckpointInstances({
      body: [{ uuid: ck.uuid, prop: 'delete_lock', op: 'set', value: false }],
    });
    await raw().instances.deleteCheckpointInstances({ body: [{ uuid: ck.uuid }] });
    const left = (await raw().instances.getCheckpointInstances()).data?.instances ?? [];
    for (const c of left) await raw().instances.deleteCheckpointInstanceByUuid(c.uuid!);
    assert.deepEqual(
      (await raw().instances.getCheckpointHistory({ uuid: [src.uuid] })).data?.instances?.[0]?.history,
      [],
    );
    for (const n of ['from-ck', 'busy']) await ukc.instances.get({ name: n }).delete();
  });

  test('an unknown instance is a 404 UnikraftCloudError, not a crash', async () => {
    await assert.rejects(
      async () => void (await ukc.instances.get({ name: 'nope' }).refresh()),
      (e: Error & { status?: number }) => {
        assert.equal(e.name, 'UnikraftCloudError');
        assert.equal(e.status, 404);
        return true;
      },
    );
  });
});

describe('service groups, certificates and autoscale', () => {
  test('create, get, list (paged), delete; the certificate a domain made', async () => {
    const g = await ukc.services.create({
      name: 'shop',
      services: [{ port: 443, handlers: ['http', 'tls'] }],
      domains: [{ name: 'shop.example.com.' }],
    });
    await ukc.services.create({ name: 'other', services: [{ port: 443, handlers: ['http', 'tls'] }] });
    const got = await ukc.services.get({ name: 'shop' });
    assert.equal(got.uuid, g.uuid);
    assert.equal((await ukc.services.get({ uuid: g.uuid }).refresh()).name, 'shop');
    const groups = await collect(ukc.services.list({ pageSize: 1 }));
    assert.deepEqual(groups.map((x) => x.name).sort(), ['other', 'shop']);
    await collect(ukc.services.list({ details: true }));

    const certs = await collect(ukc.certificates.list({ details: true }));
    assert.equal(certs.length, 1);
    const cert = certs[0]!;
    assert.equal((await ukc.certificates.get({ uuid: cert.uuid })).name, cert.name);
    assert.equal((await ukc.certificates.get({ name: cert.name! })).uuid, cert.uuid);
    await collect(ukc.certificates.list({ pageSize: 1 }));
    await raw().certificates.getCertificateByUuid(cert.uuid);
    assert.equal((await raw().services.getServiceGroupByUuid(g.uuid, { details: true })).status, 'success');

    await ukc.services.get({ name: 'other' }).delete();
    await ukc.services.delete([{ name: 'shop' }]); // the group, then its now unused certificate
    await ukc.certificates.get({ uuid: cert.uuid }).delete();
    assert.deepEqual(await collect(ukc.services.list()), []);
    assert.deepEqual(await collect(ukc.certificates.list()), []);
  });

  test('autoscale configurations and policies through the raw client', async () => {
    await ukc.services.create({ name: 'scaled', services: [{ port: 443, handlers: ['http', 'tls'] }] });
    const g = await ukc.services.get({ name: 'scaled' });
    await ukc.instances.create({ image: 'app:latest', name: 'master', service_group: { name: 'scaled' } });
    const as = raw().autoscale;
    // api-v1.md's body (`master`); the SDK's types describe a newer revision (`create_args`), its client sends as given
    await as.createAutoscaleConfigurations({
      body: [{ name: 'scaled', master: { name: 'master' }, min_size: 1, max_size: 3 }],
    } as never);
    const cfg = await as.getAutoscaleConfigurations({ uuid: [g.uuid] });
    assert.equal(cfg.data?.service_groups?.[0]?.max_size, 3);
    await as.getAutoscaleConfigurationsByServiceGroupUuid(g.uuid);
    const policy = { name: 'up', type: 'step', metric: 'cpu', steps: [{ lower_bound: 800, adjustment: 1 }] };
    await as.createAutoscaleConfigurationPolicy(g.uuid, { body: policy } as never);
    const ps = await as.getAutoscaleConfigurationPolicies(g.uuid);
    assert.equal((ps.data?.policies?.[0] as unknown as { name: string }).name, 'up');
    await as.getAutoscaleConfigurationPolicyByName(g.uuid, 'up');
    await as.deleteAutoscaleConfigurationPolicyByName(g.uuid, 'up');
    await as.createAutoscaleConfigurationPolicy(g.uuid, { body: { ...policy, name: 'up2' } } as never);
    await as.deleteAutoscaleConfigurationPolicies(g.uuid, { body: { name: 'up2' } } as never);
    await as.deleteAutoscaleConfigurationsByServiceGroupUuid(g.uuid);
    await as.createAutoscaleConfigurationByServiceGroupUuid(g.uuid, { body: { master: { name: 'master' } } } as never);
    await as.deleteAutoscaleConfigurations({ body: [{ uuid: g.uuid }] } as never);
    await ukc.instances.delete([{ name: 'master' }]);
    await ukc.services.delete([{ name: 'scaled' }]);
  });
});

describe('volumes', () => {
  test('create, get, list (paged), attach, detach, delete', async () => {
    const v = await ukc.volumes.create({ name: 'data', size_mb: 4 });
    await ukc.volumes.create({ name: 'data2', size_mb: 4 });
    await h.until(async () => (await ukc.volumes.get({ name: 'data' }).refresh()).state === 'available');
    const got = await ukc.volumes.get({ uuid: v.uuid });
    assert.equal(got.name, 'data');
    const vols = await collect(ukc.volumes.list({ pageSize: 1 }));
    assert.deepEqual(vols.map((x) => x.name).sort(), ['data', 'data2']);
    assert.equal((await collect(ukc.volumes.list({ details: false }))).length, 2);
    await raw().volumes.getVolumeByUuid(v.uuid, { details: true });

    await ukc.instances.create({ image: 'app:latest', name: 'holder' });
    await ukc.volumes.get({ name: 'data' }).attach({ attach_to: { name: 'holder' }, at: '/data' } as never);
    assert.equal((await ukc.volumes.get({ name: 'data' }).refresh()).attached_to?.[0]?.uuid !== undefined, true);
    await ukc.volumes.detach({ name: 'data' });
    await ukc.instances.delete([{ name: 'holder' }]);
    await ukc.volumes.delete([{ name: 'data' }, { name: 'data2' }]);
    assert.deepEqual(await collect(ukc.volumes.list()), []);
  });
});

describe('images, quotas, health', () => {
  test('image list, quotas (own and by UUID), healthz', async () => {
    const imgs = await raw().images.getImages({ tag: 'app:latest' } as never);
    assert.ok(imgs.data?.images?.some((i) => (i.tags ?? []).includes('app:latest')));
    const q = await ukc.users.quotas();
    assert.equal(q[0]?.uuid, userId);
    const q2 = await ukc.users.quotasByUuid(userId);
    assert.equal(q2[0]?.uuid, userId);
    assert.equal((await raw().node.healthz()).status, 'success');
  });
});

/** A raw call's envelope, which must say success (the raw client does not throw on an entry's error). */
async function ok<R extends { status?: string }>(p: Promise<R>): Promise<R> {
  const r = await p;
  assert.equal(r.status, 'success', JSON.stringify(r));
  return r;
}

/**
 * Rejects with the SDK's error, whose message names the problem; `status`:
 * the HTTP status of a whole-request error (an entry's error in a batch
 * answer has none).
 */
async function refused(p: PromiseLike<unknown>, message: RegExp, status?: number): Promise<void> {
  await assert.rejects(
    async () => void (await p),
    (e: Error & { status?: number }) => {
      assert.equal(e.name, 'UnikraftCloudError');
      assert.match(e.message, message);
      if (status !== undefined) assert.equal(e.status, status, e.message);
      return true;
    },
  );
}

describe('the newer API: updates, history, limits, volume features, create_args, nodes, image store', () => {
  test('instance updates: offline properties while stopped, labels at any time, delete_lock, edit()', async () => {
    const i = await ukc.instances.create({ image: 'app:latest', name: 'upd' });
    await ukc.instances.update({ name: 'upd' }, { memory_mb: 256, env: { MODE: 'fast' }, args: ['--port', '8080'] });
    await ukc.instances.update({ uuid: i.uuid }, { tags: ['blue'], delete_lock: true });
    let got = await ukc.instances.get({ name: 'upd' }).refresh();
    assert.equal(got.memory_mb, 256);
    assert.deepEqual(got.env, { MODE: 'fast' });
    assert.deepEqual(got.args, ['--port', '8080']);
    assert.deepEqual((got as unknown as { tags: string[] }).tags, ['blue']);
    assert.equal((got as unknown as { delete_lock: boolean }).delete_lock, true);
    await refused(ukc.instances.delete([{ name: 'upd' }]), /delete_lock/);

    await ukc.instances
      .get({ name: 'upd' })
      .edit()
      .add({ tags: ['prod'] })
      .del({ tags: ['blue'] })
      .apply();
    got = await ukc.instances.get({ name: 'upd' }).refresh();
    assert.deepEqual((got as unknown as { tags: string[] }).tags, ['prod']);

    await ukc.instances.start([{ name: 'upd' }]);
    await ukc.instances.get({ name: 'upd' }).wait({ state: 'running', timeoutSeconds: 5 });
    // what boots needs a stop; the answer says so and nothing changes
    await refused(ukc.instances.update({ name: 'upd' }, { memory_mb: 512 }), /memory_mb.*stopped/);
    assert.equal((await ukc.instances.get({ name: 'upd' }).refresh()).memory_mb, 256);
    await refused(
      ukc.instances.update({ name: 'upd' }, { autokill: { min_requests: 1 } } as never),
      /autokill.*not supported/,
    );
    await ok(
      raw().instances.updateInstanceByUuid(i.uuid, {
        body: { prop: 'delete_lock', op: 'set', value: false },
      } as never),
    );
    await ukc.instances.stop({ name: 'upd' });
    await ukc.instances.get({ name: 'upd' }).wait({ state: 'stopped', timeoutSeconds: 5 });

    // the history: created, then each state change with the stop's fields
    const hist = await ukc.instances.history({ name: 'upd' });
    assert.equal(hist.length, 1);
    const entries = hist[0]!.history as unknown as {
      event: string;
      to_state?: string;
      stop_reason?: number;
      name: string;
    }[];
    assert.equal(entries[0]!.event, 'created');
    assert.deepEqual(
      entries.filter((e) => e.event === 'state').map((e) => e.to_state),
      ['starting', 'running', 'stopping', 'stopped'],
    );
    assert.equal(entries.at(-1)!.stop_reason, 15);
    assert.ok(entries.every((e) => e.name === 'upd'));
    const byUuid = await ok(raw().instances.getInstanceHistoryByUuid(i.uuid));
    assert.equal(byUuid.data?.instances?.[0]?.history?.length, entries.length);
    await ukc.instances.delete([{ name: 'upd' }]);
  });

  test('service group soft and hard limits: set at creation and by update, soft above hard refused', async () => {
    const g = await ukc.services.create({
      name: 'lim',
      services: [{ port: 443, handlers: ['http', 'tls'] }],
      soft_limit: 5,
      hard_limit: 10,
    } as never);
    assert.equal((await ukc.services.get({ uuid: g.uuid }).refresh()).hard_limit, 10);
    await ukc.services.update({ name: 'lim' }, { soft_limit: 8 });
    await refused(
      ukc.services.update({ name: 'lim' }, { soft_limit: 11 }),
      /soft_limit 11 would be above hard_limit 10/,
    );
    const now = await ukc.services.get({ name: 'lim' }).refresh();
    assert.equal(now.soft_limit, 8, 'the refused update changed nothing');
    await ukc.services.update({ name: 'lim' }, { hard_limit: null } as never);
    assert.equal((await ukc.services.get({ name: 'lim' }).refresh()).hard_limit, undefined);
    await ukc.services.delete([{ name: 'lim' }]);
  });

  test('volume size, tags, clones and templates', async () => {
    const v = await ukc.volumes.create({ name: 'src', size_mb: 8, tags: ['db'] } as never);
    await h.until(async () => (await ukc.volumes.get({ name: 'src' }).refresh()).state === 'available');
    await ukc.volumes.update({ name: 'src' }, { size_mb: 16 });
    await h.until(async () => (await ukc.volumes.get({ name: 'src' }).refresh()).state === 'available');
    assert.equal((await ukc.volumes.get({ uuid: v.uuid }).refresh()).size_mb, 16);
    await refused(ukc.volumes.update({ name: 'src' }, { quota_policy: 'dynamic' } as never), /quota_policy/);

    const vols = raw().volumes;
    await ok(vols.cloneVolumes({ body: [{ name: 'src', vol_name: 'copy' }] }));
    await ok(vols.cloneVolumeByUuid(v.uuid, { body: { vol_name: 'copy2' } }));
    // each clone is copied on its own: either may be the last one ready (CI on PostgreSQL: 'copy' was not)
    for (const name of ['copy', 'copy2'])
      await h.until(async () => (await ukc.volumes.get({ name }).refresh()).state === 'available');
    assert.equal((await ukc.volumes.get({ name: 'copy' }).refresh()).size_mb, 16);

    await ok(vols.createTemplateVolume({ body: [{ name: 'copy' }] }));
    const templates = await ok(vols.getTemplateVolumes());
    assert.deepEqual(
      templates.data?.volumes?.map((x) => x.name),
      ['copy'],
    );
    const tpl = templates.data!.volumes![0]!;
    await ok(vols.getTemplateVolumeByUuid(tpl.uuid!));
    await ok(
      vols.updateTemplateVolumes({ body: [{ name: 'copy', prop: 'tags', op: 'set', value: ['golden'] }] } as never),
    );
    // volumes made from the template; the list of volumes leaves templates out
    await ukc.volumes.create({ name: 'fromtpl', template: { name: 'copy' } } as never);
    await h.until(async () => (await ukc.volumes.get({ name: 'fromtpl' }).refresh()).state === 'available');
    assert.deepEqual((await collect(ukc.volumes.list())).map((x) => x.name).sort(), ['copy2', 'fromtpl', 'src']);
    await refused(
      ukc.volumes.create({ name: 'hp', size_mb: 4, host_path: '/etc' } as never),
      /host_path.*not supported/,
    );
    await ok(vols.deleteTemplateVolumes({ body: [{ name: 'copy' }] }));
    await ukc.volumes.delete([{ name: 'src' }, { name: 'copy2' }, { name: 'fromtpl' }]);
  });

  test('certificate replacement keeps the certificate and its domains', async () => {
    const { testCa, testLeaf } = await import('../helpers/certs.js');
    const ca = await testCa();
    const a = await testLeaf(ca, ['shop.example.org']);
    const cert = await ukc.certificates.create({
      name: 'shop-cert',
      cn: 'shop.example.org',
      chain: a.cert,
      pkey: a.key,
    } as never);
    const b = await testLeaf(ca, ['shop.example.org']);
    await ukc.certificates.update({ uuid: cert.uuid }, { chain: b.cert, pkey: b.key });
    const after = await ukc.certificates.get({ uuid: cert.uuid }).refresh();
    assert.equal((after as unknown as { serial_number: string }).serial_number.toLowerCase(), b.serial.toLowerCase());
    const other = await testLeaf(ca, ['elsewhere.example.org']);
    await refused(
      ukc.certificates.update({ uuid: cert.uuid }, { chain: other.cert, pkey: other.key }),
      /shop\.example\.org/,
    );
    await ok(raw().certificates.updateCertificateByUuid(cert.uuid, { body: { chain: a.cert, pkey: a.key } } as never));
    await ukc.certificates.delete([{ uuid: cert.uuid }]);
  });

  test('autoscale with create_args and no master; a policy in the SDK’s typed form', async () => {
    const g = await ukc.services.create({ name: 'auto', services: [{ port: 443, handlers: ['http', 'tls'] }] });
    await ukc.instances.create({ image: 'app:latest', name: 'model', memory_mb: 192 });
    const as = raw().autoscale;
    await ok(
      as.createAutoscaleConfigurationByServiceGroupUuid(g.uuid, {
        body: { create_args: { template: { name: 'model' } }, min_size: 1, max_size: 2 },
      } as never),
    );
    const cfg = (await ok(as.getAutoscaleConfigurationsByServiceGroupUuid(g.uuid))).data
      ?.service_groups?.[0] as unknown as {
      master: { uuid: string; name: string };
    };
    const master = await ukc.instances.get({ uuid: cfg.master.uuid }).refresh();
    assert.equal(master.memory_mb, 192, 'the master copies its template');
    assert.equal(master.service_group?.uuid, g.uuid);
    await ukc.instances.get({ uuid: master.uuid }).wait({ state: 'running', timeoutSeconds: 5 });
    await ok(
      as.createAutoscaleConfigurationPolicy(g.uuid, {
        body: {
          name: 'typed',
          type: {
            name: 'typed',
            metric: 'cpu',
            adjustment_type: 'change',
            steps: [{ lower_bound: 500, adjustment: 1 }],
          },
        },
      } as never),
    );
    const ps = (await ok(as.getAutoscaleConfigurationPolicyByName(g.uuid, 'typed'))).data?.policies?.[0] as unknown as {
      steps: unknown[];
    };
    assert.equal(ps.steps.length, 1);
    await refused(
      as.createAutoscaleConfigurationByServiceGroupUuid(g.uuid, { body: { create_args: { roms: [] } } } as never),
      /roms.*not supported/,
    );
    await ok(as.deleteAutoscaleConfigurationsByServiceGroupUuid(g.uuid));
    await ukc.instances.delete([{ uuid: master.uuid }, { name: 'model' }]);
    await ukc.services.delete([{ name: 'auto' }]);
  });

  test('nodes (developer accounts) and the image store', async () => {
    const dev = new UnikraftCloud({
      token: await h.user('sdk-operator', true),
      metro: h.url,
      controlPlaneUrl: h.url,
      proxyFromEnv: false,
    });
    const nodes = await dev.api.controlplane.nodes.listNodes();
    assert.equal(nodes.data?.total_count, 1);
    const n = nodes.data!.nodes![0]!;
    assert.equal(n.uuid, h.daemon.services.hostId);
    await h.until(
      async () => (await dev.api.controlplane.nodes.getNodeByUuid(n.uuid)).data?.nodes?.[0]?.state === 'ready',
    );
    const one = (await dev.api.controlplane.nodes.getNodeByUuid(n.uuid)).data!.nodes![0]!;
    assert.ok(one.vcpus >= 1 && one.memory_mib > 0);
    assert.equal((await dev.api.controlplane.nodes.listNodes({ state: 'error' })).data?.nodes?.length, 0);
    // hosts are the operator's: a tenant is refused
    await refused(
      new UnikraftCloud({
        token: sdkToken,
        metro: h.url,
        controlPlaneUrl: h.url,
        proxyFromEnv: false,
      }).api.controlplane.nodes.listNodes(),
      /developer \(operator\) accounts/,
      403,
    );
    await refused(dev.api.controlplane.nodes.provisionNode({ body: {} } as never), /hosts join by running an agent/);

    const store = await ok(raw().images.getImageStore({ tag: 'app:latest' }));
    const img = store.data!.images![0]!;
    assert.match(img.url, /^app:latest@sha256:[0-9a-f]{64}$/);
    assert.equal(img.size_in_bytes, 1234);
    assert.equal(
      (await ok(raw().images.getImageStore({ digest: 'sha256:' + '0'.repeat(64) }))).data?.images?.length,
      0,
    );
  });
});
