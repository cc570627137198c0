import { Type } from '@sinclair/typebox';
import { endpoint } from '../endpoint.js';
import { Opt, Str, Uuid } from '../schemas/common.js';

const C = 'certificates';
const Summary = Type.Object({ status: Str(), uuid: Uuid(), name: Str() }, { additionalProperties: true });

export const certificateEndpoints = [
  endpoint({
    method: 'GET',
    path: '/v1/certificates',
    localPath: '/v1/certificates/:uuid',
    plural: C,
    summary: 'Certificate status. Without a target, lists every certificate, paged by count/from.',
    target: 'required',
    batch: true,
    params: Type.Object({}),
    list: (ctx) => ctx.services.certificates.list(ctx.user),
    handle: async (ctx, e, q) => {
      const c = await ctx.services.certificates.get(ctx.user, e.target!);
      return q.details === false ? { uuid: c.uuid, name: c.name, state: c.state } : c;
    },
    response: Summary,
  }),
  endpoint({
    method: 'DELETE',
    path: '/v1/certificates',
    localPath: '/v1/certificates/:uuid',
    plural: C,
    summary: 'Delete certificates (refused while a service group uses it).',
    target: 'required',
    batch: true,
    params: Type.Object({}),
    handle: async (ctx, e) => ctx.services.certificates.delete(ctx.user, e.target!),
    response: Summary,
  }),
  endpoint({
    method: 'GET',
    path: '/v1/certificates/list',
    plural: C,
    summary: 'List certificates.',
    target: 'none',
    batch: false,
    params: Type.Object({ common_name: Opt(Str('Filter by common name.')) }, { additionalProperties: false }),
    handleAll: async (ctx, entries) => ctx.services.certificates.list(ctx.user, entries[0]!.params.common_name),
    response: Type.Object({ uuid: Uuid(), name: Str() }),
  }),
];
