import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { ClientConfigError } from './errors.js';

/** Where to send requests and with which token. */
export interface Connection {
  baseUrl: string;
  token: string;
  /** the profile the values came from, if any */
  profile?: string;
}

export interface Profile {
  metro: string;
  token?: string;
}

/** The profile file (like a kubeconfig): named profiles and the current one. */
export interface ProfileFile {
  current?: string;
  profiles: Record<string, Profile>;
}

/** The daemon's default listen address (src/config.ts). */
export const DEFAULT_METRO = 'http://127.0.0.1:7878';

/** Token variables the official clients read, in their order. */
export const TOKEN_VARS = ['UKC_TOKEN', 'KRAFTCLOUD_TOKEN', 'KC_TOKEN', 'UNIKRAFTCLOUD_TOKEN'];

export function profilePath(env: NodeJS.ProcessEnv = process.env): string {
  if (env.UNIHOST_CLIENT_CONFIG) return env.UNIHOST_CLIENT_CONFIG;
  const base = env.XDG_CONFIG_HOME || join(homedir(), '.config');
  return join(base, 'unihost', 'config.json');
}

export function readProfiles(path: string): ProfileFile {
  if (!existsSync(path)) return { profiles: {} };
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(path, 'utf8'));
  } catch (e) {
    throw new ClientConfigError(`profile file ${path} is not valid JSON: ${(e as Error).message}`);
  }
  const f = parsed as Partial<ProfileFile> | null;
  if (typeof f !== 'object' || f === null || typeof f.profiles !== 'object' || f.profiles === null)
    throw new ClientConfigError(`profile file ${path} has no "profiles" object`);
  for (const [name, p] of Object.entries(f.profiles)) {
    if (typeof p?.metro !== 'string') throw new ClientConfigError(`profile '${name}' in ${path} has no "metro"`);
  }
  return { current: f.current, profiles: f.profiles };
}

/** Writes the file readable by its owner only: it holds tokens. */
export function writeProfiles(path: string, f: ProfileFile): void {
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(`${path}.tmp`, JSON.stringify(f, null, 2) + '\n', { mode: 0o600 });
  chmodSync(`${path}.tmp`, 0o600);
  renameSync(`${path}.tmp`, path);
}

/**
 * The API base URL of a metro value: one with `://` is used verbatim (a
 * trailing `/v1` and slashes stripped, as official clients do); a bare
 * `host:port` gets `http://`.
 */
export function baseUrlOf(metro: string): string {
  const v = metro.trim();
  if (v === '') throw new ClientConfigError('the metro is empty');
  const url = v.includes('://') ? v : `http://${v}`;
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new ClientConfigError(`metro '${metro}' is not a URL or host:port`);
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:')
    throw new ClientConfigError(`metro '${metro}': only http:// and https:// are supported`);
  return url.replace(/\/+$/, '').replace(/\/v1$/, '');
}

export interface ConnectionFlags {
  metro?: string;
  token?: string;
  profile?: string;
}

/**
 * Resolves metro and token, each on its own: flags, then an explicitly chosen
 * profile (--profile or UNIHOST_PROFILE), then the environment (UKC_METRO,
 * UKC_TOKEN and its aliases), then the current profile; the metro defaults
 * to the local daemon.
 */
export function resolveConnection(flags: ConnectionFlags, env: NodeJS.ProcessEnv = process.env): Connection {
  const path = profilePath(env);
  const file = readProfiles(path);
  const chosen = flags.profile ?? env.UNIHOST_PROFILE;
  if (chosen !== undefined && !file.profiles[chosen]) throw new ClientConfigError(`no profile '${chosen}' in ${path}`);
  const explicit = chosen !== undefined ? file.profiles[chosen] : undefined;
  const current = file.current !== undefined ? file.profiles[file.current] : undefined;
  const envToken = TOKEN_VARS.map((k) => env[k]).find((v) => v !== undefined && v !== '');
  const envMetro = env.UKC_METRO || undefined;
  const metro = flags.metro ?? explicit?.metro ?? envMetro ?? current?.metro ?? DEFAULT_METRO;
  const token = flags.token ?? explicit?.token ?? envToken ?? current?.token;
  if (token === undefined || token === '')
    throw new ClientConfigError('no token: pass --token, set UKC_TOKEN, or save one in a profile with `unihost login`');
  const profile = chosen ?? (current ? file.current : undefined);
  return { baseUrl: baseUrlOf(metro), token, ...(profile !== undefined ? { profile } : {}) };
}
