/* eslint-disable @typescript-eslint/no-explicit-any -- API replies are JSON; the assertions check their shape. */
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, type Harness } from '../helpers/harness.js';
import { simMachines } from '../helpers/sim-machines.js';
import { replyAsserts } from '../helpers/replies.js';

let h: Harness;
let alice: string;
let aliceId: string;

const { ok, entryError } = replyAsserts('certificates');

const SVC = [{ port: 443, handlers: ['http', 'tls'] }];

/** A group with one custom domain; returns the group and its certificate reference. */
async function groupFor(token: string, fqdn: string, certificate?: object): Promise<{ group: any; cert: any }> {
  const [group] = ok(
    await h.call('POST', '/v1/services', token, {
      services: SVC,
      domains: [{ name: fqdn, ...(certificate ? { certificate } : {}) }],
    }),
    'service_groups',
  );
  return { group, cert: group.domains[0].certificate };
}

const getCert = (token: string, body: unknown) => h.call('GET', '/v1/certificates', token, body);
const listNames = async (token: string, body?: unknown) =>
  ok(await h.call('GET', '/v1/certificates/list', token, body))
    .map((c) => c.name)
    .sort();

before(async () => {
  h = await startHarness({}, (s) => [simMachines(s)]);
  alice = await h.user('alice');
  aliceId = (await h.daemon.store.read((tx) => tx.users.getByName('alice')))!.id;
});
after(async () => h.close());

describe('certificates', () => {
  test('get shows every field of a pending certificate, with validation and the groups using it', async () => {
    const { group, cert } = await groupFor(alice, 'shop.example.com.');
    const [byUuid] = ok(await getCert(alice, { uuid: cert.uuid }));
    const [byName] = ok(await getCert(alice, { name: cert.name }));
    const [byPath] = ok(await h.call('GET', `/v1/certificates/${cert.uuid}`, alice));
    assert.deepEqual(byUuid, byName);
    assert.deepEqual(byUuid, byPath);
    assert.equal(byUuid.status, 'success');
    assert.equal(byUuid.uuid, cert.uuid);
    assert.equal(byUuid.name, cert.name);
    assert.equal(byUuid.common_name, 'shop.example.com');
    assert.equal(byUuid.state, 'pending');
    assert.ok(!Number.isNaN(Date.parse(byUuid.created_at)));
    assert.equal(byUuid.validation.attempt, 0);
    assert.ok(!Number.isNaN(Date.parse(byUuid.validation.next)));
    assert.equal(byUuid.subject, 'CN=shop.example.com');
    assert.deepEqual(byUuid.service_groups, [{ uuid: group.uuid, name: group.name }]);
  });

  test('a valid certificate has no validation; a wildcard is shared by several groups', async () => {
    const id = randomUUID();
    await h.daemon.store.tx((tx) =>
      tx.certificates.insert({
        id,
        user_id: aliceId,
        name: 'wild',
        created_at: new Date().toISOString(),
        common_name: '*.wild.test',
        state: 'valid',
        validation_attempt: 1,
        validation_next: null,
        subject: 'CN=*.wild.test',
        issuer: 'CN=Test CA',
        serial_number: '01ab',
        not_before: '2025-01-01T00:00:00.000Z',
        not_after: '2099-01-01T00:00:00.000Z',
        message: null,
        source: 'upload',
        names: [],
        proven: true,
      }),
    );
    const a = await groupFor(alice, 'a.wild.test.');
    const b = await groupFor(alice, 'b.wild.test.', { name: 'wild' });
    assert.equal(a.cert.uuid, id);
    assert.deepEqual(b.cert, { uuid: id, name: 'wild', state: 'valid' });
    const [c] = ok(await getCert(alice, { name: 'wild' }));
    assert.equal(c.validation, undefined);
    assert.equal(c.issuer, 'CN=Test CA');
    assert.equal(c.serial_number, '01ab');
    assert.equal(c.not_before, '2025-01-01T00:00:00.000Z');
    assert.equal(c.not_after, '2099-01-01T00:00:00.000Z');
    assert.deepEqual(c.service_groups.map((g: any) => g.uuid).sort(), [a.group.uuid, b.group.uuid].sort());
    // A wildcard covers one label only.
    const deep = await groupFor(alice, 'x.y.wild.test.');
    assert.notEqual(deep.cert.uuid, id);
  });

  test('list returns uuid and name; common_name filters', async () => {
    const bob = await h.user('bob');
    const one = await groupFor(bob, 'one.example.net.');
    const two = await groupFor(bob, 'two.example.net.');
    assert.deepEqual(await listNames(bob), [one.cert.name, two.cert.name].sort());
    const all = ok(await h.call('GET', '/v1/certificates/list', bob));
    assert.deepEqual(Object.keys(all[0]).sort(), ['name', 'uuid']);
    assert.deepEqual(await listNames(bob, { common_name: 'two.example.net' }), [two.cert.name]);
    assert.deepEqual(await listNames(bob, { common_name: 'TWO.example.net.' }), [two.cert.name]);
    assert.deepEqual(
      ok(await h.call('GET', '/v1/certificates/list?common_name=one.example.net', bob)).map((c) => c.uuid),
      [one.cert.uuid],
    );
    assert.deepEqual(await listNames(bob, { common_name: 'none.example.net' }), []);
    // Another user's certificates are neither listed nor readable.
    assert.ok(!ok(await h.call('GET', '/v1/certificates/list', alice)).some((c) => c.uuid === one.cert.uuid));
    entryError(await getCert(alice, { uuid: one.cert.uuid }), 8, /No certificate with UUID/);
  });

  test('delete is refused while a group uses it (code 15), allowed after the group is deleted', async () => {
    const { group, cert } = await groupFor(alice, 'gone.example.org.');
    entryError(
      await h.call('DELETE', '/v1/certificates', alice, { uuid: cert.uuid }),
      15,
      /still used by domain\(s\) 'gone\.example\.org'/,
    );
    ok(await h.call('DELETE', '/v1/services', alice, { uuid: group.uuid }), 'service_groups');
    const [c] = ok(await getCert(alice, { uuid: cert.uuid }));
    assert.deepEqual(c.service_groups, []);
    const [d] = ok(await h.call('DELETE', `/v1/certificates/${cert.uuid}`, alice));
    assert.deepEqual(d, { status: 'success', uuid: cert.uuid, name: cert.name });
    entryError(await getCert(alice, { uuid: cert.uuid }), 8);
    entryError(await h.call('DELETE', '/v1/certificates', alice, { name: cert.name }), 8);
    // The domain can be claimed again and gets a fresh certificate.
    const again = await groupFor(alice, 'gone.example.org.');
    assert.notEqual(again.cert.uuid, cert.uuid);
    assert.equal(again.cert.state, 'pending');
  });
});
