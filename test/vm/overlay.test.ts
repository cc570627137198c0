// One private network across hosts (docs/hosts.md): two HostNetworks, each
// in a namespace of its own ("hosts" h1 and h2) joined by a test-made
// underlay (a bridge in a third namespace, the hosts' addresses on it), with
// the VXLAN port and rules HostNetwork.setOverlay makes. The "guests" are
// namespaces too: a veth pair whose host end carries the instance's tap name
// (the rules know taps by name) and whose other end has the instance's
// address and MAC. No QEMU: this is the network alone, fast and exact.
// Needs root, iproute2, nftables and the kernel's vxlan; skipped otherwise.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { HostNetwork, tapName, type TapSpec } from '../../src/network/host.js';
import type { Overlay } from '../../src/network/driver.js';
import { bridgeMacFor, hostGateway, macFor, parseSubnet } from '../../src/network/address.js';
import { hasCommand, requirePart } from '../helpers/require.js';

const canRun = process.getuid?.() === 0 && hasCommand('ip') && hasCommand('nft') && hasCommand('bridge');
const SUBNET = '10.66.0.0/24';
const subnet = parseSubnet(SUBNET);
const tag = randomBytes(3).toString('hex');
const NS = { ul: `uhov-ul-${tag}`, h1: `uhov-h1-${tag}`, h2: `uhov-h2-${tag}` };
const ADDR = { h1: '10.99.0.1', h2: '10.99.0.2' };

const ip = (...a: string[]): string => execFileSync('ip', a, { encoding: 'utf8' });
const inNs = (ns: string, ...argv: string[]): string =>
  execFileSync('ip', ['netns', 'exec', ns, ...argv], { encoding: 'utf8' });

interface Guest {
  name: string;
  ns: string;
  host: 'h1' | 'h2';
  spec: TapSpec;
  server?: ChildProcess;
}

/** A "guest": a namespace whose eth0 is a veth peer of the tap-named port on its host's bridge. */
function makeGuest(name: string, host: 'h1' | 'h2', userId: string, addr: string): Guest {
  const id = randomUUID();
  const spec: TapSpec = { tap: tapName(id), userId, ip: addr, mac: macFor(`${id}:nic0`) };
  const ns = `uhov-${name}-${tag}`;
  ip('netns', 'add', ns);
  ip('-n', NS[host], 'link', 'add', spec.tap, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns);
  ip('-n', ns, 'link', 'set', 'eth0', 'address', spec.mac);
  ip('-n', ns, 'addr', 'add', `${addr}/${subnet.prefix}`, 'dev', 'eth0');
  ip('-n', ns, 'link', 'set', 'eth0', 'up');
  ip('-n', ns, 'link', 'set', 'lo', 'up');
  return { name, ns, host, spec };
}

/** Whether a TCP connection from namespace `ns` to `addr:8080` gets the guest's greeting within a second. */
function reaches(ns: string, addr: string): boolean {
  const js = `const s=require('net').connect(8080,'${addr}');s.setTimeout(1000,()=>process.exit(3));s.on('data',d=>{process.stdout.write(d);process.exit(0)});s.on('error',()=>process.exit(2))`;
  const r = spawnSync('ip', ['netns', 'exec', ns, process.execPath, '-e', js], { encoding: 'utf8', timeout: 10_000 });
  return r.status === 0 && r.stdout.startsWith('hello from ');
}

describe(
  'one private network across hosts (VXLAN)',
  { skip: requirePart(!canRun && 'needs root, ip, nft and bridge') },
  () => {
    const nets: Record<'h1' | 'h2', HostNetwork> = {} as never;
    const guests: Guest[] = [];
    const alice = 'user-alice';
    const bob = 'user-bob';

    const overlayFor = (host: 'h1' | 'h2', others = guests): Overlay => {
      const peer = host === 'h1' ? 'h2' : 'h1';
      const slot = peer === 'h1' ? 0 : 1;
      return {
        vni: 4242,
        local: ADDR[host],
        peers: [{ address: ADDR[peer], gateway: hostGateway(subnet, slot), mac: bridgeMacFor('uhbr0', slot) }],
        remote: others
          .filter((g) => g.host !== host)
          .map((g) => ({ ip: g.spec.ip, mac: g.spec.mac, userId: g.spec.userId, host: ADDR[g.host] })),
      };
    };

    before(async () => {
      for (const ns of Object.values(NS)) {
        ip('netns', 'add', ns);
        ip('-n', ns, 'link', 'set', 'lo', 'up');
      }
      // the hosts' network: a bridge in its own namespace, one veth per host; it carries VXLAN's 50 extra bytes
      ip('-n', NS.ul, 'link', 'add', 'ul', 'type', 'bridge');
      ip('-n', NS.ul, 'link', 'set', 'ul', 'up');
      for (const h of ['h1', 'h2'] as const) {
        ip('-n', NS[h], 'link', 'add', 'ul0', 'mtu', '1600', 'type', 'veth', 'peer', 'name', h, 'netns', NS.ul);
        ip('-n', NS.ul, 'link', 'set', h, 'mtu', '1600', 'master', 'ul', 'up');
        ip('-n', NS[h], 'addr', 'add', `${ADDR[h]}/24`, 'dev', 'ul0');
        ip('-n', NS[h], 'link', 'set', 'ul0', 'up');
      }
      nets.h1 = new HostNetwork({ subnet: SUBNET, slot: 0, netns: NS.h1 });
      nets.h2 = new HostNetwork({ subnet: SUBNET, slot: 1, netns: NS.h2 });
      await nets.h1.setup();
      await nets.h2.setup();
      guests.push(
        makeGuest('a1', 'h1', alice, '10.66.0.10'),
        makeGuest('a2', 'h2', alice, '10.66.0.20'),
        makeGuest('b2', 'h2', bob, '10.66.0.21'),
      );
      for (const g of guests) {
        await nets[g.host].ensureTap(g.spec);
        ip('-n', g.ns, 'route', 'add', 'default', 'via', nets[g.host].gateway);
        const js = `require('net').createServer(s=>s.end('hello from ${g.name}\\n')).listen(8080,'0.0.0.0')`;
        g.server = spawn('ip', ['netns', 'exec', g.ns, process.execPath, '-e', js], { stdio: 'ignore' });
      }
      await nets.h1.setOverlay(overlayFor('h1'));
      await nets.h2.setOverlay(overlayFor('h2'));
      // the guests' servers listen (a node process starting in each: slow on a loaded machine)
      for (const g of guests) {
        const listening = (): boolean =>
          spawnSync('ip', ['netns', 'exec', g.ns, 'ss', '-ltnH', 'sport = :8080'], {
            encoding: 'utf8',
          }).stdout.trim() !== '';
        for (const end = Date.now() + 30_000; !listening();) {
          if (Date.now() > end) throw new Error(`the server in ${g.ns} never listened`);
          await new Promise((r) => setTimeout(r, 20));
        }
      }
    });

    after(() => {
      for (const g of guests) {
        g.server?.kill('SIGKILL');
        spawnSync('ip', ['netns', 'del', g.ns]);
      }
      for (const ns of Object.values(NS)) spawnSync('ip', ['netns', 'del', ns]);
    });

    test('each host has its own gateway address and bridge MAC; slot 0 keeps the single host ones', () => {
      assert.equal(nets.h1.gateway, '10.66.0.1');
      assert.equal(nets.h2.gateway, '10.66.0.254');
      assert.notEqual(nets.h1.bridgeMac, nets.h2.bridgeMac);
      const vx = JSON.parse(inNs(NS.h2, 'ip', '-d', '-j', 'link', 'show', 'dev', nets.h2.vxlan))[0];
      assert.equal(vx.master, 'uhbr0');
      assert.equal(vx.linkinfo.info_data.id, 4242);
      assert.equal(vx.linkinfo.info_data.local, ADDR.h2);
      assert.equal(vx.linkinfo.info_data.learning, false);
      const fdb = (
        JSON.parse(inNs(NS.h1, 'bridge', '-j', 'fdb', 'show', 'dev', nets.h1.vxlan)) as { mac: string; dst?: string }[]
      )
        .filter((e) => e.dst)
        .map((e) => `${e.mac} ${e.dst}`)
        .sort();
      const want = ['00:00:00:00:00:00', bridgeMacFor('uhbr0', 1), guests[1]!.spec.mac, guests[2]!.spec.mac]
        .map((m) => `${m} ${ADDR.h2}`)
        .sort();
      assert.deepEqual(fdb, want);
    });

    test("a guest reaches its user's guest on the other host, both ways", () => {
      assert.ok(reaches(guests[0]!.ns, '10.66.0.20'), 'a1 (h1) -> a2 (h2)');
      assert.ok(reaches(guests[1]!.ns, '10.66.0.10'), 'a2 (h2) -> a1 (h1)');
    });

    test('a parked tap back on the bridge gets its MAC pinned again, and its guest is reached again', async () => {
      const a1 = guests[0]!;
      const pinned = (): boolean =>
        (
          JSON.parse(inNs(NS.h1, 'bridge', '-j', 'fdb', 'show', 'dev', a1.spec.tap)) as {
            mac: string;
            state?: string;
          }[]
        ).some((e) => e.mac === a1.spec.mac && e.state === 'static');
      assert.ok(pinned(), 'pinned before');
      await nets.h1.parkTap(a1.spec.tap);
      assert.equal(reaches(guests[1]!.ns, '10.66.0.10'), false, 'a parked tap carries nothing');
      // the forwarding entries read back from the kernel (as after a repair) pin the taps on the bridge only
      (nets.h1 as unknown as { fdb: unknown }).fdb = null;
      await nets.h1.setOverlay({ ...overlayFor('h1'), vni: 4242 });
      const { admitted } = await nets.h1.attachTap(a1.spec);
      await admitted;
      assert.ok(pinned(), 'pinned again');
      assert.ok(reaches(guests[1]!.ns, '10.66.0.10'), 'a2 (h2) -> a1 (h1) again');
    });

    test("no guest reaches another user's guest across hosts", () => {
      assert.equal(reaches(guests[0]!.ns, '10.66.0.21'), false, 'a1 (alice, h1) -> b2 (bob, h2)');
      assert.equal(reaches(guests[2]!.ns, '10.66.0.10'), false, 'b2 (bob, h2) -> a1 (alice, h1)');
    });

    test("a host reaches every guest on another host (the gateway's path), and the reply comes back to it", () => {
      assert.ok(reaches(NS.h1, '10.66.0.20'));
      assert.ok(reaches(NS.h1, '10.66.0.21'));
      assert.ok(reaches(NS.h2, '10.66.0.10'));
    });

    test('setOverlay is idempotent, follows a move, and null takes the host off the hosts network', async () => {
      await nets.h1.setOverlay(overlayFor('h1'));
      assert.ok(reaches(guests[0]!.ns, '10.66.0.20'));
      // a2 "moves" off h2: h1 forgets it, and alice's a1 reaches it no more
      const without = guests.filter((g) => g.name !== 'a2');
      await nets.h1.setOverlay(overlayFor('h1', without));
      assert.equal(reaches(guests[0]!.ns, '10.66.0.20'), false, 'a remote address h1 does not know is not let out');
      await nets.h1.setOverlay(overlayFor('h1'));
      assert.ok(reaches(guests[0]!.ns, '10.66.0.20'));
      await nets.h1.setOverlay(null);
      assert.equal(JSON.parse(inNs(NS.h1, 'ip', '-j', 'link', 'show', 'type', 'vxlan')).length, 0);
      assert.equal(reaches(guests[0]!.ns, '10.66.0.20'), false);
      await nets.h1.setOverlay(overlayFor('h1'));
      assert.ok(reaches(guests[0]!.ns, '10.66.0.20'), 'joined again');
    });

    test('bad overlay input is refused before anything runs', async () => {
      const o = overlayFor('h1');
      await assert.rejects(nets.h1.setOverlay({ ...o, vni: 0 }), /bad VXLAN id/);
      await assert.rejects(nets.h1.setOverlay({ ...o, local: '10.99.0.1; reboot' }), /bad IPv4/);
      await assert.rejects(nets.h1.setOverlay({ ...o, peers: [{ ...o.peers[0]!, mac: 'zz' }] }), /bad MAC/);
    });
  },
);
