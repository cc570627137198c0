/**
 * Departures: an instance taken out ahead of its stop stays out of backend
 * tables read before it left, and comes back with the first read that began
 * after (the HAProxy plane's side, with a real HAProxy, is in
 * src/gateway/tls.test.ts).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Departures } from './departures.js';
import type { Backend } from './types.js';

const a: Backend = { instanceId: 'a', host: '10.0.0.2', state: 'running' };
const b: Backend = { instanceId: 'b', host: '10.0.0.3', state: 'running' };
const states = (list: Backend[]) => list.map((x) => `${x.instanceId}:${x.state}`).join(' ');

test('a read begun before the leave has the instance out; one begun after has it as it reads', () => {
  const d = new Departures();
  const before = d.beginRead();
  d.leave('a');
  assert.equal(states(d.keep([a, b], before)), 'a:other b:running', 'read before the leave: taken out');
  const after = d.beginRead();
  assert.equal(states(d.keep([a, b], after)), 'a:running b:running', 'read after the leave: the truth');
  d.settle(after);
  assert.equal(states(d.keep([a, b], before)), 'a:running b:running', 'settled: nothing left to take out');
});

test('settling with a read that began before a leave keeps that leave', () => {
  const d = new Departures();
  const first = d.beginRead();
  d.leave('a');
  d.settle(first);
  assert.equal(states(d.keep([a], first)), 'a:other');
  const second = d.beginRead();
  d.leave('b'); // during the second read
  d.settle(second);
  assert.equal(states(d.keep([a, b], second)), 'a:running b:other');
});

test('no leaves: the list passes through as it is', () => {
  const d = new Departures();
  const list = [a, b];
  assert.equal(d.keep(list, d.beginRead()), list);
});
