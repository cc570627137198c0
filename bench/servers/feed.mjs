// One side of bench/api's change-feed latency: `watch` reports when each change arrives,
// `commit` commits changes one by one and reports when each began. Each in its own process.
//   node bench/servers/feed.mjs watch|commit STORE_URL SQLITE_PATH [COUNT]
import { performance } from 'node:perf_hooks';
import { openStore } from '../../dist/store/open.js';

const [role, url, sqlitePath, count = '300'] = process.argv.slice(2);
const now = () => performance.timeOrigin + performance.now();
const store = await openStore(url, sqlitePath);
if (role === 'watch') {
  store.watch('now', (e) => {
    if (e.type === 'change' && e.kind === 'host') process.send({ id: e.id, at: now() });
  });
  process.send({ ready: true });
  process.once('disconnect', () => void store.close().then(() => process.exit(0)));
} else {
  const run = `${process.pid}`;
  for (let k = 0; k < Number(count); k++) {
    const id = `lat-${run}-${k}`;
    const at = now();
    await store.tx((tx) => tx.hosts.insert({ id, name: id, created_at: new Date().toISOString() }));
    process.send({ id, at });
    await new Promise((r) => setTimeout(r, 5 + Math.random() * 10));
  }
  await store.close();
  process.send({ done: true });
  process.disconnect();
}
