import { type Static, type TObject, type TSchema } from '@sinclair/typebox';
import type { FastifyBaseLogger as Logger } from 'fastify';
import type { UserRec } from '../store/types.js';
import type { Services } from '../services/index.js';
import type { Target } from '../domain/refs.js';

export type Method = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

/** Which object an entry targets (src/domain/refs.ts: services take it too, without importing the API). */
export type { Target };

/** What an endpoint's handler gets for one request (src/api/server.ts builds it). */
export interface HandlerCtx {
  user: UserRec;
  services: Services;
  log: Logger;
  /** the request's abort signal: set when the client went away */
  signal: AbortSignal;
  /** runs `fn` per entry, turning thrown errors into error entries */
  each(entries: Entry<unknown>[], fn: (e: Entry<unknown>) => Promise<Result>, concurrent?: boolean): Promise<Result[]>;
  /** the error entry for a failed target */
  entryError(e: Entry<unknown>, x: unknown): Result;
  /** expands `ids: [{uuid|name}]` parameters into one entry per target */
  expandIds(entries: Entry<Record<string, unknown>>[]): Entry<Record<string, unknown>>[];
}

export interface Entry<P> {
  /** present when the endpoint targets objects */
  target: Target | undefined;
  params: P;
  /** true when the path named the object (local scope) */
  local: boolean;
  /** the UUID in the path, in local scope */
  pathUuid?: string;
  /** true when the entry is one object of a target-less list (`list`), not a get by uuid/name */
  listed?: boolean;
}

/** A successful list already serialized as a JSON array (entries without `status`). */
export class RawArray {
  constructor(readonly json: string) {}
}

/** A per-entry result; `status: success` is added by the framework. */
export type Result = Record<string, unknown>;

/**
 * One API endpoint. Routes only parse and delegate: the framework validates
 * the body (single object or batch array) and query against `params`, resolves
 * the scope, and calls `handle` once per entry, or `handleAll` once.
 */
export interface EndpointDef<P extends TObject = TObject> {
  method: Method;
  /** global-scope path, e.g. `/v1/instances/start` */
  path: string;
  /** local-scope path, e.g. `/v1/instances/:uuid/start`, when the endpoint has one */
  localPath?: string;
  /** name of the result array in `data` */
  plural: string;
  /** `data.total_count` beside the array (the control plane's list form) */
  totalCount?: boolean;
  summary: string;
  /** `required`: each entry names one object by uuid or name; `none`: no target */
  target: 'required' | 'none';
  /** per-entry parameters other than the target */
  params: P;
  /** parameters only accepted in the query string (besides `uuid`/`name` lists) */
  query?: TObject;
  /** whether the body may be an array of entries */
  batch: boolean;
  /**
   * Parameter rules that need no store (combinations, enumerations). Runs on
   * every entry before any entry runs, so a bad entry aborts the whole batch
   * with 400; throw `err('UH_INVALID', ...)`.
   */
  check?: (params: Static<P>) => void;
  /** run entries concurrently (wait) instead of one after another */
  concurrent?: boolean;
  handle?: (ctx: HandlerCtx, entry: Entry<Static<P>>, query: Record<string, unknown>) => Promise<Result>;
  /**
   * Every object of the category, in creation order. When set, a GET without
   * target lists (newer clients): the framework adds the `count`, `from` and
   * `details` query parameters, pages, and runs `handle` on each object of
   * the page (with `listed` set).
   */
  list?: (ctx: HandlerCtx) => Promise<{ uuid: string }[]>;
  /** handles all entries at once and returns the `data` array (lists, wait) */
  handleAll?: (
    ctx: HandlerCtx,
    entries: Entry<Static<P>>[],
    query: Record<string, unknown>,
  ) => Promise<Result[] | RawArray>;
  /** response entry schema, for the OpenAPI document */
  response: TSchema;
}

export function endpoint<P extends TObject>(def: EndpointDef<P>): EndpointDef<P> {
  return def;
}
