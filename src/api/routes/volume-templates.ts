import { Type } from '@sinclair/typebox';
import { VolumeChanged, VolumeStatus } from '../schemas/volume-responses.js';
import { endpoint } from '../endpoint.js';
import { Name, Opt, Str, Uuid } from '../schemas/common.js';

const V = 'volumes';
/** A volume made by a clone, or made a template. */
const Created = Type.Object(
  { status: Type.Literal('success'), uuid: Uuid(), name: Str(), state: Str() },
  { additionalProperties: false },
);

/** Volume clones and templates (the newer API; docs/api.md, "Volumes"). */
export const volumeTemplateEndpoints = [
  endpoint({
    method: 'POST',
    path: '/v1/volumes/clone',
    localPath: '/v1/volumes/:uuid/clone',
    plural: V,
    summary:
      'Clone volumes: a new volume whose file system is a copy of this one (copy-on-write where the host file system allows). The source must not be in use by a running instance.',
    target: 'required',
    batch: true,
    params: Type.Object(
      {
        vol_name: Opt(Name('Name of the new volume (default vol-<random>).')),
        tags: Opt(Type.Array(Type.String({ maxLength: 128 }), { maxItems: 64 })),
        quota_policy: Opt(Type.Literal('static')),
        access_mode: Opt(
          Type.Literal('rwo', {
            description: 'rwo (the only mode: a volume is attached to one instance at a time).',
            errorMessage: "only 'rwo' is supported: a volume is attached to one instance at a time",
          }),
        ),
      },
      { additionalProperties: false },
    ),
    handle: async (ctx, e) => ctx.services.volumes.clone(ctx.user, e.target!, e.params),
    response: Created,
  }),
  endpoint({
    method: 'POST',
    path: '/v1/volumes/templates',
    plural: V,
    summary:
      'Make volumes templates: an available, unattached volume becomes read-only; volumes are created from it (POST /v1/volumes with template) or cloned.',
    target: 'required',
    batch: true,
    params: Type.Object({}),
    handle: async (ctx, e) => ctx.services.volumes.makeTemplate(ctx.user, e.target!),
    response: Created,
  }),
  endpoint({
    method: 'GET',
    path: '/v1/volumes/templates',
    localPath: '/v1/volumes/templates/:uuid',
    plural: V,
    summary: 'Template volumes; with no selection, all of them, paged by count/from.',
    target: 'required',
    batch: true,
    params: Type.Object({}),
    list: (ctx) => ctx.services.volumes.list(ctx.user, { templates: true }),
    handle: async (ctx, e, q) => ctx.services.volumes.getTemplate(ctx.user, e.target!, q.details !== false),
    response: VolumeStatus,
  }),
  endpoint({
    method: 'DELETE',
    path: '/v1/volumes/templates',
    localPath: '/v1/volumes/templates/:uuid',
    plural: V,
    summary: 'Delete template volumes (refused while delete_lock is set; volumes made from one keep their copy).',
    target: 'required',
    batch: true,
    params: Type.Object({}),
    handle: async (ctx, e) => {
      await ctx.services.volumes.getTemplate(ctx.user, e.target!, false);
      return ctx.services.volumes.delete(ctx.user, e.target!);
    },
    response: VolumeChanged,
  }),
];
