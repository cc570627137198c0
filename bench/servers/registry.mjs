// The unihost API with its registry (compiled, from dist/), for bench/registry.
//   node bench/servers/registry.mjs
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { DEFAULTS } from '../../dist/config.js';
import { startDaemon } from '../../dist/daemon.js';

const dataDir = mkdtempSync(join(tmpdir(), 'unihost-bench-registry-'));
const hard = { ...DEFAULTS.defaultQuotas.hard, registry_mb: 1_000_000 };
const d = await startDaemon(
  {
    ...DEFAULTS,
    dataDir,
    listen: '127.0.0.1:0',
    defaultQuotas: { ...DEFAULTS.defaultQuotas, hard },
    // the API and its store only: no VM, no gateway
    roles: ['api'],
  },
  { logger: pino({ level: 'silent' }) },
);
const { token } = await d.services.users.create('bench', false);
process.send({ url: d.url, token });
process.once(
  'disconnect',
  () =>
    void d.close().then(() => {
      rmSync(dataDir, { recursive: true, force: true });
      process.exit(0);
    }),
);
