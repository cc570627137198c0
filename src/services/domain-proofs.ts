import { createHash } from 'node:crypto';
import { Resolver } from 'node:dns/promises';
import type { DomainProofConfig } from '../config.js';
import { parseDomain } from '../domain/domains.js';
import type { Store } from '../store/types.js';

/**
 * Proof of control of a custom domain in DNS (docs/certificates.md, "Domain
 * claims"). A custom FQDN is first come, first served; a name another
 * account holds (a group's domain, or a certificate that claims it) moves to
 * the account that publishes
 *
 *     _unihost-challenge.<fqdn>.  TXT  "unihost-verify=<token>"
 *
 * where the token is that account's own for that name (so a record grants
 * the name to one account, and nobody without the zone can make one). The
 * lookup runs before the request's transaction (a slow resolver never holds
 * the store); the transaction then asks `has`, which is what was found.
 */
export const PROOF_LABEL = '_unihost-challenge';

/** The account's token for `fqdn`: no secret in it, it only says which account the zone's owner picks. */
export function proofToken(userId: string, fqdn: string): string {
  return createHash('sha256').update(`unihost domain proof\n${userId}\n${fqdn}`).digest('hex').slice(0, 32);
}

/** The record, as a user publishes it: name and TXT value. */
export function proofRecord(userId: string, fqdn: string): { name: string; value: string } {
  return { name: `${PROOF_LABEL}.${fqdn}`, value: `unihost-verify=${proofToken(userId, fqdn)}` };
}

/** What one lookup found, for the refusal's words. */
type Found = { proven: true; at: number } | { proven: false; at: number; why: string };

/** How long a lookup's answer is used: the request that made it, and a retry right after. */
const REMEMBER_MS = 60_000;
/** At most this many remembered answers (oldest dropped): one account's tries cannot grow the map. */
const MAX_REMEMBERED = 10_000;

export class DomainProofs {
  private readonly found = new Map<string, Found>();
  private readonly resolver: Resolver;

  constructor(
    private readonly cfg: DomainProofConfig,
    private readonly store: Store,
    private readonly metro: string,
    private readonly now: () => number,
  ) {
    this.resolver = new Resolver({ timeout: cfg.timeoutMs, tries: 2 });
    if (cfg.dnsServers.length > 0) this.resolver.setServers(cfg.dnsServers);
  }

  /**
   * Looks up the proofs of the custom names among `names` that another
   * account holds (names that do not parse are left to the request's own
   * checks). Never throws: a failed lookup is a missing proof.
   */
  async prepare(userId: string, names: string[]): Promise<void> {
    if (!this.cfg.enabled || names.length === 0) return;
    const custom = new Set<string>();
    for (const n of names) {
      try {
        const d = parseDomain(n, this.metro);
        if (d.custom) custom.add(d.fqdn);
      } catch {
        // refused with its reason inside the request
      }
    }
    if (custom.size === 0) return;
    const held = await this.store.read(async (tx) => {
      const out: string[] = [];
      for (const fqdn of custom) {
        const row = await tx.domains.get(fqdn);
        if ((row && row.user_id !== userId) || (await tx.certificates.named(fqdn)).some((c) => c.user_id !== userId))
          out.push(fqdn);
      }
      return out;
    });
    await Promise.all(held.map((fqdn) => this.look(userId, fqdn)));
  }

  /** Whether a lookup just now found the account's record for `fqdn`. */
  has(userId: string, fqdn: string): boolean {
    const f = this.found.get(key(userId, fqdn));
    return !!f && f.proven && this.now() - f.at < REMEMBER_MS;
  }

  /**
   * The sentence a refusal adds for a name another account holds: the
   * record to publish, and what the last lookup found.
   */
  howToProve(userId: string, fqdn: string): string {
    if (!this.cfg.enabled) return '';
    const r = proofRecord(userId, fqdn);
    const f = this.found.get(key(userId, fqdn));
    const seen = f && !f.proven && this.now() - f.at < REMEMBER_MS ? ` (looked up just now: ${f.why})` : '';
    return (
      `. If the name is yours, publish the DNS record ${r.name}. TXT "${r.value}" and ask again: ` +
      `the name then moves to this account${seen}`
    );
  }

  private async look(userId: string, fqdn: string): Promise<void> {
    const want = proofRecord(userId, fqdn);
    let f: Found;
    try {
      const records = (await this.resolver.resolveTxt(want.name)).map((chunks) => chunks.join(''));
      f = records.includes(want.value)
        ? { proven: true, at: this.now() }
        : { proven: false, at: this.now(), why: `${want.name} has ${records.length} TXT value(s), not this one` };
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      const why =
        code === 'ENOTFOUND' || code === 'ENODATA'
          ? `no TXT record at ${want.name}`
          : `the lookup of ${want.name} failed (${code ?? (e as Error).message})`;
      f = { proven: false, at: this.now(), why };
    }
    const k = key(userId, fqdn);
    this.found.delete(k);
    this.found.set(k, f);
    if (this.found.size > MAX_REMEMBERED) this.found.delete(this.found.keys().next().value!);
  }
}

const key = (userId: string, fqdn: string) => `${userId} ${fqdn}`;
