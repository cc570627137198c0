import { Type } from '@sinclair/typebox';
import { endpoint, type EndpointDef } from '../endpoint.js';
import { Bool, Int, Opt, Str } from '../schemas/common.js';

/** GET /v1/images/list entry. */
export const Image = Type.Object(
  {
    // absent in the list form (GET /v1/images/list answers the list itself)
    status: Opt(Type.Literal('success')),
    digest: Str('Image digest (sha256 of the OCI manifest).'),
    tags: Type.Array(Str(), { description: 'Tags of the image the user can see.' }),
    initrd: Bool('Whether the image has an init ramdisk.'),
    size_in_bytes: Int('Kernel plus initrd size.'),
    args: Str('Default application arguments (shell-quoted words).'),
    kernel_args: Str('Kernel arguments of the image.'),
  },
  { additionalProperties: false },
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

/** An image as the newer API's image store shows it (the SDK's `Image` model). */
const StoredImage = Type.Object(
  {
    url: Str('A reference that names exactly this image: a visible tag with the digest, or the digest.'),
    created_at: Str('When the image was imported or pushed.'),
    initrd_or_rom: Bool('Whether the image has an init ramdisk.'),
    size_in_bytes: Int('Kernel plus initrd size.'),
    args: Type.Array(Str(), { description: 'Default application arguments.' }),
    env: Type.Record(Type.String(), Type.String(), {
      description: 'Environment the image sets (none: images set none).',
    }),
    tags: Type.Array(Str(), { description: 'Tags of the image the user can see.' }),
  },
  { additionalProperties: false },
);

export const imageStoreEndpoints = [
  endpoint({
    method: 'GET',
    path: '/v1/image-store',
    plural: 'images',
    summary: 'The images stored on the platform that the user can boot (official and own namespace).',
    target: 'none',
    batch: false,
    params: Type.Object({}, { additionalProperties: false }),
    query: Type.Object(
      {
        digest: Opt(Str('Only the image with this digest.')),
        tag: Opt(Str("Only images with this tag: a bare tag ('v1') or a reference ('app:v1').")),
      },
      { additionalProperties: false },
    ),
    handleAll: async (ctx, _e, q) => ctx.services.images.store(ctx.user, q as { digest?: string; tag?: string }),
    response: StoredImage,
  }),
];
