import { Type } from '@sinclair/typebox';
import { endpoint } from '../endpoint.js';
import { Str, Uuid } from '../schemas/common.js';
import { err } from '../../errors.js';

export const userEndpoints = [
  endpoint({
    method: 'GET',
    path: '/v1/users/quotas',
    localPath: '/v1/users/:uuid/quotas',
    plural: 'quotas',
    summary: 'Quota usage and limits of the calling user.',
    target: 'none',
    batch: false,
    params: Type.Object({}, { additionalProperties: false }),
    handleAll: async (ctx, entries) => {
      const e = entries[0]!;
      if (e.local && e.pathUuid?.toLowerCase() !== ctx.user.id) {
        return [ctx.entryError(e, err('UH_NOT_FOUND', `No user with UUID '${e.pathUuid}'`))];
      }
      return [{ status: 'success', ...(await ctx.services.users.quotas(ctx.user)) }];
    },
    response: Type.Object({ status: Str(), uuid: Uuid() }, { additionalProperties: true }),
  }),
];
