// The unihost API (compiled, from dist/) seeded with N instances, for bench/api.
//   node bench/servers/api.mjs N [STORE_URL]   (STORE_URL empty: SQLite in a temp data dir)
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { DEFAULTS } from '../../dist/config.js';
import { startDaemon } from '../../dist/daemon.js';
import { createInTx } from '../../dist/services/instances-create.js';

const n = Number(process.argv[2] ?? 10000);
const url = process.argv[3] ?? '';
const dataDir = mkdtempSync(join(tmpdir(), 'unihost-bench-'));
// room for the seed and for what the create benchmark adds
const hard = { ...DEFAULTS.defaultQuotas.hard, instances: 10_000_000 };
// One user at full speed: the rate limiter stays on (its cost is measured) with a budget the load never reaches.
const rateLimit = { max: 1e9, windowMs: 60_000 };
const d = await startDaemon(
  {
    ...DEFAULTS,
    dataDir,
    listen: '127.0.0.1:0',
    defaultQuotas: { ...DEFAULTS.defaultQuotas, hard },
    rateLimit,
    store: { ...DEFAULTS.store, url },
    // the API and its store only: a host to place instances on, no VM is ever started
    roles: ['api', 'agent'],
  },
  { logger: pino({ level: 'silent' }) },
);
const { token, user } = await d.services.users.create('bench', false);
const digest = `sha256:${'a'.repeat(64)}`;
await d.store.tx(async (tx) => {
  await tx.images.upsert({
    digest,
    namespace: 'official',
    size_in_bytes: 1,
    initrd: false,
    args: '',
    kernel_args: '',
    min_memory_mb: 0,
    created_at: new Date().toISOString(),
  });
  await tx.images.setTag({ ref: 'nginx:latest', namespace: 'official', digest });
});
// Seed through the real create path (without HTTP), 500 per transaction.
for (let i = 0; i < n; i += 500) {
  await d.store.tx(async (tx) => {
    for (let k = i; k < Math.min(n, i + 500); k++)
      await createInTx(d.services, tx, user, { image: 'nginx:latest', name: `inst-${k}` });
  });
}
process.send({ url: d.url, token, name: `inst-${Math.floor(n / 2)}` });
process.once(
  'disconnect',
  () =>
    void d.close().then(() => {
      rmSync(dataDir, { recursive: true, force: true });
      process.exit(0);
    }),
);
