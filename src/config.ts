import { readFileSync, existsSync } from 'node:fs';
import { homedir, hostname } from 'node:os';
import { join } from 'node:path';
import type { Hard, Limits } from './store/types.js';
import { checkConfigFile } from './config-schema.js';

/** Daemon configuration: embedded defaults < config file < environment < flags. */
export interface Config {
  /** `host:port` the API listens on */
  listen: string;
  /** serve the API over HTTPS: PEM files of the certificate (chain) and its key; both empty = plain HTTP */
  tls: { cert: string; key: string };
  dataDir: string;
  /** IATA-like metro code shown to users */
  metro: string;
  /** shared public domain of the metro; groups get `<name>-<random>.<metroDomain>` */
  metroDomain: string;
  /** labels under the metro domain nobody may claim */
  reservedLabels: string[];
  /** largest accepted request body, bytes */
  bodyLimit: number;
  /** what `-1` means for wait/stop timeouts, ms */
  maxTimeoutMs: number;
  /** concurrent waits (GET wait targets, start/create with a wait timeout) one user may hold */
  maxWaitsPerUser: number;
  /** requests per user and window (all the user's tokens together); `max: 0` turns the limit off */
  rateLimit: { max: number; windowMs: number };
  /** failed authentications per client address and window; beyond, 429 (0 = off) */
  authFailures: { max: number; windowMs: number };
  /** open `GET /v1/events` streams one user may hold at once (docs/operations.md) */
  eventStreams: { perUser: number; retentionDays: number };
  capacity: CapacityConfig;
  /** largest log chunk one request returns, bytes */
  maxLogChunk: number;
  /** private network for instances (IPv4 CIDR); the first host address is the gateway */
  subnet: string;
  defaultQuotas: { hard: Hard; limits: Limits };
  logLevel: string;
  /**
   * Where the daemon's log goes: '' for stdout (systemd's journal, a
   * terminal), else a file rolled at `maxSizeMb`, `keep` old ones kept
   * (docs/operations.md, "Logs").
   */
  log: { file: string; maxSizeMb: number; keep: number };
  machines: MachinesConfig;
  network: NetworkConfig;
  volumes: VolumesConfig;
  gateway: GatewayConfig;
  acme: AcmeConfig;
  domainProof: DomainProofConfig;
  store: StoreConfig;
  /** what this process does: `api` (the HTTP API), `agent` (runs this host's VMs, taps, volumes, DNS), `gateway` (HAProxy) */
  roles: Role[];
  /** this host, as the agent registers it (docs/hosts.md) */
  host: {
    name: string;
    /** its address on the hosts' network (others reach its instances there); '' = none (one host) */
    address: string;
    /** how long a lease lasts unless renewed (renewed every third of it); past it the host is dead */
    leaseMs: number;
    /**
     * the watchdog that kills this host's VMs when its agent's lease runs out
     * (a paused or cut-off agent must not leave copies running): `auto` = on
     * when the store is PostgreSQL (other hosts may take the instances over)
     */
    watchdog: 'auto' | 'on' | 'off';
    /**
     * the agent's port on its address, where API servers of other hosts read
     * the console logs of its instances (docs/hosts.md); 0 = any free port
     * (published in the store)
     */
    agentPort: number;
  };
}

export type Role = 'api' | 'agent' | 'gateway';
export const ROLES: readonly Role[] = ['api', 'agent', 'gateway'];

/** `api,agent`: the roles of a comma-separated list; `what` names the setting in the refusal. */
export function parseRoles(list: string, what: string): Role[] {
  const roles = list
    .split(',')
    .map((r) => r.trim())
    .filter(Boolean);
  for (const r of roles)
    if (!(ROLES as string[]).includes(r)) throw new Error(`${what}: unknown role '${r}' (known: ${ROLES.join(', ')})`);
  if (roles.length === 0) throw new Error(`${what}: no role given (known: ${ROLES.join(', ')})`);
  return [...new Set(roles)] as Role[];
}

/** Where the state lives (docs/operations.md, "The store"). */
export interface StoreConfig {
  /** empty: SQLite in the data dir (the embedded default); `postgres://` or `postgresql://`: PostgreSQL */
  url: string;
  /** every controller re-reads everything it keeps this often, whatever the change feed said (ms) */
  resyncMs: number;
}

/** Host admission control: how much RAM the guests of all users may hold together. */
export interface CapacityConfig {
  /** guest memory budget in MB; 0 = `memoryFraction` of the host's MemTotal */
  memoryMb: number;
  memoryFraction: number;
  /** counted per VM on top of its `memory_mb` (QEMU itself, its TCG translation buffer) */
  vmOverheadMb: number;
  /**
   * vCPU over-commit: live VMs (one vCPU each) per host core; 0 = no CPU
   * limit. Cores are `cores`, or the host's when 0.
   */
  vcpusPerCore: number;
  cores: number;
}

/** Certificates for custom domains from an ACME authority (docs/certificates.md). */
export interface AcmeConfig {
  /** request certificates for custom domains at all */
  enabled: boolean;
  /** directory URL (`--acme-directory`, `UNIHOST_ACME_DIRECTORY`) */
  directory: string;
  /** PEM file of extra CAs trusted for the directory's HTTPS (a private authority, tests) */
  directoryCa?: string;
  /**
   * PEM file of CAs whose certificates, uploaded, prove control of their
   * names besides the public roots (a private CA; docs/certificates.md)
   */
  uploadTrustedCa?: string;
  /** account contact */
  email?: string;
  /** failed attempts before a certificate goes to `error` */
  maxAttempts: number;
  /** back-off after the first failure, doubled per attempt (per domain), at most `retryMaxMs` */
  retryBaseMs: number;
  retryMaxMs: number;
}

/**
 * Proof of control of custom domains in DNS (src/services/domain-proofs.ts,
 * docs/certificates.md): a name another account holds moves to the account
 * that publishes its `_unihost-challenge` TXT record.
 */
export interface DomainProofConfig {
  /** look proofs up at all (off: a custom name stays with whoever took it first) */
  enabled: boolean;
  /** resolvers to ask (`ip` or `ip:port`); empty: the host's (/etc/resolv.conf) */
  dnsServers: string[];
  /** per try (two tries) */
  timeoutMs: number;
}

export const LETS_ENCRYPT_PRODUCTION = 'https://acme-v02.api.letsencrypt.org/directory';

export interface GatewayConfig {
  /** publish service groups' ports (listeners, TLS, balancing) */
  enabled: boolean;
  /** the data plane (src/drivers.ts): `haproxy`, or `memory` (binds nothing: tests, API development) */
  driver: string;
  /**
   * Scale-to-zero wakes (docs/autoscale.md): a request or connection for a
   * group whose master is in standby is held while the master starts, at
   * most `wakeTimeoutMs`, and at most `maxHeldPerGroup` at a time per group;
   * beyond either the client gets 503 with Retry-After (TCP: closed).
   */
  wake: { timeoutMs: number; maxHeldPerGroup: number };
  /** address the public listeners bind to */
  listen: string;
  /** bound port = public port + offset (e.g. 8000 to run without root); -1 = any free port (tests) */
  portOffset: number;
  /** HAProxy worker threads; 0 = chosen from the host's CPUs (gatewayThreads, docs/gateway.md) */
  threads: number;
  /**
   * CPU weight of HAProxy's cgroup `unihost-gateway` on cgroup v2's scale
   * (1-10000; 100 = a plain process, and the VMs' `unihost/` group as a
   * whole); 0 = no cgroup. Default 400: with VMs keeping every core busy the
   * gateway still gets four fifths of a core it needs (docs/gateway.md).
   */
  cpuWeight: number;
  /**
   * Log every abnormal gateway request or connection (HAProxy's log line:
   * timers, termination state, servers) to the daemon's log at warn; for
   * troubleshooting (costs some throughput). Env UNIHOST_GATEWAY_LOG_ERRORS=1.
   */
  logErrors: boolean;
  /**
   * Public ports tenants may publish: single ports and `a-b` ranges
   * (docs/operations.md, "Ports"). The API's own port is never allowed.
   */
  allowedPorts: string[];
}

/**
 * HAProxy's threads when the configuration leaves it to the host: one on a
 * host of up to 2 CPUs (one thread serves tens of thousands of requests/s
 * here, more than its instances answer; a second one on 2 CPUs only takes
 * CPU from the guests and the daemon), otherwise a quarter of the CPUs
 * (at least 1, at most 16): the rest is for the VMs the host exists to run.
 */
export function gatewayThreads(configured: number, cpus: number): number {
  if (configured > 0) return configured;
  if (cpus <= 2) return 1;
  return Math.min(16, Math.max(1, Math.floor(cpus / 4)));
}

export interface NetworkConfig {
  /** give instances a NIC on the private network (bridge, taps, isolation, DNS) */
  enabled: boolean;
  /** the host side (src/drivers.ts): `host` (bridge, taps, nftables), or `memory` (changes nothing on the host) */
  driver: string;
  bridge: string;
  /** serve `<name>.internal` on the gateway address */
  dns: boolean;
  dnsPort: number;
  /** the VXLAN id joining the hosts' bridges (docs/hosts.md): the same on every host of one platform */
  vni: number;
}

/** Persistent volumes' images. */
export interface VolumesConfig {
  /** the images (src/drivers.ts): `ext4` (image files in the data dir), or `memory` (no files: tests) */
  driver: string;
}

export interface MachinesConfig {
  /** the VMM (src/drivers.ts): `qemu`, or `memory` (boots nothing: tests, API development) */
  driver: string;
  /** `auto` probes once whether KVM really boots a guest, else TCG */
  accel: 'auto' | 'kvm' | 'tcg';
  qemu: string;
  /** TCG translation buffer (MB); smaller saves RSS per VM */
  tbSizeMb: number;
  /** a guest that has not signalled ready by then is stopped */
  bootTimeoutMs: number;
  /** a graceful stop that has not ended by then becomes a forced one */
  stopTimeoutMs: number;
  /**
   * turn the kernel's same-page merging on at start (host-wide; QEMU marks
   * guest RAM mergeable): identical pages of unikernel guests are shared
   * (docs/machines.md, "Memory per guest")
   */
  ksm: boolean;
  /**
   * how many QEMUs wait started in advance for restores of memory snapshots
   * (stateful wakes, clones of templates; docs/snapshots.md, "Warm
   * restores"); 0: each restore starts its own
   */
  warmVms: number;
}

export function defaultDataDir(): string {
  if (process.getuid?.() === 0) return '/var/lib/unihost';
  return join(process.env.XDG_DATA_HOME ?? join(homedir(), '.local', 'share'), 'unihost');
}

export const DEFAULTS: Config = {
  listen: '127.0.0.1:7878',
  tls: { cert: '', key: '' },
  dataDir: defaultDataDir(),
  metro: 'local',
  metroDomain: 'unihost.localhost',
  reservedLabels: ['www', 'api', 'admin', 'mail', 'ns1', 'ns2', 'status', 'console', 'dashboard', 'registry'],
  bodyLimit: 1024 * 1024,
  maxTimeoutMs: 3_600_000,
  maxLogChunk: 16383,
  maxWaitsPerUser: 256,
  // Generous: 100 requests/s per user on average, far above what the official clients send.
  rateLimit: { max: 6000, windowMs: 60_000 },
  // Room for a mistyped token or a misconfigured script, not for guessing.
  authFailures: { max: 30, windowMs: 60_000 },
  eventStreams: { perUser: 8, retentionDays: 30 },
  // The rest of the host's RAM stays for the kernel, the daemon and page cache.
  // 16 mostly idle unikernels per core, the allocation ratio clouds use for small VMs.
  capacity: { memoryMb: 0, memoryFraction: 0.8, vmOverheadMb: 48, vcpusPerCore: 16, cores: 0 },
  subnet: '10.88.0.0/16',
  defaultQuotas: {
    hard: {
      instances: 64,
      live_instances: 16,
      live_memory_mb: 4096,
      service_groups: 32,
      services: 64,
      volumes: 32,
      total_volume_mb: 16384,
      registry_mb: 4096,
      domains: 64,
      certificates: 32,
      snapshot_mb: 4096,
    },
    limits: {
      min_memory_mb: 16,
      max_memory_mb: 2048,
      min_volume_mb: 1,
      max_volume_mb: 8192,
      min_autoscale_size: 0,
      max_autoscale_size: 8,
    },
  },
  logLevel: 'info',
  log: { file: '', maxSizeMb: 20, keep: 5 },
  network: { enabled: true, driver: 'host', bridge: 'uhbr0', dns: true, dnsPort: 53, vni: 7878 },
  volumes: { driver: 'ext4' },
  gateway: {
    enabled: true,
    driver: 'haproxy',
    listen: '127.0.0.1',
    portOffset: 0,
    threads: 0,
    cpuWeight: 400,
    logErrors: false,
    allowedPorts: ['80', '443', '1024-65535'],
    wake: { timeoutMs: 10_000, maxHeldPerGroup: 1000 },
  },
  acme: {
    enabled: true,
    directory: LETS_ENCRYPT_PRODUCTION,
    maxAttempts: 5,
    retryBaseMs: 60_000,
    retryMaxMs: 3_600_000,
  },
  domainProof: { enabled: true, dnsServers: [], timeoutMs: 2000 },
  store: { url: '', resyncMs: 30_000 },
  roles: ['api', 'agent', 'gateway'],
  host: { name: hostname(), address: '', leaseMs: 10_000, watchdog: 'auto', agentPort: 7879 },
  machines: {
    driver: 'qemu',
    accel: 'auto',
    qemu: 'qemu-system-x86_64',
    tbSizeMb: 32,
    ksm: true,
    warmVms: 2,
    bootTimeoutMs: 180_000,
    stopTimeoutMs: 15_000,
  },
};

type DeepPartial<T> = { [K in keyof T]?: T[K] extends object ? DeepPartial<T[K]> : T[K] };

function merge<T>(base: T, over: DeepPartial<T> | undefined): T {
  if (!over) return base;
  const out: Record<string, unknown> = { ...(base as Record<string, unknown>) };
  for (const [k, v] of Object.entries(over)) {
    if (v === undefined) continue;
    const b = out[k];
    out[k] =
      b && typeof b === 'object' && !Array.isArray(b) && v && typeof v === 'object' && !Array.isArray(v)
        ? merge(b, v as DeepPartial<typeof b>)
        : v;
  }
  return out as T;
}

/** Reads env variables `UNIHOST_*` that map to config keys. */
function fromEnv(env: NodeJS.ProcessEnv): DeepPartial<Config> {
  const c: DeepPartial<Config> = {};
  if (env.UNIHOST_LISTEN) c.listen = env.UNIHOST_LISTEN;
  if (env.UNIHOST_DATA_DIR) c.dataDir = env.UNIHOST_DATA_DIR;
  if (env.UNIHOST_STORE !== undefined) c.store = { url: env.UNIHOST_STORE };
  if (env.UNIHOST_ROLE !== undefined) c.roles = parseRoles(env.UNIHOST_ROLE, 'UNIHOST_ROLE');
  if (env.UNIHOST_HOST_NAME) c.host = { name: env.UNIHOST_HOST_NAME };
  if (env.UNIHOST_HOST_ADDRESS) c.host = { ...c.host, address: env.UNIHOST_HOST_ADDRESS };
  if (env.UNIHOST_TLS_CERT || env.UNIHOST_TLS_KEY) c.tls = { cert: env.UNIHOST_TLS_CERT, key: env.UNIHOST_TLS_KEY };
  if (env.UNIHOST_METRO) c.metro = env.UNIHOST_METRO;
  if (env.UNIHOST_METRO_DOMAIN) c.metroDomain = env.UNIHOST_METRO_DOMAIN;
  if (env.UNIHOST_GATEWAY_LOG_ERRORS === '1') c.gateway = { ...c.gateway, logErrors: true } as Config['gateway'];
  if (env.UNIHOST_SUBNET) c.subnet = env.UNIHOST_SUBNET;
  if (env.UNIHOST_LOG_LEVEL) c.logLevel = env.UNIHOST_LOG_LEVEL;
  if (env.UNIHOST_LOG_FILE !== undefined) c.log = { file: env.UNIHOST_LOG_FILE };
  if (env.UNIHOST_HOST_MEMORY_MB) {
    const mb = Number(env.UNIHOST_HOST_MEMORY_MB);
    if (!Number.isInteger(mb) || mb < 0)
      throw new Error(`UNIHOST_HOST_MEMORY_MB '${env.UNIHOST_HOST_MEMORY_MB}' is not a whole number of MB (0 = auto)`);
    c.capacity = { memoryMb: mb };
  }
  if (env.UNIHOST_RATE_LIMIT) {
    const max = Number(env.UNIHOST_RATE_LIMIT);
    if (!Number.isInteger(max) || max < 0)
      throw new Error(`UNIHOST_RATE_LIMIT '${env.UNIHOST_RATE_LIMIT}' is not a whole number of requests (0 = off)`);
    c.rateLimit = { max };
  }
  if (env.UNIHOST_ACCEL) c.machines = { accel: env.UNIHOST_ACCEL as MachinesConfig['accel'] };
  if (env.UNIHOST_ACME_DIRECTORY) c.acme = { directory: env.UNIHOST_ACME_DIRECTORY };
  if (env.UNIHOST_GATEWAY_LISTEN) c.gateway = { listen: env.UNIHOST_GATEWAY_LISTEN };
  if (env.UNIHOST_NETWORK) c.network = { enabled: !/^(0|false|off|no)$/i.test(env.UNIHOST_NETWORK) };
  return c;
}

/**
 * Resolves the configuration. `file` is a JSON file (`--config` or
 * `UNIHOST_CONFIG`); a missing explicit file is an error, a missing default
 * one is not.
 */
export function loadConfig(flags: DeepPartial<Config> & { config?: string }, env = process.env): Config {
  const { config: explicit, ...flagValues } = flags;
  const file = explicit ?? env.UNIHOST_CONFIG;
  let fromFile: DeepPartial<Config> | undefined;
  if (file) {
    if (!existsSync(file)) throw new Error(`config file ${file} does not exist`);
    let parsed: unknown;
    try {
      parsed = JSON.parse(readFileSync(file, 'utf8'));
    } catch (e) {
      throw new Error(`config file ${file} is not valid JSON: ${(e as Error).message}`);
    }
    checkConfigFile(parsed, file);
    fromFile = parsed as DeepPartial<Config>;
  }
  const c = merge(merge(merge(DEFAULTS, fromFile), fromEnv(env)), flagValues);
  return c;
}
