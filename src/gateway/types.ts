import type { Logger } from 'pino';

/**
 * One instance of a service group as the gateway sees it. Only `running`
 * backends get new connections and requests; `draining` ones keep the work
 * they have; `other` (starting, stopped, crashed, ...) get nothing.
 */
export interface Backend {
  instanceId: string;
  /** private address of the instance; the route's `destinationPort` is dialled on it */
  host: string;
  state: 'running' | 'draining' | 'other';
}

/** One published service of one group (api-v1.md, Service entry), with the group's FQDNs. */
export interface Route {
  groupId: string;
  /** the group's owner; '' for the platform's own routes (the registry and the console: docs/registry.md) */
  userId: string;
  /** public port */
  port: number;
  destinationPort: number;
  handlers: string[];
  /** exact names (stored lower case, no trailing dot) */
  fqdns: string[];
  /**
   * The group's limits per instance (PATCH /v1/services soft_limit and
   * hard_limit): beyond `soft` concurrent requests (HTTP) or connections
   * (TCP) on an instance new ones queue; beyond `hard` in service and
   * queued per usable instance they are refused (HTTP 503, TCP reset).
   */
  limits?: { soft: number | null; hard: number | null };
}

export interface KeyPair {
  cert: string;
  key: string;
}

export interface GatewayLimits {
  /** open client connections per listener (public port) */
  maxConnections: number;
  /** open client connections per client IP and listener */
  maxConnectionsPerIp: number;
  /** time to receive a whole request head (slowloris) */
  headersTimeoutMs: number;
  /**
   * time to receive the ClientHello and finish the TLS handshake; on TLS
   * ports also the client inactivity timeout (HAProxy 2.6 has no separate
   * handshake timeout), which bounds idle kept-alive connections there too
   */
  handshakeTimeoutMs: number;
  /** client inactivity (a stalled request body, a client that does not read) on plain ports */
  idleTimeoutMs: number;
  /** a TCP-mode connection (no `http`) without any traffic for this long is closed */
  tcpIdleTimeoutMs: number;
  /** time an idle keep-alive HTTP client connection is kept open */
  keepAliveTimeoutMs: number;
  /** request head size; larger heads get 431 */
  maxHeaderSize: number;
  /** time to connect to a backend (each try) */
  connectTimeoutMs: number;
  /** further tries after a failed connect (a new source port each; refused ones after 1 s) */
  connectRetries: number;
  /** time a backend may take to send response headers */
  upstreamHeadersTimeoutMs: number;
  /** time a request may wait in a group's queue (soft limit reached) before it gets 503 */
  queueTimeoutMs: number;
  /** after a reload, the longest the old worker keeps serving its open connections */
  hardStopAfterMs: number;
  /** reloads an old worker outlives at most (HAProxy `mworker-max-reloads`) */
  maxReloads: number;
  /** ACME HTTP-01 requests (`/.well-known/acme-challenge/`) per client IP in 10 s; more get 429 from HAProxy */
  acmeRequestsPer10s: number;
}

export const DEFAULT_LIMITS: GatewayLimits = {
  maxConnections: 10_000,
  maxConnectionsPerIp: 1_000,
  headersTimeoutMs: 10_000,
  handshakeTimeoutMs: 10_000,
  idleTimeoutMs: 120_000,
  tcpIdleTimeoutMs: 600_000,
  keepAliveTimeoutMs: 60_000,
  maxHeaderSize: 16 * 1024,
  connectTimeoutMs: 1_000,
  connectRetries: 4,
  upstreamHeadersTimeoutMs: 120_000,
  queueTimeoutMs: 30_000,
  hardStopAfterMs: 600_000,
  maxReloads: 5,
  acmeRequestsPer10s: 30,
};

export interface GatewayOptions {
  /** public address the listeners bind to */
  listenHost: string;
  /** maps a public port to the port actually bound (tests map 80/443 to free ports; 0 = any free port) */
  portMap?: (publicPort: number) => number;
  /** metro wildcard certificate (operator files or the local CA's, see ca.ts) */
  tls: KeyPair;
  /** the metro domain: names under it use `tls`; others need `setCertificates` */
  metroDomain: string;
  /** current instances of a group; read at every `setRoutes` (the controller calls it on every change) */
  backends(groupId: string): Backend[];
  /**
   * Called when a group has no running backend. May start one (scale to
   * zero) and resolve true once it runs; false answers 503 / closes.
   */
  onNoBackend?(groupId: string): Promise<boolean>;
  /** a request or connection went to an instance (for the autoscaler's idle clock) */
  onActivity?(groupId: string, instanceId: string): void;
  /** the last connection or in-flight request of an instance ended */
  onIdle?(instanceId: string): void;
  /** HTTP-01 answers for ACME: the key authorization for (host, token), or undefined */
  acmeChallenge?(host: string, token: string): string | undefined;
  limits?: Partial<GatewayLimits>;
  log: Logger;
}

export interface Counter {
  /** client connections (group) or connections and in-flight requests to the instance */
  openConnections: number;
  /** HTTP requests, or TCP connections in TCP mode */
  requests: number;
  /** bytes from clients */
  bytesIn: number;
  /** bytes to clients */
  bytesOut: number;
  /** ms since the epoch; 0 = never */
  lastActivity: number;
}

export interface Counters {
  groups: Record<string, Counter>;
  instances: Record<string, Counter & { groupId: string }>;
}

/** What `setRoutes` did per public port. */
export interface ListenResult {
  port: number;
  /** the port actually bound (after portMap) */
  boundPort?: number;
  error?: string;
}

/**
 * What the gateway controller drives: `HaproxyDataPlane` (src/gateway/haproxy/)
 * and `MemoryDataPlane` (memory.ts, unit tests) implement it; the config's
 * `gateway.driver` chooses (src/drivers.ts).
 */
export interface DataPlane {
  /** prepares what must run before the first route table (HAProxy: its activator and stats poll) */
  start?(): Promise<void>;
  setRoutes(routes: Route[]): Promise<ListenResult[]>;
  boundPort(publicPort: number): number | undefined;
  clientConnections(publicPort: number): number;
  connections(instanceId: string): number;
  counters(): Counters;
  drain(instanceId: string, timeoutMs: number): Promise<'idle' | 'timeout'>;
  disconnect(instanceId: string): number;
  /**
   * An instance is about to stop: no new connection or request goes to it
   * from now on (open ones go on), without waiting for the next route sync.
   * A later sync removes it, or takes it back if it runs again.
   */
  leave?(instanceId: string): Promise<void>;
  forgetInstance(instanceId: string): void;
  setCertificates(certs: { names: string[]; pair: KeyPair }[]): string[];
  /** resolves (when a promise) once the challenge certificates are served */
  setAlpnChallenges(certs: { name: string; pair: KeyPair }[]): void | Promise<void>;
  setCertificate(pair: KeyPair): void;
  close(): Promise<void>;
}
