/** The confinement's pieces that need no VM: the wrapper command, uids, QEMU options. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { confinedCommand, jailArgv, makeCgroups, processUid, VM_UID_BASE, vmUid } from './jail.js';

test('the wrapper joins every cgroup with its own pid, applies the rlimits and execs the program with its args', () => {
  const d = mkdtempSync(join(tmpdir(), 'unihost-jail-'));
  try {
    const cgs = ['a', 'b'].map((n) => join(d, n));
    for (const c of cgs) {
      mkdirSync(c);
      writeFileSync(join(c, 'cgroup.procs'), '');
    }
    // the "VMM" prints its pid, its args (a `--` among them) and its rlimits
    const prog = join(d, 'vmm.sh');
    writeFileSync(
      prog,
      '#!/bin/sh\necho "$$ $*"; ulimit -n; ulimit -Hn; ulimit -c; ulimit -Hc; ulimit -v; ulimit -Hv\n',
      { mode: 0o700 },
    );
    const [cmd, ...args] = confinedCommand(prog, ['-name', 'x', '--', 'y z'], 128, cgs);
    const r = spawnSync(cmd!, args, { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    const [first, ...limits] = r.stdout.trim().split('\n');
    const [pid, ...rest] = first!.split(' ');
    assert.equal(rest.join(' '), '-name x -- y z');
    // soft and hard: 256 files, no core, address space = 128 MB of guest + 1.5 GiB (KiB)
    const as = String((128 + 1536) * 1024);
    assert.deepEqual(limits, ['256', '256', '0', '0', as, as]);
    for (const c of cgs) assert.equal(readFileSync(join(c, 'cgroup.procs'), 'utf8').trim(), pid, 'same pid: exec');
    // a cgroup it cannot join fails the start (exit 125) instead of running unconfined
    const bad = confinedCommand(prog, [], 128, [join(d, 'missing')]);
    assert.equal(spawnSync(bad[0]!, bad.slice(1)).status, 125);
  } finally {
    rmSync(d, { recursive: true, force: true });
  }
});

test('uids: per instance, stable, above every regular id', () => {
  const a = vmUid('0a1b2c3d-0000-4000-8000-000000000000');
  assert.equal(a, VM_UID_BASE + 0x0a1b2c);
  assert.equal(vmUid('0a1b2c3d-0000-4000-8000-000000000000'), a);
  assert.notEqual(vmUid('ffffff3d-0000-4000-8000-000000000000'), a);
  const argv = jailArgv('/d/i', a);
  assert.deepEqual(argv.slice(2), ['-runas', `${a}:${a}`, '-chroot', '/d/i/jail']);
  assert.match(argv[1]!, /^on,.*spawn=deny/);
});

test('uids never collide among live VMs: a taken one moves on to the next free, wrapping at the range end', () => {
  // two instances whose uuids start alike (what made 24-bit hashes collide around 4,000 VMs)
  const a = vmUid('0a1b2c3d-0000-4000-8000-000000000000');
  const b = vmUid('0a1b2cff-1111-4000-8000-000000000000', new Set([a]));
  assert.equal(b, a + 1);
  assert.equal(vmUid('0a1b2c00-2222-4000-8000-000000000000', new Set([a, b])), a + 2);
  const last = VM_UID_BASE + 0xffffff;
  assert.equal(vmUid('ffffff00-0000-4000-8000-000000000000', new Set([last])), VM_UID_BASE);
  // 5,000 VMs whose uuids all start alike still get 5,000 distinct uids
  const taken = new Set<number>();
  for (let i = 0; i < 5000; i++)
    taken.add(vmUid(`0a1b2c${String(i).padStart(2, '0').slice(-2)}-0000-4000-8000-0`, taken));
  assert.equal(taken.size, 5000);
});

test('processUid reads a running process’s uid from /proc; a gone one is undefined', () => {
  assert.equal(processUid(process.pid), process.getuid!());
  assert.equal(processUid(2 ** 22 + 12345), undefined);
});

test('cgroups: v2 (unified) gets one cgroup with memory.max, memory.swap.max, pids.max and cpu.max; v1 one per controller; none is said', () => {
  const d = mkdtempSync(join(tmpdir(), 'unihost-cg-'));
  const id = '0f0e0d0c-0000-4000-8000-000000000001';
  const logged: string[] = [];
  const log = (_o: object, m: string) => void logged.push(m);
  try {
    // a v2 hierarchy as the kernel shows it (a temporary directory stands in for /sys/fs/cgroup)
    const v2 = join(d, 'v2');
    mkdirSync(v2);
    writeFileSync(join(v2, 'cgroup.controllers'), 'cpuset cpu io memory pids\n');
    writeFileSync(join(v2, 'cgroup.subtree_control'), '');
    const dirs = makeCgroups(id, 128, log, v2);
    assert.deepEqual(dirs, [join(v2, 'unihost', id)]);
    assert.equal(readFileSync(join(dirs[0]!, 'memory.max'), 'utf8'), String((128 + 512) * 1024 * 1024));
    assert.equal(readFileSync(join(dirs[0]!, 'memory.swap.max'), 'utf8'), '0');
    assert.equal(readFileSync(join(dirs[0]!, 'pids.max'), 'utf8'), '64');
    assert.equal(readFileSync(join(dirs[0]!, 'cpu.max'), 'utf8'), '150000 100000');
    for (const s of [v2, join(v2, 'unihost')])
      assert.equal(readFileSync(join(s, 'cgroup.subtree_control'), 'utf8'), '+memory +pids +cpu');

    // v1: one directory per mounted controller
    const v1 = join(d, 'v1');
    for (const c of ['memory', 'pids', 'cpu']) {
      mkdirSync(join(v1, c), { recursive: true });
      writeFileSync(join(v1, c, 'cgroup.procs'), '');
    }
    const v1dirs = makeCgroups(id, 64, log, v1);
    assert.deepEqual(v1dirs, [
      join(v1, 'memory', 'unihost', id),
      join(v1, 'pids', 'unihost', id),
      join(v1, 'cpu', 'unihost', id),
    ]);
    assert.equal(readFileSync(join(v1dirs[2]!, 'cpu.cfs_quota_us'), 'utf8'), '150000');
    assert.equal(readFileSync(join(v1dirs[0]!, 'memory.limit_in_bytes'), 'utf8'), String((64 + 512) * 1024 * 1024));
    assert.equal(readFileSync(join(v1dirs[1]!, 'pids.max'), 'utf8'), '64');
    assert.deepEqual(logged, []);

    // neither: no cgroups, and the log says the VM is bounded by rlimits only
    const none = join(d, 'none');
    mkdirSync(none);
    assert.deepEqual(makeCgroups(id, 64, log, none), []);
    assert.equal(logged.length, 1);
    assert.match(logged[0]!, /bounded by rlimits only/);
  } finally {
    rmSync(d, { recursive: true, force: true });
  }
});
