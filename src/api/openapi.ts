import { Type, type TSchema } from '@sinclair/typebox';
import type { EndpointDef } from './endpoint.js';
import { compile } from './request.js';
import { ERROR_CODES } from '../errors.js';
import { EventsQuery, InstanceEvent } from './schemas/event-responses.js';

const strip = (s: TSchema): unknown => JSON.parse(JSON.stringify(s));
const SCOPE_KEYS = new Set(['uuid', 'name']);
const isScalar = (s: TSchema): boolean => ['string', 'integer', 'number', 'boolean'].includes(s.type as string);

/** A failed entry of a batch: beside the successful ones in `data.<plural>`. */
const ErrorEntry = Type.Object(
  {
    status: Type.Literal('error'),
    uuid: Type.Optional(Type.String({ format: 'uuid' })),
    name: Type.Optional(Type.String()),
    message: Type.String(),
    error: Type.Integer({ description: 'The API error code.' }),
  },
  { additionalProperties: false },
);

const ErrorBody = Type.Object({
  status: Type.Literal('error'),
  message: Type.String(),
  errors: Type.Array(Type.Object({ status: Type.Integer(), message: Type.String(), error: Type.Integer() })),
  op_time_us: Type.Integer(),
});

/**
 * Generates the OpenAPI 3.1 document from the endpoint table: the same
 * schemas that validate requests describe them here.
 */
export function buildOpenApi(endpoints: EndpointDef[]): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const def of endpoints) {
    const c = compile(def);
    const entry = strip(c.entrySchema);
    const body = def.batch ? { oneOf: [entry, { type: 'array', items: entry }] } : entry;
    const queryParams = Object.entries(c.query?.properties ?? {}).map(([name, s]) => ({
      name,
      in: 'query',
      required: false,
      schema: strip(s),
    }));
    // A GET's scalar body parameters may come in the query too (src/api/request.ts): browsers cannot send a GET body.
    const getParams = (local: boolean) =>
      def.method !== 'GET'
        ? []
        : Object.entries(def.params.properties as Record<string, TSchema>)
            .filter(([name, s]) => !c.query?.properties[name] && isScalar(s) && !(local && SCOPE_KEYS.has(name)))
            .map(([name, s]) => ({ name, in: 'query', required: false, schema: strip(s) }));
    for (const url of [def.path, def.localPath].filter((u): u is string => u !== undefined)) {
      const oaPath = url.replace(/:([a-z_]+)/g, '{$1}');
      const pathParams = [...url.matchAll(/:([a-z_]+)/g)].map((m) => ({
        name: m[1],
        in: 'path',
        required: true,
        schema: m[1] === 'uuid' ? { type: 'string', format: 'uuid' } : { type: 'string' },
      }));
      const local = url.includes(':uuid');
      (paths[oaPath] ??= {})[def.method.toLowerCase()] = {
        summary: def.summary,
        operationId: `${def.method.toLowerCase()}${oaPath.replace(/[^a-zA-Z]+(.)?/g, (_m, ch: string | undefined) => (ch ?? '').toUpperCase())}`,
        parameters: [...pathParams, ...queryParams, ...getParams(local)],
        requestBody: {
          required: false,
          description: local ? 'Parameters; uuid and name are not allowed in local scope.' : 'Parameters.',
          content: { 'application/json': { schema: local ? strip(Type.Object(def.params.properties)) : body } },
        },
        responses: {
          '200': {
            description: 'Success, partial success, or per-entry errors.',
            content: {
              'application/json': {
                schema: {
                  type: 'object',
                  properties: {
                    status: { enum: ['success', 'partial_success', 'error'] },
                    message: { type: 'string' },
                    data: {
                      type: 'object',
                      properties: {
                        [def.plural]: { type: 'array', items: { anyOf: [strip(def.response), strip(ErrorEntry)] } },
                        ...(def.totalCount ? { total_count: { type: 'integer' } } : {}),
                      },
                    },
                    op_time_us: { type: 'integer' },
                  },
                },
              },
            },
          },
          default: {
            description: 'Whole-request error.',
            content: { 'application/json': { schema: strip(ErrorBody) } },
          },
        },
      };
    }
  }
  paths['/v1/events'] = {
    get: {
      summary:
        'The user\'s instance events as server-sent events (text/event-stream): the backlog after the resume point, then live ones; each event\'s `data` is an InstanceEvent (docs/api.md, "Events").',
      operationId: 'getV1Events',
      parameters: [
        ...Object.entries(EventsQuery).map(([name, schema]) => ({
          name,
          in: 'query',
          required: false,
          schema: strip(schema),
        })),
        { name: 'Last-Event-ID', in: 'header', required: false, schema: { type: 'string' } },
      ],
      responses: {
        '200': {
          description: 'An event stream: `id: <id>`, `event: <type>`, `data: <InstanceEvent JSON>` per event.',
          content: { 'text/event-stream': { schema: strip(InstanceEvent) } },
        },
        default: {
          description: 'Whole-request error (before the stream starts).',
          content: { 'application/json': { schema: strip(ErrorBody) } },
        },
      },
    },
  };
  return {
    openapi: '3.1.0',
    info: {
      title: 'unihost API',
      version: '1',
      description: 'Self-hosted implementation of the unikernel hosting REST API v1.',
    },
    components: {
      securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } },
      'x-error-codes': Object.fromEntries(Object.entries(ERROR_CODES).map(([k, v]) => [k, v])),
    },
    security: [{ bearer: [] }],
    paths,
  };
}
