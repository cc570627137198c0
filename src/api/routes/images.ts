import { Type } from '@sinclair/typebox';
import { endpoint } from '../endpoint.js';
import { Bool, Opt, Str } from '../schemas/common.js';

const imagesList = {
  plural: 'images',
  summary: 'List images visible to the user (official and own namespace).',
  target: 'none' as const,
  batch: false,
  params: Type.Object(
    { digest: Opt(Str('Filter by digest.')), tag: Opt(Str('Filter by tag (full reference or tag part).')) },
    { additionalProperties: false },
  ),
  query: Type.Object(
    {
      namespace: Opt(Str("Account name, 'official', optionally '<account>/<app>'.")),
      tagged: Opt(Bool('Only tagged images.')),
    },
    { additionalProperties: false },
  ),
  response: Type.Object({ digest: Str(), tags: Type.Array(Str()) }, { additionalProperties: true }),
};

export const imageEndpoints = [
  endpoint({
    method: 'GET',
    path: '/v1/images/list',
    ...imagesList,
    handleAll: async (ctx, entries, q) =>
      (await ctx.services.images.list(ctx.user, { ...entries[0]!.params, ...q })).map((i) => ({ status: 'success', ...i })),
  }),
  endpoint({
    method: 'GET',
    path: '/v1/images',
    ...imagesList,
    summary: 'Alias of /v1/images/list (newer clients).',
    handleAll: async (ctx, entries, q) =>
      (await ctx.services.images.list(ctx.user, { ...entries[0]!.params, ...q })).map((i) => ({ status: 'success', ...i })),
  }),
];
