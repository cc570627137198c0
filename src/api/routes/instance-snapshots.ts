import { Type } from '@sinclair/typebox';
import { endpoint } from '../endpoint.js';
import { Name, Opt, Ref, TimeoutS, UpdateParams, UpdateResult } from '../schemas/common.js';
import {
  CheckpointCreated,
  CheckpointHistory,
  InstanceDeleted,
  InstanceGet,
  InstanceStateChange,
} from '../schemas/instance-responses.js';
import type { UpdateIn } from '../../domain/updates.js';
import { err } from '../../errors.js';
import { timeoutOf } from './instances.js';

const P = 'instances';
/** What a template's PATCH names (the SDK's MutableTemplateInstanceProperty; autokill is refused with why). */
const TEMPLATE_PROPS = ['tags', 'delete_lock', 'autokill', 'annotations'] as const;

/** `autokill` with a time is refused: nothing deletes templates or checkpoints after a time unused. */
function noAutokill(p: { autokill?: unknown }, kind: string): void {
  if (((p.autokill as { time_ms?: number } | undefined)?.time_ms ?? 0) > 0)
    throw err('UH_INVALID', `parameter 'autokill': ${kind}s are not deleted after a time unused here`);
}

/**
 * GET (one, several, or all paged), PATCH (tags, annotations, delete_lock)
 * and DELETE of the kept memories of one kind: `/v1/instances/<kind>s`.
 */
function keptEndpoints(kind: 'template' | 'checkpoint', afterDelete: string) {
  const path = `/v1/instances/${kind}s`;
  const local = `${path}/:uuid`;
  return [
    endpoint({
      method: 'GET',
      path,
      localPath: local,
      plural: P,
      summary: `${kind[0]!.toUpperCase()}${kind.slice(1)}s; with no selection, all of them, paged by count/from.`,
      target: 'required',
      batch: true,
      params: Type.Object({}),
      list: (ctx) => ctx.services.instances.list(ctx.user, kind),
      handle: async (ctx, e, q) => ctx.services.instances.getKept(ctx.user, e.target!, kind, q.details !== false),
      response: InstanceGet,
    }),
    endpoint({
      method: 'PATCH',
      path,
      localPath: local,
      plural: P,
      summary: `Update ${kind}s: tags, annotations and delete_lock.`,
      target: 'required',
      batch: true,
      params: UpdateParams(TEMPLATE_PROPS),
      handle: async (ctx, e) => ctx.services.instances.updateKept(ctx.user, e.target!, kind, e.params as UpdateIn),
      response: UpdateResult,
    }),
    endpoint({
      method: 'DELETE',
      path,
      localPath: local,
      plural: P,
      summary: `Delete ${kind}s (refused while delete_lock is set). ${afterDelete}`,
      target: 'required',
      batch: true,
      params: Type.Object({}),
      handle: async (ctx, e) => ctx.services.instances.deleteKept(ctx.user, e.target!, kind),
      response: InstanceDeleted,
    }),
  ];
}

/** Instance templates and checkpoints (docs/snapshots.md): the SDK's /v1/instances/templates and /checkpoints calls. */
export const instanceSnapshotEndpoints = [
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
    check: (p) => noAutokill(p, 'template'),
    handle: async (ctx, e) =>
      ctx.services.instances.makeTemplate(ctx.user, e.target!, timeoutOf(e.params, 'timeout_ms'), ctx.signal),
    response: InstanceStateChange,
  }),
  ...keptEndpoints('template', 'Instances made from one keep running; one not started yet boots afresh.'),
  endpoint({
    method: 'POST',
    path: '/v1/instances/checkpoints',
    plural: P,
    summary:
      'Take checkpoints of running instances: each pauses for the time its memory is written, then runs on; the checkpoint (state checkpoint) keeps that memory, and instances created with `checkpoint` start from it (docs/snapshots.md).',
    target: 'none',
    batch: true,
    params: Type.Object(
      {
        from: Ref('instance'),
        name: Opt(Name('Name of the checkpoint (default <instance>-ckpt-<random>).')),
        tags: Opt(Type.Array(Type.String({ maxLength: 128 }), { maxItems: 64 })),
        timeout_s: TimeoutS('the wait'),
        autokill: Opt(Type.Object({}, { additionalProperties: true, description: 'Refused when it sets a time.' })),
      },
      { additionalProperties: false },
    ),
    check: (p) => noAutokill(p, 'checkpoint'),
    handle: async (ctx, e) =>
      ctx.services.instances.createCheckpoint(
        ctx.user,
        { from: e.params.from, name: e.params.name, tags: e.params.tags },
        timeoutOf(e.params, 'timeout_ms'),
        ctx.signal,
      ),
    response: CheckpointCreated,
  }),
  endpoint({
    method: 'GET',
    path: '/v1/instances/checkpoints/history',
    localPath: '/v1/instances/checkpoints/:uuid/history',
    plural: P,
    summary: 'The checkpoints kept of instances (by the instance), oldest first.',
    target: 'required',
    batch: true,
    params: Type.Object({}),
    handle: async (ctx, e) => ctx.services.instances.checkpointHistory(ctx.user, e.target!),
    response: CheckpointHistory,
  }),
  ...keptEndpoints('checkpoint', 'Instances started from one keep running.'),
];
