/**
 * The store setting (`--store`, `UNIHOST_STORE`, `store.url`): empty for
 * SQLite in the data dir, or a PostgreSQL URL. Parsed and checked before
 * anything connects, so a typo is refused with its reason, and described
 * without the password for messages and logs.
 */
import { isAbsolute } from 'node:path';

export interface PgTarget {
  kind: 'postgres';
  /** a host name, or the directory of the server's unix socket */
  host: string;
  port: number;
  database: string;
  user: string;
  password: string;
  ssl: false | 'require' | 'prefer' | 'verify-full';
  connectTimeoutS: number;
  poolMax: number;
  applicationName: string;
  /** where it points, for messages: never the password */
  display: string;
}

export type StoreTarget = { kind: 'sqlite'; path: string } | PgTarget;

/** Query options a PostgreSQL store URL may carry, with what each means (for the refusal of others). */
const OPTIONS: Record<string, string> = {
  host: 'a host name, or the directory of a unix socket (/run/postgresql)',
  port: 'the server port (5432)',
  sslmode: 'disable, prefer, require or verify-full',
  connect_timeout: 'seconds to wait for a connection (10)',
  application_name: 'the name the server shows for the connections',
  pool_max: 'connections per process (10)',
};

const SSL_MODES: Record<string, PgTarget['ssl']> = {
  disable: false,
  prefer: 'prefer',
  require: 'require',
  'verify-full': 'verify-full',
};

function refuse(url: string, why: string): never {
  throw new Error(`store URL '${redact(url)}' is refused: ${why}`);
}

/** The URL with its password replaced, for messages. */
export function redact(url: string): string {
  return url.replace(/^([a-z][a-z0-9+.-]*:\/\/[^:@/?#]*):[^@/?#]*@/i, '$1:***@');
}

const wholeNumber = (url: string, key: string, v: string, min: number, max: number): number => {
  const n = Number(v);
  if (!/^\d+$/.test(v) || n < min || n > max) refuse(url, `${key} '${v}' is not a whole number from ${min} to ${max}`);
  return n;
};

/**
 * `sqliteDefault` is where SQLite lives when the setting is empty (the data
 * dir's `unihost.db`).
 */
export function parseStoreUrl(raw: string, sqliteDefault: string): StoreTarget {
  const url = raw.trim();
  if (url === '') return { kind: 'sqlite', path: sqliteDefault };
  const scheme = /^([a-z][a-z0-9+.-]*):/i.exec(url)?.[1]?.toLowerCase();
  if (scheme !== 'postgres' && scheme !== 'postgresql') {
    refuse(
      url,
      scheme
        ? `unknown scheme '${scheme}:' (use postgres:// or postgresql://, or leave it empty for SQLite in the data dir)`
        : 'it is not a URL (postgresql://USER@HOST/DATABASE, or empty for SQLite in the data dir)',
    );
  }
  // Parsed by hand: WHATWG URL refuses a user with an empty host (postgresql://USER@/DB?host=/socket/dir).
  const m = /^[^:]+:\/\/([^/?#]*)(\/[^?#]*)?(\?[^#]*)?$/.exec(url);
  if (!m) refuse(url, `'${scheme}:' must be followed by '//' and no '#' part`);
  const [, authority = '', path = '', query = ''] = m;
  const at = authority.lastIndexOf('@');
  const userinfo = at >= 0 ? authority.slice(0, at) : '';
  const hostport = at >= 0 ? authority.slice(at + 1) : authority;
  const colon = userinfo.indexOf(':');
  const decode = (v: string, what: string): string => {
    try {
      return decodeURIComponent(v);
    } catch {
      return refuse(url, `${what} is not valid percent-encoding`);
    }
  };
  const u = {
    username: decode(colon >= 0 ? userinfo.slice(0, colon) : userinfo, 'the user'),
    password: decode(colon >= 0 ? userinfo.slice(colon + 1) : '', 'the password'),
    hostname: '',
    port: '',
    pathname: decode(path, 'the database'),
    searchParams: new URLSearchParams(query),
  };
  const hp = /^(\[[^\]]+\]|[^:]*)(?::(\d*))?$/.exec(hostport);
  if (!hp) refuse(url, `'${hostport}' is not HOST or HOST:PORT`);
  u.hostname = decode(hp[1]!.replace(/^\[|\]$/g, ''), 'the host');
  u.port = hp[2] ?? '';
  for (const key of new Set(u.searchParams.keys())) {
    if (!Object.hasOwn(OPTIONS, key)) {
      const known = Object.entries(OPTIONS)
        .map(([k, v]) => `${k} (${v})`)
        .join(', ');
      refuse(url, `unknown option '${key}' (known: ${known})`);
    }
    if (u.searchParams.getAll(key).length > 1) refuse(url, `option '${key}' is given more than once`);
  }
  const q = (k: string): string | undefined => u.searchParams.get(k) ?? undefined;
  const database = u.pathname.replace(/^\//, '');
  if (!database) refuse(url, 'it names no database (postgresql://USER@HOST/DATABASE)');
  if (database.includes('/')) refuse(url, `database name '${database}' contains '/'`);
  const user = u.username;
  if (!user) refuse(url, 'it names no user (postgresql://USER@HOST/DATABASE)');
  const socketDir = q('host');
  if (socketDir !== undefined && socketDir.startsWith('/') === false && u.hostname !== '')
    refuse(url, `the host is given twice ('${u.hostname}' and host=${socketDir})`);
  const host = socketDir ?? u.hostname;
  if (!host) refuse(url, 'it names no host: give HOST, or host=/path/to/socket/dir for a unix socket');
  if (host.startsWith('/') && !isAbsolute(host)) refuse(url, `socket directory '${host}' is not an absolute path`);
  const port = q('port') ?? (u.port || '5432');
  const sslmode = q('sslmode') ?? 'disable';
  if (!Object.hasOwn(SSL_MODES, sslmode))
    refuse(url, `sslmode '${sslmode}' is not one of ${Object.keys(SSL_MODES).join(', ')}`);
  const target: PgTarget = {
    kind: 'postgres',
    host,
    port: wholeNumber(url, 'port', port, 1, 65535),
    database,
    user,
    password: u.password,
    ssl: SSL_MODES[sslmode]!,
    connectTimeoutS: wholeNumber(url, 'connect_timeout', q('connect_timeout') ?? '10', 1, 600),
    poolMax: wholeNumber(url, 'pool_max', q('pool_max') ?? '10', 1, 1000),
    applicationName: q('application_name') ?? 'unihost',
    display: '',
  };
  target.display = host.startsWith('/')
    ? `PostgreSQL on the socket ${host}/.s.PGSQL.${target.port}, database '${database}' as '${user}'`
    : `PostgreSQL at ${host}:${target.port}, database '${database}' as '${user}'`;
  return target;
}
