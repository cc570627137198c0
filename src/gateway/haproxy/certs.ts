import { createHash, createPrivateKey, X509Certificate } from 'node:crypto';
import { mkdir, readdir, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { KeyPair, Route } from '../types.js';
import type { PlaneFiles } from './config.js';
import type { RuntimeApi } from './runtime.js';
import { cmd, RejectedCommand } from './servers.js';

export interface CertSet {
  wildcard: KeyPair;
  custom: { names: string[]; pair: KeyPair }[];
}

/** Names the crt-list must know besides the custom ones (from the TLS routes). */
export interface TlsNames {
  /** routed names under the metro domain: the wildcard serves them */
  metro: string[];
  /** routed custom names without a certificate (pending): refused with handshake_failure */
  pending: string[];
}

/** One crt-list line and the certificate file it names (one line per file, so a line is known by its file). */
export interface CertEntry {
  /** certificate and key, as HAProxy reads the file */
  pem: string;
  /** what follows the file name on the line: options and SNI filters */
  rest: string;
}
/** file name (under the certs dir) -> its line, in crt-list order */
export type CertEntries = Map<string, CertEntry>;

/**
 * A crt-list line no client can complete a handshake with (no cipher in
 * common: PSK-only for TLS 1.2, CCM_8 for TLS 1.3): how a pending custom name
 * is refused with handshake_failure, while a name
 * nobody routes gets unrecognized_name from `strict-sni`.
 */
const REFUSE = '[ciphers PSK-AES128-CBC-SHA ciphersuites TLS_AES_128_CCM_8_SHA256]';
/** A filter no SNI matches, for a line that must not serve anything. */
const NO_NAME = 'no-name.invalid';
/**
 * The first line: the bind's default certificate, kept as loaded until the
 * next reload (it serves no name under `strict-sni`), so that no runtime
 * change ever touches what the bind was configured with.
 */
export const DEFAULT_CERT = 'default.pem';

/** Names HAProxy accepts as a crt-list SNI filter (what the store keeps: lower case, no trailing dot). */
const NAME = /^[a-z0-9*.-]+$/;

/** Throws when the pair cannot be used (bad PEM), as HAProxy would refuse it. */
function validate(p: KeyPair): void {
  new X509Certificate(p.cert);
  createPrivateKey(p.key);
}

/** Keeps the pairs that load; returns them and the names of those that do not. */
export function usableCerts(custom: CertSet['custom']): { ok: CertSet['custom']; failed: string[] } {
  const ok: CertSet['custom'] = [];
  const failed: string[] = [];
  for (const c of custom) {
    try {
      validate(c.pair);
      const names = c.names.filter((n) => NAME.test(n));
      if (names.length > 0) ok.push({ names, pair: c.pair });
    } catch {
      failed.push(...c.names);
    }
  }
  return { ok, failed };
}

/** The routed TLS names the crt-list must list besides custom certificates'. */
export function tlsNames(routes: Route[], metroDomain: string, set: CertSet): TlsNames {
  const metro = new Set<string>();
  const pending = new Set<string>();
  const domain = metroDomain.toLowerCase();
  const custom = new Set(set.custom.flatMap((c) => c.names));
  for (const r of routes) {
    if (!r.handlers.includes('tls')) continue;
    for (const n of r.fqdns) {
      if (n === domain || n.endsWith(`.${domain}`)) metro.add(n);
      else if (!custom.has(n)) pending.add(n);
    }
  }
  return { metro: [...metro].sort(), pending: [...pending].sort() };
}

const pem = (p: KeyPair): string => `${p.cert.trim()}\n${p.key.trim()}\n`;
/** A file name that follows the line's names: the same names keep their file, so a renewal is `set ssl cert` on it. */
const fileFor = (kind: string, names: string[]): string =>
  `${kind}-${createHash('sha256').update(names.join(' ')).digest('hex').slice(0, 16)}.pem`;

/**
 * The crt-list HAProxy should have: the default line, the metro wildcard for
 * the routed metro names, each custom pair for its names, and the refusing
 * line for pending names; `strict-sni` answers unrecognized_name to any other.
 */
export function wantedCerts(set: CertSet, names: TlsNames): CertEntries {
  const m: CertEntries = new Map([[DEFAULT_CERT, { pem: pem(set.wildcard), rest: NO_NAME }]]);
  if (names.metro.length > 0)
    m.set(fileFor('wildcard', names.metro), { pem: pem(set.wildcard), rest: names.metro.join(' ') });
  for (const c of set.custom) {
    const sorted = [...new Set(c.names)].sort();
    m.set(fileFor('custom', sorted), { pem: pem(c.pair), rest: sorted.join(' ') });
  }
  if (names.pending.length > 0)
    m.set(fileFor('refuse', names.pending), { pem: pem(set.wildcard), rest: `${REFUSE} ${names.pending.join(' ')}` });
  return m;
}

const line = (f: PlaneFiles, file: string, e: CertEntry): string => `${path.join(f.certs, file)} ${e.rest}`;

/** Writes the files and the crt-list as HAProxy reads them at start or reload. */
export async function writeCerts(f: PlaneFiles, want: CertEntries): Promise<void> {
  await mkdir(f.certs, { recursive: true, mode: 0o700 });
  for (const [name, e] of want) await writeFile(path.join(f.certs, name), e.pem, { mode: 0o600 });
  for (const old of await readdir(f.certs))
    if (old.endsWith('.pem') && !want.has(old)) await rm(path.join(f.certs, old), { force: true });
  const list = [...want].map(([name, e]) => `${line(f, name, e)}\n`).join('');
  await writeFile(f.crtList, list, { mode: 0o600 });
}

/** Sends a command whose success HAProxy states in words (`ok`); anything else is a refusal. */
async function expect(api: RuntimeApi, c: string, ok: RegExp, payload?: string): Promise<void> {
  const answer = await api.send(c, payload);
  if (!ok.test(answer)) throw new RejectedCommand(`haproxy refused "${c}": ${answer.split('\n')[0]}`);
}

/** Loads a certificate into HAProxy's store through a transaction (`set` + `commit`): new handshakes get it. */
async function setCert(api: RuntimeApi, file: string, text: string): Promise<void> {
  try {
    await expect(api, `set ssl cert ${file}`, /Transaction (created|updated)/i, text);
  } catch (e) {
    await api.send(`abort ssl cert ${file}`).catch(() => {});
    throw e;
  }
  await expect(api, `commit ssl cert ${file}`, /Success!/);
}

/**
 * Brings HAProxy's certificates from `have` to `want` without a reload:
 * new lines first (`new ssl cert`, `set`/`commit`, `add ssl crt-list`),
 * then renewed pairs in place (`set`/`commit ssl cert`: open connections
 * keep theirs), then gone lines (`del ssl crt-list`, `del ssl cert`), so a
 * name moving from one line to another is served all along. The files are
 * rewritten so a reload loads the same. Mutates `have` as commands succeed.
 */
export async function applyCerts(api: RuntimeApi, f: PlaneFiles, have: CertEntries, want: CertEntries): Promise<void> {
  const abs = (name: string): string => path.join(f.certs, name);
  for (const [name, e] of want) {
    if (have.has(name)) continue;
    await writeFile(abs(name), e.pem, { mode: 0o600 });
    await cmd(api, `new ssl cert ${abs(name)}`);
    await setCert(api, abs(name), e.pem);
    await expect(api, `add ssl crt-list ${f.crtList}`, /Success!/, line(f, name, e));
    have.set(name, e);
  }
  for (const [name, e] of want) {
    const h = have.get(name)!;
    if (name === DEFAULT_CERT || h.pem === e.pem) continue;
    await writeFile(abs(name), e.pem, { mode: 0o600 });
    await setCert(api, abs(name), e.pem);
    have.set(name, e);
  }
  for (const name of [...have.keys()]) {
    if (want.has(name)) continue;
    await cmd(api, `del ssl crt-list ${f.crtList} ${abs(name)}`);
    await cmd(api, `del ssl cert ${abs(name)}`);
    have.delete(name);
  }
  await writeCerts(f, have);
}

/** The certificates the data plane serves, and what HAProxy has loaded of them. */
export class PlaneCerts {
  readonly set: CertSet;
  private loaded: CertEntries = new Map();

  constructor(wildcard: KeyPair) {
    this.set = { wildcard, custom: [] };
  }

  /** Replaces the custom pairs with those that load; the names of the others, and whether anything changed. */
  setCustom(custom: CertSet['custom']): { failed: string[]; changed: boolean } {
    const { ok, failed } = usableCerts(custom);
    const key = (cs: CertSet['custom']): string => JSON.stringify(cs);
    const changed = key(ok) !== key(this.set.custom);
    this.set.custom = ok;
    return { failed, changed };
  }

  want(routes: Route[], metroDomain: string): CertEntries {
    return wantedCerts(this.set, tlsNames(routes, metroDomain, this.set));
  }

  /** Before a full load: the files HAProxy will read. */
  async write(f: PlaneFiles, want: CertEntries): Promise<void> {
    await writeCerts(f, want);
    this.loaded = new Map(want);
  }

  apply(api: RuntimeApi, f: PlaneFiles, want: CertEntries): Promise<void> {
    return applyCerts(api, f, this.loaded, want);
  }
}
