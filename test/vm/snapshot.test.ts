/**
 * Memory snapshots with real guests through the real gateway, inside a
 * network namespace this test creates and deletes (the file re-runs itself
 * there):
 *
 * * the Linux `http` image with stateful scale-to-zero: its request counter
 *   (kept in guest RAM) goes on after a wake, with one boot in its console
 *   log, no QEMU while in standby, the snapshot shown and then consumed;
 *   PUT suspend and start resume it the same way; a stop discards the
 *   snapshot;
 * * a snapshot that no longer fits (another VMM build) and a corrupt one:
 *   the instance boots afresh, with a notice event saying why;
 * * templates: Linux http made a template; its clones start from its
 *   memory (the count goes on in each, independently), each on its own
 *   private address (translated on its tap), boot afresh once stopped, and
 *   outlive the template; a template of c-http gives clones that answer
 *   through the gateway without a boot banner, each restored into a QEMU
 *   started in advance (a warm VM), found by its jail as a restarted
 *   daemon would; after two clones made at once, two warm VMs wait;
 * * a checkpoint of Linux http: the instance runs on with its count, an
 *   instance created from the checkpoint starts from the count it had;
 * * Unikraft's c-http (UNIHOST_UNIKRAFT_DIR, default ../shared/unikraft;
 *   skipped with a message when absent): woken from its snapshot it answers
 *   through the gateway and prints no second boot banner.
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync, realpathSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import pino from 'pino';
import { Agent, request } from 'undici';
import { defaultControllers } from '../../src/controllers.js';
import { importGuestImages } from '../../src/images/guest.js';
import { QemuDriver } from '../../src/machines/qemu/driver.js';
import { rootOf, runsInJail } from '../../src/machines/qemu/procs.js';
import type { GatewayController } from '../../src/reconcile/gateway.js';
import { snapshotFile } from '../../src/reconcile/machine-snapshots.js';
import { startHarness, type Harness } from '../helpers/harness.js';
import { canRunNetns, insideTestNetns, runInTestNetns } from '../helpers/netns.js';
import {
  closeVmHarness,
  guestOut,
  importCHttp,
  poll,
  qemuProcs,
  tlsGet,
  unikraftDir,
  warmQemus,
} from '../helpers/vm.js';
import { requirePart } from '../helpers/require.js';

type Any = any; // eslint-disable-line @typescript-eslint/no-explicit-any

const UK = unikraftDir();

if (!insideTestNetns()) {
  runInTestNetns(
    import.meta.url,
    'memory snapshots: stateful standby, suspend, fall-backs, through the gateway in a test-made namespace',
    !canRunNetns() && 'needs root, ip, nft, QEMU and mkfs.ext4',
  );
} else {
  describe('memory snapshots, inside the namespace', () => {
    let h: Harness;
    let t: string;
    let gwc: GatewayController;
    let ca: string;
    const get = async (name: string): Promise<Any> =>
      (await h.call('GET', '/v1/instances', t, { name })).body.data.instances[0];
    const inState = (name: string, state: string) =>
      poll(`${name} ${state}`, async () => (await get(name)).state === state, 60_000, 100);
    /** The instance's whole console log (every boot of it). */
    const consoleOf = (id: string): string => {
      const f = join(h.daemon.services.paths.instance(id), 'console.log');
      return existsSync(f) ? readFileSync(f, 'utf8') : '';
    };
    const vmRunning = (id: string): boolean => qemuProcs([`unihost-${id}`]).length > 0;
    /** QEMUs waiting in the warm pool (their jail under `<data dir>/warm/`). */
    const warmVms = (): number[] => warmQemus(h.dataDir).map((p) => p.pid);
    /** The QEMU running in the instance's jail. */
    const jailedVm = (id: string): number | undefined =>
      qemuProcs([h.dataDir]).find(
        (p) => rootOf(p.pid) === realpathSync(join(h.daemon.services.paths.instance(id), 'jail')),
      )?.pid;

    async function viaGateway(fqdn: string, agent: Agent, path = '/cgi-bin/count') {
      const r = await request(`https://127.0.0.1:${gwc.dataPlane!.boundPort(443)}${path}`, {
        headers: { host: fqdn },
        dispatcher: agent,
        headersTimeout: 60_000,
      });
      return { status: r.statusCode, body: (await r.body.text()).trim() };
    }

    async function create(name: string, image: string, services: object[], memory: number, extra: object = {}) {
      const r = await h.call('POST', '/v1/instances', t, {
        name,
        image,
        memory_mb: memory,
        service_group: { services },
        autostart: true,
        wait_timeout_ms: 120_000,
        ...extra,
      });
      assert.equal(r.body.status, 'success', r.text);
      const e = r.body.data.instances[0];
      assert.equal(e.state, 'running', r.text);
      return { ...e, fqdn: e.service_group.domains[0].fqdn as string };
    }

    const notices = async (name: string): Promise<string[]> => {
      const r = await h.call('GET', '/v1/instances/history', t, { name });
      return (r.body.data.instances[0].history as Any[]).filter((e) => e.event === 'notice').map((e) => e.message);
    };

    const agents: Agent[] = [];
    const agentFor = (fqdn: string) => {
      const a = new Agent({ connect: { ca, servername: fqdn } });
      agents.push(a);
      return a;
    };
    /** One counted request (a 503 before the gateway routes a new group is not counted by the guest). */
    const served = async (fqdn: string): Promise<string> => {
      const a = agentFor(fqdn);
      let r = await viaGateway(fqdn, a);
      if (r.status !== 200)
        await poll(
          `the gateway routes ${fqdn}`,
          async () => (r = await viaGateway(fqdn, a)).status === 200,
          10_000,
          100,
        );
      return r.body;
    };

    before(async () => {
      const log = pino({ level: process.env.UNIHOST_TEST_LOG ?? 'silent' });
      h = await startHarness(
        {
          machines: { accel: 'tcg', bootTimeoutMs: 60_000 },
          subnet: '10.78.0.0/24',
          network: { enabled: true, bridge: 'uhbr0', dns: false },
        },
        (s) => defaultControllers(s, log),
      );
      await importGuestImages(h.daemon.services.images, guestOut());
      if (UK) await importCHttp(h.daemon.services.images, UK);
      t = await h.user('snap');
      gwc = h.daemon.controllers.find(
        (c) => (c as GatewayController).dataPlane !== undefined && 'waker' in (c as object),
      ) as GatewayController;
      ca = readFileSync(gwc.ca!.caPath, 'utf8');
    });

    after(async () => {
      for (const a of agents) await a.close();
      if (h) await closeVmHarness(h, [t]);
    });

    test('Linux http, stateful scale-to-zero and suspend: the count kept in RAM goes on; one boot; a stop discards', async () => {
      const web = await create(
        'web',
        'http:latest',
        [{ port: 443, destination_port: 8080, handlers: ['tls', 'http'] }],
        128,
        {
          scale_to_zero: { policy: 'on', stateful: true, cooldown_time_ms: 1500 },
        },
      );
      assert.deepEqual((await get('web')).features, ['scale-to-zero', 'stateful']);
      const agent = new Agent({ connect: { ca, servername: web.fqdn } });
      try {
        assert.deepEqual(await viaGateway(web.fqdn, agent), { status: 200, body: '1' });
        assert.deepEqual(await viaGateway(web.fqdn, agent), { status: 200, body: '2' });
        await inState('web', 'standby');
        let i = await get('web');
        assert.equal(i.stop_reason, 7, 'a clean stop by the platform');
        assert.equal(i.snapshot.reason, 'standby');
        const file = snapshotFile(h.daemon.services.paths.instance(web.uuid));
        assert.equal(statSync(file).size, i.snapshot.size_bytes);
        assert.ok(
          i.snapshot.size_bytes < 128 * 1024 * 1024,
          `${i.snapshot.size_bytes} bytes: zero pages are not written`,
        );
        process.stderr.write(`stateful standby of Linux http (128 MB): snapshot of ${i.snapshot.size_bytes} bytes\n`);
        await poll('no QEMU in standby', async () => !vmRunning(web.uuid), 10_000, 50);
        const record = () => h.daemon.services.store.read((tx) => tx.instances.getAny(web.uuid));
        assert.deepEqual((await record())!.snapshot!.listening, [8080], 'the port that accepted when it was taken');
        const quota = (await h.call('GET', '/v1/users/quotas', t)).body.data.quotas[0];
        assert.equal(quota.used.snapshot_mb, Math.ceil(i.snapshot.size_bytes / 1024 / 1024));

        const t0 = Date.now();
        assert.deepEqual(await viaGateway(web.fqdn, agent), { status: 200, body: '3' }, 'the count goes on');
        process.stderr.write(`stateful wake -> first answer through the gateway (Linux http): ${Date.now() - t0} ms\n`);
        i = await get('web');
        assert.equal(i.state, 'running');
        assert.equal(i.start_count, 2);
        assert.equal(i.snapshot, undefined, 'consumed by the restore');
        const woken = (await record())!;
        assert.equal(
          woken.boot_time_us,
          woken.vmm_ready_time_us,
          'running at the resume: its port was not probed again',
        );
        await poll('the snapshot file is gone', async () => !existsSync(file), 5000, 50);
        assert.equal(consoleOf(web.uuid).match(/http: listening on/g)?.length, 1, 'one boot in the console log');

        // PUT suspend, then start: resumed the same way (and traffic keeps it awake meanwhile)
        const s = await h.call('PUT', '/v1/instances/suspend', t, { name: 'web' });
        assert.equal(s.body.status, 'success', s.text);
        await inState('web', 'standby');
        assert.equal((await get('web')).snapshot.reason, 'suspend');
        const st = await h.call('PUT', '/v1/instances/start', t, { name: 'web', wait_timeout_ms: 60_000 });
        assert.equal(st.body.data.instances[0].state, 'running', st.text);
        assert.deepEqual(await viaGateway(web.fqdn, agent), { status: 200, body: '4' });
        assert.equal(consoleOf(web.uuid).match(/http: listening on/g)?.length, 1);

        // a start that lands while the snapshot is being taken: the instance comes back from that
        // snapshot (the count goes on), not from a fresh boot
        const sus = await h.call('PUT', '/v1/instances/suspend', t, { name: 'web' });
        assert.equal(sus.body.data.instances[0].state, 'stopping', sus.text);
        const again = await h.call('PUT', '/v1/instances/start', t, { name: 'web', wait_timeout_ms: 60_000 });
        assert.equal(again.body.data.instances[0].state, 'running', again.text);
        assert.deepEqual(await viaGateway(web.fqdn, agent), { status: 200, body: '5' }, 'restored, not booted');
        assert.equal(consoleOf(web.uuid).match(/http: listening on/g)?.length, 1);
        assert.equal((await get('web')).snapshot, undefined, 'consumed by the restore');

        // a stop of a suspended instance discards its snapshot
        await h.call('PUT', '/v1/instances/suspend', t, { name: 'web' });
        await inState('web', 'standby');
        assert.ok(existsSync(file));
        await h.call('PUT', '/v1/instances/stop', t, { name: 'web' });
        await inState('web', 'stopped');
        await poll(
          'the snapshot is discarded',
          async () => !existsSync(file) && !(await get('web')).snapshot,
          10_000,
          50,
        );
        assert.deepEqual(await notices('web'), [], 'nothing fell back');
      } finally {
        await agent.close();
      }
    });

    test('a snapshot that does not fit, or is corrupt: the instance boots afresh and a notice says why', async () => {
      const web = await create(
        'fit',
        'http:latest',
        [{ port: 443, destination_port: 8080, handlers: ['tls', 'http'] }],
        128,
      );
      const agent = new Agent({ connect: { ca, servername: web.fqdn } });
      try {
        // one counted request (its instance runs: the gateway serves it at once)
        const served = async (): Promise<string> => {
          const r = await viaGateway(web.fqdn, agent);
          assert.equal(r.status, 200, r.body);
          return r.body;
        };
        assert.equal(await served(), '1');
        await h.call('PUT', '/v1/instances/suspend', t, { name: 'fit' });
        await inState('fit', 'standby');
        // as if the host's QEMU had been upgraded while it slept
        await h.daemon.store.tx(async (tx) => {
          const cur = (await tx.instances.getAny(web.uuid))!;
          await tx.instances.updateStatus(web.uuid, {
            snapshot: { ...cur.snapshot!, vmm: 'QEMU emulator version 0.1' },
          });
        });
        let st = await h.call('PUT', '/v1/instances/start', t, { name: 'fit', wait_timeout_ms: 60_000 });
        assert.equal(st.body.data.instances[0].state, 'running', st.text);
        assert.equal(await served(), '1', 'a fresh boot: the count starts again');
        let n = await notices('fit');
        assert.equal(n.length, 1, JSON.stringify(n));
        assert.match(
          n[0]!,
          /cannot be restored \(it was taken by QEMU emulator version 0\.1, this host runs .*\); booting afresh/,
        );

        assert.equal((await viaGateway(web.fqdn, agent)).body, '2');
        await h.call('PUT', '/v1/instances/suspend', t, { name: 'fit' });
        await inState('fit', 'standby');
        const file = snapshotFile(h.daemon.services.paths.instance(web.uuid));
        const bytes = readFileSync(file);
        bytes.fill(0x5a, 64 * 1024, 128 * 1024); // damaged on disk
        writeFileSync(file, bytes);
        st = await h.call('PUT', '/v1/instances/start', t, { name: 'fit', wait_timeout_ms: 60_000 });
        assert.equal(st.body.data.instances[0].state, 'running', st.text);
        assert.equal(await served(), '1', 'booted afresh');
        n = await notices('fit');
        assert.equal(n.length, 2, JSON.stringify(n));
        assert.match(n[1]!, /restoring the memory snapshot failed \(.*\); booting afresh/);
        assert.equal(consoleOf(web.uuid).match(/http: listening on/g)?.length, 3, 'three boots');
      } finally {
        await agent.close();
      }
    });

    test('templates of Linux http: clones start from its memory (the count goes on in each), each on its own address', async () => {
      const tpl = await create(
        'tpl',
        'http:latest',
        [{ port: 443, destination_port: 8080, handlers: ['tls', 'http'] }],
        128,
      );
      assert.equal(await served(tpl.fqdn), '1');
      assert.equal(await served(tpl.fqdn), '2');
      const made = await h.call('POST', '/v1/instances/templates', t, { name: 'tpl', timeout_s: 60 });
      assert.equal(made.body.status, 'success', made.text);
      assert.equal(made.body.data.instances[0].state, 'template', made.text);
      const listed = await h.call('GET', '/v1/instances/templates', t);
      assert.deepEqual(
        listed.body.data.instances.map((i: Any) => i.name),
        ['tpl'],
        listed.text,
      );
      const asTemplate = await get('tpl');
      assert.equal(asTemplate.snapshot.reason, 'template');
      await poll('no QEMU for a template', async () => !vmRunning(tpl.uuid), 10_000, 50);
      const start = await h.call('PUT', '/v1/instances/start', t, { name: 'tpl' });
      assert.match(start.text, /instance 'tpl' is a template and is never started/);

      const clone = async (name: string) => {
        const r = await h.call('POST', '/v1/instances', t, {
          name,
          template: { name: 'tpl' },
          service_group: { services: [{ port: 443, destination_port: 8080, handlers: ['tls', 'http'] }] },
          autostart: true,
          wait_timeout_ms: 60_000,
        });
        assert.equal(r.body.status, 'success', r.text);
        const e = r.body.data.instances[0];
        assert.equal(e.state, 'running', r.text);
        return { ...e, fqdn: e.service_group.domains[0].fqdn as string };
      };
      const t0 = Date.now();
      const c1 = await clone('clone-1');
      process.stderr.write(`clone of a Linux http template (128 MB), create -> running: ${Date.now() - t0} ms\n`);
      const c2 = await clone('clone-2');
      const ips = [tpl.private_ip, c1.private_ip, c2.private_ip];
      assert.equal(new Set(ips).size, 3, `own addresses: ${ips.join(', ')}`);
      assert.equal(await served(c1.fqdn), '3', "clone 1 goes on from the template's count");
      assert.equal(await served(c2.fqdn), '3', 'clone 2 too: its own copy of the memory');
      assert.equal(await served(c1.fqdn), '4');
      // straight to the clone's own address, as the gateway and probes reach it: translated on its tap
      const direct = await request(`http://${c2.private_ip}:8080/cgi-bin/count`, { headersTimeout: 10_000 });
      assert.equal((await direct.body.text()).trim(), '4');
      assert.equal(consoleOf(c1.uuid).match(/http: listening on/g), null, 'the clone never booted');
      const i1 = await get('clone-1');
      assert.equal(i1.snapshot, undefined, 'restored: nothing pending');
      assert.ok(existsSync(snapshotFile(h.daemon.services.paths.instance(tpl.uuid))), "the template's file stays");

      // a clone stopped and started boots afresh on its own address
      await h.call('PUT', '/v1/instances/stop', t, { name: 'clone-1' });
      await inState('clone-1', 'stopped');
      const st = await h.call('PUT', '/v1/instances/start', t, { name: 'clone-1', wait_timeout_ms: 60_000 });
      assert.equal(st.body.data.instances[0].state, 'running', st.text);
      assert.equal(await served(c1.fqdn), '1', 'a fresh boot');

      // the template goes; the clone made from it keeps running
      const del = await h.call('DELETE', '/v1/instances/templates', t, { name: 'tpl' });
      assert.equal(del.body.status, 'success', del.text);
      assert.equal(await served(c2.fqdn), '5');
      assert.deepEqual(await notices('clone-2'), []);
    });

    test('checkpoints of Linux http: the instance runs on; an instance from a checkpoint starts where it was', async () => {
      const src = await create(
        'ck-src',
        'http:latest',
        [{ port: 443, destination_port: 8080, handlers: ['tls', 'http'] }],
        128,
      );
      assert.equal(await served(src.fqdn), '1');
      assert.equal(await served(src.fqdn), '2');
      const t0 = Date.now();
      const made = await h.call('POST', '/v1/instances/checkpoints', t, {
        from: { name: 'ck-src' },
        name: 'ck-1',
        timeout_s: 60,
      });
      assert.equal(made.body.status, 'success', made.text);
      process.stderr.write(`checkpoint of Linux http (128 MB), asked -> written: ${Date.now() - t0} ms\n`);
      const ck = await get('ck-1');
      assert.equal(ck.state, 'checkpoint');
      assert.equal(ck.snapshot.pending, undefined);
      assert.equal(ck.snapshot.taken_from, src.uuid);
      assert.equal(statSync(snapshotFile(h.daemon.services.paths.instance(ck.uuid))).size, ck.snapshot.size_bytes);
      assert.equal(await served(src.fqdn), '3', 'the instance ran on, its count kept');
      assert.equal((await get('ck-src')).start_count, 1, 'not restarted');

      const r = await h.call('POST', '/v1/instances', t, {
        name: 'from-ck',
        checkpoint: { name: 'ck-1' },
        service_group: { services: [{ port: 443, destination_port: 8080, handlers: ['tls', 'http'] }] },
        autostart: true,
        wait_timeout_ms: 60_000,
      });
      assert.equal(r.body.data.instances[0].state, 'running', r.text);
      const copy = { ...r.body.data.instances[0], fqdn: r.body.data.instances[0].service_group.domains[0].fqdn };
      assert.notEqual(copy.private_ip, src.private_ip);
      assert.equal(await served(copy.fqdn), '3', 'from the checkpoint: the count it had then, plus this one');
      assert.equal(await served(src.fqdn), '4', 'the two go on apart');
      const hist = await h.call('GET', '/v1/instances/checkpoints/history', t, { name: 'ck-src' });
      assert.deepEqual(
        hist.body.data.instances[0].history.map((e: Any) => e.name),
        ['ck-1'],
        hist.text,
      );
      const del = await h.call('DELETE', '/v1/instances/checkpoints', t, { name: 'ck-1' });
      assert.equal(del.body.status, 'success', del.text);
      await poll(
        'the checkpoint file goes with it',
        async () => !existsSync(h.daemon.services.paths.instance(ck.uuid)),
        10_000,
        50,
      );
      assert.deepEqual(await notices('ck-src'), []);
    });

    test(
      'a template of c-http (Unikraft): its clones answer on their own addresses through the gateway, without a boot banner',
      { skip: requirePart(!UK && 'no Unikraft kernels (set UNIHOST_UNIKRAFT_DIR; default ../shared/unikraft)') },
      async () => {
        const tcp = [{ port: 8443, destination_port: 8080, handlers: ['tls'] }];
        await create('uk-tpl', 'c-http:latest', tcp, 16);
        const made = await h.call('POST', '/v1/instances/templates', t, { name: 'uk-tpl', timeout_s: 60 });
        assert.equal(made.body.data.instances[0].state, 'template', made.text);
        for (const name of ['uk-c1', 'uk-c2']) {
          // the template's snapshot started a warm VM (c-http is a `pc` guest); each clone takes the
          // one waiting, and the next is started once it runs
          let warm: number[] = [];
          await poll('a warm VM waits', async () => (warm = warmVms()).length > 0, 30_000, 50);
          const t0 = Date.now();
          const r = await h.call('POST', '/v1/instances', t, {
            name,
            template: { name: 'uk-tpl' },
            service_group: { services: tcp },
            autostart: true,
            wait_timeout_ms: 60_000,
          });
          assert.equal(r.body.data.instances[0].state, 'running', r.text);
          process.stderr.write(`clone of a c-http template (16 MB), create -> running: ${Date.now() - t0} ms\n`);
          const e = r.body.data.instances[0];
          // under load a first connection can still be cut (seen once in CI), so a few tries are allowed.
          // unrecognized_name (seen once in CI, when the create answered before the gateway's sync) should
          // no longer come: the create waits for this process's gateway (test/api/gateway-wait.test.ts)
          let answer = '';
          await poll(
            `${name} answers through the gateway`,
            async () =>
              (answer = await tlsGet(gwc.dataPlane!.boundPort(8443)!, e.service_group.domains[0].fqdn, ca).catch(
                (err: Error) => (/unrecognized name/i.test(err.message) ? '' : Promise.reject(err)),
              )) !== '',
            10_000,
            100,
          );
          assert.match(answer, /^HTTP\/1\.1 200[\s\S]*Hello from Unikraft!/, `${name} answers`);
          assert.equal(consoleOf(e.uuid).match(/Telesto/g), null, `${name} printed no boot banner`);
          const vm = jailedVm(e.uuid);
          assert.ok(vm !== undefined && warm.includes(vm), `${name} runs in the warm VM that waited (${warm}): ${vm}`);
          // a restarted daemon finds it as the clone's VM, by its jail (its name is the warm VM's)
          const driver = new QemuDriver(
            { qemu: 'qemu-system-x86_64', accel: 'tcg', tbSizeMb: 32, tscKhz: 0, logDir: () => '/nonexistent' },
            () => undefined,
          );
          try {
            const instances = dirname(h.daemon.services.paths.instance(e.uuid));
            assert.deepEqual(
              driver.scan(instances).filter((v) => v.id === e.uuid),
              [{ id: e.uuid, pid: vm }],
            );
            assert.ok(runsInJail(vm, join(h.daemon.services.paths.instance(e.uuid), 'jail')), 'adopted by its jail');
          } finally {
            await driver.close();
          }
        }
        // two clones at once: one of them finds no free warm VM, and from then on the pool keeps two
        // of the shape (machines.warmVms is 2), so the next burst finds one each
        await poll('a warm VM waits', async () => warmVms().length > 0, 30_000, 50);
        const burst = await Promise.all(
          ['uk-c3', 'uk-c4'].map((name) =>
            h.call('POST', '/v1/instances', t, {
              name,
              template: { name: 'uk-tpl' },
              autostart: true,
              wait_timeout_ms: 60_000,
            }),
          ),
        );
        for (const r of burst) assert.equal(r.body.data.instances[0].state, 'running', r.text);
        await poll('two warm VMs wait after a burst of restores', async () => warmVms().length === 2, 30_000, 50);
        const del = await h.call('DELETE', '/v1/instances/templates', t, { name: 'uk-tpl' });
        assert.equal(del.body.status, 'success', del.text);
      },
    );

    test(
      'c-http (Unikraft), stateful scale-to-zero: woken from its snapshot it answers, with no second boot banner',
      { skip: requirePart(!UK && 'no Unikraft kernels (set UNIHOST_UNIKRAFT_DIR; default ../shared/unikraft)') },
      async () => {
        const web = await create(
          'uk',
          'c-http:latest',
          [{ port: 8443, destination_port: 8080, handlers: ['tls'] }],
          16,
          {
            scale_to_zero: { policy: 'on', stateful: true, cooldown_time_ms: 1000 },
          },
        );
        await inState('uk', 'standby');
        const i = await get('uk');
        assert.equal(i.snapshot.reason, 'standby');
        process.stderr.write(`stateful standby of c-http (16 MB): snapshot of ${i.snapshot.size_bytes} bytes\n`);
        const t0 = Date.now();
        const answer = await tlsGet(gwc.dataPlane!.boundPort(8443)!, web.fqdn, ca);
        process.stderr.write(
          `stateful wake -> first answer through the gateway (c-http, TCP): ${Date.now() - t0} ms\n`,
        );
        assert.match(answer, /^HTTP\/1\.1 200[\s\S]*Hello from Unikraft!/);
        const now = await get('uk');
        assert.equal(now.state, 'running');
        assert.equal(now.start_count, 2);
        assert.equal(consoleOf(web.uuid).match(/Telesto/g)?.length, 1, 'one boot banner');

        // over the snapshot quota: no snapshot, a plain standby (c-http ignores shutdown: ended, 20)
        // and a notice; the next start boots afresh
        await h.daemon.services.users.setQuotas('snap', { hard: { snapshot_mb: 1 }, limits: {} });
        try {
          await h.call('PUT', '/v1/instances/suspend', t, { name: 'uk' });
          await inState('uk', 'standby');
          const plain = await get('uk');
          assert.equal(plain.snapshot, undefined);
          assert.equal(plain.stop_reason, 28, 'the user stopped it, forced: c-http ignores shutdown requests');
          const n = await notices('uk');
          assert.equal(n.length, 1, JSON.stringify(n));
          assert.match(
            n[0]!,
            /no memory snapshot: quota 'snapshot_mb' would be exceeded \(0 MiB used \+ up to 16 MiB > 1 MiB\)/,
          );
          const st = await h.call('PUT', '/v1/instances/start', t, { name: 'uk', wait_timeout_ms: 60_000 });
          assert.equal(st.body.data.instances[0].state, 'running', st.text);
          assert.equal(consoleOf(web.uuid).match(/Telesto/g)?.length, 2, 'booted afresh');
        } finally {
          await h.daemon.services.users.setQuotas('snap', { hard: { snapshot_mb: 4096 }, limits: {} });
        }
      },
    );
  });
}
