import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { InstanceRec } from '../store/types.js';
import { NameTable } from './dns-names.js';

const inst = (id: string, user: string, name: string, ip: string | null): InstanceRec =>
  ({ id, user_id: user, name, private_ip: ip }) as InstanceRec;

test("names resolve for the asker's own user only, and follow renames, new addresses and deletes", () => {
  const t = new NameTable();
  t.reset([
    inst('a1', 'alice', 'web', '10.0.0.2'),
    inst('a2', 'alice', 'db', '10.0.0.3'),
    inst('b1', 'bob', 'web', '10.0.0.9'),
  ]);
  assert.equal(t.lookup('10.0.0.2', 'db'), '10.0.0.3');
  assert.equal(t.lookup('10.0.0.2', 'DB'), '10.0.0.3', 'names are case-insensitive');
  assert.equal(t.lookup('10.0.0.9', 'web'), '10.0.0.9', "bob's web is bob's");
  assert.equal(t.lookup('10.0.0.9', 'db'), undefined, "alice's db is not bob's");
  assert.equal(t.lookup('10.9.9.9', 'web'), undefined, 'an unknown asker gets nothing');
  t.set('a2', inst('a2', 'alice', 'database', '10.0.0.3'));
  assert.equal(t.lookup('10.0.0.2', 'db'), undefined);
  assert.equal(t.lookup('10.0.0.2', 'database'), '10.0.0.3');
  t.set('a2', undefined);
  assert.equal(t.lookup('10.0.0.2', 'database'), undefined);
  assert.equal(t.lookup('10.0.0.3', 'web'), undefined, 'a deleted instance asks no more');
  // an address handed to another user's new instance: the old owner's entry does not shadow it
  t.set('a1', undefined);
  t.set('b2', inst('b2', 'bob', 'api', '10.0.0.2'));
  assert.equal(t.lookup('10.0.0.2', 'web'), '10.0.0.9');
  t.set('x', inst('x', 'carol', 'no-ip', null));
  assert.equal(t.size, 2);
});
