/**
 * The nftables ruleset that isolates users on the private network, rendered
 * from the list of expected taps. Pure: `host.ts` feeds the text to
 * `nft -f -`, so a whole rebuild is one atomic kernel transaction.
 *
 * Two tables (see docs/network.md):
 *  - `bridge <table>`: layer 2 on the daemon's bridge. Anti-spoofing on every
 *    frame entering from a tap (its own MAC, IPv4 and ARP addresses only; no
 *    IPv6, no other ethertypes) and, for frames bridged tap -> tap, a verdict
 *    map from the input tap to its user's chain, which accepts only output
 *    taps of the same user. Unknown taps on the bridge are dropped.
 *    Clones of a template get their guest's addresses translated on their
 *    tap first (`translation`).
 *    With several hosts (docs/hosts.md), the bridge has a VXLAN port too:
 *    a frame from a tap leaves by it only for an address of the tap's user
 *    on another host (or another host's gateway), and a frame from it
 *    reaches a tap only from one (`overlay`).
 *  - `inet <table>`: layer 3 for traffic that reaches the host through the
 *    bridge. Guests may open connections to the gateway only on the DNS
 *    ports (plus ICMP echo); replies to connections the host opened are
 *    allowed; nothing is routed between the bridge and anywhere else.
 */

import { createHash } from 'node:crypto';

export interface TapSpec {
  /** tap device name (see `tapName`) */
  tap: string;
  /** owner of the instance: only taps of the same user may talk */
  userId: string;
  /** the instance's private IPv4 address */
  ip: string;
  /** the guest NIC's MAC address (as passed to QEMU) */
  mac: string;
  /**
   * The address and MAC the guest itself has, when they are not `ip` and
   * `mac`: a clone restored from a template's memory keeps the template's.
   * Frames are translated on the tap (guest -> `ip`/`mac` on the way in,
   * back on the way out), so the rest of the network, the rules below
   * included, sees only the instance's own address.
   */
  guest?: { ip: string; mac: string };
}

/** What crosses the bridge's VXLAN port (docs/hosts.md): rendered into the bridge table. */
export interface OverlayRules {
  /** the VXLAN port on the bridge */
  port: string;
  /** the other hosts' gateway addresses: their host-made traffic to guests here, and the replies */
  gateways: string[];
  /** the instances on other hosts: their addresses and users */
  remote: { ip: string; userId: string }[];
}

export interface RulesOptions {
  bridge: string;
  /** the bridge's own (fixed) MAC: frames to it are routed, not bridged */
  bridgeMac: string;
  /** every unihost tap name starts with it; other bridge ports are not filtered */
  tapPrefix: string;
  /** nftables table name, used in both families */
  table: string;
  /** ports of the gateway address a guest may connect to */
  hostTcpPorts: number[];
  hostUdpPorts: number[];
  /** uids of VMs (first, last): their processes may open no IP connection at all (QEMU needs none: taps) */
  vmUids?: [number, number];
  /** the VXLAN port and what may cross it; absent on a host alone (frames never leave the bridge) */
  overlay?: OverlayRules;
}

export const IFNAME = /^[A-Za-z0-9_.-]{1,15}$/;
const MAC = /^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/;
const IPV4 = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/;

function checkIpv4(ip: string): void {
  const m = IPV4.exec(ip);
  if (!m || m.slice(1).some((o) => Number(o) > 255)) throw new Error(`bad IPv4 '${ip}'`);
}

/** Throws on values that could break (or inject into) the nft script. */
export function checkTapSpec(t: TapSpec): void {
  if (!IFNAME.test(t.tap)) throw new Error(`bad tap name '${t.tap}'`);
  if (!MAC.test(t.mac)) throw new Error(`bad MAC '${t.mac}' for tap ${t.tap}`);
  for (const [ip, mac] of [[t.ip, t.mac], ...(t.guest ? [[t.guest.ip, t.guest.mac]] : [])] as [string, string][]) {
    if (!MAC.test(mac)) throw new Error(`bad MAC '${mac}' for tap ${t.tap}`);
    const m = IPV4.exec(ip);
    if (!m || m.slice(1).some((o) => Number(o) > 255)) throw new Error(`bad IPv4 '${ip}' for tap ${t.tap}`);
  }
}

/**
 * Address translation of taps whose guest has another address than its
 * instance (`TapSpec.guest`): before the anti-spoofing (priority -300) the
 * guest's source MAC and IPv4 (Ethernet, ARP and IP headers) become the
 * instance's; after every other rule (postrouting, 300) the instance's
 * destination addresses become the guest's again. nftables fixes the IPv4
 * and TCP/UDP checksums. Empty when no tap needs it.
 */
function translation(taps: TapSpec[]): string[] {
  const clones = taps.filter((t) => t.guest && (t.guest.ip !== t.ip || t.guest.mac !== t.mac));
  if (clones.length === 0) return [];
  const L: string[] = [`  chain translate_in {`, `    type filter hook prerouting priority -300; policy accept;`];
  for (const t of clones) {
    const g = t.guest!;
    const i = `iifname ${q(t.tap)}`;
    L.push(`    ${i} ether saddr ${g.mac} ether saddr set ${t.mac}`);
    L.push(`    ${i} ether type arp arp saddr ether ${g.mac} arp saddr ether set ${t.mac}`);
    L.push(`    ${i} ether type arp arp saddr ip ${g.ip} arp saddr ip set ${t.ip}`);
    L.push(`    ${i} ether type ip ip saddr ${g.ip} ip saddr set ${t.ip}`);
  }
  L.push(`  }`, `  chain translate_out {`, `    type filter hook postrouting priority 300; policy accept;`);
  for (const t of clones) {
    const g = t.guest!;
    const o = `oifname ${q(t.tap)}`;
    L.push(`    ${o} ether daddr ${t.mac} ether daddr set ${g.mac}`);
    L.push(`    ${o} ether type arp arp daddr ether ${t.mac} arp daddr ether set ${g.mac}`);
    L.push(`    ${o} ether type arp arp daddr ip ${t.ip} arp daddr ip set ${g.ip}`);
    L.push(`    ${o} ether type ip ip daddr ${t.ip} ip daddr set ${g.ip}`);
  }
  L.push(`  }`);
  return L;
}

const q = (s: string): string => `"${s}"`;
const set = (items: string[]): string => `{ ${items.join(', ')} }`;

/**
 * A user's name in the ruleset: its chain `u<key>`, its set of taps `o<key>`
 * (and with the overlay `r<key>`, `in<key>`). Taken from the user's id, not
 * from an order, so a user's chain is the same in every ruleset and a tap of
 * an existing user is admitted by adding elements (`renderTapChanges`).
 */
export function userKey(userId: string): string {
  return createHash('sha256').update(userId).digest('hex').slice(0, 16);
}

/** Taps grouped by user, users in a stable order. */
function byUser(taps: TapSpec[]): TapSpec[][] {
  const m = new Map<string, TapSpec[]>();
  for (const t of [...taps].sort((a, b) => a.tap.localeCompare(b.tap))) {
    const list = m.get(t.userId) ?? [];
    list.push(t);
    m.set(t.userId, list);
  }
  return [...m.keys()].sort().map((k) => m.get(k)!);
}

/**
 * The rules of a user's chains: `u<key>`, where its taps may send (its own
 * taps; with the overlay, its addresses on other hosts and their gateways),
 * and with the overlay `in<key>` (null without), what may reach its taps
 * from other hosts.
 */
function userRules(o: RulesOptions, k: string): { out: string[]; in: string[] | null } {
  const ov = o.overlay;
  // Flooded frames (ARP) pass once per output port, the VXLAN port included: an ARP
  // request leaves the host only for an address of the sender's user there.
  const from = (dir: 'saddr' | 'daddr', setName: string): string[] => [
    `ether type arp arp ${dir} ip @${setName} accept`,
    `ether type ip ip ${dir} @${setName} accept`,
  ];
  const out = [`oifname @o${k} accept`];
  if (ov)
    for (const r of [...from('daddr', `r${k}`), ...from('daddr', 'peer_gw')]) out.push(`oifname ${q(ov.port)} ${r}`);
  out.push('drop');
  return { out, in: ov ? [...from('saddr', `r${k}`), ...from('saddr', 'peer_gw'), 'drop'] : null };
}

/** Each user's addresses on other hosts (`r<key>`'s elements): sorted, each once. */
function remoteByUser(remote: OverlayRules['remote']): Map<string, string[]> {
  const m = new Map<string, Set<string>>();
  for (const r of remote) m.set(r.userId, (m.get(r.userId) ?? new Set()).add(r.ip));
  return new Map([...m].map(([u, ips]) => [u, [...ips].sort()]));
}

function bridgeTable(o: RulesOptions, taps: TapSpec[]): string[] {
  const users = byUser(taps);
  const pfx = q(`${o.tapPrefix}*`);
  const ov = o.overlay;
  const L: string[] = [`table bridge ${o.table} {`];
  L.push(`  set tap_mac { type ifname . ether_addr; }`);
  L.push(`  set tap_ip { type ifname . ipv4_addr; }`);
  L.push(`  map tap_user { type ifname : verdict; }`);
  if (ov) {
    // per local user: the addresses of that user's instances on other hosts; the other hosts' gateways
    L.push(`  set peer_gw { type ipv4_addr; }`, `  map tap_in { type ifname : verdict; }`);
    for (const u of users) L.push(`  set r${userKey(u[0]!.userId)} { type ipv4_addr; }`);
  }
  for (const u of users) L.push(`  set o${userKey(u[0]!.userId)} { type ifname; }`);
  // Anti-spoofing: every frame a tap sends must carry its own addresses.
  L.push(`  chain prerouting {`, `    type filter hook prerouting priority -200; policy accept;`);
  L.push(`    iifname != ${pfx} accept`);
  L.push(`    iifname . ether saddr != @tap_mac drop`);
  L.push(`    ether type arp iifname . arp saddr ether != @tap_mac drop`);
  L.push(`    ether type arp iifname . arp saddr ip != @tap_ip drop`);
  L.push(`    ether type arp accept`);
  L.push(`    ether type ip iifname . ip saddr != @tap_ip drop`);
  L.push(`    ether type ip accept`);
  L.push(`    drop`, `  }`);
  // Tap -> tap: only within one user. Flooded frames (ARP broadcasts) pass
  // this hook once per output port, so they never reach other users' taps.
  L.push(`  chain forward {`, `    type filter hook forward priority -200; policy accept;`);
  // From another host: to a tap only from its user's addresses there (the sending host checked who sent it).
  if (ov) L.push(`    iifname ${q(ov.port)} oifname vmap @tap_in`, `    iifname ${q(ov.port)} drop`);
  L.push(`    iifname vmap @tap_user`);
  L.push(`    iifname ${pfx} drop`, `    oifname ${pfx} drop`, `  }`);
  for (const u of users) {
    const k = userKey(u[0]!.userId);
    const r = userRules(o, k);
    L.push(`  chain u${k} {`, ...r.out.map((l) => `    ${l}`), `  }`);
    if (r.in) L.push(`  chain in${k} {`, ...r.in.map((l) => `    ${l}`), `  }`);
  }
  L.push(...translation(taps));
  L.push(`}`);
  if (taps.length) {
    const els = (f: (t: TapSpec) => string): string => set(taps.map(f));
    L.push(`add element bridge ${o.table} tap_mac ${els((t) => `${q(t.tap)} . ${t.mac}`)}`);
    L.push(`add element bridge ${o.table} tap_ip ${els((t) => `${q(t.tap)} . ${t.ip}`)}`);
    const vm = taps.map((t) => `${q(t.tap)} : jump u${userKey(t.userId)}`);
    L.push(`add element bridge ${o.table} tap_user ${set(vm)}`);
    for (const u of users)
      L.push(`add element bridge ${o.table} o${userKey(u[0]!.userId)} ${set(u.map((t) => q(t.tap)))}`);
    if (ov) {
      const inn = taps.map((t) => `${q(t.tap)} : jump in${userKey(t.userId)}`);
      L.push(`add element bridge ${o.table} tap_in ${set(inn)}`);
      const remote = remoteByUser(ov.remote);
      for (const u of users) {
        const ips = remote.get(u[0]!.userId) ?? [];
        if (ips.length) L.push(`add element bridge ${o.table} r${userKey(u[0]!.userId)} ${set(ips)}`);
      }
    }
  }
  if (ov?.gateways.length) L.push(`add element bridge ${o.table} peer_gw ${set([...ov.gateways].sort())}`);
  return L;
}

function inetTable(o: RulesOptions): string[] {
  const br = q(o.bridge);
  const L: string[] = [`table inet ${o.table} {`];
  L.push(`  chain input {`, `    type filter hook input priority -10; policy accept;`);
  L.push(`    iifname != ${br} accept`);
  L.push(`    ct state established,related accept`);
  if (o.hostUdpPorts.length) L.push(`    udp dport ${set(o.hostUdpPorts.map(String))} accept`);
  if (o.hostTcpPorts.length) L.push(`    tcp dport ${set(o.hostTcpPorts.map(String))} accept`);
  L.push(`    icmp type echo-request accept`);
  L.push(`    drop`, `  }`);
  // The private network is not a way out, nor a way in from elsewhere, nor
  // a detour around the bridge rules (guest -> gateway MAC -> routed back to
  // another user's guest). With br_netfilter loaded (bridge-nf-call-iptables
  // = 1, common), frames bridged tap -> tap also pass this hook, with the
  // bridge as both interfaces: those are told apart by their destination MAC
  // (a guest's, not the bridge's) and were already filtered in `bridge`.
  L.push(`  chain forward {`, `    type filter hook forward priority -10; policy accept;`);
  L.push(`    iifname ${br} oifname ${br} ether daddr != ${o.bridgeMac} accept`);
  L.push(`    iifname ${br} drop`, `    oifname ${br} drop`, `  }`);
  // A QEMU taken over by its guest has the VM's own uid: it must not reach the host's services,
  // the API, other hosts or the internet. Its tap traffic has no socket, so this leaves it alone.
  if (o.vmUids) {
    const [lo, hi] = o.vmUids;
    if (!Number.isInteger(lo) || !Number.isInteger(hi) || lo < 1 || hi < lo) throw new Error('bad VM uid range');
    L.push(`  chain output {`, `    type filter hook output priority -10; policy accept;`);
    // rejected, not dropped: the process learns at once (a drop would make it retry for minutes)
    L.push(`    meta skuid ${lo}-${hi} reject with icmpx admin-prohibited`, `  }`);
  }
  L.push(`}`);
  return L;
}

/**
 * The full script: create-if-missing, delete, recreate, in one transaction,
 * so there is never a moment without rules nor a half-applied set.
 */
export function renderRules(o: RulesOptions, taps: TapSpec[]): string {
  if (!MAC.test(o.bridgeMac)) throw new Error(`bad bridge MAC '${o.bridgeMac}'`);
  if (!IFNAME.test(o.bridge) || !/^[a-z]{1,4}$/.test(o.tapPrefix) || !/^[A-Za-z0-9_]{1,32}$/.test(o.table))
    throw new Error('bad bridge/table name');
  taps.forEach(checkTapSpec);
  if (o.overlay) {
    if (!IFNAME.test(o.overlay.port) || o.overlay.port.startsWith(o.tapPrefix)) throw new Error('bad VXLAN port name');
    for (const ip of [...o.overlay.gateways, ...o.overlay.remote.map((r) => r.ip)]) checkIpv4(ip);
  }
  return [
    `table bridge ${o.table} {}`,
    `delete table bridge ${o.table}`,
    `table inet ${o.table} {}`,
    `delete table inet ${o.table}`,
    ...bridgeTable(o, taps),
    ...inetTable(o),
    '',
  ].join('\n');
}

/**
 * The script that takes the ruleset of `before` (rendered whole, or reached
 * by such scripts) to that of `after` by adding and deleting elements: a
 * tap admitted or dropped costs nft a few elements instead of the whole
 * ruleset again (measured with a running `nft -i`: 0.3 ms of its CPU against
 * 1.2 ms for a ruleset of three taps, and the whole grows with the taps).
 * A user's first tap adds its set and chain (`add` leaves existing ones, and
 * the chain is flushed before its rules go in); a user's last tap leaves
 * them, empty, until the next whole ruleset. With the overlay, `remoteBefore`
 * is the other hosts' instances as the ruleset of `before` has them (`o`'s
 * are the new ones): a local user's addresses there (`r<key>`) change by
 * elements too; a user's first tap finds its set flushed, as one left by an
 * earlier tap may hold addresses since gone. Null when only a whole ruleset
 * says it: a tap with address translation (its rules name it) among the
 * changes.
 */
export function renderTapChanges(
  o: RulesOptions,
  before: TapSpec[],
  after: TapSpec[],
  remoteBefore: OverlayRules['remote'] = [],
): string | null {
  after.forEach(checkTapSpec);
  const ov = o.overlay;
  if (ov) for (const r of ov.remote) checkIpv4(r.ip);
  const key = (t: TapSpec): string => JSON.stringify([t.userId, t.ip, t.mac, t.guest?.ip, t.guest?.mac]);
  const was = new Map(before.map((t) => [t.tap, t]));
  const now = new Map(after.map((t) => [t.tap, t]));
  const gone = before.filter((t) => now.get(t.tap) === undefined || key(now.get(t.tap)!) !== key(t));
  const added = after.filter((t) => was.get(t.tap) === undefined || key(was.get(t.tap)!) !== key(t));
  if ([...gone, ...added].some((t) => t.guest)) return null;
  const T = `bridge ${o.table}`;
  const L: string[] = [];
  for (const t of gone) {
    L.push(`delete element ${T} tap_mac { ${q(t.tap)} . ${t.mac} }`);
    L.push(`delete element ${T} tap_ip { ${q(t.tap)} . ${t.ip} }`);
    L.push(`delete element ${T} tap_user { ${q(t.tap)} }`);
    if (ov) L.push(`delete element ${T} tap_in { ${q(t.tap)} }`);
    L.push(`delete element ${T} o${userKey(t.userId)} { ${q(t.tap)} }`);
  }
  // users whose chains and sets the ruleset has as `before` left them, and those that get them now
  const kept = new Set(before.filter((t) => !gone.includes(t)).map((t) => t.userId));
  const fresh = new Set<string>();
  for (const t of added) {
    const k = userKey(t.userId);
    if (!kept.has(t.userId) && !fresh.has(t.userId)) {
      fresh.add(t.userId);
      L.push(`add set ${T} o${k} { type ifname; }`);
      if (ov) L.push(`add set ${T} r${k} { type ipv4_addr; }`, `flush set ${T} r${k}`);
      const r = userRules(o, k);
      for (const [chain, rules] of [[`u${k}`, r.out], ...(r.in ? [[`in${k}`, r.in]] : [])] as [string, string[]][])
        L.push(
          `add chain ${T} ${chain}`,
          `flush chain ${T} ${chain}`,
          ...rules.map((l) => `add rule ${T} ${chain} ${l}`),
        );
    }
    L.push(`add element ${T} tap_mac { ${q(t.tap)} . ${t.mac} }`);
    L.push(`add element ${T} tap_ip { ${q(t.tap)} . ${t.ip} }`);
    L.push(`add element ${T} o${k} { ${q(t.tap)} }`);
    L.push(`add element ${T} tap_user { ${q(t.tap)} : jump u${k} }`);
    if (ov) L.push(`add element ${T} tap_in { ${q(t.tap)} : jump in${k} }`);
  }
  // the addresses on other hosts of each user with taps here: from what `before` had (none for a fresh set)
  if (ov) {
    const [now, then] = [remoteByUser(ov.remote), remoteByUser(remoteBefore)];
    for (const userId of new Set(after.map((t) => t.userId))) {
      const k = userKey(userId);
      const want = now.get(userId) ?? [];
      const had = fresh.has(userId) ? [] : (then.get(userId) ?? []);
      const [wantSet, hadSet] = [new Set(want), new Set(had)];
      const del = had.filter((ip) => !wantSet.has(ip));
      const add = want.filter((ip) => !hadSet.has(ip));
      if (del.length) L.push(`delete element ${T} r${k} ${set(del)}`);
      if (add.length) L.push(`add element ${T} r${k} ${set(add)}`);
    }
  }
  return L.length ? `${L.join('\n')}\n` : '';
}

/** The script that removes both tables (teardown). */
export function renderDelete(table: string): string {
  return [
    `table bridge ${table} {}`,
    `delete table bridge ${table}`,
    `table inet ${table} {}`,
    `delete table inet ${table}`,
    '',
  ].join('\n');
}
