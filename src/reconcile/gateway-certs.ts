import { X509Certificate } from 'node:crypto';
import type { Logger } from 'pino';
import type { CertificateDataPlane } from '../certs/dataplane.js';
import type { KeyPair } from '../gateway/types.js';
import type { ControllerDeps } from './deps.js';

/**
 * Feeds a data plane the certificates of custom FQDNs: for each certificate
 * a group uses, the pair in its files (src/certs/files.ts) when it has one
 * that is not expired, whatever its state, so that a renewal (pending again)
 * keeps serving the old pair until the new one replaces the files. A pending
 * certificate without files has nothing to serve: its names are refused.
 */
export class CertInstaller {
  /** pairs read from disk, by certificate id, with the serial they were read for */
  private readonly cache = new Map<string, { serial: string | null; pair: KeyPair | undefined; notAfter: number }>();

  constructor(
    private readonly s: ControllerDeps,
    private readonly plane: CertificateDataPlane,
    private readonly log: Logger,
  ) {}

  /** `uses`: certificate id -> FQDNs using it. */
  async install(uses: Map<string, string[]>): Promise<void> {
    const serials = await this.s.store.read(async (tx) => {
      const m = new Map<string, string | null>();
      for (const c of await tx.certificates.all()) if (uses.has(c.id)) m.set(c.id, c.serial_number);
      return m;
    });
    const certs: { names: string[]; pair: KeyPair }[] = [];
    for (const [id, names] of uses) {
      const pair = await this.pair(id, serials.get(id) ?? null);
      if (pair) certs.push({ names, pair });
    }
    for (const id of this.cache.keys()) if (!uses.has(id)) this.cache.delete(id);
    const failed = this.plane.setCertificates(certs);
    if (failed.length > 0) this.log.error({ names: failed }, 'gateway: certificate files could not be loaded');
  }

  private async pair(id: string, serial: string | null): Promise<KeyPair | undefined> {
    let c = this.cache.get(id);
    if (!c || c.serial !== serial) {
      const pair = await this.s.certificates.files.read(id).catch((e: Error) => {
        this.log.error({ certificate: id, err: e.message }, 'gateway: cannot read certificate files');
        return undefined;
      });
      const notAfter = pair ? Date.parse(new X509Certificate(pair.cert).validTo) : 0;
      c = { serial, pair, notAfter };
      this.cache.set(id, c);
    }
    return c.pair && c.notAfter > this.s.clock.now() ? c.pair : undefined;
  }
}
