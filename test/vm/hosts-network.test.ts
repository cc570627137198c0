/**
 * Three hosts on one machine (docs/hosts.md): each a network namespace this
 * test makes, joined by a test-made link (a bridge in a fourth namespace,
 * the hosts' addresses on it), with an agent process in it
 * (`unihost serve --role agent`, host h1 also `gateway`); the API server runs
 * here, PostgreSQL on its unix socket. Real QEMU guests on the private
 * network across hosts (VXLAN):
 *   - alice's `web` (the http image) on h2 serves alice's `client` on h1 by
 *     `web.internal` and by address; bob's `prober` on h3 reaches neither;
 *   - the gateway on h1 publishes `web`, which runs on h2;
 *   - host h2 dies (everything in its namespace SIGKILLed, the namespace
 *     deleted): `web` (restart policy `always`) comes up on h1 or h3 with its
 *     address, serves through the gateway again, and `client` reaches it.
 * Traffic stays inside the namespaces the test made and deletes.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DEFAULTS } from '../../src/config.js';
import { LocalConsoles } from '../../src/machines/console-log.js';
import { pathsFor } from '../../src/paths.js';
import { importGuestImages } from '../../src/images/guest.js';
import { startHarness, type Harness } from '../helpers/harness.js';
import { postgresMissing, testPostgres } from '../helpers/postgres.js';
import { canRunNetns } from '../helpers/netns.js';
import { requirePart } from '../helpers/require.js';
import { agentArgv, guestOut, poll, qemuProcs, ROOT, GUEST_CPU_STEPS } from '../helpers/vm.js';

const LEASE_MS = 3000;
const SUBNET = '10.67.0.0/24';
const HOSTS = ['h1', 'h2', 'h3'] as const;
type HostName = (typeof HOSTS)[number];
const tag = randomBytes(3).toString('hex');
const NS = { ul: `uhhn-ul-${tag}`, h1: `uhhn-h1-${tag}`, h2: `uhhn-h2-${tag}`, h3: `uhhn-h3-${tag}` };
const ADDR: Record<HostName, string> = { h1: '10.98.0.1', h2: '10.98.0.2', h3: '10.98.0.3' };
const missing = postgresMissing() ?? (canRunNetns() ? undefined : 'needs root, ip, nft, QEMU and mkfs.ext4');

const ip = (...a: string[]): string => execFileSync('ip', a, { encoding: 'utf8' });

/** `GET /` for `fqdn` through the gateway of host h1 (on its namespace's loopback): status and body, or the error. */
function viaGateway(fqdn: string, timeoutMs = 5000): string {
  const js =
    `require('http').get({host:'127.0.0.1',port:80,headers:{host:${JSON.stringify(fqdn)}},timeout:${timeoutMs}},` +
    `r=>{let b='';r.on('data',d=>b+=d);r.on('end',()=>console.log(r.statusCode+' '+b.trim()))})` +
    `.on('error',e=>console.log('error '+e.message)).on('timeout',function(){this.destroy(new Error('timeout'))})`;
  const r = spawnSync('ip', ['netns', 'exec', NS.h1, process.execPath, '-e', js], {
    encoding: 'utf8',
    timeout: timeoutMs + 10_000,
  });
  return (r.stdout || r.stderr).trim();
}

describe('three hosts, one private network, a gateway and a host that dies', { skip: requirePart(missing) }, () => {
  let url: string;
  let api: Harness;
  let alice: string;
  let bob: string;
  const dirs = {} as Record<HostName, string>;
  const procs = {} as Record<HostName, ChildProcess>;
  const logs = {} as Record<HostName, string>;
  const ids: Record<string, string> = {};

  const startAgent = (h: HostName): void => {
    const dir = dirs[h];
    writeFileSync(
      join(dir, 'config.json'),
      JSON.stringify({
        subnet: SUBNET,
        host: { leaseMs: LEASE_MS, watchdog: 'on' },
        network: { enabled: true, driver: 'host', dns: true, dnsPort: 53 },
        gateway: { enabled: h === 'h1' },
        machines: { accel: 'tcg', ksm: false },
        capacity: { memoryMb: 2048 },
      }),
    );
    const argv = agentArgv({
      name: h,
      dir,
      storeUrl: url,
      config: join(dir, 'config.json'),
      roles: h === 'h1' ? 'agent,gateway' : 'agent',
      address: ADDR[h],
    });
    const p = spawn('ip', ['netns', 'exec', NS[h], process.execPath, ...argv], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, UNIHOST_LOG_LEVEL: 'info' },
    });
    logs[h] = '';
    p.stdout!.on('data', (d: Buffer) => (logs[h] += d.toString()));
    p.stderr!.on('data', (d: Buffer) => (logs[h] += d.toString()));
    procs[h] = p;
  };
  const hosts = () => api.daemon.services.hosts.list();
  const inst = (name: string) => api.daemon.store.read((tx) => tx.instances.getAny(ids[name]!));
  const hostOf = async (name: string) => {
    const at = (await inst(name))?.host_id;
    return (await hosts()).find((h) => h.id === at)?.name;
  };
  /** the console log of an instance, read where its host keeps it */
  const consoleOf = async (name: string): Promise<string> => {
    const h = (await hostOf(name)) as HostName;
    const c = await new LocalConsoles((id) => pathsFor(dirs[h]).instance(id)).read(ids[name]!, 0, 1 << 20);
    return c.output.toString('utf8');
  };
  /** creates an instance on `on` only (the other hosts cordoned meanwhile) */
  const createOn = async (on: HostName, token: string, body: Record<string, unknown>) => {
    for (const h of HOSTS) await api.daemon.services.hosts.mark(h, h === on ? 'live' : 'cordoned');
    try {
      const r = await api.call('POST', '/v1/instances', token, { autostart: true, wait_timeout_ms: 180_000, ...body });
      const e = r.body.data?.instances?.[0];
      assert.equal(e?.state, 'running', `${String(body.name)}: ${r.text}\n${logs[on].slice(-3000)}`);
      ids[body.name as string] = e.uuid;
      return e;
    } finally {
      for (const h of HOSTS) await api.daemon.services.hosts.mark(h, 'live');
    }
  };

  before(async () => {
    url = await testPostgres().createDb();
    for (const ns of Object.values(NS)) {
      ip('netns', 'add', ns);
      ip('-n', ns, 'link', 'set', 'lo', 'up');
    }
    // the hosts' network: a bridge in its own namespace, a veth per host, room for VXLAN's 50 bytes
    ip('-n', NS.ul, 'link', 'add', 'ul', 'type', 'bridge');
    ip('-n', NS.ul, 'link', 'set', 'ul', 'up');
    for (const h of HOSTS) {
      ip('-n', NS[h], 'link', 'add', 'ul0', 'mtu', '1600', 'type', 'veth', 'peer', 'name', h, 'netns', NS.ul);
      ip('-n', NS.ul, 'link', 'set', h, 'mtu', '1600', 'master', 'ul', 'up');
      ip('-n', NS[h], 'addr', 'add', `${ADDR[h]}/24`, 'dev', 'ul0');
      ip('-n', NS[h], 'link', 'set', 'ul0', 'up');
    }
    api = await startHarness({
      store: { url },
      roles: ['api'],
      subnet: SUBNET,
      host: { ...DEFAULTS.host, leaseMs: LEASE_MS },
    });
    alice = await api.user('alice', true);
    bob = await api.user('bob', true);
    await importGuestImages(api.daemon.services.images, guestOut(), ['http', 'fetch']);
    for (const h of HOSTS) {
      dirs[h] = mkdtempSync(join(tmpdir(), `unihost-test-hn-${h}-`));
      startAgent(h);
    }
    await poll(
      'three agents live',
      async () => (await hosts()).filter((h) => h.state === 'live').length === 3,
      90_000,
      200,
    );
  });

  after(async () => {
    for (const p of Object.values(procs)) p.kill('SIGTERM');
    await Promise.all(
      Object.values(procs).map(
        (p) =>
          new Promise((r) => {
            if (p.exitCode !== null || p.signalCode !== null) return r(null);
            const t = setTimeout(() => p.kill('SIGKILL'), 15_000);
            p.once('exit', () => r(clearTimeout(t)));
          }),
      ),
    );
    // whatever is left in the namespaces (QEMUs, watchdogs, HAProxy) goes with them
    for (const ns of Object.values(NS)) {
      const pids =
        spawnSync('ip', ['netns', 'pids', ns], { encoding: 'utf8' }).stdout?.split('\n').filter(Boolean) ?? [];
      for (const p of pids) spawnSync('kill', ['-9', p]);
      spawnSync('ip', ['netns', 'del', ns]);
    }
    for (const q of qemuProcs(Object.values(dirs))) process.kill(q.pid, 'SIGKILL');
    for (const d of Object.values(dirs)) rmSync(d, { recursive: true, force: true });
    await api?.close();
  });

  let fqdn = '';
  let webIp = '';

  test('guests on two hosts reach each other by name; another user on a third host reaches neither', async () => {
    const web = await createOn('h2', alice, {
      name: 'web',
      image: 'http:latest',
      memory_mb: 128,
      restart_policy: 'always',
      service_group: { services: [{ port: 80, destination_port: 8080, handlers: ['http'] }] },
    });
    webIp = web.private_ip;
    fqdn = web.service_group.domains[0].fqdn;
    const fetchEnv = { FETCH_INTERVAL: '1', FETCH_TIMEOUT: '2' };
    await createOn('h1', alice, {
      name: 'client',
      image: 'fetch:latest',
      memory_mb: 128,
      args: ['http://web.internal:8080/', `http://${webIp}:8080/`],
      env: fetchEnv,
    });
    await createOn('h3', bob, {
      name: 'prober',
      image: 'fetch:latest',
      memory_mb: 128,
      args: [`http://${webIp}:8080/`, 'http://web.internal:8080/'],
      env: fetchEnv,
    });
    assert.deepEqual([await hostOf('web'), await hostOf('client'), await hostOf('prober')], ['h2', 'h1', 'h3']);
    const ok = (name: string) => new RegExp(`fetch: \\d+ http://${name.replaceAll('.', '\\.')}:8080/ ok`);
    await poll(
      'client (h1) fetched web (h2) by name and by address',
      async () => {
        const l = await consoleOf('client');
        return ok('web.internal').test(l) && ok(webIp).test(l);
      },
      90_000,
    );
    await poll(
      'prober tried at least twice',
      async () => /fetch: 2 http:\S+ (ok|failed)/.test(await consoleOf('prober')),
      90_000,
    );
    const pl = await consoleOf('prober');
    assert.doesNotMatch(pl, / ok/, `bob's guest on h3 reached alice's on h2:\n${pl}`);
    assert.match(pl, /fetch: 1 http:\/\/10\.67\.0\.\d+:8080\/ failed/);
    assert.match(pl, /fetch: 1 http:\/\/web\.internal:8080\/ failed/);
  });

  test('the gateway on h1 serves an instance that runs on h2', async () => {
    await poll('web through the gateway', async () => /^200 .*hello from unihost/s.test(viaGateway(fqdn)), 60_000);
  });

  test('a scale-to-zero master on h3 sleeps; a request through the gateway on h1 wakes it there', async (t) => {
    const e = await createOn('h3', alice, {
      name: 'sleeper',
      image: 'http:latest',
      memory_mb: 128,
      scale_to_zero: { policy: 'on', cooldown_time_ms: 1000 },
      service_group: { services: [{ port: 80, destination_port: 8080, handlers: ['http'] }] },
    });
    const sleeperFqdn = e.service_group.domains[0].fqdn as string;
    await poll('sleeper in standby', async () => (await inst('sleeper'))?.state === 'standby', 60_000, 200);
    const sentAt = Date.now();
    // the activator on h1 holds the request while h3's agent boots the master (a Linux guest: seconds under TCG)
    const answer = viaGateway(sleeperFqdn, 90_000);
    assert.match(answer, /^200 .*hello from unihost/s, `${answer}\nh1:\n${logs.h1.slice(-2000)}`);
    t.diagnostic(`woken and answered ${((Date.now() - sentAt) / 1000).toFixed(1)} s after the request`);
    assert.equal(await hostOf('sleeper'), 'h3', 'woken where it slept');
    const i = await inst('sleeper');
    assert.ok(i && ['running', 'standby'].includes(i.state), `sleeper is ${i?.state}`);
  });

  test('autoscale across hosts: a loaded master on h2 gets a clone on another host, and loses it when idle', async (t) => {
    const m = await createOn('h2', alice, {
      name: 'busy',
      image: 'http:latest',
      memory_mb: 128,
      service_group: { services: [{ port: 80, destination_port: 8080, handlers: ['http'] }] },
    });
    const busyFqdn = m.service_group.domains[0].fqdn as string;
    const group = (await api.call('GET', '/v1/services', alice, { uuid: m.service_group.uuid })).body.data
      .service_groups[0];
    const r = await api.call('POST', '/v1/services/autoscale', alice, {
      uuid: group.uuid,
      master: { uuid: m.uuid },
      min_size: 1,
      max_size: 2,
      warmup_time_ms: 2000,
      cooldown_time_ms: 4000,
      policies: [GUEST_CPU_STEPS],
    });
    assert.equal(r.status, 200, r.text);
    const members = async () =>
      (await api.daemon.store.read((tx) => tx.instances.inGroup(group.uuid))).filter((i) => i.state !== 'stopped');
    // five request loops through the gateway on h1 (busybox httpd forks per connection: the master's CPU rises)
    const loops =
      `const http=require('http');let n=0;const go=()=>http.get({host:'127.0.0.1',port:80,headers:{host:${JSON.stringify(busyFqdn)}},timeout:5000},` +
      `r=>{r.resume();r.on('end',()=>{n++;go()})}).on('error',()=>setTimeout(go,50));for(let i=0;i<5;i++)go();` +
      `process.on('SIGTERM',()=>{console.log(n);process.exit(0)})`;
    const load = spawn('ip', ['netns', 'exec', NS.h1, process.execPath, '-e', loops], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let clone: { id: string; host_id: string | null } | undefined;
    try {
      await poll(
        'a clone running',
        async () => {
          clone = (await members()).find((i) => i.id !== m.uuid && i.state === 'running');
          return clone !== undefined;
        },
        120_000,
        500,
      );
    } finally {
      load.kill('SIGTERM');
    }
    const served = await new Promise<string>((res) => {
      let out = '';
      load.stdout!.on('data', (d: Buffer) => (out += d.toString()));
      load.once('exit', () => res(out.trim()));
    });
    const where = (await hosts()).find((h) => h.id === clone!.host_id)?.name;
    t.diagnostic(`clone on ${where} after ${served} requests through h1`);
    assert.notEqual(where, 'h2', "a group's clone goes to another host than its master");
    assert.equal((await members()).length, 2, 'max_size 2: one clone');
    await poll('back to the master alone', async () => (await members()).length === 1, 120_000, 500);
    assert.equal((await members())[0]!.id, m.uuid);
  });

  test('host h2 dies: web comes up elsewhere with its address, and serves through the gateway again', async (t) => {
    const h2 = (await hosts()).find((h) => h.name === 'h2')!;
    const killedAt = Date.now();
    const pids = spawnSync('ip', ['netns', 'pids', NS.h2], { encoding: 'utf8' }).stdout.split('\n').filter(Boolean);
    for (const p of pids) spawnSync('kill', ['-9', p]);
    ip('netns', 'del', NS.h2);
    await poll(
      'h2 declared dead',
      async () => (await hosts()).find((h) => h.id === h2.id)?.state === 'dead',
      30_000,
      100,
    );
    t.diagnostic(`h2 dead ${((Date.now() - killedAt) / 1000).toFixed(1)} s after it died`);
    await poll(
      'web running on another host',
      async () => {
        const i = await inst('web');
        return i?.state === 'running' && i.host_id !== h2.id;
      },
      120_000,
      200,
    );
    const runningAfter = (Date.now() - killedAt) / 1000;
    assert.equal((await inst('web'))!.private_ip, webIp, 'the same private address');
    assert.ok(['h1', 'h3'].includes((await hostOf('web'))!));
    await poll(
      'web through the gateway again',
      async () => /^200 .*hello from unihost/s.test(viaGateway(fqdn)),
      60_000,
    );
    const servingAfter = (Date.now() - killedAt) / 1000;
    // the client on h1 keeps fetching: it reaches web again, wherever it now runs
    const before = ((await consoleOf('client')).match(/ ok/g) ?? []).length;
    await poll(
      'client reaches web again',
      async () => ((await consoleOf('client')).match(/ ok/g) ?? []).length > before + 1,
      60_000,
    );
    const prober = await consoleOf('prober');
    assert.doesNotMatch(prober, / ok/, `bob's guest reached alice's after the move:\n${prober}`);
    t.diagnostic(`running again ${runningAfter.toFixed(1)} s, serving ${servingAfter.toFixed(1)} s after h2 died`);
  });
});
