import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, test } from 'node:test';
import { runCli } from '../helpers/cli.js';
import { JEMALLOC, JEMALLOC_CONF } from '../../src/cli/admin/service.js';

const dir = mkdtempSync(join(tmpdir(), 'uh-unit-'));
after(() => rmSync(dir, { recursive: true, force: true }));

test('admin install-service writes the systemd unit: this checkout, the data dir, VMs that outlive the daemon, hardening', async () => {
  const r = await runCli([
    'admin',
    '--data-dir',
    '/srv/uh data',
    'install-service',
    '--unit-dir',
    dir,
    '--serve-arg',
    '--listen=0.0.0.0:7878',
  ]);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /systemctl daemon-reload && systemctl enable --now unihost/);
  const path = join(dir, 'unihost.service');
  assert.equal(statSync(path).mode & 0o777, 0o644);
  const unit = readFileSync(path, 'utf8');
  const bin = resolve(import.meta.dirname, '../../bin/unihost.js');
  assert.ok(
    unit.includes(`ExecStart=${process.execPath} ${bin} serve --data-dir "/srv/uh data" --listen=0.0.0.0:7878`),
    unit,
  );
  for (const line of [
    'KillMode=process',
    'Restart=on-failure',
    'NoNewPrivileges=yes',
    'ProtectSystem=full',
    'WantedBy=multi-user.target',
  ])
    assert.ok(unit.split('\n').includes(line), line);
  // the daemon's allocator, where the host has it (docs/operations.md, "Memory")
  if (existsSync(JEMALLOC)) {
    assert.ok(unit.split('\n').includes(`Environment=LD_PRELOAD=${JEMALLOC}`), unit);
    assert.ok(unit.split('\n').includes(`Environment=MALLOC_CONF=${JEMALLOC_CONF}`), unit);
  } else assert.doesNotMatch(unit, /LD_PRELOAD/);
  // what the daemon needs must not be taken away: cgroups and KSM's sysfs stay writable
  assert.doesNotMatch(unit, /ProtectControlGroups|ProtectKernelTunables/);
  // systemd's own check, where systemd is installed: no unknown key, no bad setting
  if (existsSync('/usr/bin/systemd-analyze')) {
    const v = spawnSync('/usr/bin/systemd-analyze', ['verify', path], { encoding: 'utf8' });
    assert.equal(v.status, 0, v.stderr);
    assert.doesNotMatch(v.stderr, /Unknown|ignoring|bad/i);
  }
  const printed = await runCli([
    'admin',
    '--data-dir',
    '/srv/uh data',
    'install-service',
    '--print',
    '--serve-arg',
    '--listen=0.0.0.0:7878',
  ]);
  assert.equal(printed.stdout, unit);
  const bad = await runCli(['admin', 'install-service', '--unit-dir', dir, '--name', '../evil']);
  assert.equal(bad.code, 2);
});
