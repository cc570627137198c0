import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, type Harness, type Reply } from '../helpers/harness.js';
import { simMachines } from '../helpers/sim-machines.js';
import { replyAsserts } from '../helpers/replies.js';

let h: Harness;
let alice: string;
let bob: string;
let metro: string;

const { ok, entryError, bad } = replyAsserts('service_groups');

/** The entries of a 200 answer whose entries all succeeded. */
/** The single failed entry of a 200 answer. */
/** A whole-request 400 whose message matches `re`. */
const create = (token: string, body: unknown) => h.call('POST', '/v1/services', token, body);
const get = (token: string, body: unknown) => h.call('GET', '/v1/services', token, body);
const list = (token: string, body?: unknown) => h.call('GET', '/v1/services/list', token, body);
const groupCount = async (token: string) => ok(await list(token)).length;

before(async () => {
  h = await startHarness({}, (s) => [simMachines(s)]);
  metro = h.daemon.config.metroDomain;
  alice = await h.user('alice');
  bob = await h.user('bob');
  await h.image('app:latest');
});
after(async () => h.close());

describe('create', () => {
  test('one group: persistent, destination_port defaults to port, generated domain from the name', async () => {
    const [g] = ok(await create(alice, { name: 'web', services: [{ port: 443, handlers: ['http', 'tls'] }] }));
    assert.equal(g.status, 'success');
    assert.equal(g.name, 'web');
    assert.match(g.uuid, /^[0-9a-f-]{36}$/);
    assert.equal(g.domains.length, 1);
    assert.match(g.domains[0].fqdn, new RegExp(`^web-[a-z0-9]{8}\\.${metro.replace(/\./g, '\\.')}$`));
    assert.equal(g.domains[0].certificate, undefined, 'metro subdomains use the wildcard certificate');
    const [full] = ok(await get(alice, { uuid: g.uuid }));
    assert.deepEqual(full.services, [{ port: 443, destination_port: 443, handlers: ['http', 'tls'] }]);
    assert.equal(full.persistent, true);
  });

  test('a batch creates each group; entries come in request order', async () => {
    const gs = ok(
      await create(alice, [
        { name: 'batch-a', services: [{ port: 8443, destination_port: 8080, handlers: ['tls'] }] },
        { name: 'batch-b', services: [{ port: 5432, handlers: ['tls'] }] },
      ]),
    );
    assert.deepEqual(
      gs.map((g) => g.name),
      ['batch-a', 'batch-b'],
    );
    const [a] = ok(await get(alice, { name: 'batch-a' }));
    assert.equal(a.services[0].destination_port, 8080);
  });

  test('without a name the group gets `<word>-<word>-<8 random>` and a domain from it', async () => {
    const [g] = ok(await create(alice, { services: [{ port: 443, handlers: ['http', 'tls'] }] }));
    assert.match(g.name, /^[a-z]+-[a-z]+-[a-z0-9]{8}$/);
    assert.ok(g.domains[0].fqdn.startsWith(`${g.name}-`), g.domains[0].fqdn);
    assert.ok(g.domains[0].fqdn.endsWith(`.${metro}`));
  });

  test('`services` is required', async () => {
    const before = await groupCount(alice);
    bad(await create(alice, { name: 'no-services' }), /services/);
    assert.equal(await groupCount(alice), before);
  });

  test('each valid port/handler combination is accepted', async () => {
    const [g] = ok(
      await create(alice, {
        name: 'combos',
        services: [
          { port: 80, handlers: ['http', 'redirect'] },
          { port: 443, destination_port: 8080, handlers: ['http', 'tls'] },
          { port: 8443, destination_port: 8080, handlers: ['tls'] },
          { port: 5432, handlers: ['tls'] },
        ],
      }),
    );
    const [full] = ok(await get(alice, { uuid: g.uuid }));
    assert.deepEqual(full.services, [
      { port: 80, destination_port: 443, handlers: ['http', 'redirect'] },
      { port: 443, destination_port: 8080, handlers: ['http', 'tls'] },
      { port: 8443, destination_port: 8080, handlers: ['tls'] },
      { port: 5432, destination_port: 5432, handlers: ['tls'] },
    ]);
    ok(await create(alice, { name: 'plain-80', services: [{ port: 80, handlers: ['http'] }] }));
  });

  test('each of the four port rules, violated, answers 400 naming the rule and creates nothing', async () => {
    const cases: [unknown, RegExp][] = [
      [{ port: 80, handlers: ['tls'] }, /port rule 1: port 80 must have the 'http' handler/],
      [{ port: 80, handlers: ['http', 'tls'] }, /port rule 1/],
      [{ port: 443, handlers: ['http'] }, /port rule 2: port 443 must have the 'http' and 'tls'/],
      [{ port: 443, handlers: ['tls'] }, /port rule 2/],
      [{ port: 443, handlers: ['http', 'tls', 'redirect'] }, /port rule 3: 'redirect' may only be set on port 80/],
      [{ port: 8443, handlers: ['tls', 'redirect'] }, /port rule 3/],
      [{ port: 80, destination_port: 8080, handlers: ['http', 'redirect'] }, /port rule 3: .*redirect to port 443/],
      [{ port: 8080, handlers: ['http'] }, /port rule 4: ports other than 80 and 443 must have the 'tls' handler/],
      [{ port: 8443, handlers: ['tls', 'http'] }, /port rule 4/],
      [{ port: 5432 }, /port rule 4/],
    ];
    const before = await groupCount(alice);
    for (const [svc, re] of cases) bad(await create(alice, { services: [svc] }), re);
    // In a batch, one bad entry aborts the request: the good one is not created either.
    bad(
      await create(alice, [
        { name: 'good-one', services: [{ port: 443, handlers: ['http', 'tls'] }] },
        { services: [{ port: 80, handlers: ['tls'] }] },
      ]),
      /entry 1: .*port rule 1/,
    );
    assert.equal(await groupCount(alice), before);
  });

  test('a port published twice and an unknown handler answer 400', async () => {
    bad(
      await create(alice, {
        services: [
          { port: 443, handlers: ['http', 'tls'] },
          { port: 443, handlers: ['http', 'tls'] },
        ],
      }),
      /port 443 is published twice/,
    );
    bad(await create(alice, { services: [{ port: 8443, handlers: ['tls', 'quic'] }] }), /unknown handler 'quic'/);
    bad(await create(alice, { services: [{ port: 70000, handlers: ['tls'] }] }), /port/);
  });

  test("ports outside the operator's open ports (gateway.allowedPorts) are refused naming them; the API's own port too", async () => {
    bad(
      await create(alice, { services: [{ port: 22, handlers: ['tls'] }] }),
      /port 22 is not open to services on this platform \(open: 80, 443, 1024-65535/,
    );
    bad(await create(alice, { services: [{ port: 1023, handlers: ['tls'] }] }), /port 1023 is not open/);
    const g = await h.call('POST', '/v1/services', alice, { services: [{ port: 1024, handlers: ['tls'] }] });
    assert.equal(g.body.status, 'success', g.text);
    // adding a closed port by an update is refused the same way
    const u = await h.call('PATCH', '/v1/services', alice, {
      uuid: g.body.data.service_groups[0].uuid,
      prop: 'services',
      op: 'add',
      value: [{ port: 25, handlers: ['tls'] }],
    });
    assert.match(u.text, /port 25 is not open/);
    const { checkPortPolicy } = await import('../../src/domain/ports.js');
    assert.throws(() => checkPortPolicy(7878, { allowed: ['1024-65535'], taken: [7878] }), /platform's own/);
    assert.doesNotThrow(() => checkPortPolicy(2000, { allowed: ['1999-2001'], taken: [7878] }));
  });

  test('a group name taken by the same user is a per-entry error; another user may use it', async () => {
    ok(await create(alice, { name: 'dup-name', services: [] }));
    entryError(await create(alice, { name: 'dup-name', services: [] }), 23, /already exists/);
    ok(await create(bob, { name: 'dup-name', services: [] }));
  });
});

describe('domains', () => {
  test('a name without a trailing dot gets the metro domain; no certificate', async () => {
    const [g] = ok(
      await create(alice, { services: [{ port: 443, handlers: ['http', 'tls'] }], domains: [{ name: 'Shop' }] }),
    );
    assert.deepEqual(g.domains, [{ fqdn: `shop.${metro}` }]);
  });

  test('an FQDN with a trailing dot is taken as is and gets a pending certificate', async () => {
    const [g] = ok(
      await create(alice, {
        name: 'custom',
        services: [{ port: 443, handlers: ['http', 'tls'] }],
        domains: [{ name: 'www.example.org.' }],
      }),
    );
    assert.equal(g.domains.length, 1);
    assert.equal(g.domains[0].fqdn, 'www.example.org');
    const c = g.domains[0].certificate;
    assert.ok(c, 'a custom FQDN gets a certificate');
    assert.match(c.uuid, /^[0-9a-f-]{36}$/);
    assert.equal(c.state, 'pending');
    assert.equal(typeof c.name, 'string');
    const [cert] = ok(await h.call('GET', '/v1/certificates', alice, { uuid: c.uuid }), 'certificates');
    assert.equal(cert.common_name, 'www.example.org');
    // GET shows the same domain view.
    const [full] = ok(await get(alice, { uuid: g.uuid }));
    assert.deepEqual(full.domains, g.domains);
  });

  test('`certificate` on a non-FQDN answers 400 and creates nothing', async () => {
    const before = await groupCount(alice);
    bad(
      await create(alice, {
        services: [{ port: 443, handlers: ['http', 'tls'] }],
        domains: [{ name: 'plain', certificate: { name: 'x' } }],
      }),
      /'certificate' is only allowed for FQDNs/,
    );
    assert.equal(await groupCount(alice), before);
  });

  test('an existing certificate is reused when its common name matches, refused when it does not', async () => {
    const svc = [{ port: 443, handlers: ['http', 'tls'] }];
    const [g1] = ok(await create(alice, { services: svc, domains: [{ name: 'api.reuse.test.' }] }));
    const cert = g1.domains[0].certificate;
    const certsBefore = ok(await h.call('GET', '/v1/certificates/list', alice), 'certificates').length;

    // By name, the common name does not cover the other domain: CertCNMisMatch, nothing created.
    const groupsBefore = await groupCount(alice);
    entryError(
      await create(alice, {
        services: svc,
        domains: [{ name: 'other.reuse.test.', certificate: { name: cert.name } }],
      }),
      30,
      /does not cover domain 'other\.reuse\.test'/,
    );
    assert.equal(await groupCount(alice), groupsBefore);

    // By name or uuid for a matching domain (the first group gave it up): reused.
    ok(await h.call('DELETE', '/v1/services', alice, { uuid: g1.uuid }));
    const [g2] = ok(
      await create(alice, { services: svc, domains: [{ name: 'api.reuse.test.', certificate: { name: cert.name } }] }),
    );
    assert.equal(g2.domains[0].certificate.uuid, cert.uuid);
    ok(await h.call('DELETE', '/v1/services', alice, { uuid: g2.uuid }));
    // Without a reference, the matching certificate is picked automatically.
    const [g3] = ok(await create(alice, { services: svc, domains: [{ name: 'api.reuse.test.' }] }));
    assert.equal(g3.domains[0].certificate.uuid, cert.uuid);
    assert.equal(ok(await h.call('GET', '/v1/certificates/list', alice), 'certificates').length, certsBefore);

    bad(
      await create(alice, {
        services: svc,
        domains: [{ name: 'x.reuse.test.', certificate: { uuid: cert.uuid, name: cert.name } }],
      }),
      /certificate: give either 'uuid' or 'name'/,
    );
    // A certificate that does not exist is a per-entry not found.
    entryError(
      await create(alice, { services: svc, domains: [{ name: 'x.reuse.test.', certificate: { name: 'nope' } }] }),
      8,
    );
  });

  test('a domain used by another user cannot be used (code 24); nothing is created', async () => {
    const svc = [{ port: 443, handlers: ['http', 'tls'] }];
    ok(await create(alice, { services: svc, domains: [{ name: 'taken' }, { name: 'taken.example.net.' }] }));
    const before = await groupCount(bob);
    entryError(await create(bob, { services: svc, domains: [{ name: 'taken' }] }), 24, /already in use/);
    entryError(await create(bob, { services: svc, domains: [{ name: `taken.${metro}.` }] }), 24);
    entryError(await create(bob, { services: svc, domains: [{ name: 'taken.example.net.' }] }), 24);
    // The same user cannot use it twice either.
    entryError(await create(alice, { services: svc, domains: [{ name: 'TAKEN' }] }), 24);
    assert.equal(await groupCount(bob), before);
  });

  test('a name of several labels under the metro domain is refused, saying how to write what was meant', async () => {
    const svc = [{ port: 443, handlers: ['http', 'tls'] }];
    bad(
      await create(alice, { services: svc, domains: [{ name: 'app.example.com' }] }),
      /would be 'app\.example\.com\.[^']*'.*add a trailing dot \('app\.example\.com\.'\).* one label \('app-example-com'\)/,
    );
    bad(await create(alice, { services: svc, domains: [{ name: `x.shop.${metro}.` }] }), /has one label \('x-shop\./);
    const ok = await create(alice, { services: svc, domains: [{ name: 'app-example-com' }] });
    assert.equal(ok.body.status, 'success', ok.text);
  });

  test('domains are bounded: at most 16 per group, and the domains quota per user (code 19)', async () => {
    const svc = [{ port: 443, handlers: ['http', 'tls'] }];
    const many = Array.from({ length: 17 }, (_, i) => ({ name: `many-${i}` }));
    bad(await create(alice, { services: svc, domains: many }), /domains/);
    const t = await h.user('domainer');
    await h.daemon.services.users.setQuotas('domainer', { hard: { domains: 2 } });
    const two = await create(t, { services: svc, domains: [{ name: 'dq-one' }, { name: 'dq-two' }] });
    assert.equal(two.body.status, 'success', two.text);
    entryError(
      await create(t, { services: svc, domains: [{ name: 'dq-three' }] }),
      19,
      /quota 'domains' exceeded: 2 used \+ 1 requested > 2 allowed/,
    );
    // nothing half-made: no group without its domain
    const list = await h.call('GET', '/v1/services', t);
    assert.equal(list.body.data.service_groups.length, 1);
    const q = await h.call('GET', '/v1/users/quotas', t);
    assert.equal(q.body.data.quotas[0].used.domains, 2);
  });

  test('reserved labels under the metro domain are refused (code 24)', async () => {
    const svc = [{ port: 443, handlers: ['http', 'tls'] }];
    entryError(await create(alice, { services: svc, domains: [{ name: 'www' }] }), 24, /reserved/);
    entryError(await create(alice, { services: svc, domains: [{ name: `www.${metro}.` }] }), 24, /reserved/);
    entryError(await create(alice, { services: svc, domains: [{ name: `${metro}.` }] }), 24, /reserved/);
  });

  test('the same domain twice in one request answers 400', async () => {
    const svc = [{ port: 443, handlers: ['http', 'tls'] }];
    const before = await groupCount(alice);
    bad(
      await create(alice, { services: svc, domains: [{ name: 'twice' }, { name: `twice.${metro}.` }] }),
      /given twice/,
    );
    bad(
      await create(alice, [
        { services: svc, domains: [{ name: 'twice2' }] },
        { services: svc, domains: [{ name: 'twice2' }] },
      ]),
      /entry 1: .*given twice/,
    );
    assert.equal(await groupCount(alice), before);
  });

  test('an invalid domain name answers 400', async () => {
    bad(await create(alice, { services: [], domains: [{ name: 'bad_name' }] }), /domain 'bad_name' is invalid/);
    bad(await create(alice, { services: [], domains: [{ name: '-x.example.com.' }] }), /invalid/);
  });
});

describe('get, delete, list', () => {
  test('get returns every field, including attached instances and autoscale', async () => {
    const [g] = ok(await create(alice, { name: 'full', services: [{ port: 443, handlers: ['http', 'tls'] }] }));
    const inst = ok(
      await h.call('POST', '/v1/instances', alice, {
        name: 'full-1',
        image: 'app:latest',
        service_group: { name: 'full' },
      }),
      'instances',
    )[0];
    const [byName] = ok(await get(alice, { name: 'full' }));
    const [byPath] = ok(await h.call('GET', `/v1/services/${g.uuid}`, alice));
    assert.deepEqual(byName, byPath);
    assert.equal(byName.status, 'success');
    assert.equal(byName.uuid, g.uuid);
    assert.equal(byName.name, 'full');
    assert.ok(!Number.isNaN(Date.parse(byName.created_at)));
    assert.equal(byName.persistent, true);
    assert.equal(byName.autoscale, false);
    assert.deepEqual(byName.services, [{ port: 443, destination_port: 443, handlers: ['http', 'tls'] }]);
    assert.deepEqual(byName.domains, g.domains);
    assert.deepEqual(byName.instances, [{ uuid: inst.uuid, name: 'full-1' }]);

    ok(await h.call('POST', `/v1/services/${g.uuid}/autoscale`, alice, { master: { name: 'full-1' } }));
    assert.equal(ok(await get(alice, { name: 'full' }))[0].autoscale, true);
  });

  test("a missing group and another user's group are per-entry not found", async () => {
    const [g] = ok(await create(alice, { name: 'mine', services: [] }));
    entryError(await get(bob, { uuid: g.uuid }), 8, /No service group with UUID/);
    entryError(await get(alice, { name: 'no-such-group' }), 8, /No service group with name 'no-such-group'/);
    const r = await get(alice, [{ name: 'mine' }, { name: 'no-such-group' }]);
    assert.equal(r.body.status, 'partial_success');
  });

  test('delete is refused while instances are attached (code 15), then releases the domain', async () => {
    const [g] = ok(
      await create(alice, {
        name: 'del',
        services: [{ port: 443, handlers: ['http', 'tls'] }],
        domains: [{ name: 'released' }],
      }),
    );
    const [inst] = ok(
      await h.call('POST', '/v1/instances', alice, { image: 'app:latest', service_group: { uuid: g.uuid } }),
      'instances',
    );
    entryError(await h.call('DELETE', '/v1/services', alice, { uuid: g.uuid }), 15, /attached/);
    entryError(
      await create(bob, { services: [{ port: 443, handlers: ['http', 'tls'] }], domains: [{ name: 'released' }] }),
      24,
    );

    ok(await h.call('DELETE', '/v1/instances', alice, { uuid: inst.uuid }), 'instances');
    const [d] = ok(await h.call('DELETE', `/v1/services/${g.uuid}`, alice));
    assert.deepEqual({ uuid: d.uuid, name: d.name }, { uuid: g.uuid, name: 'del' });
    entryError(await get(alice, { uuid: g.uuid }), 8);
    const [b] = ok(
      await create(bob, { services: [{ port: 443, handlers: ['http', 'tls'] }], domains: [{ name: 'released' }] }),
    );
    assert.equal(b.domains[0].fqdn, `released.${metro}`);
  });

  test('list filters by persistent and fqdn; all given filters must match', async () => {
    const carol = await h.user('carol');
    const [p] = ok(
      await create(carol, {
        name: 'persist',
        services: [{ port: 443, handlers: ['http', 'tls'] }],
        domains: [{ name: 'carol-p' }],
      }),
    );
    const [i] = ok(
      await h.call('POST', '/v1/instances', carol, {
        image: 'app:latest',
        service_group: { services: [{ port: 443, handlers: ['http', 'tls'] }], domains: [{ name: 'carol-i' }] },
      }),
      'instances',
    );
    const implicit = i.service_group;
    const names = (r: Reply) =>
      ok(r)
        .map((g) => g.name)
        .sort();
    assert.deepEqual(names(await list(carol)), [implicit.name, 'persist'].sort());
    assert.deepEqual(ok(await list(carol))[0], { uuid: p.uuid, name: 'persist' });
    assert.deepEqual(names(await list(carol, { persistent: true })), ['persist']);
    assert.deepEqual(names(await list(carol, { persistent: false })), [implicit.name]);
    assert.deepEqual(names(await h.call('GET', '/v1/services/list?persistent=false', carol)), [implicit.name]);
    assert.deepEqual(names(await list(carol, { fqdn: `carol-p.${metro}` })), ['persist']);
    assert.deepEqual(names(await list(carol, { fqdn: `carol-p.${metro}.` })), ['persist']);
    assert.deepEqual(names(await list(carol, { fqdn: `carol-p.${metro}`, persistent: false })), []);
    assert.deepEqual(names(await list(carol, { fqdn: 'nowhere.example.com' })), []);
    bad(await list(carol, { bogus: 1 }), /unknown parameter 'bogus'/);
  });
});

describe('groups created with an instance', () => {
  const svc = [{ port: 443, handlers: ['http', 'tls'] }];

  test('an implicit group is not persistent and dies with its instance', async () => {
    const [i] = ok(
      await h.call('POST', '/v1/instances', alice, { image: 'app:latest', service_group: { services: svc } }),
      'instances',
    );
    const sg = i.service_group;
    assert.match(sg.name, /^[a-z]+-[a-z]+-[a-z0-9]{8}$/);
    assert.equal(sg.domains.length, 1);
    assert.ok(sg.domains[0].fqdn.endsWith(`.${metro}`));
    const [g] = ok(await get(alice, { uuid: sg.uuid }));
    assert.equal(g.persistent, false);
    assert.deepEqual(g.instances, [{ uuid: i.uuid, name: i.name }]);
    ok(await h.call('DELETE', '/v1/instances', alice, { uuid: i.uuid }), 'instances');
    entryError(await get(alice, { uuid: sg.uuid }), 8);
    // Its domain is free again.
    ok(await create(bob, { services: svc, domains: [{ name: sg.domains[0].fqdn + '.' }] }));
  });

  test('it becomes persistent when a second instance attaches by name, and survives both', async () => {
    const [i1] = ok(
      await h.call('POST', '/v1/instances', alice, { image: 'app:latest', service_group: { services: svc } }),
      'instances',
    );
    const sg = i1.service_group;
    const [i2] = ok(
      await h.call('POST', '/v1/instances', alice, { image: 'app:latest', service_group: { name: sg.name } }),
      'instances',
    );
    assert.equal(i2.service_group.uuid, sg.uuid);
    const [g] = ok(await get(alice, { uuid: sg.uuid }));
    assert.equal(g.persistent, true);
    assert.equal(g.instances.length, 2);
    ok(await h.call('DELETE', '/v1/instances', alice, [{ uuid: i1.uuid }, { uuid: i2.uuid }]), 'instances');
    const [after] = ok(await get(alice, { uuid: sg.uuid }));
    assert.deepEqual(after.instances, []);
  });

  test('`service_group: {}` creates a group without services or domains', async () => {
    const [i] = ok(
      await h.call('POST', '/v1/instances', alice, { image: 'app:latest', service_group: {} }),
      'instances',
    );
    const [g] = ok(await get(alice, { uuid: i.service_group.uuid }));
    assert.deepEqual(g.services, []);
    assert.deepEqual(g.domains, []);
    assert.equal(g.persistent, false);
  });

  test('a port rule broken in an implicit group fails and creates neither instance nor group', async () => {
    const before = await groupCount(alice);
    const instancesBefore = ok(await h.call('GET', '/v1/instances/list', alice), 'instances').length;
    const r = await h.call('POST', '/v1/instances', alice, {
      image: 'app:latest',
      service_group: { services: [{ port: 80, handlers: ['tls'] }] },
    });
    assert.equal(r.body.status, 'error', r.text);
    assert.match(r.text, /port rule 1/);
    assert.equal(await groupCount(alice), before);
    assert.equal(ok(await h.call('GET', '/v1/instances/list', alice), 'instances').length, instancesBefore);
  });
});
