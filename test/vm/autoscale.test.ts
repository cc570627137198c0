/**
 * Autoscale with real guests: the daemon, its bridge and its VMs run inside
 * a network namespace this test creates and deletes (the file re-runs
 * itself there). The master is the `http` image (busybox httpd, a fork per
 * connection); the test loads it with requests to its private IP from inside
 * the namespace, which makes its VM process busy. Under a step policy
 * (cpu >= 200 → +1, < 100 → -1, max_size 2; an idle guest
 * measures ~40 millicores under TCG, five request loops ~350) the group scales out to 2 while
 * the load runs, and back in to the master alone once it stops.
 *
 * `burn` is not used: a clone copies the master's args, so a burning master
 * makes burning clones and the load could not be stopped from outside.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import pino from 'pino';
import { request } from 'undici';
import { defaultControllers } from '../../src/controllers.js';
import { importGuestImages } from '../../src/images/guest.js';
import { startHarness, type Harness } from '../helpers/harness.js';
import { assertNoVmLeft, guestOut, poll, GUEST_CPU_STEPS } from '../helpers/vm.js';
import { canRunNetns, insideTestNetns, runInTestNetns } from '../helpers/netns.js';

type Any = any; // eslint-disable-line @typescript-eslint/no-explicit-any

if (!insideTestNetns()) {
  runInTestNetns(
    import.meta.url,
    'autoscale scales a loaded http guest out and back in, in a test-made namespace',
    !canRunNetns() && 'needs root, ip, nft, QEMU and mkfs.ext4',
  );
} else {
  describe('inside the namespace', () => {
    let h: Harness;
    let dev: string;

    before(async () => {
      const log = pino({ level: process.env.UNIHOST_TEST_LOG ?? 'info' }, pino.destination(2));
      h = await startHarness(
        {
          machines: { accel: 'tcg' },
          subnet: '10.78.0.0/24',
          network: { enabled: true, bridge: 'uhbr0', dns: false },
          gateway: { enabled: false },
        },
        (s) => defaultControllers(s, log),
        { logger: log },
      );
      await importGuestImages(h.daemon.services.images, guestOut());
      dev = await h.user('dev', true);
    });

    after(async () => {
      if (!h) return;
      for (const i of (await h.call('GET', '/v1/instances/list', dev)).body?.data?.instances ?? [])
        await h.call('DELETE', `/v1/instances/${i.uuid}`, dev);
      const dataDir = h.dataDir;
      try {
        await assertNoVmLeft([dataDir]);
      } finally {
        await h.close();
      }
    });

    const groupInstances = async (): Promise<Any[]> => {
      const g = (await h.call('GET', '/v1/services', dev, { name: 'web' })).body.data.service_groups[0];
      const out: Any[] = [];
      for (const i of g.instances ?? [])
        out.push((await h.call('GET', '/v1/instances', dev, { uuid: i.uuid })).body.data.instances[0]);
      return out;
    };

    test('scale out to 2 under load, back to the master alone after it', async () => {
      const g = await h.call('POST', '/v1/services', dev, {
        name: 'web',
        services: [{ port: 443, destination_port: 8080, handlers: ['tls', 'http'] }],
      });
      assert.equal(g.status, 200, g.text);
      const created = await h.call('POST', '/v1/instances', dev, {
        name: 'web-m',
        image: 'http:latest',
        autostart: true,
        wait_timeout_ms: 240_000,
        service_group: { name: 'web' },
      });
      assert.equal(created.status, 200, created.text);
      const master = created.body.data.instances[0];
      assert.equal(master.state, 'running', created.text);
      const r = await h.call('POST', '/v1/services/autoscale', dev, {
        name: 'web',
        master: { uuid: master.uuid },
        min_size: 1,
        max_size: 2,
        warmup_time_ms: 2000,
        cooldown_time_ms: 4000,
        policies: [GUEST_CPU_STEPS],
      });
      assert.equal(r.status, 200, r.text);
      const url = `http://${master.private_ip}:8080/`;
      const body = await (await request(url)).body.text();
      assert.match(body, /hello from unihost http/);

      // Idle, nothing happens: one instance, and its CPU is visible.
      await new Promise((res) => setTimeout(res, 5000));
      let all = await groupInstances();
      assert.equal(all.length, 1, 'idle: no clone');
      assert.equal(typeof all[0].cpu_millicores, 'number', JSON.stringify(all[0]));
      process.stderr.write(`idle master cpu_millicores: ${all[0].cpu_millicores}\n`);

      // Load: a few request loops on the master (only: the clone stays idle, so the average halves).
      let loading = true;
      let served = 0;
      const loops = Array.from({ length: 5 }, async () => {
        while (loading) {
          try {
            const res = await request(url, { headersTimeout: 5000, bodyTimeout: 5000 });
            await res.body.text();
            served++;
          } catch {
            await new Promise((res) => setTimeout(res, 50));
          }
        }
      });
      try {
        await poll(
          'a running clone',
          async () =>
            (await groupInstances()).filter((i) => i.uuid !== master.uuid && i.state === 'running').length === 1,
          120_000,
          500,
        );
        all = await groupInstances();
        process.stderr.write(
          `loaded: ${served} requests; ${all.map((i) => `${i.name} ${i.state} ${i.cpu_millicores}`).join(', ')}\n`,
        );
        const clone = all.find((i) => i.uuid !== master.uuid)!;
        for (const k of ['image', 'args', 'env', 'memory_mb', 'restart_policy'])
          assert.deepEqual(clone[k], all.find((i) => i.uuid === master.uuid)[k], k);
        // Still loaded a while: max_size holds it at 2.
        await new Promise((res) => setTimeout(res, 6000));
        assert.equal((await groupInstances()).length, 2, 'max_size 2');
      } finally {
        loading = false;
        await Promise.all(loops);
      }
      await poll('back to the master alone', async () => (await groupInstances()).length === 1, 120_000, 500);
      all = await groupInstances();
      assert.equal(all[0].uuid, master.uuid);
      assert.equal(all[0].state, 'running');
    });
  });
}
