/**
 * Per-VM confinement with real QEMU, through the driver: the VM runs as its
 * own uid, chrooted into an empty directory, under seccomp, with rlimits
 * and (where mounted) cgroup v1 limits; it still boots with a volume whose
 * image only root can read (umask 077), and QMP still controls it.
 */
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readlinkSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { MachineEvent } from '../../src/machines/driver.js';
import { hostTscKhz } from '../../src/machines/qemu/argv.js';
import { QemuDriver } from '../../src/machines/qemu/driver.js';
import { jailRoot, vmUid } from '../../src/machines/qemu/jail.js';
import { guestOut, killLeaks, poll } from '../helpers/vm.js';
import { requirePart } from '../helpers/require.js';

const oldMask = process.umask(0o077);
const dir = mkdtempSync(join(tmpdir(), 'unihost-jail-'));
const id = randomUUID();
const events: MachineEvent[] = [];
const driver = new QemuDriver(
  {
    qemu: 'qemu-system-x86_64',
    accel: 'tcg',
    tbSizeMb: 32,
    tscKhz: hostTscKhz(),
    logDir: (i) => join(dir, 'logs', i),
  },
  (_id, ev) => events.push(ev),
);

after(async () => {
  await driver.close();
  const leaked = killLeaks([dir]);
  rmSync(dir, { recursive: true, force: true });
  process.umask(oldMask);
  assert.deepEqual(leaked, [], 'QEMU processes left behind');
});

const status = (pid: number): Record<string, string> =>
  Object.fromEntries(
    readFileSync(`/proc/${pid}/status`, 'utf8')
      .split('\n')
      .map((l) => l.split(/:\s*/, 2) as [string, string]),
  );

/** The cgroup version of this host: v1 (controllers each mounted, as on this project's machines) or v2. */
const CGROUPS = existsSync('/sys/fs/cgroup/memory/cgroup.procs')
  ? 'v1'
  : existsSync('/sys/fs/cgroup/cgroup.controllers')
    ? 'v2'
    : undefined;
const noCgroups = requirePart(
  CGROUPS === undefined ? 'no cgroup memory controller on this host (neither v1 /sys/fs/cgroup/memory nor v2)' : false,
);

test(
  'a confined VM: own uid, chroot, seccomp, limits; boots with a volume, stops by QMP',
  { skip: noCgroups },
  async () => {
    const out = guestOut();
    const vol = join(dir, 'volumes', 'v.img');
    mkdirSync(join(dir, 'volumes'));
    execFileSync('mkfs.ext4', ['-q', '-F', '-b', '4096', vol, '16M']);
    assert.equal(statSync(vol).mode & 0o777, 0o600, 'only root can read the image');
    const rt = await driver.start({
      id,
      dir: join(dir, 'instances', id),
      kernel: join(out, 'vmlinux'),
      initrd: join(out, 'echo.initrd'),
      cmdline: 'console=ttyS0 quiet panic=-1 oops=panic mitigations=off vfs.fstab=[ "vol0:/data:ext4:::" ] -- confined',
      memoryMb: 128,
      machine: 'microvm',
      contract: 'unihost',
      disks: [{ path: vol, tag: 'vol0', readonly: false }],
    });
    // READY comes after the volume is mounted (a failed mount is a boot error)
    await poll('guest ready', () => events.some((e) => e.type === 'ready'), 120_000, 100);
    const st = status(rt.pid);
    const uid = String(vmUid(id));
    assert.deepEqual(st.Uid!.split(/\s+/), [uid, uid, uid, uid]);
    assert.equal(st.Gid!.split(/\s+/)[0], uid);
    assert.equal(st.Seccomp, '2', 'seccomp filter mode');
    assert.equal(st.NoNewPrivs, '1');
    assert.equal(readlinkSync(`/proc/${rt.pid}/root`), jailRoot(join(dir, 'instances', id)));
    const limits = readFileSync(`/proc/${rt.pid}/limits`, 'utf8');
    assert.match(limits, /Max core file size\s+0\s+0/);
    assert.match(limits, /Max open files\s+256\s+256/);
    assert.match(limits, /Max address space\s+\d+\s+\d+/);
    // the limits of the cgroup version this host has (cgroupVersion says which; the test fails on neither)
    if (CGROUPS === 'v1') {
      const joined = readFileSync(`/proc/${rt.pid}/cgroup`, 'utf8');
      assert.match(joined, new RegExp(`memory:/unihost/${id}\\n`));
      assert.match(joined, new RegExp(`pids:/unihost/${id}\\n`));
      const limit = Number(readFileSync(`/sys/fs/cgroup/memory/unihost/${id}/memory.limit_in_bytes`, 'utf8'));
      assert.equal(limit, (128 + 512) * 1024 * 1024);
      assert.equal(readFileSync(`/sys/fs/cgroup/pids/unihost/${id}/pids.max`, 'utf8').trim(), '64');
      assert.match(joined, new RegExp(`cpu,cpuacct:/unihost/${id}\\n|cpu:/unihost/${id}\\n`));
      assert.equal(readFileSync(`/sys/fs/cgroup/cpu/unihost/${id}/cpu.cfs_quota_us`, 'utf8').trim(), '150000');
    } else {
      const joined = readFileSync(`/proc/${rt.pid}/cgroup`, 'utf8');
      assert.match(joined, new RegExp(`0::/unihost/${id}\\n`));
      assert.equal(
        readFileSync(`/sys/fs/cgroup/unihost/${id}/memory.max`, 'utf8').trim(),
        String((128 + 512) * 1024 * 1024),
      );
      assert.equal(readFileSync(`/sys/fs/cgroup/unihost/${id}/cpu.max`, 'utf8').trim(), '150000 100000');
    }
    // QMP (a socket QEMU opened before dropping privileges) still controls it: graceful stop
    await driver.stop(id);
    await poll('VM ended', () => events.find((e) => e.type === 'exit'), 60_000, 100);
    const exit = events.find((e) => e.type === 'exit') as Extract<MachineEvent, { type: 'exit' }>;
    assert.equal(exit.control.shutdown, true, `clean shutdown; stderr: ${exit.stderr}`);
    assert.equal(exit.status, 0);
    await poll(
      'cgroups removed',
      () => ['memory', 'pids', 'cpu', '.'].every((c) => !existsSync(`/sys/fs/cgroup/${c}/unihost/${id}`)),
      5_000,
      50,
    );
  },
);
