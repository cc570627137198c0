import { Type } from '@sinclair/typebox';
import { VolumeChanged, VolumeCreated, VolumeStatus } from '../schemas/volume-responses.js';
import { err } from '../../errors.js';
import { endpoint } from '../endpoint.js';
import { Bool, Int, Listed, Name, Opt, Ref, Str } from '../schemas/common.js';
import type { VolumeState } from '../../store/types.js';
import { checkAttach, type AttachIn } from '../../services/volumes.js';

/** Create parameters of the newer API that a volume here does not have, and why. */
const NOT_ON_CREATE: Record<string, string> = {
  host_path: "a volume is an ext4 image in the platform's data directory, never a path of the host",
  uid: 'the file system is created empty, owned by root; the guest sets owners',
  gid: 'the file system is created empty, owned by root; the guest sets owners',
  args: 'volumes take no driver arguments',
};

const V = 'volumes';
const VolumeStateSchema = Type.Union(
  ['uninitialized', 'initializing', 'available', 'idle', 'mounted', 'busy', 'error', 'template'].map((s) =>
    Type.Literal(s),
  ),
  { errorMessage: 'expected one of uninitialized, initializing, available, idle, mounted, busy, error, template' },
);

export const volumeEndpoints = [
  endpoint({
    method: 'POST',
    path: '/v1/volumes',
    plural: V,
    summary: 'Create volumes: ext4, initialized empty (size_mb), or a copy of a template volume (template).',
    target: 'none',
    batch: true,
    params: Type.Object(
      {
        name: Opt(Name()),
        size_mb: Opt(Int('Size in MB (required unless template is given).', { minimum: 1 })),
        template: Opt(Ref('template volume')),
        tags: Opt(Type.Array(Type.String({ maxLength: 128 }), { maxItems: 64 })),
        quota_policy: Opt(Type.Literal('static', { description: 'Volumes have a fixed size.' })),
        filesystem: Opt(
          Type.Literal('ext4', { description: 'ext4 (the only one).', errorMessage: "only 'ext4' is supported" }),
        ),
        access_mode: Opt(
          Type.Literal('rwo', {
            description: 'rwo (the only mode: a volume is attached to one instance at a time).',
            errorMessage: "only 'rwo' is supported: a volume is attached to one instance at a time",
          }),
        ),
        ...Object.fromEntries(
          Object.keys(NOT_ON_CREATE).map((k) => [
            k,
            Opt(Type.Unknown({ description: `Not supported: ${NOT_ON_CREATE[k]}.` })),
          ]),
        ),
      },
      { additionalProperties: false },
    ),
    check: (p) => {
      if (p.size_mb === undefined && p.template === undefined)
        throw err('UH_INVALID', "parameter 'size_mb' is required (or 'template', a template volume to copy)");
      for (const k of Object.keys(NOT_ON_CREATE))
        if ((p as Record<string, unknown>)[k] !== undefined)
          throw err('UH_NOT_SUPPORTED', `parameter '${k}': not supported on this platform (${NOT_ON_CREATE[k]})`);
    },
    handle: async (ctx, e) => ctx.services.volumes.create(ctx.user, e.params),
    response: VolumeCreated,
  }),
  endpoint({
    method: 'GET',
    path: '/v1/volumes',
    localPath: '/v1/volumes/:uuid',
    plural: V,
    summary: 'Volume status; with no selection, all volumes, paged by count/from.',
    target: 'required',
    batch: true,
    params: Type.Object({}),
    list: (ctx) => ctx.services.volumes.list(ctx.user, {}),
    // Listed volumes have no attached_to (as the API spec's list shows them).
    handle: async (ctx, e, q) => ctx.services.volumes.get(ctx.user, e.target!, q.details !== false, e.listed),
    response: VolumeStatus,
  }),
  endpoint({
    method: 'DELETE',
    path: '/v1/volumes',
    localPath: '/v1/volumes/:uuid',
    plural: V,
    summary: 'Delete volumes (refused while attached).',
    target: 'required',
    batch: true,
    params: Type.Object({}),
    handle: async (ctx, e) => ctx.services.volumes.delete(ctx.user, e.target!),
    response: VolumeChanged,
  }),
  endpoint({
    method: 'PUT',
    path: '/v1/volumes/attach',
    localPath: '/v1/volumes/:uuid/attach',
    plural: V,
    summary: 'Attach a volume to a stopped instance.',
    target: 'required',
    batch: true,
    params: Type.Object(
      {
        attach_to: Ref('instance'),
        at: Str('Mount path: absolute, no . or .. components, no colons.', { minLength: 1, maxLength: 1024 }),
        readonly: Opt(Bool('Default false.')),
      },
      { additionalProperties: false },
    ),
    check: (p) => checkAttach(p as AttachIn),
    handle: async (ctx, e) => ctx.services.volumes.attach(ctx.user, e.target!, e.params as AttachIn),
    response: VolumeChanged,
  }),
  endpoint({
    method: 'PUT',
    path: '/v1/volumes/detach',
    localPath: '/v1/volumes/:uuid/detach',
    plural: V,
    summary: 'Detach a volume from its stopped instance.',
    target: 'required',
    batch: true,
    params: Type.Object({}),
    handle: async (ctx, e) => ctx.services.volumes.detach(ctx.user, e.target!),
    response: VolumeChanged,
  }),
  endpoint({
    method: 'GET',
    path: '/v1/volumes/list',
    plural: V,
    summary: 'List volumes.',
    target: 'none',
    batch: false,
    params: Type.Object({ persistent: Opt(Bool()), state: Opt(VolumeStateSchema) }, { additionalProperties: false }),
    handleAll: async (ctx, entries) =>
      ctx.services.volumes.list(ctx.user, entries[0]!.params as { persistent?: boolean; state?: VolumeState }),
    response: Listed,
  }),
];
