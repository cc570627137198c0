/* eslint-disable @typescript-eslint/no-explicit-any -- API replies are JSON; the assertions check their shape. */
/**
 * A custom domain another account holds moves to the account that proves
 * control of it in DNS (docs/certificates.md, "Domain claims"): the TXT
 * record `_unihost-challenge.<name>` with that account's value, looked up at
 * a DNS server this test runs on loopback.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createSocket, type Socket } from 'node:dgram';
import * as packet from 'dns-packet';
import { startHarness, type Harness } from '../helpers/harness.js';
import { simMachines } from '../helpers/sim-machines.js';

let h: Harness;
let dns: Socket;
let alice: string;
let bob: string;
/** the TXT records the test's DNS server answers: name -> values (each a list of strings) */
const txt = new Map<string, string[][]>();
let lookups = 0;

before(async () => {
  dns = createSocket('udp4');
  dns.on('message', (msg, from) => {
    const q = packet.decode(msg);
    const name = q.questions?.[0]?.name ?? '';
    lookups++;
    const values = q.questions?.[0]?.type === 'TXT' ? txt.get(name.toLowerCase()) : undefined;
    const reply = packet.encode({
      id: q.id,
      type: 'response',
      flags: packet.AUTHORITATIVE_ANSWER | (values ? 0 : 3), // NXDOMAIN when nothing is published
      questions: q.questions,
      answers: (values ?? []).map((v) => ({ type: 'TXT', name, ttl: 1, data: v.map((s) => Buffer.from(s)) })),
    });
    dns.send(reply, from.port, from.address);
  });
  await new Promise<void>((r) => dns.bind(0, '127.0.0.1', r));
  const port = dns.address().port;
  h = await startHarness({ domainProof: { enabled: true, dnsServers: [`127.0.0.1:${port}`], timeoutMs: 500 } }, (s) => [
    simMachines(s),
  ]);
  alice = await h.user('alice');
  bob = await h.user('bob');
  await h.image('app:latest');
});
after(async () => {
  await h.close();
  dns.close();
});

const svc = [{ port: 443, handlers: ['http', 'tls'] }];
const first = (r: { body: any }) => Object.values(r.body.data as Record<string, any[]>)[0]![0];
/** the record a refusal asks for: name and value */
const asked = (message: string) => {
  const m = /publish the DNS record (\S+)\. TXT "([^"]+)"/.exec(message);
  assert.ok(m, message);
  return { name: m[1]!, value: m[2]! };
};

test('a custom domain held by another account moves to the account that publishes its TXT record', async () => {
  // alice has it first: her group, and a pending ACME certificate that claims it
  const made = await h.call('POST', '/v1/instances', alice, {
    image: 'app:latest',
    name: 'shop',
    service_group: { services: svc, domains: [{ name: 'shop.example.com.' }] },
  });
  assert.equal(made.status, 200, made.text);
  const aliceInst = first(made);
  const aliceGroup = aliceInst.service_group.uuid;

  // bob is refused with the record to publish; nothing published yet
  const refused = first(
    await h.call('POST', '/v1/services', bob, { services: svc, domains: [{ name: 'shop.example.com.' }] }),
  );
  assert.equal(refused.error, 24, JSON.stringify(refused));
  assert.match(refused.message, /domain 'shop\.example\.com' is already in use\. If the name is yours/);
  assert.match(refused.message, /looked up just now: no TXT record at _unihost-challenge\.shop\.example\.com/);
  const rec = asked(refused.message);
  assert.equal(rec.name, '_unihost-challenge.shop.example.com');
  assert.match(rec.value, /^unihost-verify=[0-9a-f]{32}$/);

  // a record with another value (alice's, say) proves nothing for bob
  txt.set(rec.name, [['unihost-verify=0123456789abcdef0123456789abcdef']]);
  const wrong = first(
    await h.call('POST', '/v1/services', bob, { services: svc, domains: [{ name: 'shop.example.com.' }] }),
  );
  assert.equal(wrong.error, 24);
  assert.match(wrong.message, /has 1 TXT value\(s\), not this one/);

  // his value (split in two strings, as DNS tools may publish it) beside an unrelated one: the name moves to him
  txt.set(rec.name, [['v=spf1 -all'], [rec.value.slice(0, 20), rec.value.slice(20)]]);
  const moved = await h.call('POST', '/v1/services', bob, {
    name: 'bobshop',
    services: svc,
    domains: [{ name: 'shop.example.com.' }],
  });
  assert.equal(moved.status, 200, moved.text);
  assert.deepEqual(
    first(moved).domains.map((d: any) => d.fqdn),
    ['shop.example.com'],
  );
  const aliceView = first(await h.call('GET', '/v1/services', alice, { uuid: aliceGroup }));
  assert.deepEqual(aliceView.domains, [], 'alice no longer has it');
  const evs = await h.daemon.store.read(async (tx) => {
    const i = (await tx.instances.getAny(aliceInst.uuid))!;
    return tx.events.after(i.user_id, 0, { instanceId: i.id }, 100);
  });
  assert.ok(
    evs.some((e) =>
      /domain 'shop\.example\.com' left this service group: another account proved control/.test(e.message ?? ''),
    ),
    'alice is told why',
  );

  // alice cannot take it back: the record names bob's account; a PATCH asks her for her own record
  const back = first(
    await h.call('PATCH', '/v1/services', alice, {
      uuid: aliceGroup,
      prop: 'domains',
      op: 'add',
      value: ['shop.example.com.'],
    }),
  );
  assert.equal(back.error, 24, JSON.stringify(back));
  const hers = asked(back.message);
  assert.equal(hers.name, rec.name);
  assert.notEqual(hers.value, rec.value, 'each account has its own value');
  assert.match(back.message, /has 2 TXT value\(s\), not this one/);
});

test('an instance create with a new service group takes a proven name too', async () => {
  const carol = await h.user('carol');
  const body = {
    image: 'app:latest',
    name: 'carolshop',
    service_group: { services: svc, domains: [{ name: 'shop.example.com.' }] },
  };
  const refused = first(await h.call('POST', '/v1/instances', carol, body));
  assert.equal(refused.error, 24, JSON.stringify(refused));
  const rec = asked(refused.message);
  txt.set(rec.name, [[rec.value]]);
  const made = await h.call('POST', '/v1/instances', carol, body);
  assert.equal(made.status, 200, made.text);
  assert.deepEqual(
    first(made).service_group.domains.map((d: any) => d.fqdn),
    ['shop.example.com'],
  );
});

test('names under the metro domain, and names nobody else holds, look nothing up', async () => {
  const before = lookups;
  const mine = await h.call('POST', '/v1/services', alice, {
    services: svc,
    domains: [{ name: 'fresh.example.org.' }],
  });
  assert.equal(mine.status, 200, mine.text);
  const taken = first(await h.call('POST', '/v1/services', alice, { services: svc, domains: [{ name: 'alicesite' }] }));
  assert.equal(taken.status, 'success', JSON.stringify(taken));
  const other = first(await h.call('POST', '/v1/services', bob, { services: svc, domains: [{ name: 'alicesite' }] }));
  assert.equal(other.error, 24);
  assert.doesNotMatch(other.message, /TXT/, "the metro's names are the platform's: no proof takes one");
  assert.equal(lookups, before, 'no DNS lookup');
});
