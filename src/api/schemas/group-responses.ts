import { Type, type TSchema } from '@sinclair/typebox';
import { Bool, Int, Opt, Str, Uuid } from './common.js';
import { GroupSummary } from './instance-responses.js';

/**
 * Response entries of the service group endpoints (closed: every field
 * named; test/api/responses.test.ts checks real answers against them).
 */

const closed = <T extends Record<string, TSchema>>(props: T, description: string) =>
  Type.Object(props, { additionalProperties: false, description });

/** GET /v1/services: the group (without details: uuid and name; in the list form without `status`). */
export const GroupStatus = closed(
  {
    status: Opt(Type.Literal('success')),
    uuid: Uuid(),
    name: Str(),
    created_at: Opt(Type.String({ format: 'date-time' })),
    persistent: Opt(Bool()),
    autoscale: Opt(Bool('Whether autoscale is enabled for the group.')),
    services: Opt(
      Type.Array(
        closed(
          { port: Int(), destination_port: Int(), handlers: Type.Array(Str()) },
          'A published port and where it goes.',
        ),
      ),
    ),
    soft_limit: Opt(Int()),
    hard_limit: Opt(Int()),
    domains: Opt(GroupSummary.properties.domains),
    instances: Opt(Type.Array(closed({ uuid: Uuid(), name: Str() }, 'An instance of the group.'))),
  },
  'A service group (GET /v1/services).',
);

/** POST /v1/services: the new group and its names. */
export const GroupCreated = closed(
  { status: Type.Literal('success'), uuid: Uuid(), name: Str(), domains: GroupSummary.properties.domains },
  'A created service group.',
);

/** DELETE /v1/services. */
export const GroupDeleted = closed(
  { status: Type.Literal('success'), uuid: Uuid(), name: Str() },
  'A deleted service group.',
);
