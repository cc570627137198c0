import { Type } from '@sinclair/typebox';
import { endpoint } from '../endpoint.js';
import { Bool, Int, Name, Opt, PolicyName, Ref, Str, Uuid } from '../schemas/common.js';
import type { GroupDescription } from '../../services/groups.js';
import type { AutoscaleIn } from '../../services/autoscale.js';
import type { PolicyIn } from '../../domain/steps.js';

export const GroupServiceEntry = Type.Object(
  {
    port: Int('Public port.', { minimum: 1, maximum: 65535 }),
    destination_port: Opt(Int('Port the application listens on. Default: port.', { minimum: 1, maximum: 65535 })),
    handlers: Opt(Type.Array(Type.String(), { description: 'tls, http, redirect' })),
  },
  { additionalProperties: false },
);

export const DomainIn = Type.Object(
  {
    name: Str('Domain: a name under the metro domain, or an FQDN ending with a dot.', { minLength: 1, maxLength: 254 }),
    certificate: Opt(Ref('certificate')),
  },
  { additionalProperties: false },
);

const G = 'service_groups';
const Summary = Type.Object({ status: Str(), uuid: Uuid(), name: Str() }, { additionalProperties: true });

const StepSchema = Type.Object(
  {
    lower_bound: Opt(Type.Union([Type.Integer(), Type.Null()])),
    upper_bound: Opt(Type.Union([Type.Integer(), Type.Null()])),
    adjustment: Int('Instances to add (positive) or remove (negative), or target / percent per adjustment_type.'),
  },
  { additionalProperties: false },
);

export const PolicySchema = Type.Object(
  {
    name: PolicyName(),
    type: Str('Policy type: step.'),
    metric: Opt(Str('Metric: cpu (millicores). Default cpu.')),
    adjustment_type: Opt(Str('change, exact or percent. Default change.')),
    steps: Type.Array(StepSchema),
  },
  { additionalProperties: false },
);

const AutoscaleBody = Type.Object(
  {
    master: Ref('master instance'),
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
      { name: Opt(Name()), services: Type.Array(GroupServiceEntry), domains: Opt(Type.Array(DomainIn)) },
      { additionalProperties: false },
    ),
    handle: async (ctx, e) => ctx.services.groups.create(ctx.user, e.params as GroupDescription),
    response: Summary,
  }),
  endpoint({
    method: 'GET',
    path: '/v1/services',
    localPath: '/v1/services/:uuid',
    plural: G,
    summary: 'Service group status and configuration.',
    target: 'required',
    batch: true,
    params: Type.Object({}),
    query: Type.Object({ details: Opt(Bool('Accepted for client compatibility.')) }, { additionalProperties: false }),
    handle: async (ctx, e) => ctx.services.groups.get(ctx.user, e.target!),
    response: Summary,
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
    response: Summary,
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
    response: Type.Object({ uuid: Uuid(), name: Str() }),
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
    handle: async (ctx, e) => ctx.services.autoscale.create(ctx.user, e.target!, e.params as AutoscaleIn),
    response: Summary,
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
    handle: async (ctx, e) => ctx.services.autoscale.get(ctx.user, e.target!),
    response: Summary,
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
    response: Summary,
  }),
  endpoint({
    method: 'POST',
    path: '/v1/services/:uuid/autoscale/policies',
    plural: 'policies',
    summary: 'Add an autoscale policy.',
    target: 'required',
    batch: false,
    params: PolicySchema,
    handle: async (ctx, e) => ctx.services.autoscale.addPolicy(ctx.user, e.target!, e.params as PolicyIn),
    response: Summary,
  }),
  endpoint({
    method: 'GET',
    path: '/v1/services/:uuid/autoscale/policies',
    plural: 'policies',
    summary: 'Read autoscale policies (all, or the one named in the body).',
    target: 'required',
    batch: false,
    params: Type.Object({ name: Opt(PolicyName()) }, { additionalProperties: false }),
    handleAll: async (ctx, entries) => {
      const e = entries[0]!;
      try {
        const ps = await ctx.services.autoscale.getPolicies(ctx.user, e.target!, e.params.name);
        return ps.map((p) => ({ status: 'success', ...p }));
      } catch (x) {
        return [ctx.entryError(e, x)];
      }
    },
    response: Summary,
  }),
  endpoint({
    method: 'GET',
    path: '/v1/services/:uuid/autoscale/policies/:policy',
    plural: 'policies',
    summary: 'Read one autoscale policy.',
    target: 'required',
    batch: false,
    params: Type.Object({ policy: PolicyName() }, { additionalProperties: false }),
    handle: async (ctx, e) =>
      (await ctx.services.autoscale.getPolicies(ctx.user, e.target!, e.params.policy))[0]! as unknown as Record<string, unknown>,
    response: Summary,
  }),
  endpoint({
    method: 'DELETE',
    path: '/v1/services/:uuid/autoscale/policies',
    plural: 'policies',
    summary: 'Delete the autoscale policy named in the body.',
    target: 'required',
    batch: false,
    params: Type.Object({ name: PolicyName() }, { additionalProperties: false }),
    handle: async (ctx, e) => ctx.services.autoscale.deletePolicy(ctx.user, e.target!, e.params.name),
    response: Summary,
  }),
  endpoint({
    method: 'DELETE',
    path: '/v1/services/:uuid/autoscale/policies/:policy',
    plural: 'policies',
    summary: 'Delete one autoscale policy.',
    target: 'required',
    batch: false,
    params: Type.Object({ policy: PolicyName() }, { additionalProperties: false }),
    handle: async (ctx, e) => ctx.services.autoscale.deletePolicy(ctx.user, e.target!, e.params.policy),
    response: Summary,
  }),
];
