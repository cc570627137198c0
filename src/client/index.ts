import { resolveConnection, type Connection, type ConnectionFlags } from './config.js';
import { streamEvents, type EventsOptions } from './events.js';
import { call, type CallOptions, type Method } from './http.js';
import type * as T from './types.js';

export * from './errors.js';
export type { EventsOptions } from './events.js';
export type * from './types.js';
export { baseUrlOf, resolveConnection, type Connection } from './config.js';

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** A target from a command-line word: a UUID names by uuid, anything else by name. */
export function ref(s: string): T.Ref {
  return UUID_RE.test(s) ? { uuid: s } : { name: s };
}

type Json = Record<string, unknown>;
type Opts = { signal?: AbortSignal };

/**
 * The typed client of the unihost API v1, used by the CLI and tests. Each
 * method sends one request; batch methods take several targets and return
 * one entry per target. Failures throw ApiError (HTTP status, API message,
 * per-entry codes) or ConnectionError.
 */
export class UnihostClient {
  constructor(readonly conn: Connection) {}

  /** A client configured from flags, environment and the profile file. */
  static from(flags: ConnectionFlags = {}, env: NodeJS.ProcessEnv = process.env): UnihostClient {
    return new UnihostClient(resolveConnection(flags, env));
  }

  private async send<R>(method: Method, path: string, plural: string, o?: CallOptions): Promise<R[]> {
    return (await call(this.conn, method, path, plural, o)) as unknown as R[];
  }

  private async one<R>(method: Method, path: string, plural: string, o?: CallOptions): Promise<R> {
    return (await this.send<R>(method, path, plural, o))[0]!;
  }

  /** GET targets go in the query string (`uuid=a&uuid=b` or `name=...`), as newer clients send them. */
  private static targets(refs: T.Ref[]): Json {
    if (refs.every((r) => r.uuid !== undefined)) return { uuid: refs.map((r) => r.uuid) };
    if (refs.every((r) => r.name !== undefined)) return { name: refs.map((r) => r.name) };
    throw new TypeError('mix uuids and names in separate calls');
  }

  readonly instances = {
    create: (p: T.CreateParams, o: Opts = {}) =>
      this.send<T.CreatedInstance>('POST', '/v1/instances', 'instances', {
        body: p as unknown as Json,
        signal: o.signal,
        replyTimeoutMs: (p.wait_timeout_ms ?? 0) + 300_000,
      }),
    list: () => this.send<T.Summary>('GET', '/v1/instances/list', 'instances'),
    /** every instance with its details (GET /v1/instances without a target) */
    listDetailed: () => this.send<T.Instance>('GET', '/v1/instances', 'instances'),
    get: (refs: T.Ref[]) =>
      this.send<T.Instance>('GET', '/v1/instances', 'instances', { query: UnihostClient.targets(refs) }),
    start: (refs: T.Ref[], waitMs?: number, o: Opts = {}) =>
      this.send<T.StartResult>('PUT', '/v1/instances/start', 'instances', {
        body: refs.map((r) => ({ ...r, ...(waitMs !== undefined ? { wait_timeout_ms: waitMs } : {}) })),
        signal: o.signal,
        replyTimeoutMs: (waitMs ?? 0) + 300_000,
      }),
    stop: (refs: T.Ref[], p: { force?: boolean; drain_timeout_ms?: number } = {}) =>
      this.send<T.StopResult>('PUT', '/v1/instances/stop', 'instances', { body: refs.map((r) => ({ ...r, ...p })) }),
    suspend: (refs: T.Ref[], p: { drain_timeout_ms?: number } = {}) =>
      this.send<T.StopResult>('PUT', '/v1/instances/suspend', 'instances', {
        body: refs.map((r) => ({ ...r, ...p })),
      }),
    delete: (refs: T.Ref[]) => this.send<T.InstanceDeleted>('DELETE', '/v1/instances', 'instances', { body: refs }),
    /** makes instances templates (docs/snapshots.md); with `timeoutS`, waits until they are */
    makeTemplates: (refs: T.Ref[], timeoutS?: number) =>
      this.send<T.StopResult>('POST', '/v1/instances/templates', 'instances', {
        body: refs.map((r) => ({ ...r, ...(timeoutS !== undefined ? { timeout_s: timeoutS } : {}) })),
        replyTimeoutMs: (timeoutS ?? 0) * 1000 + 300_000,
      }),
    templates: () => this.send<T.Instance>('GET', '/v1/instances/templates', 'instances'),
    /** a checkpoint of a running instance (docs/snapshots.md); with `timeoutS`, waits until it is written */
    checkpoint: (from: T.Ref, p: { name?: string; timeoutS?: number } = {}) =>
      this.send<T.Summary>('POST', '/v1/instances/checkpoints', 'instances', {
        body: [
          {
            from,
            ...(p.name !== undefined ? { name: p.name } : {}),
            ...(p.timeoutS !== undefined ? { timeout_s: p.timeoutS } : {}),
          },
        ] as Json[],
        replyTimeoutMs: (p.timeoutS ?? 0) * 1000 + 300_000,
      }),
    wait: (refs: T.Ref[], state: T.InstanceState, timeoutMs: number, o: Opts = {}) =>
      this.send<T.WaitResult>('GET', '/v1/instances/wait', 'instances', {
        query: { ...UnihostClient.targets(refs), state, timeout_ms: timeoutMs },
        signal: o.signal,
        replyTimeoutMs: (timeoutMs < 0 ? 24 * 3600_000 : timeoutMs) + 60_000,
      }),
    /** PATCH: one property (`prop`, `op`, `value`); the answer's message says what changed */
    update: (r: T.Ref, u: T.UpdateIn) =>
      this.one<T.UpdateResult>('PATCH', '/v1/instances', 'instances', { body: [{ ...r, ...u }] as Json[] }),
    history: (r: T.Ref) =>
      this.one<T.History>('GET', '/v1/instances/history', 'instances', { query: UnihostClient.targets([r]) }),
    log: (r: T.Ref, offset: number, limit = 4096, o: Opts = {}) =>
      this.one<T.LogChunk>('GET', '/v1/instances/log', 'instances', {
        query: { ...r, offset, limit },
        signal: o.signal,
      }),
  };

  readonly services = {
    create: (d: T.GroupDescription) =>
      this.one<T.GroupSummary>('POST', '/v1/services', 'service_groups', { body: d as Json }),
    list: () => this.send<T.Summary>('GET', '/v1/services/list', 'service_groups'),
    get: (refs: T.Ref[]) =>
      this.send<T.ServiceGroup>('GET', '/v1/services', 'service_groups', { query: UnihostClient.targets(refs) }),
    delete: (refs: T.Ref[]) => this.send<T.Summary>('DELETE', '/v1/services', 'service_groups', { body: refs }),
    update: (r: T.Ref, u: T.UpdateIn) =>
      this.one<T.UpdateResult>('PATCH', '/v1/services', 'service_groups', { body: [{ ...r, ...u }] as Json[] }),
  };

  readonly volumes = {
    create: (p: { name?: string; size_mb: number }) =>
      this.one<T.Summary>('POST', '/v1/volumes', 'volumes', { body: p }),
    list: () => this.send<T.Summary>('GET', '/v1/volumes/list', 'volumes'),
    get: (refs: T.Ref[]) =>
      this.send<T.Volume>('GET', '/v1/volumes', 'volumes', { query: UnihostClient.targets(refs) }),
    attach: (r: T.Ref, p: T.AttachIn) =>
      this.one<T.Summary>('PUT', '/v1/volumes/attach', 'volumes', { body: [{ ...r, ...p }] }),
    detach: (r: T.Ref) => this.one<T.Summary>('PUT', '/v1/volumes/detach', 'volumes', { body: [r] }),
    delete: (refs: T.Ref[]) => this.send<T.Summary>('DELETE', '/v1/volumes', 'volumes', { body: refs }),
    update: (r: T.Ref, u: T.UpdateIn) =>
      this.one<T.UpdateResult>('PATCH', '/v1/volumes', 'volumes', { body: [{ ...r, ...u }] as Json[] }),
    /** a copy of the volume; `vol_name` names the copy (`name` would name the source) */
    clone: (r: T.Ref, p: { vol_name?: string } = {}) =>
      this.one<T.Summary>('POST', '/v1/volumes/clone', 'volumes', { body: [{ ...r, ...p }] as Json[] }),
  };

  /** Autoscale of a service group. Policy calls need the group's UUID (local scope only). */
  readonly autoscale = {
    create: (group: T.Ref, p: T.AutoscaleIn) =>
      this.one<T.Summary>('POST', '/v1/services/autoscale', 'service_groups', { body: [{ ...group, ...p }] as Json[] }),
    get: (group: T.Ref) =>
      this.one<T.Autoscale>('GET', '/v1/services/autoscale', 'service_groups', { query: { ...group } }),
    delete: (group: T.Ref) =>
      this.one<T.Summary>('DELETE', '/v1/services/autoscale', 'service_groups', { body: [group] }),
    addPolicy: (groupUuid: string, p: T.PolicyIn) =>
      this.one<T.Summary>('POST', `/v1/services/${encodeURIComponent(groupUuid)}/autoscale/policies`, 'policies', {
        body: p as unknown as Json,
      }),
    policies: (groupUuid: string) =>
      this.send<T.Policy>('GET', `/v1/services/${encodeURIComponent(groupUuid)}/autoscale/policies`, 'policies'),
    deletePolicy: (groupUuid: string, name: string) =>
      this.one<{ name: string }>(
        'DELETE',
        `/v1/services/${encodeURIComponent(groupUuid)}/autoscale/policies/${encodeURIComponent(name)}`,
        'policies',
      ),
  };

  readonly certificates = {
    list: () => this.send<T.Summary>('GET', '/v1/certificates/list', 'certificates'),
    get: (refs: T.Ref[]) =>
      this.send<T.Certificate>('GET', '/v1/certificates', 'certificates', { query: UnihostClient.targets(refs) }),
    delete: (refs: T.Ref[]) => this.send<T.Summary>('DELETE', '/v1/certificates', 'certificates', { body: refs }),
    /** PUT: a new chain and key for the certificate (served from the next handshake) */
    replace: (r: T.Ref, p: { chain: string; pkey: string }) =>
      this.one<T.Summary & { state: string }>('PUT', '/v1/certificates', 'certificates', { body: [{ ...r, ...p }] }),
  };

  readonly images = {
    list: (f: { namespace?: string; tag?: string; digest?: string } = {}) =>
      this.send<T.Image>('GET', '/v1/images/list', 'images', { query: f }),
  };

  /** The instance event stream (`GET /v1/events`), resumed by id after a dropped connection. */
  events(o: EventsOptions = {}): AsyncGenerator<T.InstanceEvent> {
    return streamEvents(this.conn, o);
  }

  quotas(): Promise<T.Quotas> {
    return this.one<T.Quotas>('GET', '/v1/users/quotas', 'quotas');
  }
}
