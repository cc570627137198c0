import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import pino from 'pino';
import { Agent, request } from 'undici';
import { dataPlane } from '../../src/drivers.js';
import { kraftkitLayout, multibootKernel } from '../../src/images/testing/fixtures.js';
import { GatewayController } from '../../src/reconcile/gateway.js';
import { startHarness, type Harness } from '../helpers/harness.js';
import { requirePart } from '../helpers/require.js';
import { simMachines } from '../helpers/sim-machines.js';

const run = promisify(execFile);
const REGISTRY = 'registry.unihost.localhost';
const skip = requirePart(!existsSync('/usr/sbin/haproxy') && 'HAProxy (scripts/install.sh)');
const sha = (b: Buffer): string => `sha256:${createHash('sha256').update(b).digest('hex')}`;

/** The registry through the real gateway at registry.<metro domain>, TLS verified against the platform's CA. */
describe('the registry at registry.<metro domain> through the gateway', { skip }, () => {
  let h: Harness;
  let gw: GatewayController;
  let alice: string;
  let agent: Agent;
  let port: number;
  let files: string;

  before(async () => {
    h = await startHarness({ gateway: { enabled: true, listen: '127.0.0.1', portOffset: -1 } }, (s) => {
      gw = new GatewayController(s, pino({ level: 'silent' }), dataPlane(s, pino({ level: 'silent' })));
      return [simMachines(s), gw];
    });
    alice = await h.user('alice');
    await gw.settled();
    port = gw.dataPlane!.boundPort(443)!;
    agent = new Agent({ connect: { ca: gw.ca!.caCert, servername: REGISTRY } });
    files = mkdtempSync(join(tmpdir(), 'uh-reggw-'));
  });
  after(async () => {
    await agent.close();
    await h.close();
    rmSync(files, { recursive: true, force: true });
  });

  const call = async (method: string, path: string, auth?: string, body?: Buffer) => {
    const r = await request(`https://127.0.0.1:${port}${path}`, {
      method: method as 'GET',
      dispatcher: agent,
      headers: { host: REGISTRY, ...(auth ? { authorization: auth } : {}) },
      body,
    });
    return { status: r.statusCode, headers: r.headers, body: Buffer.from(await r.body.arrayBuffer()) };
  };
  const basic = () => `Basic ${Buffer.from(`alice:${alice}`).toString('base64')}`;

  test('TLS with the metro certificate; the challenge names the https realm', async () => {
    const anon = await call('GET', '/v2/');
    assert.equal(anon.status, 401);
    assert.equal(anon.headers['www-authenticate'], `Bearer realm="https://${REGISTRY}/v2/token",service="${REGISTRY}"`);
    assert.equal((await call('GET', '/v2/', basic())).status, 200);
  });

  test('a blob goes up and comes back through the gateway', async () => {
    const data = Buffer.alloc(3 * 1024 * 1024, 5);
    const d = sha(data);
    const up = await call('POST', `/v2/alice/gw/blobs/uploads/?digest=${d}`, basic(), data);
    assert.equal(up.status, 201, up.body.toString());
    const back = await call('GET', `/v2/alice/gw/blobs/${d}`, basic());
    assert.equal(sha(back.body), d);
  });

  test('port 80 redirects to 443', async () => {
    const r = await request(`http://127.0.0.1:${gw.dataPlane!.boundPort(80)!}/v2/`, { headers: { host: REGISTRY } });
    await r.body.dump();
    assert.equal(r.statusCode, 301);
    assert.equal(r.headers.location, `https://${REGISTRY}/v2/`);
  });

  test('skopeo pushes through the gateway with TLS verified against the platform CA', async (t) => {
    if (!existsSync('/usr/bin/skopeo')) return t.skip('skopeo is not installed');
    if (process.getuid?.() !== 0) return t.skip('needs root (a mount namespace for /etc/hosts)');
    const certs = join(files, 'certs.d');
    mkdirSync(certs);
    writeFileSync(join(certs, 'ca.crt'), gw.ca!.caCert);
    const src = join(files, 'src');
    const { digests } = await kraftkitLayout(src, [
      { os: 'qemu', architecture: 'x86_64', kernel: multibootKernel('through the gateway') },
    ]);
    // The name must resolve to loopback without asking any DNS server: skopeo runs in a mount
    // namespace of its own whose /etc/hosts says so (nothing leaves the machine).
    const hosts = join(files, 'hosts');
    writeFileSync(hosts, `127.0.0.1 localhost ${REGISTRY}\n`);
    await run('unshare', [
      '--mount',
      '--',
      'sh',
      '-c',
      'mount --bind "$0" /etc/hosts && exec "$@"',
      hosts,
      '/usr/bin/skopeo',
      'copy',
      '--preserve-digests',
      '--dest-cert-dir',
      certs,
      '--dest-creds',
      `alice:${alice}`,
      `oci:${src}`,
      `docker://${REGISTRY}:${port}/alice/viagw:1`,
    ]);
    assert.equal((await h.daemon.store.read((tx) => tx.images.tag('alice/viagw:1')))?.digest, digests[0]);
  });
});
