import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { UserRec } from '../store/types.js';
import { decodeToken, TokenCache } from './tokens.js';

const user = (name: string): UserRec => ({ id: name, name, developer: false, created_at: '', quotas: {} });

test('only the canonical base64 of "<user>:<secret>" decodes', () => {
  for (const text of ['alice:s3cret', 'bob:xy', 'carol:abc']) {
    const t = Buffer.from(text).toString('base64');
    assert.deepEqual(decodeToken(t), { name: text.split(':')[0], secret: text.split(':')[1] });
    for (const v of [t + 'A', t + '=', t.replace(/=+$/, ''), t + '\n', ` ${t}`, t.replace(/\+/g, '-')]) {
      if (v !== t) assert.equal(decodeToken(v), undefined, `${JSON.stringify(v)} decoded`);
    }
  }
  assert.equal(decodeToken(Buffer.from('no-colon').toString('base64')), undefined);
  assert.equal(decodeToken(Buffer.from([0x61, 0x3a, 0xff, 0xfe]).toString('base64')), undefined); // not UTF-8
});

test('the cache is bounded and evicts its oldest entry, not all of them', () => {
  const c = new TokenCache(60_000, 3);
  for (const n of ['a', 'b', 'c', 'd']) c.set(n, user(n), 0);
  assert.equal(c.size, 3);
  assert.equal(c.get('a', 1), undefined);
  assert.equal(c.get('d', 1)?.name, 'd');
  assert.equal(c.get('b', 1)?.name, 'b');
  assert.equal(c.get('b', 60_001), undefined); // expired
});
