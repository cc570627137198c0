// The unihost API (compiled, from dist/) seeded with N instances, for bench/api.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { DEFAULTS } from '../../dist/config.js';
import { startDaemon } from '../../dist/daemon.js';
import { createInTx } from '../../dist/services/instances-create.js';

const n = Number(process.argv[2] ?? 10000);
const dataDir = mkdtempSync(join(tmpdir(), 'unihost-bench-'));
const hard = { ...DEFAULTS.defaultQuotas.hard, instances: n + 10 };
// One user at full speed: the rate limiter stays on (its cost is measured) with a budget the load never reaches.
const rateLimit = { max: 1e9, windowMs: 60_000 };
const d = await startDaemon(
  { ...DEFAULTS, dataDir, listen: '127.0.0.1:0', defaultQuotas: { ...DEFAULTS.defaultQuotas, hard }, rateLimit },
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
