import assert from 'node:assert/strict';
import { test } from 'node:test';
import { normalizeHost } from './answers.js';

test('host names are normalized for lookup', () => {
  assert.equal(normalizeHost('Foo.Example.COM.:8080'), 'foo.example.com');
  assert.equal(normalizeHost('a b'), undefined);
  assert.equal(normalizeHost(''), undefined);
});
