import { Type } from '@sinclair/typebox';
import { endpoint, type EndpointDef } from '../endpoint.js';
import { Bool, Int, Opt, Str } from '../schemas/common.js';

const Image = Type.Object(
  {
    status: Str(),
    digest: Str('Image digest (sha256 of the OCI manifest).'),
    tags: Type.Array(Str(), { description: 'Tags of the image the user can see.' }),
    initrd: Bool('Whether the image has an init ramdisk.'),
    size_in_bytes: Int('Kernel plus initrd size.'),
    args: Str('Default application arguments (shell-quoted words).'),
    kernel_args: Str('Kernel arguments of the image.'),
  },
  { additionalProperties: true },
);

const imagesList = {
  plural: 'images',
  target: 'none' as const,
  batch: false,
  params: Type.Object(
    {
      digest: Opt(Str('Filter by digest.')),
      tag: Opt(Str("Filter by tag: a bare tag ('v1') or a reference ('app:v1').")),
    },
    { additionalProperties: false },
  ),
  query: Type.Object(
    {
      namespace: Opt(Str("Account name, 'official', optionally '<account>/<app>'.")),
      tagged: Opt(Bool('Only tagged images.')),
    },
    { additionalProperties: false },
  ),
  response: Image,
  handleAll: (async (ctx, entries, q) =>
    (await ctx.services.images.list(ctx.user, { ...entries[0]!.params, ...q })).map((i) => ({
      status: 'success',
      ...i,
    }))) satisfies EndpointDef['handleAll'],
};

export const imageEndpoints = [
  endpoint({
    method: 'GET',
    path: '/v1/images/list',
    summary: 'List images visible to the user (official and own namespace).',
    ...imagesList,
  }),
  endpoint({ method: 'GET', path: '/v1/images', summary: 'Alias of /v1/images/list (newer clients).', ...imagesList }),
];
