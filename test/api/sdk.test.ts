/**
 * The official JS SDK (`@unikraft/cloud`, pinned in devDependencies) drives a
 * real daemon unchanged, as a new user would: every call it offers that the
 * API has. Any SDK error fails the test. Machines are simulated (the SDK sees
 * the API only); test/vm/sdk-boot.test.ts boots a real guest through it.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { UnikraftCloud, collect } from '@unikraft/cloud';
import { startHarness, type Harness } from '../helpers/harness.js';
import { SIM_STATS, simMachines } from '../helpers/sim-machines.js';

let h: Harness;
let ukc: UnikraftCloud;
let userId: string;

before(async () => {
  h = await startHarness({}, (s) => [simMachines(s)]);
  const token = await h.user('sdk');
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
