import { Type } from '@sinclair/typebox';
import {
  AutoscaleChanged,
  AutoscaleStatus,
  GroupCreated,
  GroupDeleted,
  GroupGet,
  Policy,
  PolicyDeleted,
} from '../schemas/group-responses.js';
import { endpoint } from '../endpoint.js';
import { Bool, Int, Listed, Name, Opt, PolicyName, Ref, Str } from '../schemas/common.js';
import { MAX_DOMAINS_PER_GROUP as MAX_DOMAINS } from '../../domain/domains.js';
import { portPolicy } from '../../domain/ports.js';
import { checkGroupDescription, type GroupDescription } from '../../services/groups.js';
import { checkAutoscaleParams, type AutoscaleIn } from '../../services/autoscale.js';
import { checkPolicy, type PolicyIn } from '../../domain/steps.js';
import { err } from '../../errors.js';
import type { HandlerCtx, Entry } from '../endpoint.js';
import { checkedEach, summaryOr } from './checked.js';

export const GroupServiceEntry = Type.Object(
  {
    port: Int('Public port.', { minimum: 1, maximum: 65535 }),
    destination_port: Opt(
      Int('Port the application listens on. Default: port (443 with redirect).', { minimum: 1, maximum: 65535 }),
    ),
    handlers: Opt(Type.Array(Type.String(), { description: 'tls, http, redirect' })),
  },
  { additionalProperties: false },
);

/** A group's limits per instance (docs/gateway.md, "Limits"). */
export const GroupLimitFields = {
  soft_limit: Opt(
    Int('Requests (HTTP) or connections (TCP) per instance beyond which new ones queue.', {
      minimum: 1,
      maximum: 65535,
    }),
  ),
  hard_limit: Opt(
    Int('Requests or connections per instance, in service and queued, beyond which new ones are refused.', {
      minimum: 1,
      maximum: 65535,
    }),
  ),
};

export const DomainIn = Type.Object(
  {
    name: Str('Domain: a name under the metro domain, or an FQDN ending with a dot.', { minLength: 1, maxLength: 254 }),
    certificate: Opt(Ref('certificate')),
  },
  { additionalProperties: false },
);

const G = 'service_groups';

const StepSchema = Type.Object(
  {
    lower_bound: Opt(Type.Union([Type.Integer(), Type.Null()])),
    upper_bound: Opt(Type.Union([Type.Integer(), Type.Null()])),
    adjustment: Int('Instances to add (positive) or remove (negative), or target / percent per adjustment_type.'),
  },
  { additionalProperties: false },
);

const PolicyFields = {
  enabled: Opt(Bool('Default true: a disabled policy is kept, not evaluated.')),
  metric: Opt(Str('Metric: cpu (millicores). Default cpu.')),
  adjustment_type: Opt(Str('change, exact or percent (percentage, absolute: aliases). Default change.')),
  steps: Opt(Type.Array(StepSchema, { description: 'Required (here or in type).' })),
};

/** A policy: the spec's form (`type: "step"` beside the fields), or the official SDK's (`type` is the policy). */
export const PolicySchema = Type.Object(
  {
    name: PolicyName(),
    type: Type.Union(
      [
        Str('Policy type: step.'),
        Type.Object({ name: Opt(PolicyName()), ...PolicyFields }, { additionalProperties: false }),
      ],
      { errorMessage: "expected 'step' or a policy object" },
    ),
    ...PolicyFields,
  },
  { additionalProperties: false },
);

/**
 * What the platform creates the master from when a configuration names
 * none (the newer API's `create_args`): an instance of the user as its
 * template (`template`), or the fields of an instance create request.
 */
const CreateArgs = Type.Object(
  {
    template: Opt(Ref('instance the master copies (its image, args, env, memory and restart policy)')),
    roms: Opt(Type.Unknown({ description: 'Not supported: instances boot a kernel and an initrd.' })),
    name: Opt(Name()),
    image: Opt(Str('Image reference (tag or digest).', { minLength: 1, maxLength: 512 })),
    args: Opt(Type.Union([Type.String(), Type.Array(Type.String())])),
    env: Opt(Type.Record(Type.String({ pattern: '^[A-Za-z_][A-Za-z0-9_]*$' }), Type.String())),
    memory_mb: Opt(Int('Default 128.', { minimum: 1 })),
    restart_policy: Opt(Str()),
  },
  { additionalProperties: false },
);

const AutoscaleBody = Type.Object(
  {
    master: Opt(Ref('master instance (or create_args)')),
    create_args: Opt(CreateArgs),
    min_size: Opt(Int('Minimum instances. Default 1.', { minimum: 0 })),
    max_size: Opt(Int('Maximum instances. Default 4.', { minimum: 0 })),
    warmup_time_ms: Opt(Int('Default 1000.', { minimum: 0 })),
    cooldown_time_ms: Opt(Int('Default 1000.', { minimum: 0 })),
    policies: Opt(Type.Array(PolicySchema)),
  },
  { additionalProperties: false },
);

export const serviceEndpoints = [
  endpoint({
    method: 'POST',
    path: '/v1/services',
    plural: G,
    summary: 'Create service groups.',
    target: 'none',
    batch: true,
    params: Type.Object(
      {
        name: Opt(Name()),
        services: Type.Array(GroupServiceEntry),
        domains: Opt(Type.Array(DomainIn, { maxItems: MAX_DOMAINS })),
        ...GroupLimitFields,
      },
      { additionalProperties: false },
    ),
    handleAll: checkedEach<GroupDescription>(
      (d, ctx, seen) =>
        void checkGroupDescription(d, ctx.services.config.metroDomain, seen, portPolicy(ctx.services.config)),
      async (ctx, e) => ctx.services.groups.create(ctx.user, e.params),
    ),
    response: GroupCreated,
  }),
  endpoint({
    method: 'GET',
    path: '/v1/services',
    localPath: '/v1/services/:uuid',
    plural: G,
    summary: 'Service group status and configuration. Without a target, lists every group, paged by count/from.',
    target: 'required',
    batch: true,
    params: Type.Object({}),
    list: (ctx) => ctx.services.groups.list(ctx.user, {}),
    handle: async (ctx, e, q) => summaryOr(q, await ctx.services.groups.get(ctx.user, e.target!)),
    response: GroupGet,
  }),
  endpoint({
    method: 'DELETE',
    path: '/v1/services',
    localPath: '/v1/services/:uuid',
    plural: G,
    summary: 'Delete service groups (refused while instances are attached).',
    target: 'required',
    batch: true,
    params: Type.Object({}),
    handle: async (ctx, e) => ctx.services.groups.delete(ctx.user, e.target!),
    response: GroupDeleted,
  }),
  endpoint({
    method: 'GET',
    path: '/v1/services/list',
    plural: G,
    summary: 'List service groups.',
    target: 'none',
    batch: false,
    params: Type.Object({ persistent: Opt(Bool()), fqdn: Opt(Str()) }, { additionalProperties: false }),
    handleAll: async (ctx, entries) => ctx.services.groups.list(ctx.user, entries[0]!.params),
    response: Listed,
  }),
  endpoint({
    method: 'POST',
    path: '/v1/services/autoscale',
    localPath: '/v1/services/:uuid/autoscale',
    plural: G,
    summary: 'Create an autoscale configuration.',
    target: 'required',
    batch: true,
    params: AutoscaleBody,
    check: (p) => checkAutoscaleParams(p as AutoscaleIn),
    handle: async (ctx, e) => ctx.services.autoscale.create(ctx.user, e.target!, e.params as AutoscaleIn),
    response: AutoscaleChanged,
  }),
  endpoint({
    method: 'GET',
    path: '/v1/services/autoscale',
    localPath: '/v1/services/:uuid/autoscale',
    plural: G,
    summary: "Read an autoscale configuration (entry status 'unconfigured' if there is none).",
    target: 'required',
    batch: true,
    params: Type.Object({}),
    query: Type.Object({ details: Opt(Bool('Accepted for client compatibility.')) }, { additionalProperties: false }),
    handle: async (ctx, e) => ctx.services.autoscale.get(ctx.user, e.target!),
    response: AutoscaleStatus,
  }),
  endpoint({
    method: 'DELETE',
    path: '/v1/services/autoscale',
    localPath: '/v1/services/:uuid/autoscale',
    plural: G,
    summary: 'Delete an autoscale configuration.',
    target: 'required',
    batch: true,
    params: Type.Object({}),
    handle: async (ctx, e) => ctx.services.autoscale.delete(ctx.user, e.target!),
    response: AutoscaleChanged,
  }),
  // Policy endpoints exist only in local scope and take `name` as the policy's name, so they have no
  // uuid/name target: the group is the path's UUID.
  endpoint({
    method: 'POST',
    path: '/v1/services/:uuid/autoscale/policies',
    plural: 'policies',
    summary: 'Add an autoscale policy.',
    target: 'none',
    batch: false,
    params: PolicySchema,
    check: (p) => void checkPolicy(p as PolicyIn),
    handle: async (ctx, e) => ctx.services.autoscale.addPolicy(ctx.user, groupOf(e), e.params as PolicyIn),
    response: AutoscaleChanged,
  }),
  endpoint({
    method: 'GET',
    path: '/v1/services/:uuid/autoscale/policies',
    plural: 'policies',
    summary: 'Read autoscale policies (all, or the one named in the body).',
    target: 'none',
    batch: false,
    params: Type.Object({ name: Opt(PolicyName()) }, { additionalProperties: false }),
    handleAll: async (ctx, entries) => policiesOf(ctx, entries[0]!, entries[0]!.params.name),
    response: Policy,
  }),
  endpoint({
    method: 'GET',
    path: '/v1/services/:uuid/autoscale/policies/:policy',
    plural: 'policies',
    summary: 'Read one autoscale policy.',
    target: 'none',
    batch: false,
    params: Type.Object({ policy: PolicyName() }, { additionalProperties: false }),
    handleAll: async (ctx, entries) => policiesOf(ctx, entries[0]!, entries[0]!.params.policy),
    response: Policy,
  }),
  endpoint({
    method: 'DELETE',
    path: '/v1/services/:uuid/autoscale/policies',
    plural: 'policies',
    summary: 'Delete the autoscale policy named in the body.',
    target: 'none',
    batch: false,
    params: Type.Object({ name: PolicyName() }, { additionalProperties: false }),
    handle: async (ctx, e) => ctx.services.autoscale.deletePolicy(ctx.user, groupOf(e), e.params.name),
    response: PolicyDeleted,
  }),
  endpoint({
    method: 'DELETE',
    path: '/v1/services/:uuid/autoscale/policies/:policy',
    plural: 'policies',
    summary: 'Delete one autoscale policy.',
    target: 'none',
    batch: false,
    params: Type.Object({ policy: PolicyName() }, { additionalProperties: false }),
    handle: async (ctx, e) => ctx.services.autoscale.deletePolicy(ctx.user, groupOf(e), e.params.policy),
    response: PolicyDeleted,
  }),
];

/** The group of a policy endpoint: the UUID in its path. */
function groupOf(e: Entry<unknown>): { uuid: string } {
  if (e.pathUuid === undefined) throw err('UH_INTERNAL', 'policy endpoint without a group UUID in the path');
  return { uuid: e.pathUuid.toLowerCase() };
}

/** Policies of a group, one entry each; a failure is the single error entry. */
async function policiesOf(ctx: HandlerCtx, e: Entry<unknown>, name: string | undefined) {
  try {
    const ps = await ctx.services.autoscale.getPolicies(ctx.user, groupOf(e), name);
    return ps.map((p) => ({ status: 'success', ...p }));
  } catch (x) {
    return [{ ...ctx.entryError(e, x), uuid: e.pathUuid }];
  }
}
