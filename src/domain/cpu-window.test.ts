import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CpuWindow } from './cpu-window.js';

test('millicores are CPU ms over wall ms across the window', () => {
  const w = new CpuWindow(3000);
  assert.equal(w.millicores(), undefined);
  w.add({ t: 0, cpuMs: 0 });
  assert.equal(w.millicores(), undefined, 'one reading says nothing');
  w.add({ t: 1000, cpuMs: 500 });
  assert.equal(w.millicores(), 500);
  w.add({ t: 2000, cpuMs: 1500 });
  assert.equal(w.millicores(), 750);
});

test('readings older than the window drop out, keeping the window covered', () => {
  const w = new CpuWindow(2000);
  let cpu = 0;
  for (let t = 0; t <= 10_000; t += 1000) {
    cpu += t <= 5000 ? 1000 : 100; // busy, then nearly idle
    w.add({ t, cpuMs: cpu });
  }
  assert.equal(w.size, 3, 'two seconds of one-second readings');
  assert.equal(w.millicores(), 100);
});

test('a counter that goes backwards (a new VM process) starts the history over', () => {
  const w = new CpuWindow(5000);
  w.add({ t: 0, cpuMs: 9000 });
  w.add({ t: 1000, cpuMs: 10_000 });
  w.add({ t: 2000, cpuMs: 50 });
  assert.equal(w.millicores(), undefined);
  w.add({ t: 3000, cpuMs: 250 });
  assert.equal(w.millicores(), 200);
});

test('from a time on: the readings before it (a boot) are left out', () => {
  const w = new CpuWindow(5000);
  w.add({ t: 0, cpuMs: 0 });
  w.add({ t: 1000, cpuMs: 900 }); // booting: 900 millicores
  w.add({ t: 2000, cpuMs: 950 });
  assert.equal(w.millicores(), 475);
  assert.equal(w.millicores(2000), undefined, 'one reading since: nothing to judge by');
  w.add({ t: 3000, cpuMs: 1000 });
  assert.equal(w.millicores(1500), 50);
});
