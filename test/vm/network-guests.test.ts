// The private network with real guests, all inside a network namespace this
// test creates (and deletes): HostNetwork's bridge/taps/rules, the .internal
// DNS server (a child process in the namespace), and three microVMs:
//   a  alice  http  (serves :8080)
//   b  alice  fetch (a.internal:8080, a by IP, the host's non-DNS port)
//   c  bob    fetch (a by IP, a.internal)
// Proves: same user reaches by name and IP; another user cannot (neither by
// IP nor by name); guests cannot reach host ports other than DNS; the host
// reaches a guest's port; a daemon "restart" (fresh HostNetwork: setup +
// sync) keeps running guests connected and removes leftovers.
// Needs root, ip, nft, qemu-system-x86_64 and guest/out (guest/build-images.sh).
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes, randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { HostNetwork, tapName, type TapSpec } from '../../src/network/host.js';
import { requirePart } from '../helpers/require.js';
import { macFor } from '../../src/network/address.js';
import { hostTscKhz } from '../../src/machines/qemu/argv.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const OUT = process.env.UNIHOST_GUEST_OUT ?? join(root, 'guest/out');
const has = (cmd: string): boolean => {
  try {
    execFileSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
};
const ready =
  process.getuid?.() === 0 &&
  ['ip', 'nft', 'qemu-system-x86_64', 'curl'].every(has) &&
  ['vmlinux', 'http.initrd', 'fetch.initrd'].every((f) => existsSync(join(OUT, f)));

const ns = `uhtest-${randomBytes(4).toString('hex')}`;
const SUBNET = '10.99.0.0/24';
const GW = '10.99.0.1';
const HOST_PORT = 8081; // a host service on the gateway address guests must not reach
const work = mkdtempSync(join(tmpdir(), 'uhnet-'));
const children: ChildProcess[] = [];

interface Guest extends TapSpec {
  name: string;
  app: 'http' | 'fetch';
  args: string[];
  console: string;
}
function guest(name: string, userId: string, ip: string, app: Guest['app'], args: string[] = []): Guest {
  const id = randomUUID();
  return {
    name,
    userId,
    ip,
    app,
    args,
    tap: tapName(id),
    mac: macFor(`${id}:nic0`),
    console: join(work, `${name}.con`),
  };
}
const a = guest('a', 'alice', '10.99.0.2', 'http');
const b = guest('b', 'alice', '10.99.0.3', 'fetch', [
  'http://a.internal:8080/',
  'http://10.99.0.2:8080/',
  `http://${GW}:${HOST_PORT}/`,
]);
const c = guest('c', 'bob', '10.99.0.4', 'fetch', ['http://10.99.0.2:8080/', 'http://a.internal:8080/']);
const guests = [a, b, c];

function boot(g: Guest, net: HostNetwork): void {
  const tsc = hostTscKhz();
  const append = [
    'console=ttyS0 quiet panic=-1 oops=panic mitigations=off cryptomgr.notests',
    tsc ? `tsc_early_khz=${tsc}` : '',
    `netdev.ip=${net.netdevIp(g.ip)}`,
    g.app === 'fetch' ? 'env.vars=[ "FETCH_INTERVAL=1" "FETCH_TIMEOUT=2" ]' : '',
    '--',
    ...g.args,
  ].join(' ');
  const argv = [
    ...['netns', 'exec', ns, 'qemu-system-x86_64', '-M', 'microvm', '-accel', 'tcg,tb-size=32', '-cpu', 'max'],
    ...['-smp', '1', '-m', '128', '-nodefaults', '-no-user-config', '-nographic', '-no-reboot'],
    ...['-kernel', join(OUT, 'vmlinux'), '-initrd', join(OUT, `${g.app}.initrd`), '-append', append],
    ...['-serial', `file:${g.console}`],
    ...['-netdev', `tap,id=net0,ifname=${g.tap},script=no,downscript=no`],
    ...['-device', `virtio-net-device,netdev=net0,mac=${g.mac}`],
  ];
  children.push(spawn('ip', argv, { stdio: 'ignore' }));
}

const con = (g: Guest): string => (existsSync(g.console) ? readFileSync(g.console, 'utf8').replace(/\r/g, '') : '');
/** fetch lines of a guest for one URL: ['ok', 'failed', ...] in order. */
const results = (g: Guest, url: string): string[] =>
  con(g)
    .split('\n')
    .map((l) => l.split(' '))
    .filter((w) => w[0] === 'fetch:' && w[2] === url)
    .map((w) => w[3]!);

async function until<T>(what: string, fn: () => T | undefined | false, timeoutMs = 120_000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(250);
  }
}

/** The .internal DNS server plus a host-only HTTP service, as a child in the namespace. */
function startHostSide(): Promise<void> {
  const script = join(work, 'host-side.mts');
  const map: Record<string, Record<string, string>> = {};
  for (const g of guests) {
    map[g.ip] = Object.fromEntries(guests.filter((o) => o.userId === g.userId).map((o) => [o.name, o.ip]));
  }
  writeFileSync(
    script,
    `import http from 'node:http';
import { InternalDns } from ${JSON.stringify(join(root, 'src/network/dns.ts'))};
const map = ${JSON.stringify(map)};
const dns = new InternalDns({ host: '${GW}', port: 53, resolve: (client, name) => map[client]?.[name] });
await dns.start();
http.createServer((_q, s) => s.end('host-only\\n')).listen(${HOST_PORT}, '${GW}', () => console.log('ready'));
`,
  );
  const p = spawn('ip', ['netns', 'exec', ns, process.execPath, '--import', 'tsx', script], {
    cwd: root,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  children.push(p);
  return new Promise((resolve, reject) => {
    p.stdout!.on('data', (d: Buffer) => d.toString().includes('ready') && resolve());
    p.once('exit', (code) => reject(new Error(`host side exited ${code}`)));
  });
}

/** HTTP GET from the host side of the namespace (curl). */
function hostGet(url: string): string | undefined {
  try {
    return execFileSync('ip', ['netns', 'exec', ns, 'curl', '-sS', '-f', '-m', '3', url], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    });
  } catch {
    return undefined;
  }
}

describe(
  'private network with real guests',
  { skip: requirePart(!ready && 'needs root, ip, nft, qemu and guest/out') },
  () => {
    const opts = { subnet: SUBNET, netns: ns };

    before(async () => {
      execFileSync('ip', ['netns', 'add', ns]);
      execFileSync('ip', ['-n', ns, 'link', 'set', 'lo', 'up']);
      const net = new HostNetwork(opts);
      await net.setup();
      for (const g of guests) await net.ensureTap(g);
      await startHostSide();
      for (const g of guests) boot(g, net);
    });

    after(async () => {
      for (const p of children) if (p.exitCode === null) p.kill('SIGKILL');
      await Promise.all(children.map((p) => (p.exitCode === null ? new Promise((r) => p.once('exit', r)) : null)));
      execFileSync('ip', ['netns', 'del', ns]);
      if (process.env.UNIHOST_KEEP_WORK) console.log(`work dir kept: ${work}`);
      else rmSync(work, { recursive: true, force: true });
    });

    test('the host reaches a guest port over the bridge', async () => {
      await until('a serving', () => /http: listening/.test(con(a)));
      const body = await until('host -> a:8080', () => hostGet('http://10.99.0.2:8080/'), 60_000);
      assert.match(body, /hello from unihost http/);
    });

    test('a guest reaches another guest of its user by <name>.internal and by IP', async () => {
      await until('b -> a.internal ok', () => results(b, 'http://a.internal:8080/').includes('ok'));
      await until('b -> a by IP ok', () => results(b, 'http://10.99.0.2:8080/').includes('ok'));
      assert.match(con(b), /fetch: \d+ http:\/\/a\.internal:8080\/ ok hello from unihost http/);
    });

    test("a guest of another user reaches neither the other user's guest nor its name", async () => {
      // a serves (b got answers above): c's attempts from now on must fail
      const n = results(c, 'http://a.internal:8080/').length;
      await until('c: 2 more rounds', () => results(c, 'http://a.internal:8080/').length >= n + 2);
      assert.deepEqual([...new Set(results(c, 'http://10.99.0.2:8080/'))], ['failed']);
      assert.deepEqual([...new Set(results(c, 'http://a.internal:8080/'))], ['failed']);
    });

    test('guests reach the host only on DNS, not on other host ports', async () => {
      assert.equal(hostGet(`http://${GW}:${HOST_PORT}/`), 'host-only\n', 'the service itself works');
      await until('b: 2 tries of the host port', () => results(b, `http://${GW}:${HOST_PORT}/`).length >= 2);
      assert.deepEqual([...new Set(results(b, `http://${GW}:${HOST_PORT}/`))], ['failed']);
    });

    test('a daemon restart (fresh setup + sync) keeps running guests connected and removes leftovers', async () => {
      execFileSync('ip', ['-n', ns, 'tuntap', 'add', 'dev', 'uhfeedfacefeed', 'mode', 'tap']);
      const okBefore = results(b, 'http://10.99.0.2:8080/').length;
      const net = new HostNetwork(opts);
      await net.setup();
      const r = await net.sync(guests);
      assert.deepEqual(r, { created: [], removed: ['uhfeedfacefeed'] });
      assert.match(hostGet('http://10.99.0.2:8080/') ?? '', /hello from unihost http/);
      await until('b: 2 more rounds', () => results(b, 'http://10.99.0.2:8080/').length >= okBefore + 2);
      const later = results(b, 'http://10.99.0.2:8080/').slice(okBefore);
      assert.ok(
        later.every((x) => x === 'ok'),
        `b -> a after the restart: ${later.join(' ')}`,
      );
      assert.deepEqual([...new Set(results(c, 'http://10.99.0.2:8080/'))], ['failed'], 'still isolated');
    });
  },
);
