/**
 * The private network and volumes through the real daemon, real QEMU and the
 * real bridge, taps, nftables rules and DNS server — all inside a network
 * namespace this test creates and deletes. The file re-runs itself inside the
 * namespace (`ip netns exec`), so the daemon, its bridge, its VMs and the
 * client all live there and no traffic leaves it.
 *
 * Proves: guest A reaches guest B of the same user by `<name>.internal` and
 * by IP; a guest of another user reaches neither; the host reaches a guest's
 * port; a volume written by one instance is read by another after detach and
 * attach; deleting instances removes their taps.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import pino from 'pino';
import { Agent, request } from 'undici';
import { readFileSync } from 'node:fs';
import tls from 'node:tls';
import type { GatewayController } from '../../src/reconcile/gateway.js';
import { defaultControllers } from '../../src/controllers.js';
import { importGuestImages } from '../../src/images/guest.js';
import { startHarness, type Harness } from '../helpers/harness.js';
import { closeVmHarness, guestOut, poll } from '../helpers/vm.js';
import { canRunNetns, insideTestNetns, runInTestNetns } from '../helpers/netns.js';
import { Ext4Volumes } from '../../src/volumes/ext4.js';
import { tapName } from '../../src/network/host.js';

type Any = any; // eslint-disable-line @typescript-eslint/no-explicit-any

if (!insideTestNetns()) {
  runInTestNetns(
    import.meta.url,
    'private network and volumes through the daemon, in a test-made namespace',
    !canRunNetns() && 'needs root, ip, nft, QEMU and mkfs.ext4',
  );
} else {
  describe('inside the namespace', () => {
    let h: Harness;
    let alice: string;
    let bob: string;
    const SUBNET = '10.77.0.0/24';

    before(async () => {
      const log = pino({ level: process.env.UNIHOST_TEST_LOG ?? 'silent' });
      h = await startHarness(
        {
          machines: { accel: 'tcg' },
          subnet: SUBNET,
          network: { enabled: true, bridge: 'uhbr0', dns: true, dnsPort: 53 },
        },
        (s) => defaultControllers(s, log),
      );
      await importGuestImages(h.daemon.services.images, guestOut());
      alice = await h.user('alice');
      bob = await h.user('bob');
    });

    after(async () => {
      if (h) await closeVmHarness(h, [alice, bob]);
    });

    const log = async (token: string, name: string): Promise<string> => {
      const r = await h.call('GET', '/v1/instances/log', token, { name, offset: 0, limit: 16383 });
      return Buffer.from(r.body.data.instances[0].output ?? '', 'base64').toString('utf8');
    };

    test('same-user guests reach each other by name; other users cannot; the host reaches a guest', async () => {
      const a = await h.call('POST', '/v1/instances', alice, {
        name: 'a',
        image: 'http:latest',
        autostart: true,
        wait_timeout_ms: 240_000,
      });
      assert.equal(a.body.data.instances[0].state, 'running', JSON.stringify(a.body));
      const aIp: string = a.body.data.instances[0].private_ip;
      assert.match(aIp, /^10\.77\.0\.\d+$/);
      const fetchEnv = { FETCH_INTERVAL: '1', FETCH_TIMEOUT: '2' };
      const [b, c] = await Promise.all([
        h.call('POST', '/v1/instances', alice, {
          name: 'b',
          image: 'fetch:latest',
          args: ['http://a.internal:8080/', `http://${aIp}:8080/`],
          env: fetchEnv,
          autostart: true,
          wait_timeout_ms: 240_000,
        }),
        h.call('POST', '/v1/instances', bob, {
          name: 'c',
          image: 'fetch:latest',
          args: [`http://${aIp}:8080/`, 'http://a.internal:8080/'],
          env: fetchEnv,
          autostart: true,
          wait_timeout_ms: 240_000,
        }),
      ]);
      assert.equal(b.body.data.instances[0].state, 'running');
      assert.equal(c.body.data.instances[0].state, 'running');

      // the host side reaches the guest's port over the bridge; the instance's counters are its real tap's
      const counters = async () =>
        (await h.call('GET', '/v1/instances/metrics', alice, { name: 'a' })).body.data.instances[0] as Any;
      const m0 = await counters();
      const res = await request(`http://${aIp}:8080/`);
      assert.equal(res.statusCode, 200);
      const page = await res.body.text();
      assert.match(page, /hello from unihost/);
      const m1 = await counters();
      // seen from the guest: it received the request (rx) and sent the page (tx), headers and TCP included
      assert.ok(m1.rx_packets > m0.rx_packets && m1.tx_packets > m0.tx_packets, JSON.stringify([m0, m1]));
      assert.ok(
        m1.tx_bytes - m0.tx_bytes >= page.length,
        `the page's bytes left the guest: ${JSON.stringify([m0, m1])}`,
      );
      assert.ok(m1.rx_bytes > m0.rx_bytes);

      await poll(
        'b fetched a by name and by IP',
        async () => {
          const l = await log(alice, 'b');
          return (
            /fetch: \d+ http:\/\/a\.internal:8080\/ ok/.test(l) &&
            new RegExp(`fetch: \\d+ http://${aIp.replaceAll('.', '\\.')}:8080/ ok`).test(l)
          );
        },
        90_000,
      );
      await poll(
        'c tried at least twice',
        async () => /fetch: 2 http:\S+ (ok|failed)/.test(await log(bob, 'c')),
        90_000,
      );
      const cl = await log(bob, 'c');
      assert.doesNotMatch(cl, / ok /, `bob's guest reached alice's:\n${cl}`);
      assert.match(cl, /fetch: 1 http:\/\/10\.77\.0\.\d+:8080\/ failed/);
      assert.match(cl, /fetch: 1 http:\/\/a\.internal:8080\/ failed/);

      // network fields are the truth: the tap exists and carries the instance's MAC
      const info = (await h.call('GET', '/v1/instances', alice, { name: 'a' })).body.data.instances[0] as Any;
      assert.equal(info.network_interfaces[0].private_ip, aIp);
      const links = execFileSync('ip', ['-j', 'link', 'show', 'master', 'uhbr0'], { encoding: 'utf8' });
      assert.equal(JSON.parse(links).length, 3, links);

      for (const n of ['b']) await h.call('DELETE', '/v1/instances', alice, { name: n });
      await h.call('DELETE', '/v1/instances', bob, { name: 'c' });
      await poll(
        'taps of deleted instances removed',
        () => {
          const l = JSON.parse(execFileSync('ip', ['-j', 'link', 'show', 'master', 'uhbr0'], { encoding: 'utf8' }));
          return l.length === 1;
        },
        30_000,
      );
    });

    test('a volume written by one instance is read by another after detach and attach', async () => {
      const w = await h.call('POST', '/v1/instances', alice, {
        name: 'writer',
        image: 'echo:latest',
        args: ['persisted-bytes-42'],
        env: { ECHO_FILE: '/data/note.txt' },
        volumes: [{ size_mb: 16, at: '/data' }],
        autostart: true,
        wait_timeout_ms: 240_000,
      });
      assert.equal(w.body.data.instances[0].state, 'running', JSON.stringify(w.body));
      const vol = (await h.call('GET', '/v1/instances', alice, { name: 'writer' })).body.data.instances[0].volumes[0];
      assert.equal(
        (await h.call('GET', '/v1/volumes', alice, { uuid: vol.uuid })).body.data.volumes[0].state,
        'mounted',
      );
      // `running` is the app's start: the echo app appends and syncs the file after printing its
      // environment (slow under TCG), then says "echo: running"; a stop before that would cut the write
      await poll('the writer synced the file', async () => /echo: running/.test(await log(alice, 'writer')), 60_000);
      assert.match(await log(alice, 'writer'), /echo: wrote to \/data\/note.txt/);
      await h.call('PUT', '/v1/instances/stop', alice, { name: 'writer' });
      await h.call('GET', '/v1/instances/wait', alice, { name: 'writer', state: 'stopped', timeout_ms: 60_000 });
      // stopped for good, its tap leaves the bridge (it has ports for 1,023): the next start puts it back
      const writerTap = tapName(
        (await h.call('GET', '/v1/instances', alice, { name: 'writer' })).body.data.instances[0].uuid,
      );
      const onBridge = (): boolean =>
        (
          JSON.parse(execFileSync('ip', ['-j', 'link', 'show', 'master', 'uhbr0'], { encoding: 'utf8' })) as {
            ifname: string;
          }[]
        ).some((l) => l.ifname === writerTap);
      await poll('the stopped instance is off the bridge', () => !onBridge(), 10_000);
      const again = await h.call('PUT', '/v1/instances/start', alice, { name: 'writer', wait_timeout_ms: 240_000 });
      assert.equal(again.body.data.instances[0].state, 'running', JSON.stringify(again.body));
      assert.ok(onBridge(), 'started again, its tap is back on the bridge');
      await poll(
        'the writer synced the file again',
        async () => (await log(alice, 'writer')).match(/echo: running/g)?.length === 2,
        60_000,
      );
      await h.call('PUT', '/v1/instances/stop', alice, { name: 'writer' });
      await h.call('GET', '/v1/instances/wait', alice, { name: 'writer', state: 'stopped', timeout_ms: 60_000 });
      assert.equal((await h.call('GET', '/v1/volumes', alice, { uuid: vol.uuid })).body.data.volumes[0].state, 'idle');
      const d = await h.call('PUT', '/v1/volumes/detach', alice, { uuid: vol.uuid });
      assert.equal(d.body.status, 'success', JSON.stringify(d.body));
      const v = (await h.call('GET', '/v1/volumes', alice, { uuid: vol.uuid })).body.data.volumes[0];
      assert.equal(v.state, 'available');
      assert.equal(v.persistent, true, 'a volume created with an instance becomes persistent when detached');

      await h.call('POST', '/v1/instances', alice, {
        name: 'reader',
        image: 'echo:latest',
        args: ['second'],
        env: { ECHO_FILE: '/mnt/v/note.txt' },
      });
      const at = await h.call('PUT', '/v1/volumes/attach', alice, {
        uuid: vol.uuid,
        attach_to: { name: 'reader' },
        at: '/mnt/v',
      });
      assert.equal(at.body.status, 'success', JSON.stringify(at.body));
      const r = await h.call('PUT', '/v1/instances/start', alice, { name: 'reader', wait_timeout_ms: 240_000 });
      assert.equal(r.body.data.instances[0].state, 'running', JSON.stringify(r.body));
      await poll(
        'reader printed the file the writer wrote',
        async () => /persisted-bytes-42/.test(await log(alice, 'reader')),
        30_000,
      );
      const file = new Ext4Volumes(h.daemon.services.paths.volumes).path(vol.uuid);
      assert.ok(existsSync(file));
      // the host checks the file system the guests used
      assert.equal(spawnSync('e2fsck', ['-fn', file]).status, 0, 'ext4 image is clean');
    });

    test('the gateway publishes a group of real guests: TLS, balancing, routing per user, redirect, drain', async () => {
      const gwc = h.daemon.controllers.find(
        (c) => (c as GatewayController).dataPlane !== undefined && 'ca' in (c as object),
      ) as GatewayController;
      const services = [
        { port: 443, destination_port: 8080, handlers: ['tls', 'http'] },
        { port: 80, destination_port: 443, handlers: ['http', 'redirect'] },
        { port: 8443, destination_port: 8080, handlers: ['tls'] }, // TCP mode: a connection pins one instance
      ];
      const w1 = await h.call('POST', '/v1/instances', alice, {
        name: 'w1',
        image: 'http:latest',
        service_group: { services },
      });
      const group = w1.body.data.instances[0].service_group;
      const fqdn: string = group.domains[0].fqdn;
      await h.call('POST', '/v1/instances', alice, {
        name: 'w2',
        image: 'http:latest',
        service_group: { name: group.name },
      });
      const bobGroup = await h.call('POST', '/v1/instances', bob, {
        name: 'bw',
        image: 'http:latest',
        service_group: { services: [services[0]] },
      });
      const bobFqdn: string = bobGroup.body.data.instances[0].service_group.domains[0].fqdn;
      const started = await Promise.all([
        h.call('PUT', '/v1/instances/start', alice, [
          { name: 'w1', wait_timeout_ms: 240_000 },
          { name: 'w2', wait_timeout_ms: 240_000 },
        ]),
        h.call('PUT', '/v1/instances/start', bob, { name: 'bw', wait_timeout_ms: 240_000 }),
      ]);
      for (const r of started)
        for (const e of r.body.data.instances) assert.equal(e.state, 'running', JSON.stringify(r.body));
      const gw = gwc.dataPlane!;
      const tlsPort = gw.boundPort(443)!;
      const httpPort = gw.boundPort(80)!;
      assert.ok(tlsPort && httpPort, 'listeners for 443 and 80');
      const ca = readFileSync(gwc.ca!.caPath, 'utf8');
      const get = async (name: string, path = '/') => {
        const agent = new Agent({ connect: { ca, servername: name } });
        try {
          const r = await request(`https://127.0.0.1:${tlsPort}${path}`, {
            headers: { host: name },
            dispatcher: agent,
          });
          return { status: r.statusCode, body: await r.body.text() };
        } finally {
          await agent.close();
        }
      };
      const ids = Object.fromEntries(
        await Promise.all(
          ['w1', 'w2'].map(async (n) => [
            n,
            (await h.call('GET', '/v1/instances', alice, { name: n })).body.data.instances[0].uuid,
          ]),
        ),
      );
      const bobId = (await h.call('GET', '/v1/instances', bob, { name: 'bw' })).body.data.instances[0].uuid;
      await poll('guests answer through the gateway', async () => (await get(fqdn)).status === 200, 60_000);
      for (let i = 0; i < 10; i++) {
        const r = await get(fqdn, `/?i=${i}`);
        assert.equal(r.status, 200);
        assert.match(r.body, /hello from unihost/);
      }
      // counters come from the data plane's stats (HAProxy: read every 250 ms), so wait for them
      const served = (): boolean => {
        const c = gw.counters();
        return (c.instances[ids.w1]?.requests ?? 0) > 0 && (c.instances[ids.w2]?.requests ?? 0) > 0;
      };
      await poll(`both backends served: ${JSON.stringify(gw.counters().instances)}`, served, 5_000);
      const before = gw.counters().instances[bobId]?.requests ?? 0;
      assert.equal((await get(bobFqdn)).status, 200);
      // counters come from the data plane's stats (HAProxy: read every 250 ms), so wait for them
      await poll(
        "bob's name reaches bob's instance",
        () => gw.counters().instances[bobId]?.requests === before + 1,
        5_000,
      );
      // unknown names are refused; port 80 redirects to https keeping host, path and query
      const unknown = await request(`http://127.0.0.1:${httpPort}/`, {
        headers: { host: `nope.${h.daemon.config.metroDomain}` },
      });
      assert.equal(unknown.statusCode, 404);
      await unknown.body.text();
      const redir = await request(`http://127.0.0.1:${httpPort}/a/b?x=1`, { headers: { host: fqdn } });
      assert.equal(redir.statusCode, 301);
      assert.equal(redir.headers.location, `https://${fqdn}/a/b?x=1`);
      await redir.body.text();
      // drain: an open connection (TCP mode) holds the instance in draining; closing it ends the drain
      const sock = tls.connect({ host: '127.0.0.1', port: gw.boundPort(8443)!, servername: fqdn, ca });
      await new Promise<void>((resolve, reject) => sock.once('secureConnect', resolve).once('error', reject));
      const pinned = await poll(
        'the connection reached an instance',
        () => ['w1', 'w2'].find((n) => (gw.counters().instances[ids[n]!]?.openConnections ?? 0) > 0),
        20_000,
      );
      const st = await h.call('PUT', '/v1/instances/stop', alice, { name: pinned, drain_timeout_ms: 120_000 });
      assert.equal(st.body.data.instances[0].state, 'draining');
      const early = await h.call('GET', '/v1/instances/wait', alice, {
        name: pinned,
        state: 'stopped',
        timeout_ms: 3_000,
      });
      assert.equal(early.body.data.instances[0].error, 12, 'still draining while the connection is open');
      sock.destroy();
      const waited = await h.call('GET', '/v1/instances/wait', alice, {
        name: pinned,
        state: 'stopped',
        timeout_ms: 60_000,
      });
      assert.equal(
        waited.body.status,
        'success',
        'the drain ended when the last connection closed, long before its timeout',
      );
      const stoppedBefore = gw.counters().instances[ids[pinned]!]?.requests ?? 0;
      for (let i = 0; i < 4; i++) assert.equal((await get(fqdn)).status, 200);
      assert.equal(
        gw.counters().instances[ids[pinned]!]?.requests ?? 0,
        stoppedBefore,
        'a stopped instance receives nothing',
      );
    });
  });
}
