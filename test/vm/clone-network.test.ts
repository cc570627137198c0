// Clones of a template on the private network (docs/snapshots.md,
// "Templates"): a clone's guest keeps the template's address and MAC in its
// memory; HostNetwork translates them on the clone's tap, so every other
// party sees the clone's own address. Against the real kernel, with real
// TCP, inside network namespaces this test creates (and deletes): one for
// the host side (bridge, rules) and one per "guest", joined to the bridge by
// a veth named like a tap (what QEMU's tap is to the bridge). Needs root,
// iproute2 and nftables; skipped otherwise.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { HostNetwork, tapName, type TapSpec } from '../../src/network/host.js';
import { macFor } from '../../src/network/address.js';
import { hasCommand, requirePart } from '../helpers/require.js';

const canRun = process.getuid?.() === 0 && hasCommand('ip') && hasCommand('nft');

const tag = randomBytes(3).toString('hex');
const hostNs = `uhcl-${tag}-h`;
const run = (ns: string, ...argv: string[]): string =>
  execFileSync('ip', ['netns', 'exec', ns, ...argv], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });

/** A "guest": a namespace whose eth0 (the far end of a veth named like the instance's tap) has `ip`/`mac`. */
interface Guest {
  ns: string;
  spec: TapSpec;
  server?: ChildProcess;
}

function guest(name: string, userId: string, own: { ip: string; mac: string }, inGuest = own): Guest {
  const ns = `uhcl-${tag}-${name}`;
  const tap = tapName(randomUUID());
  execFileSync('ip', ['netns', 'add', ns]);
  execFileSync('ip', ['-n', hostNs, 'link', 'add', tap, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns]);
  run(ns, 'ip', 'link', 'set', 'lo', 'up');
  run(ns, 'ip', 'link', 'set', 'eth0', 'address', inGuest.mac);
  run(ns, 'ip', 'addr', 'add', `${inGuest.ip}/16`, 'dev', 'eth0');
  run(ns, 'ip', 'link', 'set', 'eth0', 'up');
  run(ns, 'ip', 'route', 'add', 'default', 'via', '10.78.0.1');
  const spec: TapSpec = { tap, userId, ip: own.ip, mac: own.mac, ...(inGuest !== own ? { guest: inGuest } : {}) };
  return { ns, spec };
}

/** An HTTP server in the guest on its own (in-guest) address: answers `who` and the client address it saw. */
async function serve(g: Guest, who: string): Promise<void> {
  const ip = g.spec.guest?.ip ?? g.spec.ip;
  const code = `require('http').createServer((q, s) => s.end('${who} ' + q.socket.remoteAddress)).listen(8080, '${ip}', () => console.log('up'))`;
  g.server = spawn('ip', ['netns', 'exec', g.ns, process.execPath, '-e', code], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  await new Promise<void>((resolve, reject) => {
    g.server!.stdout!.once('data', () => resolve());
    g.server!.once('exit', (c) => reject(new Error(`the server in ${g.ns} ended (${c})`)));
  });
}

/** GET http://ip:8080/ from namespace `ns` with curl-less Node: the body, or the error's code. */
function get(ns: string, ip: string): string {
  const code = `require('http').get({host: '${ip}', port: 8080, timeout: 2000}, (r) => { let b = ''; r.on('data', (d) => b += d); r.on('end', () => console.log(b)); }).on('error', (e) => console.log('ERR ' + e.code)).on('timeout', function () { console.log('ERR timeout'); this.destroy(); })`;
  return run(ns, process.execPath, '-e', code).trim();
}

describe(
  'clones of a template on the private network (address translation on the tap)',
  { skip: requirePart(!canRun && 'needs root, ip and nft') },
  () => {
    // the template's identity, which every clone's guest keeps in its memory
    const template = { ip: '10.78.0.5', mac: macFor('template:nic') };
    const guests: Guest[] = [];
    let net: HostNetwork;
    let c1: Guest, c2: Guest, other: Guest, bob: Guest;

    before(async () => {
      execFileSync('ip', ['netns', 'add', hostNs]);
      run(hostNs, 'ip', 'link', 'set', 'lo', 'up');
      net = new HostNetwork({ subnet: '10.78.0.0/16', netns: hostNs });
      await net.setup();
      c1 = guest('c1', 'alice', { ip: '10.78.0.6', mac: macFor('c1:nic') }, template);
      c2 = guest('c2', 'alice', { ip: '10.78.0.8', mac: macFor('c2:nic') }, template);
      other = guest('o', 'alice', { ip: '10.78.0.7', mac: macFor('o:nic') });
      bob = guest('b', 'bob', { ip: '10.78.0.9', mac: macFor('b:nic') });
      guests.push(c1, c2, other, bob);
      // the veths exist already: ensureTap takes them as it takes a tap QEMU re-opened
      for (const g of guests) await net.ensureTap(g.spec);
      await serve(c1, 'clone-1');
      await serve(c2, 'clone-2');
    });
    after(async () => {
      for (const g of guests) {
        g.server?.kill('SIGKILL');
        execFileSync('ip', ['netns', 'del', g.ns]);
      }
      await net?.teardown().catch(() => undefined);
      execFileSync('ip', ['netns', 'del', hostNs]);
    });

    test('two clones with the same guest address each answer on their own address, to the host and to a peer', () => {
      assert.equal(get(other.ns, '10.78.0.6'), 'clone-1 10.78.0.7', 'the peer reaches clone 1 and is seen as itself');
      assert.equal(get(other.ns, '10.78.0.8'), 'clone-2 10.78.0.7');
      assert.equal(get(hostNs, '10.78.0.6'), 'clone-1 10.78.0.1', 'the host (gateway, probes) reaches clone 1');
      assert.equal(get(hostNs, '10.78.0.8'), 'clone-2 10.78.0.1');
      // nobody sees the guests' shared address: the host learnt each clone's own MAC
      const neigh = run(hostNs, 'ip', 'neigh', 'show', 'dev', 'uhbr0');
      assert.match(neigh, new RegExp(`10\\.78\\.0\\.6 lladdr ${c1.spec.mac}`));
      assert.match(neigh, new RegExp(`10\\.78\\.0\\.8 lladdr ${c2.spec.mac}`));
      assert.doesNotMatch(neigh, /10\.78\.0\.5 /);
    });

    test("a clone's own connections leave with its own address; the anti-spoofing holds", async () => {
      const seen: Guest = { ns: other.ns, spec: { ...other.spec } };
      await serve(seen, 'peer');
      try {
        assert.equal(get(c1.ns, '10.78.0.7'), 'peer 10.78.0.6', 'the peer sees clone 1 as 10.78.0.6');
        assert.equal(get(c2.ns, '10.78.0.7'), 'peer 10.78.0.8');
      } finally {
        seen.server?.kill('SIGKILL');
      }
    });

    test("another user's instance reaches no clone (isolation is applied to the clone's own address)", () => {
      assert.match(get(bob.ns, '10.78.0.6'), /^ERR /);
    });

    test('a clone booted afresh (no guest address) is translated no more', async () => {
      const rules = (): string => run(hostNs, 'nft', 'list', 'table', 'bridge', 'unihost');
      assert.match(rules(), new RegExp(`iifname "${c2.spec.tap}" ether saddr ${c2.spec.guest!.mac} ether saddr set`));
      const { guest: _, ...cold } = c2.spec;
      await net.ensureTap(cold);
      assert.doesNotMatch(rules(), new RegExp(c2.spec.tap + '" ether saddr'));
      assert.match(get(other.ns, '10.78.0.6'), /^clone-1 /, 'clone 1 is still translated');
    });
  },
);
