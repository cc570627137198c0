/** Gateway traffic per service group in `GET /metrics`, parsed by a Prometheus text-format parser. */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { Readable } from 'node:stream';
import { after, before, test } from 'node:test';
import tls from 'node:tls';
import pino from 'pino';
import { getMetricsFromStream } from 'prom2javascript';
import { dataPlane } from '../../src/drivers.js';
import { GatewayController } from '../../src/reconcile/gateway.js';
import { startHarness, type Harness } from '../helpers/harness.js';
import { replyAsserts } from '../helpers/replies.js';
import { simMachines, wireFigures } from '../helpers/sim-machines.js';

let h: Harness;
let gw: GatewayController;
let alice: string;
let op: string;
const { ok } = replyAsserts('service_groups');

before(async () => {
  h = await startHarness({ gateway: { enabled: true, listen: '127.0.0.1', portOffset: -1 } }, (s) => {
    gw = new GatewayController(s, pino({ level: 'silent' }), dataPlane(s, pino({ level: 'silent' })));
    const sim = simMachines(s);
    wireFigures(s, { sim, gateway: gw });
    return [sim, gw];
  });
  alice = await h.user('alice');
  op = await h.user('op', true);
});
after(async () => h.close());

/** One HTTPS request through the gateway's port 443 to `host`; the whole answer. */
function get(host: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = tls.connect({
      host: '127.0.0.1',
      port: gw.dataPlane!.boundPort(443)!,
      servername: host,
      ca: readFileSync(gw.ca!.caPath),
    });
    let t = '';
    s.on('secureConnect', () => s.write(`GET / HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`));
    s.on('data', (d: Buffer) => (t += d.toString()));
    s.on('end', () => resolve(t));
    s.on('error', reject);
  });
}

const sample = (f: { data: unknown[] } | undefined, labels: Record<string, string>): number | undefined =>
  (f?.data as { labels: Record<string, string>; value?: number }[]).find((m) =>
    Object.entries(labels).every(([k, v]) => m.labels[k] === v),
  )?.value;

test('requests, open connections and bytes per service group', async () => {
  const [g] = ok(await h.call('POST', '/v1/services', alice, { services: [{ port: 443, handlers: ['http', 'tls'] }] }));
  await gw.settled();
  const fqdn = String(g.domains[0].fqdn).replace(/\.$/, '');
  // no instance in the group: the gateway answers 503 itself; client bytes count, a routed request does not
  assert.match(await get(fqdn), /^HTTP\/1\.1 503/);
  assert.match(await get(fqdn), /^HTTP\/1\.1 503/);
  // the bytes, and the end of the second connection, come with the gateway's next stats polls
  const deadline = Date.now() + 5000;
  let r = await h.call('GET', '/metrics', op);
  let fs = await getMetricsFromStream(Readable.from([r.text]));
  const settled = () =>
    sample(fs.unihost_gateway_bytes_total, { group: g.uuid, direction: 'out' })! > 0 &&
    sample(fs.unihost_gateway_open_connections, { group: g.uuid }) === 0;
  while (!settled() && Date.now() < deadline) {
    await new Promise((res) => setTimeout(res, 100));
    r = await h.call('GET', '/metrics', op);
    fs = await getMetricsFromStream(Readable.from([r.text]));
  }
  assert.equal(r.status, 200, r.text);
  assert.equal(fs.unihost_gateway_requests_total?.type, 'counter');
  assert.equal(sample(fs.unihost_gateway_requests_total, { group: g.uuid }), 0);
  assert.equal(sample(fs.unihost_gateway_open_connections, { group: g.uuid }), 0);
  assert.ok(sample(fs.unihost_gateway_bytes_total, { group: g.uuid, direction: 'in' })! > 0, r.text);
  assert.ok(sample(fs.unihost_gateway_bytes_total, { group: g.uuid, direction: 'out' })! > 0, r.text);

  // the group's owner reads the same counters on the group itself (the console's service groups view)
  const [mine] = ok(await h.call('GET', `/v1/services/${g.uuid}`, alice));
  assert.equal(mine.traffic.requests, 0);
  assert.equal(mine.traffic.open_connections, 0);
  assert.ok(mine.traffic.bytes_in > 0 && mine.traffic.bytes_out > 0, JSON.stringify(mine.traffic));
  const listed = ok(await h.call('GET', '/v1/services', alice));
  assert.ok(listed.find((x) => x.uuid === g.uuid)?.traffic, 'in the list too');
});
