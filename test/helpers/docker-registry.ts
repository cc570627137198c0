import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import bcrypt from 'bcryptjs';

export const DOCKER_REGISTRY = '/usr/bin/docker-registry';
export const hasDockerRegistry = (): boolean => existsSync(DOCKER_REGISTRY);

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

export interface RegistryProcess {
  /** host:port on loopback */
  host: string;
  dir: string;
  /** the server's process id */
  pid: number;
  stop(): Promise<void>;
}

/**
 * Debian's `docker-registry` (distribution v2) on a free loopback port with
 * filesystem storage in a temp dir; with `auth`, HTTP Basic against an
 * htpasswd file (bcrypt). Plain HTTP.
 */
export async function startDockerRegistry(auth?: { user: string; password: string }): Promise<RegistryProcess> {
  const dir = mkdtempSync(join(tmpdir(), 'uh-docker-registry-'));
  const port = await freePort();
  let authBlock = '';
  if (auth) {
    writeFileSync(join(dir, 'htpasswd'), `${auth.user}:${bcrypt.hashSync(auth.password, 8)}\n`);
    authBlock = `auth:\n  htpasswd:\n    realm: test\n    path: ${join(dir, 'htpasswd')}\n`;
  }
  writeFileSync(
    join(dir, 'config.yml'),
    `version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: ${join(dir, 'data')}\n` +
      `  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:${port}\n${authBlock}`,
  );
  const child: ChildProcess = spawn(DOCKER_REGISTRY, ['serve', join(dir, 'config.yml')], { stdio: 'ignore' });
  const deadline = Date.now() + 10_000;
  for (;;) {
    const up = await new Promise<boolean>((resolve) => {
      const s = connect(port, '127.0.0.1', () => {
        s.destroy();
        resolve(true);
      });
      s.on('error', () => resolve(false));
    });
    if (up) break;
    if (child.exitCode !== null || Date.now() > deadline) {
      child.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
      throw new Error(`docker-registry did not start on 127.0.0.1:${port}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    host: `127.0.0.1:${port}`,
    dir,
    pid: child.pid!,
    async stop() {
      if (child.exitCode === null) {
        const gone = new Promise((r) => child.once('exit', r));
        child.kill('SIGTERM');
        await gone;
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
