import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { hostsLinkCheck } from '../../src/cli/doctor.js';
import { runCli } from '../helpers/cli.js';

const dir = mkdtempSync(join(tmpdir(), 'uh-doctor-'));
after(() => rmSync(dir, { recursive: true, force: true }));

interface Check {
  name: string;
  status: 'ok' | 'warn' | 'fail';
  detail: string;
  fix?: string;
}

async function doctor(config: object): Promise<{ code: number | null; checks: Check[]; stderr: string }> {
  const file = join(dir, `config-${Math.random()}.json`);
  writeFileSync(file, JSON.stringify(config));
  const r = await runCli(['doctor', '--data-dir', dir, '--config', file, '-o', 'json']);
  return { code: r.code, checks: JSON.parse(r.stdout || '[]') as Check[], stderr: r.stderr };
}

test('doctor checks the tools, the data dir and the ports, and names what to fix', async () => {
  const r = await doctor({ machines: { accel: 'tcg' }, listen: '127.0.0.1:1' });
  const names = r.checks.map((c) => c.name);
  for (const n of [
    'node',
    'qemu',
    'accelerator',
    'ip',
    'nft',
    'mkfs.ext4',
    'haproxy',
    'data dir',
    'cgroups',
    'api port',
  ])
    assert.ok(names.includes(n), `${n} in ${names.join(', ')}`);
  const dd = r.checks.find((c) => c.name === 'data dir')!;
  assert.match(dd.detail, /GiB free/);
  assert.match(r.checks.find((c) => c.name === 'accelerator')!.detail, /tcg \(configured\)/);
  for (const c of r.checks) if (c.status !== 'ok') assert.ok(c.fix, `${c.name}: a warning says what to do`);
  assert.equal(r.code, r.checks.some((c) => c.status === 'fail') ? 1 : 0);
});

test('a missing tool is a failure with the package to install, and the exit code says so', async () => {
  const r = await doctor({ machines: { accel: 'tcg', qemu: '/nonexistent/qemu-system-x86_64' } });
  const q = r.checks.find((c) => c.name === 'qemu')!;
  assert.equal(q.status, 'fail');
  assert.match(q.detail, /not found/);
  assert.match(q.fix ?? '', /qemu-system-x86/);
  assert.equal(r.code, 1);
});

test("with a host address: the link that holds it, its MTU against VXLAN's 1550, or a failure when none has it", async () => {
  const on = await doctor({ machines: { accel: 'tcg' }, host: { address: '127.0.0.1' } });
  const lo = on.checks.find((c) => c.name === 'hosts network')!;
  assert.equal(lo.status, 'ok', JSON.stringify(lo));
  assert.match(lo.detail, /^127\.0\.0\.1 on lo, MTU \d+$/);
  const off = await doctor({ machines: { accel: 'tcg' }, host: { address: '192.0.2.77' } });
  const none = off.checks.find((c) => c.name === 'hosts network')!;
  assert.deepEqual([none.status, none.detail], ['fail', 'no link of this host has host.address 192.0.2.77']);
  assert.equal(off.code, 1);
  assert.ok(
    !(await doctor({ machines: { accel: 'tcg' } })).checks.some((c) => c.name === 'hosts network'),
    'one host: no check',
  );
  // a link of the usual 1500 bytes: guests' large packets would be lost between hosts
  const ipJson = JSON.stringify([
    { ifname: 'lo', mtu: 65536, addr_info: [{ local: '127.0.0.1' }] },
    { ifname: 'eth0', mtu: 1500, addr_info: [{ local: '10.1.2.3' }] },
  ]);
  const warn = hostsLinkCheck(ipJson, '10.1.2.3');
  assert.equal(warn.status, 'warn');
  assert.match(warn.detail, /10\.1\.2\.3 on eth0, MTU 1500: guests' large packets to other hosts are lost/);
  assert.match(warn.fix!, /ip link set dev eth0 mtu 1550/);
});
