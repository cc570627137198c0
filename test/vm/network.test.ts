// HostNetwork against the real kernel, inside a network namespace this test
// creates (and deletes): bridge, taps, sync after a "restart", nft rules.
// Needs root, iproute2 and nftables; skipped otherwise.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { HostNetwork, tapName, type TapSpec } from '../../src/network/host.js';
import { renderDelete, renderRules, renderTapChanges, userKey, type RulesOptions } from '../../src/network/rules.js';
import { macFor } from '../../src/network/address.js';
import { VM_UID_BASE } from '../../src/machines/qemu/jail.js';
import { hasCommand, requirePart } from '../helpers/require.js';
import { poll } from '../helpers/vm.js';

const canRun = process.getuid?.() === 0 && hasCommand('ip') && hasCommand('nft');

const ns = `uhtest-${randomBytes(4).toString('hex')}`;
const sh = (...argv: string[]): string => execFileSync('ip', ['netns', 'exec', ns, ...argv], { encoding: 'utf8' });
interface Link {
  ifindex: number;
  ifname: string;
  master?: string;
  flags: string[];
  address: string;
  linkinfo?: { info_kind?: string };
}
const links = (): Link[] => JSON.parse(sh('ip', '-d', '-j', 'link', 'show')) as Link[];
const link = (name: string): Link | undefined => links().find((l) => l.ifname === name);
const inet4 = (dev: string): string[] =>
  (
    JSON.parse(sh('ip', '-j', '-4', 'addr', 'show', 'dev', dev)) as {
      addr_info: { local: string; prefixlen: number }[];
    }[]
  )
    .flatMap((a) => a.addr_info)
    .map((a) => `${a.local}/${a.prefixlen}`);

function spec(userId: string, ip: string): TapSpec {
  const id = randomUUID();
  return { tap: tapName(id), userId, ip, mac: macFor(`${id}:nic0`) };
}

describe(
  'HostNetwork (in a private network namespace)',
  { skip: requirePart(!canRun && 'needs root, ip and nft') },
  () => {
    const opts = { subnet: '10.77.0.0/16', netns: ns };
    const a1 = spec('alice', '10.77.0.2');
    const a2 = spec('alice', '10.77.0.3');
    const b1 = spec('bob', '10.77.0.4');

    before(() => {
      execFileSync('ip', ['netns', 'add', ns]);
    });
    after(() => {
      execFileSync('ip', ['netns', 'del', ns]);
    });

    test('tapName: uh + 12 hex digits, UUID prefix or hash, ≤ 15 chars', () => {
      assert.equal(tapName('0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0'), 'uh0f1e2d3c4b5a');
      assert.match(tapName('instance-42'), /^uh[0-9a-f]{12}$/);
      assert.notEqual(tapName('instance-42'), tapName('instance-43'));
    });

    test('setup creates the bridge with the gateway address, a fixed MAC, up; idempotent', async () => {
      const net = new HostNetwork(opts);
      await net.setup();
      const br = link('uhbr0')!;
      assert.ok(br, 'bridge exists');
      assert.equal(br.linkinfo?.info_kind, 'bridge');
      assert.ok(br.flags.includes('UP'));
      assert.deepEqual(inet4('uhbr0'), ['10.77.0.1/16']);
      // a stale address (e.g. the subnet changed in the config) is replaced
      sh('ip', 'addr', 'add', '192.168.50.1/24', 'dev', 'uhbr0');
      await net.setup();
      await new HostNetwork(opts).setup();
      assert.deepEqual(inet4('uhbr0'), ['10.77.0.1/16']);
      assert.equal(link('uhbr0')!.address, br.address, 'MAC unchanged');
      assert.equal(net.netdevIp('10.77.0.9'), '10.77.0.9/16:10.77.0.1:10.77.0.1');
    });

    test('ensureTap creates, attaches and raises a tap; idempotent; the MAC of the bridge stays', async () => {
      const net = new HostNetwork(opts);
      await net.sync([]);
      const mac = link('uhbr0')!.address;
      await net.ensureTap(a1);
      await net.ensureTap(a1);
      await net.ensureTap(a2);
      for (const t of [a1, a2]) {
        const l = link(t.tap)!;
        assert.equal(l.linkinfo?.info_kind, 'tun');
        assert.equal(l.master, 'uhbr0');
        assert.ok(l.flags.includes('UP'));
      }
      assert.equal(link('uhbr0')!.address, mac, 'bridge MAC does not follow its ports');
      assert.deepEqual(await net.listTaps(), [a1.tap, a2.tap].sort());
      await net.removeTap(a2.tap);
      await net.removeTap(a2.tap);
      assert.equal(link(a2.tap), undefined);
    });

    test('a tap taken from a VM started in advance (from): renamed, on the bridge and up; the old one deleted after', async () => {
      const net = new HostNetwork(opts);
      await net.setup();
      const index = (tap: string) =>
        (JSON.parse(sh('ip', '-j', 'link', 'show', 'dev', tap)) as { ifindex: number }[])[0]!.ifindex;
      const up = (tap: string) => {
        const l = link(tap)!;
        assert.equal(l.master, 'uhbr0');
        assert.ok(l.flags.includes('UP'));
      };
      // as a warm VM's: made down, on no bridge
      for (const w of ['uwtest0001', 'uwtest0002']) sh('ip', 'tuntap', 'add', 'dev', w, 'mode', 'tap');
      const first = index('uwtest0001');
      const c = spec('carol', '10.77.0.5');
      // the instance's first boot here: no tap of its own yet
      await net.ensureTap(c);
      const own = index(c.tap);
      await (
        await net.attachTap(c, { from: 'uwtest0001' })
      ).admitted;
      assert.notEqual(index(c.tap), own, 'the warm tap replaced the one the instance had');
      up(c.tap);
      assert.equal(link('uwtest0001'), undefined);
      assert.equal(index(c.tap), first);
      // a later restore into another warm VM: that one's tap replaces it, the old device goes off the path
      const second = index('uwtest0002');
      await (
        await net.attachTap(c, { from: 'uwtest0002' })
      ).admitted;
      assert.equal(index(c.tap), second);
      up(c.tap);
      await poll(
        'the set-aside tap is deleted',
        async () => !links().some((l) => l.ifname.startsWith('uhx') || l.ifindex === first),
        10_000,
        50,
      );
      // a warm tap that is gone: refused, and the instance's tap stays as it was
      await assert.rejects(net.attachTap(c, { from: 'uwtest0003' }), /is gone|Cannot find device|does not exist/);
      assert.equal(index(c.tap), second);
      up(c.tap);
      await assert.rejects(net.attachTap(c, { from: 'bad name' }), /bad tap name/);
      await net.removeTap(c.tap);
    });

    test("a restored VM's address: the host's ARP entry is set to its MAC, also over one a stray packet left being resolved", async () => {
      const net = new HostNetwork(opts);
      await net.setup();
      const neigh = (ip: string): string => sh('ip', 'neigh', 'show', ip, 'dev', 'uhbr0').trim();
      // a packet to an address nobody answers for (the last instance's, deleted): the kernel resolves it,
      // holding packets to it until its next try, a second later (docs/network.md, "Address resolution")
      const stray = (ip: string): void => void sh('bash', '-c', `echo > /dev/udp/${ip}/9`);
      const booted = spec('dave', '10.77.0.6');
      const restored = spec('dave', '10.77.0.7');
      stray(booted.ip);
      stray(restored.ip);
      assert.match(neigh(restored.ip), /INCOMPLETE/);
      await (
        await net.attachTap(booted)
      ).admitted;
      await (
        await net.attachTap(restored, { restored: true })
      ).admitted;
      // a booting guest announces itself (a gratuitous ARP): its entry is left to the kernel
      assert.match(neigh(booted.ip), /INCOMPLETE|FAILED/);
      assert.match(neigh(restored.ip), new RegExp(`lladdr ${restored.mac} (STALE|DELAY|PROBE|REACHABLE)`));
      // a restore on the tap the instance kept (a stateful wake): the same
      sh('ip', 'neigh', 'flush', 'to', restored.ip, 'dev', 'uhbr0');
      stray(restored.ip);
      assert.match(neigh(restored.ip), /INCOMPLETE/);
      await (
        await net.attachTap(restored, { restored: true })
      ).admitted;
      assert.match(neigh(restored.ip), new RegExp(`lladdr ${restored.mac} (STALE|DELAY|PROBE|REACHABLE)`));
      await net.removeTap(booted.tap);
      await net.removeTap(restored.tap);
      assert.equal(neigh(restored.ip), '', 'a removed tap takes its address with it');
    });

    test('sync (fresh object, as after a restart) deletes stray unihost taps only and creates missing ones', async () => {
      sh('ip', 'tuntap', 'add', 'dev', 'uhdeadbeef0000', 'mode', 'tap'); // leftover, unattached
      sh('ip', 'tuntap', 'add', 'dev', 'uhcafe00000000', 'mode', 'tap');
      sh('ip', 'link', 'set', 'dev', 'uhcafe00000000', 'master', 'uhbr0'); // leftover, attached
      sh('ip', 'tuntap', 'add', 'dev', 'other0', 'mode', 'tap'); // not ours
      sh('ip', 'link', 'add', 'name', 'otherbr', 'type', 'bridge');
      sh('ip', 'tuntap', 'add', 'dev', 'uh0000other00', 'mode', 'tap');
      sh('ip', 'link', 'set', 'dev', 'uh0000other00', 'master', 'otherbr'); // another bridge's port
      const ifindex = (JSON.parse(sh('ip', '-j', 'link', 'show', 'dev', a1.tap)) as { ifindex: number }[])[0]!.ifindex;

      const net = new HostNetwork(opts);
      await net.setup();
      const r = await net.sync([a1, b1]);
      assert.deepEqual(r.removed, ['uhcafe00000000', 'uhdeadbeef0000']);
      assert.deepEqual(r.created, [b1.tap]);
      const names = links().map((l) => l.ifname);
      for (const n of ['other0', 'uh0000other00', a1.tap, b1.tap]) assert.ok(names.includes(n), `${n} kept`);
      assert.ok(!names.includes('uhdeadbeef0000') && !names.includes('uhcafe00000000'));
      const again = (JSON.parse(sh('ip', '-j', 'link', 'show', 'dev', a1.tap)) as { ifindex: number }[])[0]!.ifindex;
      assert.equal(again, ifindex, 'the expected tap was not recreated');
      assert.deepEqual(await net.sync([a1, b1]), { created: [], removed: [] });
    });

    test("parkTap: a stopped instance's tap leaves the bridge and keeps its device and rules; attachTap puts it back", async () => {
      const net = new HostNetwork(opts);
      await net.sync([a1, a2, b1]);
      const ifindex = link(a2.tap)!.ifindex;
      await net.parkTap(a2.tap);
      const parked = link(a2.tap)!;
      assert.equal(parked.master, undefined, 'off the bridge');
      assert.ok(!parked.flags.includes('UP'), 'down');
      assert.match(sh('nft', 'list', 'table', 'bridge', 'unihost'), new RegExp(`"${a2.tap}"`), 'still in the rules');
      await net.parkTap(a2.tap); // parked already: nothing
      await net.parkTap(tapName(randomUUID())); // unknown: left alone
      const { admitted } = await net.attachTap(a2);
      await admitted;
      const back = link(a2.tap)!;
      assert.equal(back.master, 'uhbr0');
      assert.ok(back.flags.includes('UP'));
      assert.equal(back.ifindex, ifindex, 'the same device');
      // a fresh object (a daemon's start) expects the live ones only: a parked tap is a stray then
      await net.parkTap(a2.tap);
      const r = await new HostNetwork(opts).sync([a1, b1]);
      assert.deepEqual(r.removed, [a2.tap]);
    });

    test('a bridge takes 1,023 taps; parked taps take none of its ports', async () => {
      const net = new HostNetwork(opts);
      await net.sync([]);
      const many = Array.from({ length: 1030 }, (_, i) =>
        spec(`u${i % 7}`, `10.77.${8 + Math.floor(i / 250)}.${(i % 250) + 1}`),
      );
      const t0 = Date.now();
      for (const t of many) {
        await net.attachTap(t);
        await net.parkTap(t.tap);
      }
      const onBridge = (): number => JSON.parse(sh('ip', '-j', 'link', 'show', 'master', 'uhbr0')).length as number;
      assert.equal(onBridge(), 0);
      process.stderr.write(`1030 taps made and parked in ${Date.now() - t0} ms\n`);
      // the kernel's limit, which parking keeps stopped instances out of: the 1,024th port is refused
      for (const t of many.slice(0, 1023)) await net.attachTap(t);
      assert.equal(onBridge(), 1023);
      await assert.rejects(net.attachTap(many[1023]!), /Exchange full/);
      await net.sync([]);
    });

    test('nft rules: per-user chains, address sets, guests reach the host only on DNS', async () => {
      const net = new HostNetwork(opts);
      await net.sync([a1, a2, b1]);
      const br = (): string => sh('nft', 'list', 'table', 'bridge', 'unihost');
      const chainOf = (tap: string): string => new RegExp(`"${tap}" : jump (u[0-9a-f]+)`).exec(br())?.[1] ?? 'none';
      /** the taps a user's chain lets frames out to: its set's elements */
      const outTaps = (chain: string): string[] => {
        const set = new RegExp(`chain ${chain} \\{\\s*oifname @(o[0-9a-f]+) accept\\s*drop`).exec(br())![1]!;
        const els = new RegExp(`set ${set} \\{[^}]*?elements = \\{([^}]*)\\}`).exec(br())?.[1] ?? '';
        return els
          .split(',')
          .map((t) => t.trim())
          .filter(Boolean)
          .sort();
      };
      assert.equal(chainOf(a1.tap), chainOf(a2.tap), 'alice taps share a chain');
      assert.notEqual(chainOf(a1.tap), chainOf(b1.tap));
      assert.deepEqual(outTaps(chainOf(a1.tap)), [`"${a1.tap}"`, `"${a2.tap}"`].sort());
      assert.deepEqual(outTaps(chainOf(b1.tap)), [`"${b1.tap}"`]);
      for (const t of [a1, a2, b1]) {
        assert.match(br(), new RegExp(`"${t.tap}" \\. ${t.mac}`), 'MAC set');
        assert.match(br(), new RegExp(`"${t.tap}" \\. ${t.ip.replace(/\./g, '\\.')}`), 'IP set');
      }
      const inet = sh('nft', 'list', 'table', 'inet', 'unihost');
      assert.match(inet, /udp dport 53 accept/);
      assert.match(inet, /iifname "uhbr0" drop/);
      // a tap that goes, and one of a new user: elements and a chain, the others untouched
      const alice = chainOf(a1.tap);
      await net.removeTap(a2.tap);
      const c1 = spec('carol', '10.77.0.5');
      await net.ensureTap(c1);
      assert.doesNotMatch(br(), new RegExp(a2.tap), 'a2 gone from the rules');
      assert.deepEqual(outTaps(alice), [`"${a1.tap}"`]);
      assert.equal(chainOf(a1.tap), alice);
      assert.notEqual(chainOf(c1.tap), alice);
      assert.deepEqual(outTaps(chainOf(c1.tap)), [`"${c1.tap}"`]);
      assert.match(br(), new RegExp(`"${c1.tap}" \\. ${c1.ip.replace(/\./g, '\\.')}`));
      // a ruleset that is not what was applied (elements flushed behind our back): a change that
      // nft refuses as elements goes as the whole ruleset
      sh('nft', 'flush', 'set', 'bridge', 'unihost', 'tap_ip');
      await net.removeTap(c1.tap);
      assert.deepEqual(outTaps(alice), [`"${a1.tap}"`]);
      assert.match(br(), new RegExp(`"${a1.tap}" \\. ${a1.ip.replace(/\./g, '\\.')}`), 'rebuilt whole');
      assert.doesNotMatch(br(), new RegExp(c1.tap));
      await net.removeTap(a1.tap);
      await net.removeTap(b1.tap);
      // one table per family only, however often the rules are rebuilt
      await net.sync([a1, b1]);
      const tables = sh('nft', 'list', 'tables').trim().split('\n').sort();
      assert.deepEqual(tables, ['table bridge unihost', 'table inet unihost']);
      assert.deepEqual(outTaps(chainOf(a1.tap)), [`"${a1.tap}"`]);
    });

    test("a VM's uid opens no IP connection, not even to loopback; other processes are not affected", async () => {
      const net = new HostNetwork(opts);
      await net.sync([a1]);
      execFileSync('ip', ['netns', 'exec', ns, 'ip', 'link', 'set', 'lo', 'up']);
      /** connect() to a closed loopback port, as `uid`: refused (it went out) or not permitted (dropped before) */
      const attempt = (uid: number): string => {
        try {
          execFileSync(
            'ip',
            [
              'netns',
              'exec',
              ns,
              'setpriv',
              `--reuid=${uid}`,
              `--regid=${uid}`,
              '--clear-groups',
              'bash',
              '-c',
              'exec 3<>/dev/tcp/127.0.0.1/9',
            ],
            { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] },
          );
          return 'connected';
        } catch (e) {
          return String((e as { stderr?: string }).stderr);
        }
      };
      assert.match(attempt(VM_UID_BASE + 12345), /No route to host|Permission denied|not permitted/);
      assert.match(attempt(65534), /Connection refused/, 'nobody (not a VM) still reaches loopback');
      assert.match(
        sh('nft', 'list', 'table', 'inet', 'unihost'),
        /meta skuid 1073741824-1090519039 reject with icmpx admin-prohibited/,
      );
    });

    test('elements added and deleted leave the kernel with the ruleset the whole script gives, with and without the overlay', () => {
      // 60 random changes of taps (and of instances on other hosts), each applied as elements to one table
      // and as the whole ruleset to another; the two tables must hold the same sets, maps and chains
      // (the elements' way also keeps the empty chains and sets of users who had taps: nothing jumps there)
      let seed = 13; // mulberry32: the same changes in every run
      const rnd = (n: number): number => {
        seed = (seed + 0x6d2b79f5) | 0;
        let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
        t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
        return ((t ^ (t >>> 14)) >>> 0) % n;
      };
      const users = ['alice', 'bob', 'carol'];
      const nft = (script: string): void => {
        execFileSync('ip', ['netns', 'exec', ns, 'nft', '-f', '-'], { input: script });
      };
      /** a table's sets and maps (elements sorted) and chains (rules in order), by name */
      const content = (table: string): Map<string, string> => {
        const out = JSON.parse(sh('nft', '-j', 'list', 'table', 'bridge', table)) as {
          nftables: Record<string, Record<string, unknown>>[];
        };
        const m = new Map<string, string>();
        const bare = (x: Record<string, unknown>): Record<string, unknown> => {
          const { handle: _h, table: _t, ...rest } = x;
          return rest;
        };
        for (const e of out.nftables) {
          const [kind, body] = Object.entries(e)[0]!;
          if (kind === 'set' || kind === 'map') {
            const { elem, ...rest } = bare(body);
            const els = ((elem as unknown[] | undefined) ?? []).map((x) => JSON.stringify(x)).sort();
            m.set(`${kind} ${body.name as string}`, JSON.stringify([rest, els]));
          } else if (kind === 'chain') m.set(`chain ${body.name as string}`, JSON.stringify(bare(body)));
          else if (kind === 'rule') {
            const k = `chain ${body.chain as string}`;
            m.set(k, `${m.get(k) ?? ''}\n${JSON.stringify(body.expr)}`);
          }
        }
        return m;
      };
      for (const overlay of [false, true]) {
        const opts = (table: string, remote: { ip: string; userId: string }[]): RulesOptions => ({
          bridge: 'uhbr0',
          bridgeMac: '02:00:00:00:00:01',
          tapPrefix: 'uh',
          table,
          hostTcpPorts: [53],
          hostUdpPorts: [53],
          ...(overlay && { overlay: { port: 'vxuhbr0', gateways: ['10.77.255.1'], remote } }),
        });
        let taps: TapSpec[] = [spec('alice', '10.77.1.1')];
        let remote: { ip: string; userId: string }[] = [];
        nft(renderRules(opts('uhinc', remote), taps));
        for (let step = 0; step < 60; step++) {
          const [beforeTaps, beforeRemote] = [taps, remote];
          // first a user whose set of addresses elsewhere outlives its taps and changes meanwhile, then at random
          const op = (overlay ? ['dave', 'dave-far', 'dave-gone', 'dave-far-gone', 'dave'][step] : undefined) ?? rnd(4);
          const far = (userId: string) => ({ ip: `10.77.3.${step}`, userId });
          if (op === 'dave') taps = [...taps, spec('dave', `10.77.4.${step}`)];
          else if (op === 'dave-far') remote = [...remote, far('dave')];
          else if (op === 'dave-gone') taps = taps.filter((t) => t.userId !== 'dave');
          else if (op === 'dave-far-gone') remote = remote.filter((r) => r.userId !== 'dave');
          else if (op === 0 || taps.length === 0) taps = [...taps, spec(users[rnd(3)]!, `10.77.1.${10 + step}`)];
          else if (op === 1) taps = taps.filter((_, i) => i !== rnd(taps.length));
          else if (op === 2) taps = taps.map((t, i) => (i === 0 ? { ...t, ip: `10.77.2.${step}` } : t));
          else if (overlay && rnd(2) === 0) remote = [...remote, far(users[rnd(3)]!)];
          else remote = remote.filter((_, i) => i !== rnd(remote.length + 1));
          const changes = renderTapChanges(opts('uhinc', remote), beforeTaps, taps, beforeRemote);
          assert.notEqual(changes, null);
          nft(changes!);
          nft(renderRules(opts('uhwhole', remote), taps));
          const [inc, whole] = [content('uhinc'), content('uhwhole')];
          const keys = new Set(taps.map((t) => userKey(t.userId)));
          for (const [name, body] of whole)
            assert.equal(inc.get(name), body, `step ${step} (overlay ${overlay}): ${name}`);
          for (const name of inc.keys())
            if (!whole.has(name)) {
              const m = /^(?:chain (?:u|in)|set [or])([0-9a-f]{16})$/.exec(name);
              assert.ok(m && !keys.has(m[1]!), `step ${step}: ${name} only where elements went`);
            }
        }
        for (const t of ['uhinc', 'uhwhole']) nft(renderDelete(t));
      }
    });

    test('bad input is rejected before anything runs', async () => {
      const net = new HostNetwork(opts);
      await assert.rejects(net.ensureTap({ ...a1, mac: '02:00:00:00:00:0g' }), /bad MAC/);
      await assert.rejects(net.ensureTap({ ...a1, ip: '10.77.0.300' }), /bad IPv4/);
      await assert.rejects(net.ensureTap({ ...a1, tap: 'uh"; flush ruleset' }), /bad tap name/);
      await assert.rejects(net.ensureTap({ ...a1, tap: 'eth0' }), /does not start with 'uh'/);
      assert.ok(link('eth0') === undefined);
    });

    test('teardown removes taps, bridge and rules; idempotent', async () => {
      const net = new HostNetwork(opts);
      await net.teardown();
      await net.teardown();
      const names = links().map((l) => l.ifname);
      assert.ok(!names.includes('uhbr0'));
      assert.ok(!names.some((n) => n.startsWith('uh') && n !== 'uh0000other00'), names.join(','));
      assert.equal(sh('nft', 'list', 'tables').trim(), '');
    });
  },
);
