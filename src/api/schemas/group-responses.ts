import { Type } from '@sinclair/typebox';
import { Bool, Int, Opt, Str, Uuid, closed } from './common.js';
import { GroupSummary } from './instance-responses.js';

/**
 * Response entries of the service group endpoints (closed: every field
 * named; test/api/responses.test.ts checks real answers against them).
 */

/** GET /v1/services: the group. */
export const GroupStatus = closed(
  {
    // absent in the list form (GET without a target)
    status: Opt(Type.Literal('success')),
    uuid: Uuid(),
    name: Str(),
    created_at: Type.String({ format: 'date-time' }),
    persistent: Bool(),
    autoscale: Bool('Whether autoscale is enabled for the group.'),
    services: Type.Array(
      closed(
        { port: Int(), destination_port: Int(), handlers: Type.Array(Str()) },
        'A published port and where it goes.',
      ),
    ),
    soft_limit: Opt(Int()),
    hard_limit: Opt(Int()),
    domains: GroupSummary.properties.domains,
    instances: Type.Array(closed({ uuid: Uuid(), name: Str() }, 'An instance of the group.')),
    traffic: Opt(
      closed(
        {
          requests: Int('HTTP requests, or connections of a TCP-mode port.'),
          open_connections: Int('Client connections open now.'),
          bytes_in: Int('Bytes from clients.'),
          bytes_out: Int('Bytes to clients.'),
        },
        "Traffic through the gateway since the daemon started (absent when no gateway measures it; unihost's own field).",
      ),
    ),
  },
  'A service group (GET /v1/services).',
);

/** GET /v1/services without details (`details: false`). */
export const GroupBrief = closed(
  { status: Opt(Type.Literal('success')), uuid: Uuid(), name: Str() },
  'A service group without details.',
);

/** Either form of GET /v1/services. */
export const GroupGet = Type.Union([GroupStatus, GroupBrief]);

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

/** A step of a step policy: the adjustment while the metric is in [lower_bound, upper_bound). */
const Step = closed(
  {
    lower_bound: Type.Union([Type.Number(), Type.Null()]),
    upper_bound: Type.Union([Type.Number(), Type.Null()]),
    adjustment: Type.Number(),
  },
  'A step of a policy.',
);

/** A scaling policy (GET .../autoscale/policies entries, with `status`). */
export const Policy = closed(
  {
    status: Type.Literal('success'),
    name: Str(),
    type: Type.Literal('step'),
    enabled: Bool(),
    metric: Type.Literal('cpu'),
    adjustment_type: Type.Union([Type.Literal('change'), Type.Literal('exact'), Type.Literal('percent')]),
    steps: Type.Array(Step),
  },
  'A step policy on CPU.',
);

/** GET /v1/services/autoscale: the configuration, or `status: unconfigured`. */
export const AutoscaleStatus = Type.Union([
  closed(
    {
      status: Type.Literal('success'),
      uuid: Uuid(),
      name: Str(),
      enabled: Bool(),
      min_size: Int(),
      max_size: Int(),
      warmup_time_ms: Int(),
      cooldown_time_ms: Int(),
      master: closed({ uuid: Uuid(), name: Opt(Str()) }, 'The instance the group scales from.'),
      policies: Type.Array(Type.Omit(Policy, ['status'])),
    },
    'The autoscale configuration of a group.',
  ),
  closed(
    { status: Type.Literal('unconfigured'), uuid: Uuid(), name: Str() },
    'A group without autoscale configuration.',
  ),
]);

/** POST and DELETE /v1/services/autoscale, POST of a policy: the group. */
export const AutoscaleChanged = closed(
  { status: Type.Literal('success'), uuid: Uuid(), name: Str() },
  'The group whose autoscale configuration changed.',
);

/** DELETE of a policy: its name. */
export const PolicyDeleted = closed({ status: Type.Literal('success'), name: Str() }, 'A deleted policy.');
