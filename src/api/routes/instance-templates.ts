import { Type } from '@sinclair/typebox';
import { endpoint } from '../endpoint.js';
import { Opt, Summary, TimeoutS, UpdateParams, UpdateResult } from '../schemas/common.js';
import type { UpdateIn } from '../../domain/updates.js';
import { err } from '../../errors.js';
import { timeoutOf } from './instances.js';

const P = 'instances';
/** What a template's PATCH names (the SDK's MutableTemplateInstanceProperty; autokill is refused with why). */
const TEMPLATE_PROPS = ['tags', 'delete_lock', 'autokill', 'annotations'] as const;

/** Instance templates (docs/snapshots.md, "Templates"): the SDK's /v1/instances/templates calls. */
export const instanceTemplateEndpoints = [
  endpoint({
    method: 'POST',
    path: '/v1/instances/templates',
    plural: P,
    summary:
      'Make instances templates: a running instance is paused, its memory kept in a snapshot and its VM ended; a suspended one becomes a template at once. Instances created with `template` start from that memory (no boot), each with its own name, private IP and MAC.',
    target: 'required',
    batch: true,
    params: Type.Object(
      {
        timeout_s: TimeoutS('the wait'),
        autokill: Opt(Type.Object({}, { additionalProperties: true, description: 'Refused when it sets a time.' })),
      },
      { additionalProperties: false },
    ),
    check: (p) => {
      const ak = p.autokill as { time_ms?: number } | undefined;
      if ((ak?.time_ms ?? 0) > 0)
        throw err('UH_INVALID', "parameter 'autokill': templates are not deleted after a time unused here");
    },
    handle: async (ctx, e) =>
      ctx.services.instances.makeTemplate(ctx.user, e.target!, timeoutOf(e.params, 'timeout_ms'), ctx.signal),
    response: Summary,
  }),
  endpoint({
    method: 'GET',
    path: '/v1/instances/templates',
    localPath: '/v1/instances/templates/:uuid',
    plural: P,
    summary: 'Template instances; with no selection, all of them, paged by count/from.',
    target: 'required',
    batch: true,
    params: Type.Object({}),
    list: (ctx) => ctx.services.instances.list(ctx.user, 'template'),
    handle: async (ctx, e, q) => ctx.services.instances.getTemplate(ctx.user, e.target!, q.details !== false),
    response: Summary,
  }),
  endpoint({
    method: 'PATCH',
    path: '/v1/instances/templates',
    localPath: '/v1/instances/templates/:uuid',
    plural: P,
    summary: 'Update templates: tags, annotations and delete_lock.',
    target: 'required',
    batch: true,
    params: UpdateParams(TEMPLATE_PROPS),
    handle: async (ctx, e) => ctx.services.instances.updateTemplate(ctx.user, e.target!, e.params as UpdateIn),
    response: UpdateResult,
  }),
  endpoint({
    method: 'DELETE',
    path: '/v1/instances/templates',
    localPath: '/v1/instances/templates/:uuid',
    plural: P,
    summary:
      'Delete templates (refused while delete_lock is set). Instances made from one keep running; one not started yet boots afresh.',
    target: 'required',
    batch: true,
    params: Type.Object({}),
    handle: async (ctx, e) => ctx.services.instances.deleteTemplate(ctx.user, e.target!),
    response: Summary,
  }),
];
