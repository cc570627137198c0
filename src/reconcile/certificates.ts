import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { Logger } from 'pino';
import { AcmeIssuer } from '../certs/acme.js';
import { challengeFor, type ChallengeType } from '../certs/challenges.js';
import { certInfo } from '../certs/pem.js';
import type { Controller, ControllerDeps } from './deps.js';
import type { CertificateRec } from '../store/types.js';
import { follow, KeyedQueue } from './engine.js';

/** A certificate is renewed when a third of its lifetime is left. */
export function renewAt(c: Pick<CertificateRec, 'not_before' | 'not_after'>): number {
  const from = Date.parse(c.not_before ?? '');
  const to = Date.parse(c.not_after ?? '');
  return to - (to - from) / 3;
}

/**
 * Requests and renews the certificates of custom domains (source `acme`)
 * that a group uses: a `pending` one whose `validation.next` has come is
 * ordered; a failure counts an attempt and waits twice as long as the last
 * time (per certificate, so per domain), and after `maxAttempts` the
 * certificate is `error` with the authority's message, not tried again. A
 * `valid` one with a third of its life left goes back to `pending` (a
 * renewal: its old pair keeps serving until the new one is written).
 */
export class CertificateController implements Controller {
  private readonly queue: KeyedQueue;
  private readonly issuer: AcmeIssuer;
  private timer: NodeJS.Timeout | null = null;
  private off: (() => void) | null = null;
  private stopped = false;

  constructor(
    private readonly s: ControllerDeps,
    private readonly log: Logger,
  ) {
    this.queue = new KeyedQueue((k, e) => log.error({ k, err: e }, 'certificates: run failed'));
    const a = s.config.acme;
    this.issuer = new AcmeIssuer({
      directoryUrl: a.directory,
      dir: s.paths.acme,
      directoryCa: a.directoryCa ? readFileSync(a.directoryCa, 'utf8') : undefined,
      email: a.email,
      challenges: s.certificates.challenges,
    });
  }

  async start(): Promise<void> {
    this.off = follow(this.s.store, {
      kinds: ['certificate', 'group'],
      change: () => this.kick(),
      resync: () => this.kick(),
      resyncMs: this.s.config.store.resyncMs,
    });
    this.kick();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.off?.();
    if (this.timer) clearTimeout(this.timer);
    await this.queue.drain();
  }

  /** Resolves once the work due so far is done (tests). */
  settled(): Promise<void> {
    return this.queue.drain();
  }

  kick(): void {
    if (!this.stopped) void this.queue.kick('run', () => this.run());
  }

  /** Certificates of source `acme` used by a group, with when each is due. */
  private async due(): Promise<{ c: CertificateRec; at: number }[]> {
    return this.s.store.read(async (tx) => {
      const out: { c: CertificateRec; at: number }[] = [];
      for (const c of await tx.certificates.all()) {
        if (c.source !== 'acme' || c.state === 'error') continue;
        if ((await tx.domains.forCertificate(c.id)).length === 0) continue; // nobody needs it: spare the quota
        const at = c.state === 'pending' ? Date.parse(c.validation_next ?? '') || 0 : renewAt(c);
        out.push({ c, at });
      }
      return out;
    });
  }

  private async run(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    const list = await this.due();
    let next = Infinity;
    for (const { c, at } of list) {
      if (this.stopped) return;
      if (at <= this.s.clock.now()) await this.attempt(c);
      else next = Math.min(next, at);
    }
    if (next !== Infinity && !this.stopped) {
      // timers take at most 2^31-1 ms; a far renewal is looked at again later
      const wait = Math.min(Math.max(next - this.s.clock.now(), 0), 2 ** 31 - 1);
      this.timer = setTimeout(() => this.kick(), wait);
      this.timer.unref();
    }
  }

  /** The challenge for this attempt at `fqdn`, from the ports its group publishes now. */
  private async challengeOf(fqdn: string, attempt: number): Promise<ChallengeType> {
    const ports = await this.s.store.read(async (tx) => {
      const d = await tx.domains.get(fqdn);
      const g = d ? await tx.groups.getAnyUser(d.group_id) : undefined;
      return (g?.services ?? []).map((svc) => svc.port);
    });
    return challengeFor(ports, attempt);
  }

  private async attempt(c: CertificateRec): Promise<void> {
    const fqdn = c.common_name;
    const attempt = c.state === 'pending' ? c.validation_attempt + 1 : 1;
    if (c.state === 'valid') this.log.info({ certificate: c.id, fqdn }, 'certificates: renewing');
    // Shown while the order runs: pending with the attempt counted.
    await this.s.store.tx((tx) =>
      tx.certificates.update(c.id, { state: 'pending', validation_attempt: attempt - 1, validation_next: null }),
    );
    try {
      const method = await this.challengeOf(fqdn, attempt);
      this.log.info({ certificate: c.id, fqdn, method, attempt }, 'certificates: ordering');
      const pair = await this.issuer.issue(fqdn, method);
      const info = certInfo(new X509Certificate(pair.cert));
      await this.s.certificates.files.write(c.id, pair);
      const { names, ...shown } = info;
      await this.s.store.tx((tx) =>
        tx.certificates.update(c.id, {
          state: 'valid',
          validation_attempt: attempt,
          validation_next: null,
          message: null,
          names,
          ...shown,
        }),
      );
      this.log.info({ certificate: c.id, fqdn, not_after: info.not_after }, 'certificates: issued');
    } catch (e) {
      const message = (e as Error).message || String(e);
      const a = this.s.config.acme;
      const last = attempt >= a.maxAttempts;
      const wait = Math.min(a.retryBaseMs * 2 ** (attempt - 1), a.retryMaxMs);
      this.log.warn({ certificate: c.id, fqdn, attempt, err: message, final: last }, 'certificates: order failed');
      await this.s.store.tx((tx) =>
        tx.certificates.update(c.id, {
          state: last ? 'error' : 'pending',
          validation_attempt: attempt,
          validation_next: last ? null : new Date(this.s.clock.now() + wait).toISOString(),
          message: `attempt ${attempt}: ${message}`.slice(0, 2000),
        }),
      );
    }
  }
}
