import { Type } from '@sinclair/typebox';
import { endpoint } from '../endpoint.js';
import { Bool, Int, Opt, Str } from '../schemas/common.js';
import { err } from '../../errors.js';

/**
 * The platform's hosts in the control plane's `Node` model (the official
 * SDK's `api.controlplane` with `controlPlaneUrl` set to the metro):
 * developer (operator) accounts only (src/services/nodes.ts).
 */
const Node = Type.Object(
  {
    uuid: Str('Host UUID.'),
    name: Str("Host name (the agent's --host-name)."),
    created_at: Str('When the host first registered.'),
    updated_at: Opt(Str('When its agent last reported.')),
    state: Str('ready (its agent reported lately) or error (see state_message).'),
    state_message: Opt(Str('Why the host is not ready, or that it is cordoned or draining.')),
    address: Opt(Str("Its agent's address on the hosts' network (--host-address).")),
    cloudprovider: Str('Always manual: hosts join by running an agent.'),
    vcpus: Int("The machine's cores."),
    memory_mib: Int("The machine's memory."),
    guest_vcpus: Opt(
      Type.Union([Type.Integer(), Type.Null()], { description: 'vCPU budget for guests (null: no limit).' }),
    ),
    guest_memory_mib: Opt(Int('Memory budget for guests.')),
    metro: Str('The metro.'),
    ready_at: Opt(Str('When its agent started.')),
    uptime_seconds: Int('Seconds since its agent started (0 when not ready).'),
    delete_lock: Bool('Always false.'),
  },
  { additionalProperties: false },
);

const NodeFilters = Type.Object(
  {
    uuid: Opt(Type.Array(Str(), { description: 'Only these UUIDs.' })),
    name: Opt(Type.Array(Str(), { description: 'Only these names.' })),
    state: Opt(Type.Array(Str(), { description: 'Only nodes in these states.' })),
    metro: Opt(Type.Array(Str(), { description: 'Only these metros.' })),
    cloudprovider: Opt(Type.Array(Str(), { description: 'Only these providers (manual).' })),
    limit: Opt(Int('At most this many nodes.', { minimum: 0 })),
    offset: Opt(Int('Skip this many nodes.', { minimum: 0 })),
  },
  { additionalProperties: false },
);

type Filters = { [K in 'uuid' | 'name' | 'state' | 'metro' | 'cloudprovider']?: string[] } & {
  limit?: number;
  offset?: number;
};

export const nodeEndpoints = [
  endpoint({
    method: 'GET',
    path: '/v1/nodes',
    plural: 'nodes',
    totalCount: true,
    summary: "The platform's hosts (developer accounts): state, machine, guest budgets, uptime.",
    target: 'none',
    batch: false,
    params: Type.Object({}, { additionalProperties: false }),
    query: NodeFilters,
    handleAll: async (ctx, _e, q) => {
      const f = q as Filters;
      const all = await ctx.services.nodes.list(ctx.user);
      const keep = (k: keyof Omit<Filters, 'limit' | 'offset'>, n: Record<string, unknown>) =>
        f[k] === undefined || f[k].includes(String(n[k]));
      const hits = all.filter(
        (n) => keep('uuid', n) && keep('name', n) && keep('state', n) && keep('metro', n) && keep('cloudprovider', n),
      );
      const from = f.offset ?? 0;
      return hits.slice(from, f.limit !== undefined ? from + f.limit : undefined);
    },
    response: Node,
  }),
  endpoint({
    method: 'GET',
    path: '/v1/nodes/:uuid',
    plural: 'nodes',
    totalCount: true,
    summary: 'One host of the platform (developer accounts).',
    target: 'none',
    batch: false,
    params: Type.Object({}, { additionalProperties: false }),
    handleAll: async (ctx, e) => [await ctx.services.nodes.get(ctx.user, e[0]!.pathUuid!.toLowerCase())],
    response: Node,
  }),
];

/**
 * What the control plane of the public service does that a self-hosted
 * platform does not: provisioning machines at a cloud provider, licensing,
 * sign-in by e-mail. Each answers `UH_NOT_SUPPORTED` with the way to do it
 * here, instead of "No API endpoint".
 */
const NOT_HERE: [method: 'GET' | 'POST' | 'PATCH' | 'DELETE', path: string, why: string][] = [
  [
    'POST',
    '/v1/nodes',
    'hosts join by running an agent: unihost serve --role agent --store <url> (docs/operations.md)',
  ],
  ['DELETE', '/v1/nodes', 'a host leaves when its agent stops (docs/operations.md)'],
  ['DELETE', '/v1/nodes/:uuid', 'a host leaves when its agent stops (docs/operations.md)'],
  ['PATCH', '/v1/nodes', 'hosts have no tags, locks or SSH keys here'],
  ['PATCH', '/v1/nodes/:uuid', 'hosts have no tags, locks or SSH keys here'],
  ['GET', '/v1/nodes/wait', 'hosts are not provisioned by the platform; GET /v1/nodes shows their state'],
  ['GET', '/v1/nodes/:uuid/wait', 'hosts are not provisioned by the platform; GET /v1/nodes shows their state'],
  ['GET', '/v1/nodes/providers/:provider/regions', 'there are no cloud providers: hosts are machines you run'],
  ['GET', '/v1/nodes/providers/:provider/types', 'there are no cloud providers: hosts are machines you run'],
  ['POST', '/v1/nodes/activate', 'a self-hosted platform needs no licence'],
  ['POST', '/v1/nodes/deactivate', 'a self-hosted platform needs no licence'],
  ['POST', '/v1/auth/signin', 'tokens come from the operator: unihost admin user create / unihost admin user token'],
];

export const notHereEndpoints = NOT_HERE.map(([method, path, why]) =>
  endpoint({
    method,
    path,
    plural: 'results',
    summary: `Not supported on a self-hosted platform: ${why}.`,
    target: 'none',
    batch: true,
    params: Type.Object({}, { additionalProperties: true }),
    handleAll: () => Promise.reject(err('UH_NOT_SUPPORTED', `'${method} ${path}' is not supported here: ${why}`)),
    // no answer entry ever: the whole request is refused (the document's `default` error body)
    response: Type.Never({ description: `Always refused (UH_NOT_SUPPORTED): ${why}.` }),
  }),
);
