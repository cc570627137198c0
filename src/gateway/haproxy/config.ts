import path from 'node:path';
import type { Backend, GatewayLimits, Route } from '../types.js';
import { ACME_TLS_ALPN } from './acme-tls.js';
import type { Slot } from './slots.js';

/** The data plane's wanted state, from which the whole configuration is rendered. */
export interface PlaneState {
  listenHost: string;
  /** nbthread; undefined = HAProxy's default */
  threads?: number;
  limits: GatewayLimits;
  /** every abnormal request or connection logged (gateway.logErrors; HAProxy's stderr, read by the daemon) */
  logErrors?: boolean;
  /**
   * The workers' uid and gid: set (a root daemon), they drop to it and are
   * chrooted into the empty `jail` dir; the master alone stays root (binds,
   * reloads, certificate files). Undefined: HAProxy runs as the daemon does.
   */
  worker?: { uid: number; gid: number };
  /**
   * public port -> the activator's listeners for it on 127.0.0.1: `fallback`
   * behind the port's default backend, `backup` as the backup server of its
   * HTTP backends (activator.ts)
   */
  activatorPorts: Map<number, { fallback: number; backup: number }>;
  /** TLS-ALPN-01: the names with a challenge and the port of the listener that answers them (acme-tls.ts) */
  acme: { port: number; names: string[] };
  /** public port -> bound port, its routes and its backends (slots.ts) */
  ports: Map<number, { bound: number; routes: Route[]; slots: Slot[] }>;
  /** TCP backend (slot) -> the activator's TCP listener for it (its `backup` server) */
  wakePorts: Map<string, number>;
  /** group id -> its instances (only running and draining ones are rendered) */
  backends: (groupId: string) => Backend[];
}

/** Files under <dataDir>/haproxy/. */
export function planeFiles(dir: string) {
  return {
    dir,
    config: path.join(dir, 'haproxy.cfg'),
    admin: path.join(dir, 'admin.sock'),
    master: path.join(dir, 'master.sock'),
    pid: path.join(dir, 'haproxy.pid'),
    crtList: path.join(dir, 'certs', 'crt-list.txt'),
    certs: path.join(dir, 'certs'),
    map: (port: number) => path.join(dir, `port-${port}.map`),
    /** the workers' root (`chroot`): empty but for the sockets they connect to */
    jail: path.join(dir, 'jail'),
    /** where a TLS port's pre-inspection hands ordinary clients to its TLS frontend (with the PROXY protocol) */
    tlsSocket: (port: number) => path.join(dir, 'jail', `tls-${port}.sock`),
  };
}
export type PlaneFiles = ReturnType<typeof planeFiles>;

/** HAProxy names allow [A-Za-z0-9_.:-]; ids are made of those, anything else is replaced. */
const safe = (s: string): string => s.replace(/[^A-Za-z0-9_.:-]/g, '_');
export const serverName = (instanceId: string): string => safe(instanceId);
export const activatorName = (port: number): string => `uh_activator_${port}`;
/** The backend that answers names not published on a port (HAProxy itself: no Node on the way). */
export const unknownName = (port: number): string => `uh_unknown_${port}`;
/** The stick table that counts ACME HTTP-01 requests per client (its own backend: only those requests are tracked). */
export const ACME_RATE = 'uh_acme_rate';
/** The backup server of every HTTP backend: the activator's `backup` listener of the port. */
export const ACTIVATOR_SERVER = 'uh_activator';

const isTls = (rs: Route[]): boolean => rs.some((r) => r.handlers.includes('tls'));
const allHttp = (rs: Route[]): boolean => rs.every((r) => r.handlers.includes('http'));
/** A TLS port whose routes all speak HTTP is an HTTP frontend (HTTP/2 by ALPN); mixed ones stay TCP. */
export const frontendMode = (rs: Route[]): 'http' | 'tcp' => (!isTls(rs) || allHttp(rs) ? 'http' : 'tcp');

/** The routes of each public port. */
export function routesByPort(routes: Route[]): Map<number, Route[]> {
  const m = new Map<number, Route[]>();
  for (const r of routes) m.set(r.port, [...(m.get(r.port) ?? []), r]);
  return m;
}

/** Host (or SNI) -> backend lines of a port's map file; only HTTP routes on plain ports. */
export function mapEntries(
  port: number,
  routes: Route[],
  slotOf: (port: number, groupId: string) => string | undefined,
): Map<string, string> {
  const m = new Map<string, string>();
  const tls = isTls(routes);
  for (const r of routes) {
    if (tls !== r.handlers.includes('tls')) continue; // disagreeing routes are unreachable
    if (!tls && !r.handlers.includes('http')) {
      // a name whose group does not speak HTTP here: the activator says so
      for (const f of r.fqdns) m.set(f, activatorName(port));
      continue;
    }
    const be = slotOf(port, r.groupId);
    if (be) for (const f of r.fqdns) m.set(f, be);
  }
  return m;
}

/** A socket the workers connect to is theirs (they run as `worker` after the master bound it). */
const socketOwner = (s: PlaneState): string => (s.worker ? ` uid ${s.worker.uid} gid ${s.worker.gid}` : '');

const sec = (ms: number): string => `${Math.max(1, Math.ceil(ms))}ms`;

function globalSection(s: PlaneState, f: PlaneFiles): string[] {
  const l = s.limits;
  return [
    'global',
    `  stats socket ${f.admin} mode 600 level admin expose-fd listeners`,
    '  stats timeout 30s',
    // workers: unprivileged, in an empty root (what they open after start are sockets in it)
    ...(s.worker ? [`  chroot ${f.jail}`, `  uid ${s.worker.uid}`, `  gid ${s.worker.gid}`] : []),
    ...(s.threads ? [`  nbthread ${s.threads}`] : []),
    // Room for the largest accepted head plus HAProxy's rewrite reserve; larger heads get 431 below,
    // up to twice the limit (beyond the buffer HAProxy itself answers 400). A buffer of 16 KiB instead
    // measured 4-8 % more requests/s, too little to give up the 431 for heads just over the limit.
    `  tune.bufsize ${Math.max(16384, l.maxHeaderSize * 2 + 1024)}`,
    // An old worker (one per reload) keeps its connections at most this long, and through at most
    // this many later reloads: a burst of reloads cannot pile up workers and their memory.
    `  hard-stop-after ${sec(l.hardStopAfterMs)}`,
    `  mworker-max-reloads ${l.maxReloads}`,
    '  log stderr format raw local0 err',
    '',
    // No `log global` in defaults: a proxy with a logger builds a log line for every request even
    // when the level filters it out (a tenth of the request rate); process messages still reach stderr.
    'defaults',
    // troubleshooting only: a line per abnormal request (`dontlog-normal`), with its termination state
    ...(s.logErrors
      ? ['  log global', '  option httplog', '  option dontlog-normal', '  option log-separate-errors']
      : []),
    // Short connects, several tries: a guest on the bridge answers a SYN in well under a millisecond,
    // but an lwIP guest (Unikraft) that closed a connection keeps it in TIME_WAIT for 120 s and ignores a
    // new SYN from the same source port (the host's kernel reuses ports long before; docs/gateway.md,
    // "Connecting to instances"): a try with another port is what gets through.
    `  timeout connect ${sec(l.connectTimeoutMs)}`,
    `  retries ${l.connectRetries}`,
    `  timeout queue ${sec(l.queueTimeoutMs)}`,
    `  timeout client ${sec(l.idleTimeoutMs)}`,
    `  timeout server ${sec(l.upstreamHeadersTimeoutMs)}`,
    `  timeout http-request ${sec(l.headersTimeoutMs)}`,
    `  timeout http-keep-alive ${sec(l.keepAliveTimeoutMs)}`,
    `  timeout tunnel ${sec(l.tcpIdleTimeoutMs)}`,
    `  timeout client-fin 5s`,
    // a half-closed server side (a guest that never closes after the client left) ends too
    `  timeout server-fin 5s`,
    '  option dontlognull',
    // On a reload the old worker keeps idle kept-alive connections until their next request, answered
    // with `Connection: close`, instead of closing them under clients that may be sending on them
    // (which then see a cut connection: the soak found it). Bounded by the keep-alive timeout and
    // hard-stop-after. TCP proxies ignore it.
    '  option idle-close-on-response',
    '',
  ];
}

/**
 * HAProxy 2.6 has no TLS handshake timeout of its own (2.8's `timeout client-hs`): on TLS ports the
 * client timeout is the handshake's, so a client that never says hello is closed in time. Idle
 * kept-alive HTTP and established TCP streams have their own timeouts (http-keep-alive, tunnel).
 */
const handshakeTimeout = (l: GatewayLimits): string[] => [`  timeout client ${sec(l.handshakeTimeoutMs)}`];

function frontend(s: PlaneState, f: PlaneFiles, port: number, bound: number, routes: Route[]): string[] {
  const l = s.limits;
  const mode = frontendMode(routes);
  const tls = isTls(routes);
  const act = activatorName(port);
  const alpn = mode === 'http' ? ' alpn h2,http/1.1' : '';
  const ssl = tls ? ` ssl crt-list ${f.crtList} strict-sni${alpn}` : '';
  const inspect = tls && s.acme.names.length > 0;
  const out = inspect
    ? [
        ...acmeInspection(s, f, port, bound),
        `frontend p${port}_tls`,
        `  mode ${mode}`,
        // the PROXY protocol gives this frontend the client's address (X-Forwarded-For, logs)
        `  bind unix@${f.tlsSocket(port)}${socketOwner(s)} mode 600 accept-proxy${ssl}`,
        `  maxconn ${l.maxConnections}`,
        ...handshakeTimeout(l),
      ]
    : [
        `frontend p${port}`,
        `  mode ${mode}`,
        `  bind ${s.listenHost}:${bound}${ssl}`,
        ...(tls ? handshakeTimeout(l) : []),
        ...clientLimits(l),
      ];
  if (mode === 'http') {
    out.push(
      // `req.hdrs` rebuilds the whole head, a fifth of the request rate: only for requests whose
      // buffered size (headers without ": " and CRLF, so a little less than the head) could exceed it
      `  http-request return status 431 content-type text/plain string "Request Header Fields Too Large" if { req.len gt ${Math.floor(l.maxHeaderSize / 2)} } { req.hdrs,length gt ${l.maxHeaderSize} }`,
    );
    if (tls) {
      out.push(
        '  http-request set-var(txn.host) req.hdr(host),field(1,:),lower',
        '  http-request set-var(txn.sni) ssl_fc_sni,lower',
        '  acl host_same var(txn.host),strcmp(txn.sni) eq 0',
        '  http-request return status 421 content-type "text/plain; charset=utf-8" lf-string "unihost: this connection is for %[var(txn.sni)], not %[var(txn.host)]." if { var(txn.host) -m found } !host_same',
        // a name not in the map gets HAProxy's own 404 text
        `  use_backend %[var(txn.sni),map(${f.map(port)},${unknownName(port)})]`,
      );
    } else {
      out.push(
        // ACME HTTP-01 before any routing or redirect (docs/certificates.md), for names published on
        // this port only (others get HAProxy's own 404 below) and a bounded rate per client: the
        // activator runs on the daemon's event loop
        '  acl acme_path path_beg /.well-known/acme-challenge/',
        `  http-request track-sc1 src table ${ACME_RATE} if acme_path`,
        `  http-request return status 429 content-type text/plain string "unihost: too many ACME challenge requests from this address" hdr retry-after 10 if acme_path { sc1_http_req_rate(${ACME_RATE}) gt ${l.acmeRequestsPer10s} }`,
        `  use_backend ${act} if acme_path { req.hdr(host),field(1,:),lower,map(${f.map(port)}) -m found }`,
        `  use_backend %[req.hdr(host),field(1,:),lower,map(${f.map(port)},${unknownName(port)})]`,
      );
    }
  } else {
    out.push(
      '  tcp-request inspect-delay 5s',
      `  tcp-request content set-var(txn.be) ssl_fc_sni,lower,map(${f.map(port)})`,
      '  tcp-request content reject if !{ var(txn.be) -m found }',
      '  use_backend %[var(txn.be)]',
    );
  }
  // A group without a usable instance reaches the activator through its backend's backup server
  // (HTTP: wake, redirect or 503; TCP: tcp-wake.ts): no rule per request here.
  out.push(`  default_backend ${mode === 'http' ? unknownName(port) : act}`, '');
  return out;
}

/**
 * Names not published on a port: a 404 text from HAProxy itself, so a flood
 * of unknown Host headers never reaches the Node activator (the daemon's
 * event loop).
 */
function unknown(port: number): string[] {
  const text = (where: string) => `unihost: no service is published at ${where} on port ${port}.`;
  return [
    `backend ${unknownName(port)}`,
    '  mode http',
    `  http-request return status 404 content-type "text/plain; charset=utf-8" lf-string "${text('%[req.hdr(host),field(1,:),lower]')}" if { req.hdr(host) -m found }`,
    `  http-request return status 404 content-type "text/plain; charset=utf-8" string "${text('this address')}"`,
    '',
  ];
}

/** Connection limits on the frontend that accepts the client's connection (its own address). */
function clientLimits(l: GatewayLimits): string[] {
  return [
    `  maxconn ${l.maxConnections}`,
    `  stick-table type ip size 100k expire 10m store conn_cur`,
    '  tcp-request connection track-sc0 src',
    `  tcp-request connection reject if { sc0_conn_cur gt ${l.maxConnectionsPerIp} }`,
  ];
}

/**
 * While TLS-ALPN-01 challenges exist (rare: rendered then, with a reload), a
 * TLS port's public bind reads the ClientHello first: a client offering
 * `acme-tls/1` for a challenged name goes to the activator's TLS listener,
 * every other connection to the port's TLS frontend over a unix socket
 * with the PROXY protocol (so the client's address stays known there). The
 * per-client limits apply here, where the client's address is the socket's.
 */
function acmeInspection(s: PlaneState, f: PlaneFiles, port: number, bound: number): string[] {
  return [
    `frontend p${port}`,
    '  mode tcp',
    `  bind ${s.listenHost}:${bound}`,
    ...clientLimits(s.limits),
    `  tcp-request inspect-delay ${sec(s.limits.handshakeTimeoutMs)}`,
    '  tcp-request content accept if { req.ssl_hello_type 1 }',
    `  acl acme_name req.ssl_sni,lower -m str ${s.acme.names.join(' ')}`,
    `  use_backend uh_acme_tls if { req.ssl_alpn -m str ${ACME_TLS_ALPN} } acme_name`,
    `  default_backend p${port}_tls`,
    '',
    `backend p${port}_tls`,
    '  mode tcp',
    `  server tls unix@${s.worker ? `/${path.basename(f.tlsSocket(port))}` : f.tlsSocket(port)} send-proxy-v2`,
    '',
  ];
}

function backend(s: PlaneState, port: number, tls: boolean, slot: Slot): string[] {
  const http = slot.flavor !== 'tcp';
  const out = [`backend ${slot.name}`, `  mode ${http ? 'http' : 'tcp'}`, '  balance roundrobin'];
  if (slot.flavor === 'redirect') {
    out.push(
      // to port 443 by name, lower case, the port stripped (as a browser would type it); path and query kept
      '  http-request redirect location https://%[req.hdr(host),field(1,:),lower]%[capture.req.uri] code 301 if METH_GET or METH_HEAD',
      '  http-request redirect location https://%[req.hdr(host),field(1,:),lower]%[capture.req.uri] code 308',
      '',
    );
    return out;
  }
  if (http) {
    out.push(
      '  http-reuse safe',
      // a connection refused or failed goes to another instance, whatever the method: nothing was sent
      // (`retries` in defaults). No L7 retries (`retry-on empty-response`): they copy every request into a
      // buffer to replay it (a seventh of the request rate); a request that reached an instance and got no
      // answer is a 502.
      '  option redispatch 1',
      // the gateway is the edge: what the client sent is replaced. On a plain port a request without Host
      // was not routed here; on a TLS port (routed by SNI) an HTTP/1.0 one may come without it
      '  http-request set-header x-forwarded-for %[src]',
      `  http-request set-header x-forwarded-proto ${tls ? 'https' : 'http'}`,
      tls
        ? '  http-request set-header x-forwarded-host %[req.hdr(host)] if { req.hdr(host) -m found }'
        : '  http-request set-header x-forwarded-host %[req.hdr(host)]',
    );
  }
  const r = slot.route;
  out.push(...hardLimit(r, http));
  const wake = s.wakePorts.get(slot.name);
  if (!http && wake) out.push(`  server uh_wake 127.0.0.1:${wake} backup`);
  // used only while no instance is usable (none, or all draining): the activator wakes or explains
  if (http) out.push(`  server ${ACTIVATOR_SERVER} 127.0.0.1:${s.activatorPorts.get(port)!.backup} backup`);
  for (const b of r ? s.backends(r.groupId) : []) {
    if (b.state === 'other') continue;
    out.push(
      // drains are runtime state (`set server state drain`), set again after every load
      `  server ${serverName(b.instanceId)} ${b.host}:${r!.destinationPort}${serverOptions(r)}`,
    );
  }
  out.push('');
  return out;
}

/**
 * A server's options from its group's limits: `maxconn` is the soft limit
 * (the hard one when there is no soft one). HAProxy queues what an instance
 * cannot take now in the backend's queue, served in order as slots free up.
 */
export function serverOptions(r: Route | undefined): string {
  const max = r?.limits?.soft ?? r?.limits?.hard ?? null;
  return max === null ? '' : ` maxconn ${max}`;
}

/**
 * The hard limit: a request (HTTP) or connection (TCP) that would make the
 * backend hold more than `hard` per usable instance, in service and queued
 * (`be_conn` counts both, this one included), is refused at once.
 */
function hardLimit(r: Route | undefined, http: boolean): string[] {
  const hard = r?.limits?.hard ?? null;
  if (hard === null) return [];
  const rule = http ? 'http-request' : 'tcp-request content';
  // with no usable instance the request goes to the backup (the activator), not refused
  const full = '{ nbsrv gt 0 } { be_conn,sub(txn.uh_cap) gt 0 }';
  return [
    `  ${rule} set-var(txn.uh_cap) nbsrv,mul(${hard})`,
    http
      ? `  http-request return status 503 content-type "text/plain; charset=utf-8" hdr retry-after 1 string "unihost: this service is at its hard limit (${hard} requests per instance); try again shortly." if ${full}`
      : `  tcp-request content reject if ${full}`,
  ];
}

function activator(s: PlaneState, port: number): string[] {
  return [
    `backend ${activatorName(port)}`,
    '  mode http',
    '  http-request set-header x-forwarded-for %[src]',
    `  server activator 127.0.0.1:${s.activatorPorts.get(port)!.fallback}`,
    '',
  ];
}

/** The whole configuration. Deterministic for one state, so rendering twice changes nothing. */
export function renderConfig(s: PlaneState, f: PlaneFiles): string {
  const out = globalSection(s, f);
  if (s.acme.names.length > 0)
    out.push('backend uh_acme_tls', '  mode tcp', `  server acme 127.0.0.1:${s.acme.port}`, '');
  out.push(`backend ${ACME_RATE}`, '  stick-table type ip size 100k expire 1m store http_req_rate(10s)', '');
  for (const [port, { bound, routes, slots }] of [...s.ports].sort((a, b) => a[0] - b[0])) {
    out.push(...frontend(s, f, port, bound, routes), ...activator(s, port));
    if (frontendMode(routes) === 'http') out.push(...unknown(port));
    for (const slot of slots) out.push(...backend(s, port, isTls(routes), slot));
  }
  return `${out.join('\n')}\n`;
}

export function renderMap(entries: Map<string, string>): string {
  return [...entries].map(([k, v]) => `${k} ${v}\n`).join('');
}
