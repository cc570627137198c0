/* eslint-disable @typescript-eslint/no-explicit-any -- API replies are JSON; the assertions check their shape. */
/**
 * ACME against Debian's `pebble`, all inside a network namespace this file
 * creates (test/helpers/netns.ts): pebble on 127.0.0.1:14000 with its VA
 * asking a tiny DNS server of this test, which answers the test domains with
 * the gateway's address (127.0.0.1: port 80 for HTTP-01, 443 for
 * TLS-ALPN-01) or, for the domain meant to fail, with an address nothing
 * listens on. Which challenge each order used is read from the certificate
 * controller's log.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import tls from 'node:tls';
import { Writable } from 'node:stream';
import pino from 'pino';
import { AcmeIssuer } from '../../src/certs/acme.js';
import { CertificateController } from '../../src/reconcile/certificates.js';
import { dataPlane } from '../../src/drivers.js';
import { GatewayController } from '../../src/reconcile/gateway.js';
import { startHarness, type Harness } from '../helpers/harness.js';
import { insideTestNetns, runInTestNetns } from '../helpers/netns.js';
import { hasPebble, startPebble, type Pebble } from '../helpers/pebble.js';
import { replyAsserts } from '../helpers/replies.js';
import { simMachines } from '../helpers/sim-machines.js';

const has = (cmd: string): boolean => spawnSync('sh', ['-c', `command -v ${cmd}`]).status === 0;
const { ok } = replyAsserts('certificates');

if (!insideTestNetns()) {
  runInTestNetns(
    import.meta.url,
    'ACME with pebble (in a network namespace)',
    process.getuid?.() !== 0 || !has('ip') || !hasPebble()
      ? 'needs root, ip and pebble (apt-get install pebble)'
      : false,
  );
} else {
  let h: Harness;
  let gw: GatewayController;
  let certs: CertificateController;
  let pebble: Pebble;
  let pebbleRoot = '';
  let alice: string;
  /** (fqdn, challenge) of every order, from the controller's 'certificates: ordering' lines */
  const orders: { fqdn: string; method: string }[] = [];
  const orderLog = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const line of chunk.toString().split('\n').filter(Boolean)) {
        const o = JSON.parse(line) as { msg?: string; fqdn?: string; method?: string };
        if (o.msg === 'certificates: ordering') orders.push({ fqdn: o.fqdn!, method: o.method! });
      }
      done();
    },
  });
  const methodsFor = (fqdn: string) => orders.filter((o) => o.fqdn === fqdn).map((o) => o.method);

  function handshake(servername: string): Promise<tls.TLSSocket> {
    return new Promise((resolve, reject) => {
      const s = tls.connect({ host: '127.0.0.1', port: 443, servername, ca: pebbleRoot }, () => resolve(s));
      s.once('error', reject);
    });
  }

  const cert = async (uuid: string) => ok(await h.call('GET', '/v1/certificates', alice, { uuid }))[0];

  before(async () => {
    // the VA's resolver: test domains are the gateway (127.0.0.1), `fail.` ones an address nothing serves
    pebble = await startPebble({
      httpPort: 80,
      tlsPort: 443,
      resolve: (name) =>
        name.endsWith('example.test') ? (name.startsWith('fail.') ? '127.0.0.9' : '127.0.0.1') : undefined,
    });
    h = await startHarness(
      {
        gateway: { enabled: true, listen: '127.0.0.1', portOffset: 0 },
        acme: {
          enabled: true,
          directory: pebble.directory,
          directoryCa: pebble.directoryCa,
          maxAttempts: 2,
          retryBaseMs: 20,
          retryMaxMs: 100,
        },
      },
      (s) => {
        gw = new GatewayController(s, pino({ level: 'silent' }), dataPlane(s, pino({ level: 'silent' })));
        certs = new CertificateController(s, pino({ level: 'info' }, orderLog));
        return [simMachines(s), gw, certs];
      },
    );
    alice = await h.user('alice');
    pebbleRoot = await pebble.root();
    assert.match(pebbleRoot, /BEGIN CERTIFICATE/);
  });

  after(async () => {
    await h?.close();
    await pebble?.close();
  });

  const group = async (fqdn: string, services: unknown[] = [{ port: 443, handlers: ['http', 'tls'] }]) =>
    ok(
      await h.call('POST', '/v1/services', alice, {
        services,
        domains: [{ name: fqdn }],
      }),
      'service_groups',
    )[0];

  describe('ACME with pebble', () => {
    let appCert: any;
    let appGroup: any;
    test('a custom domain of a group without port 80 gets a certificate over TLS-ALPN-01, served by SNI', async () => {
      const g = await group('app.example.test.');
      appGroup = g;
      appCert = g.domains[0].certificate;
      assert.equal(appCert.state, 'pending');
      const c = await h.until(async () => {
        const x = await cert(appCert.uuid);
        return x.state === 'valid' ? x : undefined;
      }, 60_000);
      assert.match(c.issuer, /Pebble/);
      assert.match(c.subject, /app\.example\.test|^$/);
      assert.ok(Date.parse(c.not_after) > Date.now());
      await gw.settled();
      const s = await handshake('app.example.test');
      assert.equal(s.authorized, true);
      assert.equal(s.getPeerX509Certificate()!.serialNumber.toLowerCase(), c.serial_number);
      s.destroy();
      assert.deepEqual(methodsFor('app.example.test'), ['tls-alpn-01']);
    });

    test('a group publishing port 80 is validated over HTTP-01', async () => {
      const g = await group('web.example.test.', [
        { port: 443, handlers: ['http', 'tls'] },
        { port: 80, destination_port: 443, handlers: ['http', 'redirect'] },
      ]);
      const id = g.domains[0].certificate.uuid;
      await h.until(async () => ((await cert(id)).state === 'valid' ? true : undefined), 60_000);
      await gw.settled();
      const s = await handshake('web.example.test');
      assert.equal(s.authorized, true);
      s.destroy();
      assert.deepEqual(methodsFor('web.example.test'), ['http-01']);
    });

    test('renewal when a third of the lifetime is left: new certificate, open connection kept', async () => {
      const old = await cert(appCert.uuid);
      const open = await handshake('app.example.test');
      // Make the record say its life is nearly over (the controller renews by the record's dates).
      await h.daemon.store.tx((tx) =>
        tx.certificates.update(appCert.uuid, {
          not_before: new Date(Date.now() - 90 * 86_400_000).toISOString(),
          not_after: new Date(Date.now() + 86_400_000).toISOString(),
        }),
      );
      const c = await h.until(async () => {
        const x = await cert(appCert.uuid);
        return x.state === 'valid' && x.serial_number !== old.serial_number ? x : undefined;
      }, 60_000);
      await gw.settled();
      const s = await handshake('app.example.test');
      assert.equal(s.getPeerX509Certificate()!.serialNumber.toLowerCase(), c.serial_number);
      assert.equal(open.destroyed, false);
      assert.equal(open.getPeerX509Certificate()!.serialNumber.toLowerCase(), old.serial_number);
      open.destroy();
      s.destroy();
      // the renewal went over TLS-ALPN-01 on the very port that kept serving the open connection
      assert.deepEqual(methodsFor('app.example.test'), ['tls-alpn-01', 'tls-alpn-01']);
    });

    test('a failing challenge ends in error with the authority message after the attempts', async () => {
      const g = await group('fail.example.test.');
      const id = g.domains[0].certificate.uuid;
      const c = await h.until(async () => {
        const x = await h.call('GET', '/v1/certificates', alice, { uuid: id });
        return x.body.data.certificates[0].state === 'error' ? x.body.data.certificates[0] : undefined;
      }, 60_000);
      assert.match(c.message, /attempt 2: /);
      // the second attempt tried the other challenge, in case only one port is reachable
      assert.deepEqual(methodsFor('fail.example.test'), ['tls-alpn-01', 'http-01']);
      assert.match(c.message, /127\.0\.0\.9|connection refused|Connection refused|unauthorized|Fetching/i);
      await assert.rejects(handshake('fail.example.test'), /handshake failure/);
    });

    test('a second group for a covered name reuses the valid certificate', async () => {
      ok(await h.call('DELETE', '/v1/services', alice, { uuid: appGroup.uuid }), 'service_groups');
      const g2 = await group('app.example.test.');
      assert.equal(g2.domains[0].certificate.uuid, appCert.uuid);
      assert.equal(g2.domains[0].certificate.state, 'valid');
    });

    test('a daemon that starts again (its account key known to the authority) orders at its first attempt', async () => {
      // a new issuer on the same account key, as after a restart; pebble refuses acme-client's plain
      // re-registration of a known key as an empty account update
      const again = new AcmeIssuer({
        directoryUrl: pebble.directory,
        dir: h.daemon.services.paths.acme,
        directoryCa: readFileSync(pebble.directoryCa, 'utf8'),
        challenges: h.daemon.services.certificates.challenges,
      });
      await group('again.example.test.', [
        { port: 443, handlers: ['http', 'tls'] },
        { port: 80, destination_port: 443, handlers: ['http', 'redirect'] },
      ]);
      await gw.settled();
      const pair = await again.issue('again.example.test', 'http-01');
      assert.match(pair.cert, /BEGIN CERTIFICATE/);
    });
  });
}
