/**
 * The control channel reader against a file written like QEMU writes it
 * (appended), including a guest that floods it.
 */
import { afterEach, test } from 'node:test';
import assert from 'node:assert/strict';
import { appendFileSync, existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CONTROL_BUDGET, ControlTail } from './control-tail.js';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function files(): { path: string; savedPath: string } {
  const d = mkdtempSync(join(tmpdir(), 'unihost-ctl-'));
  dirs.push(d);
  return { path: join(d, 'control.log'), savedPath: join(d, 'control.json') };
}

test('lines are parsed incrementally, a line split across reads included', () => {
  const f = files();
  const t = new ControlTail(f);
  assert.equal(t.pump(), false, 'no file yet');
  writeFileSync(f.path, 'UNIHOST INIT uptime_ms=1\nUNIHOST REA');
  assert.equal(t.pump(), true);
  assert.deepEqual([t.state.init, t.state.ready], [true, false]);
  appendFileSync(f.path, 'DY uptime_ms=2\r\n');
  assert.equal(t.pump(), true);
  assert.equal(t.state.ready, true);
  appendFileSync(f.path, 'noise\nUNIHOST EXIT 3\n');
  t.pump();
  assert.equal(t.state.exit, 3);
  assert.equal(t.overflowed, false);
  assert.ok(existsSync(f.path), 'a well-behaved guest keeps its file');
});

test('a flood: reading stops at the budget, the file is truncated and stays small, the state is kept', () => {
  const f = files();
  const floods: number[] = [];
  const t = new ControlTail({ ...f, onFlood: (n) => floods.push(n) });
  writeFileSync(f.path, 'UNIHOST INIT uptime_ms=1\nUNIHOST READY uptime_ms=2\n');
  t.pump();
  // 4 MiB without a newline (one endless line), then more lines
  appendFileSync(f.path, Buffer.alloc(4 << 20, 'x'));
  assert.equal(t.pump(), false);
  assert.equal(t.overflowed, true);
  assert.deepEqual(floods, [CONTROL_BUDGET], 'logged once, at the budget');
  assert.equal(statSync(f.path).size, 0, 'truncated');
  // the guest keeps writing: lines past the budget are not read, the file keeps being cut
  appendFileSync(f.path, 'UNIHOST EXIT 9\n'.repeat(10_000));
  assert.equal(t.pump(), false);
  assert.equal(t.state.exit, null, 'not parsed past the budget');
  assert.equal(statSync(f.path).size, 0);
  assert.deepEqual(floods, [CONTROL_BUDGET]);
  // a daemon that adopts the VM takes the saved state instead of the (cut) file
  const saved = JSON.parse(readFileSync(f.savedPath, 'utf8'));
  assert.equal(saved.ready, true);
  appendFileSync(f.path, 'UNIHOST SHUTDOWN\n');
  const again = new ControlTail(f, true);
  assert.equal(again.state.ready, true);
  assert.equal(again.overflowed, true);
  again.pump();
  assert.equal(again.state.shutdown, false);
  assert.equal(statSync(f.path).size, 0);
});

test('many short lines: parsed up to the budget only', () => {
  const f = files();
  const t = new ControlTail({ ...f, budget: 1024 });
  writeFileSync(f.path, 'UNIHOST INIT\n' + 'UNIHOST bogus\n'.repeat(200) + 'UNIHOST READY\n');
  t.pump();
  assert.equal(t.state.init, true);
  assert.equal(t.state.ready, false, 'the READY line lies past the budget');
  assert.equal(t.overflowed, true);
});

test('adopting without a saved state re-reads the file from the start', () => {
  const f = files();
  writeFileSync(f.path, 'UNIHOST INIT\nUNIHOST READY\nUNIHOST STOP\n');
  const t = new ControlTail(f, true);
  t.pump();
  assert.deepEqual([t.state.init, t.state.ready, t.state.stop], [true, true, true]);
});
