/**
 * Scale-to-zero with real guests through the real gateway, inside a network
 * namespace this test creates and deletes (the file re-runs itself there):
 *
 * * the Linux `http` image goes to standby after its cooldown; an HTTPS
 *   request through the gateway wakes it and gets the answer; 20 concurrent
 *   first requests all get 200 from one wake;
 * * Unikraft's c-http (UNIHOST_UNIKRAFT_DIR, default ../shared/unikraft;
 *   skipped with a message when absent) in TCP mode: a TLS connection wakes
 *   it;
 * * a master whose kernel can no longer boot: the held request gets 503 with
 *   Retry-After, well within the hold bound.
 */
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import pino from 'pino';
import { Agent, request } from 'undici';
import { defaultControllers } from '../../src/controllers.js';
import { importGuestImages } from '../../src/images/guest.js';
import type { GatewayController } from '../../src/reconcile/gateway.js';
import { startHarness, type Harness } from '../helpers/harness.js';
import { canRunNetns, insideTestNetns, runInTestNetns } from '../helpers/netns.js';
import { closeVmHarness, guestOut, importCHttp, poll, tlsGet, unikraftDir } from '../helpers/vm.js';
import { requirePart } from '../helpers/require.js';

type Any = any; // eslint-disable-line @typescript-eslint/no-explicit-any

const UK = unikraftDir();

if (!insideTestNetns()) {
  runInTestNetns(
    import.meta.url,
    'scale-to-zero: standby after the cooldown, woken by traffic through the gateway, in a test-made namespace',
    !canRunNetns() && 'needs root, ip, nft, QEMU and mkfs.ext4',
  );
} else {
  describe('scale-to-zero, inside the namespace', () => {
    let h: Harness;
    let t: string;
    let gwc: GatewayController;
    let ca: string;
    const get = async (name: string): Promise<Any> =>
      (await h.call('GET', '/v1/instances', t, { name })).body.data.instances[0];
    const standby = (name: string) =>
      poll(`${name} in standby`, async () => (await get(name)).state === 'standby', 60_000, 200);

    /** An HTTPS request through the gateway's port 443 for `fqdn`; status, Retry-After and body. */
    async function viaGateway(fqdn: string, agent: Agent) {
      const r = await request(`https://127.0.0.1:${gwc.dataPlane!.boundPort(443)}/`, {
        headers: { host: fqdn },
        dispatcher: agent,
        headersTimeout: 60_000,
      });
      return { status: r.statusCode, retryAfter: r.headers['retry-after'], body: await r.body.text() };
    }

    async function create(name: string, image: string, services: object[], memory = 128) {
      const r = await h.call('POST', '/v1/instances', t, {
        name,
        image,
        memory_mb: memory,
        service_group: { services },
        scale_to_zero: { policy: 'on', cooldown_time_ms: 1500 },
        autostart: true,
        wait_timeout_ms: 120_000,
      });
      assert.equal(r.body.status, 'success', r.text);
      const e = r.body.data.instances[0];
      assert.equal(e.state, 'running', r.text);
      return { ...e, fqdn: e.service_group.domains[0].fqdn as string };
    }

    // The daemon's log at info, kept here: a wake that fails shows what the platform did meanwhile (a rare
    // failure in CI left no trace). UNIHOST_TEST_LOG prints it instead.
    const kept: string[] = [];
    const since = (n: number): string => `\ndaemon log meanwhile:\n${kept.slice(n).join('').slice(-4000)}`;

    before(async () => {
      const log = process.env.UNIHOST_TEST_LOG
        ? pino({ level: process.env.UNIHOST_TEST_LOG })
        : pino({ level: 'info' }, { write: (line: string) => void kept.push(line) });
      h = await startHarness(
        {
          machines: { accel: 'tcg', bootTimeoutMs: 60_000 },
          subnet: '10.79.0.0/24',
          network: { enabled: true, bridge: 'uhbr0', dns: false },
        },
        (s) => defaultControllers(s, log),
        { logger: log },
      );
      const images = h.daemon.services.images;
      await importGuestImages(images, guestOut());
      if (UK) await importCHttp(images, UK);
      const junk = join(h.dataDir, 'not-a-kernel');
      writeFileSync(junk, '#!/bin/sh\necho this is a shell script, not a kernel\n');
      await images.importKernel('junk:latest', { kernel: junk, machine: 'pc' });
      t = await h.user('stz');
      gwc = h.daemon.controllers.find(
        (c) => (c as GatewayController).dataPlane !== undefined && 'waker' in (c as object),
      ) as GatewayController;
      ca = readFileSync(gwc.ca!.caPath, 'utf8');
    });

    after(async () => {
      if (h) await closeVmHarness(h, [t]);
    });

    test('Linux http: standby after the cooldown (stop_reason 7); a request wakes it; 20 first requests all served', async () => {
      const web = await create('web', 'http:latest', [
        { port: 443, destination_port: 8080, handlers: ['tls', 'http'] },
      ]);
      const agent = new Agent({ connect: { ca, servername: web.fqdn }, connections: 32 });
      try {
        const first = await viaGateway(web.fqdn, agent);
        assert.equal(first.status, 200, first.body);
        await standby('web');
        let i = await get('web');
        assert.equal(i.stop_reason, 7, 'the platform stopped it and the guest shut down cleanly');

        const t0 = Date.now();
        const mark = kept.length;
        const woke = await viaGateway(web.fqdn, agent);
        process.stderr.write(`standby -> first answer through the gateway (Linux http): ${Date.now() - t0} ms\n`);
        assert.equal(woke.status, 200, `${woke.body}${since(mark)}`);
        assert.match(woke.body, /hello from unihost http/);
        i = await get('web');
        assert.equal(i.state, 'running');
        assert.equal(i.uuid, web.uuid);
        assert.equal(i.private_ip, web.private_ip);
        assert.equal(i.start_count, 2);

        await standby('web');
        const all = await Promise.all(Array.from({ length: 20 }, () => viaGateway(web.fqdn, agent)));
        assert.deepEqual(
          all.map((r) => r.status),
          Array(20).fill(200),
          JSON.stringify(all.filter((r) => r.status !== 200)),
        );
        assert.equal((await get('web')).start_count, 3, 'one wake for all 20');
      } finally {
        await agent.close();
      }
    });

    test(
      'c-http (Unikraft) in TCP mode: a TLS connection wakes it and reaches the app',
      { skip: requirePart(!UK && 'no Unikraft kernels (set UNIHOST_UNIKRAFT_DIR; default ../shared/unikraft)') },
      async () => {
        const web = await create(
          'uk',
          'c-http:latest',
          [{ port: 8443, destination_port: 8080, handlers: ['tls'] }],
          16,
        );
        await standby('uk');
        // c-http ignores shutdown requests: the platform's stop ends it at once (forced, 20)
        assert.equal((await get('uk')).stop_reason, 20);
        const t0 = Date.now();
        const mark = kept.length;
        const answer = await tlsGet(gwc.dataPlane!.boundPort(8443)!, web.fqdn, ca);
        process.stderr.write(`standby -> first answer through the gateway (c-http, TCP): ${Date.now() - t0} ms\n`);
        assert.match(
          answer,
          /^HTTP\/1\.1 200[\s\S]*Hello from Unikraft!/,
          `answer ${JSON.stringify(answer)}${since(mark)}`,
        );
        const i = await get('uk');
        assert.equal(i.state, 'running');
        assert.equal(i.start_count, 2);
      },
    );

    test('a master that cannot boot any more: the held request gets 503 with Retry-After, within the bound', async () => {
      const web = await create('broken', 'http:latest', [
        { port: 443, destination_port: 8080, handlers: ['tls', 'http'] },
      ]);
      await standby('broken');
      // Its kernel can no longer boot: the record is pointed at a file QEMU refuses.
      const junk = await h.daemon.store.read((tx) => tx.images.tag('junk:latest'));
      assert.ok(junk, 'junk image imported');
      await h.daemon.store.tx((tx) => tx.instances.updateSpec(web.uuid, { image: junk.digest }));
      const agent = new Agent({ connect: { ca, servername: web.fqdn } });
      try {
        const t0 = Date.now();
        const r = await viaGateway(web.fqdn, agent);
        const ms = Date.now() - t0;
        assert.equal(r.status, 503, r.body);
        assert.equal(r.retryAfter, '5');
        assert.match(r.body, /unavailable/);
        assert.ok(ms < h.daemon.config.gateway.wake.timeoutMs, `answered in ${ms} ms, within the bound`);
        const i = await get('broken');
        assert.equal(i.state, 'stopped');
        assert.equal(i.stop_reason, 4, 'the VMM failed');
      } finally {
        await agent.close();
      }
    });
  });
}
