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

/**
 * One crt-list line and the certificate file it names. The metro wildcard's
 * file is named by one line per routed name, so that a name comes or goes
 * with one line (`add ssl crt-list`, `del ssl crt-list <file>:<line>`) and no
 * certificate is loaded or freed for it; every other file has one line.
 */
export interface CertEntry {
  /** the file's name under the certs dir */
  file: string;
  /** certificate and key, as HAProxy reads the file */
  pem: string;
  /** what follows the file name on the line: options and SNI filters */
  rest: string;
}
/** a line's key (its file, or `metro <name>` for a line of the wildcard) -> the line, in crt-list order */
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
/** The metro wildcard's file, named by a line per routed metro name. */
const WILDCARD_CERT = 'wildcard.pem';

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
 * each routed metro name, each custom pair for its names, and the refusing
 * line for pending names; `strict-sni` answers unrecognized_name to any other.
 */
export function wantedCerts(set: CertSet, names: TlsNames): CertEntries {
  const m: CertEntries = new Map([[DEFAULT_CERT, { file: DEFAULT_CERT, pem: pem(set.wildcard), rest: NO_NAME }]]);
  for (const n of names.metro) m.set(`metro ${n}`, { file: WILDCARD_CERT, pem: pem(set.wildcard), rest: n });
  for (const c of set.custom) {
    const sorted = [...new Set(c.names)].sort();
    const file = fileFor('custom', sorted);
    m.set(file, { file, pem: pem(c.pair), rest: sorted.join(' ') });
  }
  if (names.pending.length > 0) {
    const file = fileFor('refuse', names.pending);
    m.set(file, { file, pem: pem(set.wildcard), rest: `${REFUSE} ${names.pending.join(' ')}` });
  }
  return m;
}

const line = (f: PlaneFiles, e: CertEntry): string => `${path.join(f.certs, e.file)} ${e.rest}`;

/** The certificate files of these lines: file name -> its content. */
function filesOf(entries: CertEntries): Map<string, string> {
  return new Map([...entries.values()].map((e) => [e.file, e.pem]));
}

/** Writes the files and the crt-list as HAProxy reads them at start or reload. */
export async function writeCerts(f: PlaneFiles, want: CertEntries): Promise<void> {
  await mkdir(f.certs, { recursive: true, mode: 0o700 });
  const files = filesOf(want);
  for (const [name, text] of files) await writeFile(path.join(f.certs, name), text, { mode: 0o600 });
  for (const old of await readdir(f.certs))
    if (old.endsWith('.pem') && !files.has(old)) await rm(path.join(f.certs, old), { force: true });
  await writeList(f, want);
}

/** Writes the crt-list alone (its files are in place). */
async function writeList(f: PlaneFiles, entries: CertEntries): Promise<void> {
  const list = [...entries.values()].map((e) => `${line(f, e)}\n`).join('');
  await writeFile(f.crtList, list, { mode: 0o600 });
}

/** `show ssl crt-list -n`'s lines: `<file>:<line number> <rest>`. */
function numberedLines(answer: string): { file: string; n: number; rest: string }[] {
  const out: { file: string; n: number; rest: string }[] = [];
  for (const l of answer.split('\n')) {
    const m = /^(\S+):(\d+)(?: (.*))?$/.exec(l.trim());
    if (m) out.push({ file: m[1]!, n: Number(m[2]), rest: (m[3] ?? '').trim() });
  }
  return out;
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
 * new files first (`new ssl cert`, `set`/`commit`), then new lines (`add ssl
 * crt-list`), then renewed pairs in place (`set`/`commit ssl cert`: open
 * connections keep theirs), then gone lines (`del ssl crt-list`, by line
 * number where the file has several) and the files no line names any more
 * (`del ssl cert`), so a name moving from one line to another is served all
 * along. A new metro name is one command. The files follow (written before
 * their commands, removed after them), and the crt-list is rewritten when a
 * line came or went, so a reload loads the same; an apply that changes
 * nothing writes nothing. Mutates `have` as commands succeed.
 */
export async function applyCerts(api: RuntimeApi, f: PlaneFiles, have: CertEntries, want: CertEntries): Promise<void> {
  const abs = (name: string): string => path.join(f.certs, name);
  const wantFiles = filesOf(want);
  const loaded = filesOf(have);
  let lines = false;
  try {
    for (const [file, text] of wantFiles) {
      if (loaded.has(file)) continue;
      await writeFile(abs(file), text, { mode: 0o600 });
      await cmd(api, `new ssl cert ${abs(file)}`);
      await setCert(api, abs(file), text);
      loaded.set(file, text);
    }
    for (const [key, e] of want) {
      if (have.has(key)) continue;
      await expect(api, `add ssl crt-list ${f.crtList}`, /Success!/, line(f, e));
      // with what its file holds now: a renewal below brings it to `want`'s
      have.set(key, { ...e, pem: loaded.get(e.file)! });
      lines = true;
    }
    for (const [file, text] of wantFiles) {
      if (file === DEFAULT_CERT || loaded.get(file) === text) continue;
      await writeFile(abs(file), text, { mode: 0o600 });
      await setCert(api, abs(file), text);
      loaded.set(file, text);
      for (const [key, e] of have) if (e.file === file) have.set(key, { ...e, pem: text });
    }
    const gone = [...have.keys()].filter((key) => !want.has(key));
    if (gone.length > 0) {
      const perFile = new Map<string, number>();
      for (const e of have.values()) perFile.set(e.file, (perFile.get(e.file) ?? 0) + 1);
      // a file named by several lines: the line is given by its number, which HAProxy keeps for its life
      const numbered = [...perFile.values()].some((n) => n > 1)
        ? numberedLines(await api.send(`show ssl crt-list -n ${f.crtList}`))
        : [];
      for (const key of gone) {
        const e = have.get(key)!;
        let target = abs(e.file);
        if (perFile.get(e.file)! > 1) {
          const n = numbered.find((l) => l.file === target && l.rest === e.rest)?.n;
          if (n === undefined) throw new RejectedCommand(`haproxy has no crt-list line "${line(f, e)}"`);
          target += `:${n}`;
        }
        await cmd(api, `del ssl crt-list ${f.crtList} ${target}`);
        have.delete(key);
        perFile.set(e.file, perFile.get(e.file)! - 1);
        lines = true;
      }
    }
    for (const file of loaded.keys()) {
      if (wantFiles.has(file)) continue;
      await cmd(api, `del ssl cert ${abs(file)}`);
      await rm(abs(file), { force: true });
    }
  } finally {
    // what HAProxy has now, also after a refused command (the caller then reloads from `write`)
    if (lines) await writeList(f, have);
  }
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
