import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import { clockTicks, parseStatCpuMs, parseStatusRssBytes, processStats, threadCpuMs } from './stats.js';

test('clock ticks match getconf CLK_TCK', () => {
  assert.equal(clockTicks(), Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()));
});

test('stats of the current process agree with node’s own accounting', () => {
  // Some CPU work so the tick-granular /proc numbers are well above zero.
  let x = 0;
  for (let i = 0; i < 2e7; i++) x += i % 7;
  assert.ok(x > 0);
  const before = process.cpuUsage();
  const s = processStats(process.pid);
  const after = process.cpuUsage();
  assert.ok(s, 'stats for a live pid');
  const lo = (before.user + before.system) / 1000;
  const hi = (after.user + after.system) / 1000;
  // /proc counts whole ticks (10 ms at 100 Hz) per thread; allow a few ticks of slack per side.
  const slack = (4 * 1000) / clockTicks() + 0.05 * hi;
  assert.ok(s.cpuMs >= lo - slack && s.cpuMs <= hi + slack, `cpuMs ${s.cpuMs} vs cpuUsage ${lo}..${hi}`);
  const rss = process.memoryUsage().rss;
  assert.ok(Math.abs(s.rssBytes - rss) < 0.25 * rss, `rssBytes ${s.rssBytes} vs memoryUsage ${rss}`);
});

test('a gone process has no stats', async () => {
  const child = spawn('true', { stdio: 'ignore' });
  const pid = child.pid!;
  await once(child, 'exit'); // node reaps it: /proc/<pid> disappears
  assert.equal(processStats(pid), undefined);
  assert.equal(threadCpuMs(pid, pid), undefined);
  assert.equal(processStats(0), undefined);
  assert.equal(processStats(-1), undefined);
});

test('per-thread CPU time of the main thread', () => {
  const t = threadCpuMs(process.pid, process.pid);
  const s = processStats(process.pid);
  assert.ok(t !== undefined && s !== undefined);
  assert.ok(t > 0 && t <= s.cpuMs + (2 * 1000) / clockTicks(), `thread ${t} ms, process ${s.cpuMs} ms`);
  assert.equal(threadCpuMs(process.pid, 0x3fffffff), undefined);
});

test('stat parsing survives a command name with spaces and parentheses', () => {
  const rest = 'S 1 2 3 0 -1 4194560 100 0 0 0 250 150 0 0 20 0 4 0 100 200000000 5000';
  const ms = parseStatCpuMs(`4242 (qemu) (x y) ${rest}`);
  assert.equal(ms, ((250 + 150) * 1000) / clockTicks());
  assert.equal(parseStatCpuMs('garbage'), undefined);
});

test('VmRSS parsing; a zombie without VmRSS counts 0', () => {
  assert.equal(parseStatusRssBytes('Name:\tqemu\nVmPeak:\t  9 kB\nVmRSS:\t  123456 kB\n'), 123456 * 1024);
  assert.equal(parseStatusRssBytes('Name:\tqemu\nState:\tZ (zombie)\n'), 0);
});
