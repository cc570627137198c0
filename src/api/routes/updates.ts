import { Type } from '@sinclair/typebox';
import { endpoint } from '../endpoint.js';
import { Str, UpdateParams, UpdateResult, Uuid } from '../schemas/common.js';
import type { UpdateIn } from '../../domain/updates.js';

/**
 * Updates in the newer API's form (`PATCH`, one property per entry: `prop`,
 * `op`, `value`; docs/api.md, "Updates"), and the instance history. Each
 * property the official SDK names is accepted by the schema; those the
 * platform does not offer are refused per entry with the reason.
 */
const INSTANCE_PROPS = [
  'image',
  'args',
  'env',
  'memory_mb',
  'vcpus',
  'scale_to_zero',
  'tags',
  'delete_lock',
  'schedules',
  'autokill',
  'hostname',
  'roms',
  'dependencies',
  'sched_priority',
  'plugins',
  'annotations',
] as const;
const GROUP_PROPS = ['services', 'domains', 'soft_limit', 'hard_limit', 'autokill'] as const;
const VOLUME_PROPS = ['size_mb', 'tags', 'quota_policy', 'delete_lock'] as const;
const TEMPLATE_PROPS = ['tags', 'delete_lock'] as const;

/** GET /v1/instances/history: the instance's events, oldest first. */
export const InstanceHistory = Type.Object(
  {
    status: Str(),
    uuid: Uuid(),
    name: Str(),
    history: Type.Array(
      Type.Object(
        {
          uuid: Uuid(),
          name: Str(),
          created_at: Str(),
          event_id: Type.Integer(),
          event: Str('created, state, deleted or notice'),
          message: Type.Optional(Str('what happened, in words (notice events)')),
          from_state: Type.Optional(Str()),
          to_state: Type.Optional(Str()),
          stop_reason: Type.Optional(Type.Integer()),
          exit_code: Type.Optional(Type.Integer()),
          stop_code: Type.Optional(Type.Integer()),
        },
        { additionalProperties: false },
      ),
    ),
  },
  { additionalProperties: false },
);

export const updateEndpoints = [
  endpoint({
    method: 'PATCH',
    path: '/v1/instances',
    localPath: '/v1/instances/:uuid',
    plural: 'instances',
    summary:
      'Update instances: one property per entry. What boots (image, args, env, memory_mb) changes only while stopped; tags, annotations, delete_lock, hostname and scale_to_zero in any state.',
    target: 'required',
    batch: true,
    params: UpdateParams(INSTANCE_PROPS),
    handle: async (ctx, e) => ctx.services.instances.update(ctx.user, e.target!, e.params as UpdateIn),
    response: UpdateResult,
  }),
  endpoint({
    method: 'PATCH',
    path: '/v1/services',
    localPath: '/v1/services/:uuid',
    plural: 'service_groups',
    summary: 'Update service groups: published ports (services), domains, soft_limit and hard_limit per instance.',
    target: 'required',
    batch: true,
    params: UpdateParams(GROUP_PROPS),
    handle: async (ctx, e) => ctx.services.groups.update(ctx.user, e.target!, e.params as UpdateIn),
    response: UpdateResult,
  }),
  endpoint({
    method: 'PATCH',
    path: '/v1/volumes',
    localPath: '/v1/volumes/:uuid',
    plural: 'volumes',
    summary:
      'Update volumes: size_mb (grow or shrink the ext4 file system, offline), tags, delete_lock, quota_policy (static).',
    target: 'required',
    batch: true,
    params: UpdateParams(VOLUME_PROPS),
    handle: async (ctx, e) => ctx.services.volumes.update(ctx.user, e.target!, e.params as UpdateIn),
    response: UpdateResult,
  }),
  endpoint({
    method: 'PATCH',
    path: '/v1/volumes/templates',
    localPath: '/v1/volumes/templates/:uuid',
    plural: 'volumes',
    summary: 'Update template volumes: tags, delete_lock.',
    target: 'required',
    batch: true,
    params: UpdateParams(TEMPLATE_PROPS),
    handle: async (ctx, e) => ctx.services.volumes.update(ctx.user, e.target!, e.params as UpdateIn, true),
    response: UpdateResult,
  }),
  endpoint({
    method: 'GET',
    path: '/v1/instances/history',
    localPath: '/v1/instances/:uuid/history',
    plural: 'instances',
    summary:
      'Instance history from the durable event log: created, every state change (with the stop fields of a stop), oldest first.',
    target: 'required',
    batch: true,
    params: Type.Object({}),
    handle: async (ctx, e) => ctx.services.instances.history(ctx.user, e.target!),
    response: InstanceHistory,
  }),
];
