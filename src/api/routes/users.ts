import { Type } from '@sinclair/typebox';
import { endpoint } from '../endpoint.js';
import { Int, Uuid } from '../schemas/common.js';
import { err } from '../../errors.js';

const n = (d: string) => Int(d, { minimum: 0 });
/** The counted resources: hard quotas and what is used of them (docs/operations.md, quotas). */
const HardFields = Type.Object(
  {
    instances: n('Instances (any state).'),
    live_instances: n('Instances not stopped.'),
    live_memory_mb: n('Memory of the instances not stopped, MB.'),
    service_groups: n('Service groups.'),
    services: n('Published ports over all groups.'),
    volumes: n('Volumes.'),
    total_volume_mb: n('Size of all volumes, MB.'),
    registry_mb: n("Registry storage of the user's repositories, MiB rounded up."),
    domains: n('Domain names of the service groups.'),
    certificates: n('Certificates, uploaded and requested.'),
    snapshot_mb: n('Memory snapshots kept, MiB rounded up.'),
  },
  { additionalProperties: false },
);

/** GET /v1/users/quotas. */
export const Quotas = Type.Object(
  {
    status: Type.Literal('success'),
    uuid: Uuid('The user.'),
    used: HardFields,
    hard: HardFields,
    limits: Type.Object(
      {
        min_memory_mb: n('Smallest instance memory, MB.'),
        max_memory_mb: n('Largest instance memory, MB.'),
        min_volume_mb: n('Smallest volume, MB.'),
        max_volume_mb: n('Largest volume, MB.'),
        min_autoscale_size: n('Smallest autoscale min_size.'),
        max_autoscale_size: n('Largest autoscale max_size.'),
      },
      { additionalProperties: false },
    ),
  },
  { additionalProperties: false, description: 'Usage, hard quotas and limits of the calling user.' },
);

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
    response: Quotas,
  }),
];
