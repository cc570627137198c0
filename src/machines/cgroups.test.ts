/** The gateway's CPU group on both cgroup layouts, in fake hierarchies (the real one: gateway/haproxy/process.test.ts). */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { cpuWeightGroup, joinCgroup } from './cgroups.js';

function hierarchy(files: string[]): string {
  const root = mkdtempSync(join(tmpdir(), 'unihost-cg-'));
  for (const f of files) {
    mkdirSync(join(root, f, '..'), { recursive: true });
    writeFileSync(join(root, f), '');
  }
  return root;
}

test("cgroup v2: a top-level group with cpu.weight, the cpu controller enabled for the root's children", () => {
  const root = hierarchy(['cgroup.controllers', 'cgroup.subtree_control']);
  try {
    const procs = cpuWeightGroup('unihost-gateway', 400, root);
    assert.equal(procs, join(root, 'unihost-gateway', 'cgroup.procs'));
    assert.equal(readFileSync(join(root, 'unihost-gateway', 'cpu.weight'), 'utf8'), '400');
    assert.equal(readFileSync(join(root, 'cgroup.subtree_control'), 'utf8'), '+cpu');
    joinCgroup(procs, 4242);
    assert.equal(readFileSync(procs, 'utf8'), '4242');
    cpuWeightGroup('unihost-gateway', 50_000, root);
    assert.equal(readFileSync(join(root, 'unihost-gateway', 'cpu.weight'), 'utf8'), '10000', "bounded to v2's scale");
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

test("cgroup v1: the cpu controller's cpu.shares, the weight scaled to 1024 per 100", () => {
  const root = hierarchy(['cpu/cgroup.procs', 'memory/cgroup.procs']);
  try {
    const procs = cpuWeightGroup('unihost-gateway', 400, root);
    assert.equal(procs, join(root, 'cpu', 'unihost-gateway', 'cgroup.procs'));
    assert.equal(readFileSync(join(root, 'cpu', 'unihost-gateway', 'cpu.shares'), 'utf8'), '4096');
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

test('no cpu controller: an error that says where it looked', () => {
  const root = hierarchy(['memory/cgroup.procs']);
  try {
    assert.throws(() => cpuWeightGroup('unihost-gateway', 400, root), /no cgroup cpu controller at .*\/cpu/);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});
