/**
 * Debian's `pebble` (a test ACME authority) with a tiny DNS server for its
 * validation authority, for tests that run inside a network namespace of
 * their own (test/helpers/netns.ts): pebble listens on 127.0.0.1:14000
 * (management 15000) with a certificate of a test CA, and validates HTTP-01
 * on `httpPort` and TLS-ALPN-01 on `tlsPort` of the address the DNS server
 * gives for a name (`resolve`; no answer for names it returns undefined).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import dgram from 'node:dgram';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as packet from 'dns-packet';
import { testCa, testLeaf } from './certs.js';

export interface Pebble {
  /** the ACME directory URL (config `acme.directory`) */
  directory: string;
  /** the CA file that vouches for pebble's own HTTPS (config `acme.directoryCa`) */
  directoryCa: string;
  /** the PEM of the root pebble issues certificates under */
  root(): Promise<string>;
  close(): Promise<void>;
}

export const hasPebble = (): boolean => spawnSync('sh', ['-c', 'command -v pebble']).status === 0;

export async function startPebble(o: {
  httpPort: number;
  tlsPort: number;
  resolve: (name: string) => string | undefined;
  dnsPort?: number;
}): Promise<Pebble> {
  const work = mkdtempSync(join(tmpdir(), 'uh-pebble-'));
  const ca = await testCa('CN=pebble listener test CA');
  const leaf = await testLeaf(ca, ['localhost']);
  const caFile = join(work, 'ca.pem');
  writeFileSync(caFile, ca.pem);
  writeFileSync(join(work, 'cert.pem'), leaf.cert);
  writeFileSync(join(work, 'key.pem'), leaf.key);
  writeFileSync(
    join(work, 'pebble.json'),
    JSON.stringify({
      pebble: {
        listenAddress: '127.0.0.1:14000',
        managementListenAddress: '127.0.0.1:15000',
        certificate: join(work, 'cert.pem'),
        privateKey: join(work, 'key.pem'),
        httpPort: o.httpPort,
        tlsPort: o.tlsPort,
        ocspResponderURL: '',
        externalAccountBindingRequired: false,
      },
    }),
  );
  const dnsPort = o.dnsPort ?? 5353;
  const dns = dgram.createSocket('udp4');
  dns.on('message', (msg, rinfo) => {
    const q = packet.decode(msg);
    const name = q.questions?.[0]?.name ?? '';
    const addr = q.questions?.[0]?.type === 'A' ? o.resolve(name) : undefined;
    const answers: packet.Answer[] = addr ? [{ type: 'A', name, ttl: 1, data: addr }] : [];
    const out = packet.encode({
      id: q.id,
      type: 'response',
      flags: packet.AUTHORITATIVE_ANSWER,
      questions: q.questions,
      answers,
    });
    dns.send(out, rinfo.port, rinfo.address);
  });
  await new Promise<void>((r) => dns.bind(dnsPort, '127.0.0.1', r));
  let pebble: ChildProcess | undefined;
  const close = async () => {
    pebble?.kill();
    dns.close();
    rmSync(work, { recursive: true, force: true });
  };
  try {
    pebble = spawn('pebble', ['-config', join(work, 'pebble.json'), '-dnsserver', `127.0.0.1:${dnsPort}`], {
      env: { ...process.env, PEBBLE_VA_NOSLEEP: '1', PEBBLE_WFE_NONCEREJECT: '0' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let plog = '';
    await new Promise<void>((resolve, reject) => {
      const onOut = (d: Buffer) => {
        plog += d.toString();
        if (plog.includes('ACME directory available')) resolve();
      };
      pebble!.stdout!.on('data', onOut);
      pebble!.stderr!.on('data', onOut);
      pebble!.once('exit', (c) => reject(new Error(`pebble exited ${c}: ${plog}`)));
    });
  } catch (e) {
    await close();
    throw e;
  }
  return {
    directory: 'https://localhost:14000/dir',
    directoryCa: caFile,
    root: () =>
      new Promise((resolve, reject) => {
        https
          .get('https://localhost:15000/roots/0', { ca: ca.pem }, (res) => {
            let t = '';
            res.on('data', (d: Buffer) => (t += d.toString()));
            res.on('end', () => resolve(t));
          })
          .on('error', reject);
      }),
    close,
  };
}
