import { Type } from '@sinclair/typebox';
import { endpoint } from '../endpoint.js';
import { Bool, Int, Name, Opt, Ref, Str, Summary, Uuid } from '../schemas/common.js';
import type { VolumeState } from '../../store/types.js';
import { checkAttach, type AttachIn } from '../../services/volumes.js';

const V = 'volumes';
const VolumeStateSchema = Type.Union(
  ['uninitialized', 'initializing', 'available', 'idle', 'mounted', 'busy', 'error'].map((s) => Type.Literal(s)),
  { errorMessage: 'expected one of uninitialized, initializing, available, idle, mounted, busy, error' },
);

export const volumeEndpoints = [
  endpoint({
    method: 'POST',
    path: '/v1/volumes',
    plural: V,
    summary: 'Create volumes (ext4, initialized empty).',
    target: 'none',
    batch: true,
    params: Type.Object(
      { name: Opt(Name()), size_mb: Int('Size in MB.', { minimum: 1 }) },
      { additionalProperties: false },
    ),
    handle: async (ctx, e) => ctx.services.volumes.create(ctx.user, e.params),
    response: Summary,
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
    response: Summary,
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
    response: Summary,
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
    response: Summary,
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
    response: Summary,
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
    response: Type.Object({ uuid: Uuid(), name: Str() }),
  }),
];
