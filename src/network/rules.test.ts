import assert from 'node:assert/strict';
import { test } from 'node:test';
import { renderRules, renderTapChanges, userKey, type RulesOptions, type TapSpec } from './rules.js';

const o: RulesOptions = {
  bridge: 'uhbr0',
  bridgeMac: '02:00:00:00:00:01',
  tapPrefix: 'uh',
  table: 'unihost',
  hostTcpPorts: [53],
  hostUdpPorts: [53],
};
const tap = (n: number, userId: string): TapSpec => ({
  tap: `uh00000000000${n}`,
  userId,
  ip: `10.0.0.${n + 2}`,
  mac: `02:00:00:00:00:1${n}`,
});
const [a1, a2, b1] = [tap(1, 'alice'), tap(2, 'alice'), tap(3, 'bob')];

test('a user is named by its id, the same in every ruleset', () => {
  assert.equal(userKey('alice'), userKey('alice'));
  assert.notEqual(userKey('alice'), userKey('bob'));
  assert.match(userKey('alice'), /^[0-9a-f]{16}$/);
  const k = userKey('alice');
  for (const r of [renderRules(o, [a1, b1]), renderRules(o, [b1, a2, a1])])
    assert.match(r, new RegExp(`chain u${k} \\{\\n    oifname @o${k} accept\\n    drop\\n  \\}`));
});

test('a tap of a user who has one: its elements only', () => {
  const s = renderTapChanges(o, [a1, b1], [a1, b1, a2])!;
  const lines = s.trim().split('\n');
  assert.equal(lines.length, 4);
  assert.ok(lines.every((l) => l.startsWith('add element bridge unihost ')));
  assert.ok(lines.includes(`add element bridge unihost tap_user { "${a2.tap}" : jump u${userKey('alice')} }`));
  assert.ok(lines.includes(`add element bridge unihost o${userKey('alice')} { "${a2.tap}" }`));
});

test("a user's first tap adds its set and chain, flushed before its rules; a tap that goes is deleted", () => {
  const k = userKey('bob');
  const s = renderTapChanges(o, [a1, a2], [a1, b1])!;
  assert.match(s, new RegExp(`^delete element bridge unihost tap_user \\{ "${a2.tap}" \\}$`, 'm'));
  assert.match(s, new RegExp(`^delete element bridge unihost o${userKey('alice')} \\{ "${a2.tap}" \\}$`, 'm'));
  const order = [`add set bridge unihost o${k}`, `add chain bridge unihost u${k}`, `flush chain bridge unihost u${k}`];
  const at = order.map((l) => s.indexOf(l));
  assert.ok(
    at.every((i, n) => i >= 0 && (n === 0 || i > at[n - 1]!)),
    s,
  );
  assert.ok(s.indexOf(`add rule bridge unihost u${k} drop`) > s.indexOf(`oifname @o${k} accept`));
  // a tap whose address changed: out, then in again
  const moved = { ...a1, ip: '10.0.0.99' };
  const m = renderTapChanges(o, [a1], [moved])!;
  assert.ok(m.indexOf(`delete element bridge unihost tap_ip { "${a1.tap}" . 10.0.0.3 }`) >= 0, m);
  assert.ok(m.indexOf(`add element bridge unihost tap_ip { "${a1.tap}" . 10.0.0.99 }`) > 0, m);
  assert.equal(renderTapChanges(o, [a1, b1], [b1, a1]), '');
});

test("with the overlay: a user's first tap adds its chains and a flushed set of its addresses elsewhere", () => {
  const k = userKey('bob');
  const remote = [
    { ip: '10.0.1.7', userId: 'bob' },
    { ip: '10.0.1.8', userId: 'alice' },
  ];
  const ov = { ...o, overlay: { port: 'vxuhbr0', gateways: ['10.0.255.1'], remote } };
  const s = renderTapChanges(ov, [a1], [a1, b1], remote)!;
  const at = (l: string): number => s.indexOf(l);
  assert.ok(at(`add set bridge unihost r${k} { type ipv4_addr; }`) >= 0, s);
  assert.ok(at(`flush set bridge unihost r${k}`) > at(`add set bridge unihost r${k}`), s);
  assert.ok(at(`add element bridge unihost r${k} { 10.0.1.7 }`) > at(`flush set bridge unihost r${k}`), s);
  assert.match(
    s,
    new RegExp(`^add rule bridge unihost u${k} oifname "vxuhbr0" ether type ip ip daddr @r${k} accept$`, 'm'),
  );
  assert.match(s, new RegExp(`^add rule bridge unihost in${k} ether type ip ip saddr @peer_gw accept$`, 'm'));
  assert.match(s, new RegExp(`^add element bridge unihost tap_in \\{ "${b1.tap}" : jump in${k} \\}$`, 'm'));
  // alice's set is hers already: only what changed elsewhere
  assert.doesNotMatch(s, new RegExp(`r${userKey('alice')}`));
  // the rules of a user's chains are those of the whole ruleset
  const whole = renderRules(ov, [a1, b1]);
  for (const l of s.split('\n').filter((x) => x.startsWith(`add rule bridge unihost in${k} `)))
    assert.ok(whole.includes(`    ${l.slice(`add rule bridge unihost in${k} `.length)}\n`), l);
});

test('with the overlay: addresses elsewhere of users with taps here change by elements; a tap that goes leaves tap_in', () => {
  const ka = userKey('alice');
  const before = [{ ip: '10.0.1.8', userId: 'alice' }];
  const after = [
    { ip: '10.0.1.9', userId: 'alice' },
    { ip: '10.0.1.9', userId: 'alice' },
    { ip: '10.0.1.10', userId: 'carol' },
  ];
  const ov = { ...o, overlay: { port: 'vxuhbr0', gateways: [], remote: after } };
  const s = renderTapChanges(ov, [a1, b1], [a1], before)!;
  assert.deepEqual(s.trim().split('\n'), [
    `delete element bridge unihost tap_mac { "${b1.tap}" . ${b1.mac} }`,
    `delete element bridge unihost tap_ip { "${b1.tap}" . ${b1.ip} }`,
    `delete element bridge unihost tap_user { "${b1.tap}" }`,
    `delete element bridge unihost tap_in { "${b1.tap}" }`,
    `delete element bridge unihost o${userKey('bob')} { "${b1.tap}" }`,
    `delete element bridge unihost r${ka} { 10.0.1.8 }`,
    `add element bridge unihost r${ka} { 10.0.1.9 }`,
  ]);
  assert.equal(renderTapChanges(ov, [a1], [a1], after), '', 'nothing changed');
  assert.throws(
    () =>
      renderTapChanges(
        { ...ov, overlay: { ...ov.overlay, remote: [{ ip: '10.0.1.x', userId: 'alice' }] } },
        [a1],
        [a1],
      ),
    /bad IPv4/,
  );
});

test('the whole ruleset where elements cannot say it: a tap with address translation', () => {
  const clone = { ...b1, guest: { ip: '10.0.0.9', mac: '02:00:00:00:00:99' } };
  assert.equal(renderTapChanges(o, [a1], [a1, clone]), null);
  assert.equal(renderTapChanges(o, [a1, clone], [a1]), null);
  assert.throws(() => renderTapChanges(o, [], [{ ...a1, mac: 'x' }]), /bad MAC/);
});
