import assert from 'node:assert/strict';
import { test } from 'node:test';
import { StatCounters, type StatNames } from './counters.js';

const HEAD = '# pxname,svname,scur,stot,bin,bout,req_tot';
const names: StatNames = {
  group: (px) => ({ b1: 'g1', b2: 'g2' })[px],
  instance: (px, sv) => (sv.startsWith('s') ? `${px}-${sv}` : undefined),
  port: (px) => (px === 'p80' ? 80 : undefined),
};
const answer = (...rows: string[]) => [HEAD, ...rows, ''].join('\n');

test('a partial read replaces what it holds; the rest stands until read again', () => {
  const idle: string[] = [];
  const c = new StatCounters({ onIdle: (id) => idle.push(id) });
  c.update(
    answer(
      'p80,FRONTEND,3,9,0,0,',
      'b1,BACKEND,2,5,10,20,',
      'b1,s1,2,5,10,20,5',
      'b2,BACKEND,1,1,3,4,',
      'b2,s2,1,1,3,4,1',
    ),
    names,
  );
  assert.equal(c.connections('b1-s1'), 2);
  assert.equal(c.connections('b2-s2'), 1);
  assert.equal(c.clientConnections(80), 3);
  // b1 only: its server is gone (the instance stopped); b2's sessions stand as last read
  c.update(answer('p80,FRONTEND,1,9,0,0,', 'b1,BACKEND,0,7,30,40,'), names, Date.now(), true);
  assert.equal(c.connections('b1-s1'), 0);
  assert.deepEqual(idle, ['b1-s1']);
  assert.equal(c.connections('b2-s2'), 1, 'a backend the partial read does not hold keeps its sessions');
  assert.equal(c.snapshot().groups.g2!.openConnections, 1);
  assert.equal(c.snapshot().groups.g1!.bytesIn, 30, "the read backend's bytes");
  // a whole read replaces everything: b2's server is gone too
  c.update(answer('p80,FRONTEND,0,9,0,0,', 'b1,BACKEND,0,7,30,40,', 'b2,BACKEND,0,1,3,4,'), names);
  assert.equal(c.connections('b2-s2'), 0);
  assert.deepEqual(idle, ['b1-s1', 'b2-s2']);
  assert.equal(c.snapshot().groups.g2!.openConnections, 0);
  assert.equal(c.snapshot().instances['b1-s1']!.requests, 5);
});
