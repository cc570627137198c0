/**
 * A create with wait answers `running` once this process's gateway has the
 * instance's group (a start with wait does the same) (src/services/instances.ts, `routesInPlace`): a
 * TLS client that connects the moment the call answers is served by the
 * group's name through the real HAProxy, not refused with
 * `unrecognized_name` while the gateway's sync is still on its way. The
 * machines, network and volumes are the in-memory drivers.
 */
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import tls from 'node:tls';
import { after, before, test } from 'node:test';
import pino from 'pino';
import { DEFAULTS } from '../../src/config.js';
import { defaultControllers } from '../../src/controllers.js';
import { GatewayController } from '../../src/reconcile/gateway.js';
import { startHarness, type Harness } from '../helpers/harness.js';
import { replyAsserts } from '../helpers/replies.js';

const log = pino({ level: process.env.UNIHOST_TEST_LOG ?? 'silent' });
const { ok } = replyAsserts('instances');
let h: Harness;
let alice: string;
let gw: GatewayController;

before(async () => {
  h = await startHarness(
    {
      machines: { ...DEFAULTS.machines, driver: 'memory' },
      network: { ...DEFAULTS.network, driver: 'memory' },
      volumes: { driver: 'memory' },
      gateway: { ...DEFAULTS.gateway, enabled: true, listen: '127.0.0.1', portOffset: -1 },
    },
    (s) => defaultControllers(s, log),
  );
  gw = h.daemon.controllers.find((c) => c instanceof GatewayController) as GatewayController;
  alice = await h.user('alice');
  const kernel = join(h.dataDir, 'kernel');
  writeFileSync(kernel, 'a kernel the memory machine driver never reads');
  await h.daemon.services.images.importKernel('app:latest', { kernel, machine: 'microvm' });
});
after(async () => h?.close());

/** A TLS handshake to the gateway's port 443 for `servername`, trusting the metro CA. */
function handshake(servername: string): Promise<tls.TLSSocket> {
  const ca = readFileSync(gw.ca!.caPath, 'utf8');
  return new Promise((resolve, reject) => {
    const s = tls.connect({ host: '127.0.0.1', port: gw.dataPlane!.boundPort(443)!, servername, ca }, () => resolve(s));
    s.once('error', reject);
  });
}

test('a create with wait in a new group answers once the gateway serves its name', async () => {
  // the first group opens port 443 (a reload); the next ones are runtime changes of HAProxy
  for (let k = 0; k < 6; k++) {
    const [e] = ok(
      await h.call('POST', '/v1/instances', alice, {
        name: `w${k}`,
        image: 'app:latest',
        autostart: true,
        wait_timeout_ms: 10_000,
        service_group: { services: [{ port: 443, handlers: ['http', 'tls'] }] },
      }),
    );
    assert.equal(e.state, 'running');
    const s = await handshake(e.service_group.domains[0].fqdn);
    assert.equal(s.authorized, true);
    s.destroy();
  }
});
