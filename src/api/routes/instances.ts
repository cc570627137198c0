import { Type } from '@sinclair/typebox';
import {
  InstanceCreated,
  InstanceDeleted,
  InstanceGet,
  InstanceLog,
  InstanceReached,
  InstanceStateChange,
} from '../schemas/instance-responses.js';
import { endpoint, RawArray } from '../endpoint.js';
import { Bool, Int, Listed, Name, Opt, Ref, Str, TimeoutMs, TimeoutS, Uuid } from '../schemas/common.js';
import { GroupServiceEntry, DomainIn, GroupLimitFields } from './services.js';
import { checkCreate, FEATURES, RESTART_POLICIES, type CreateParams } from '../../services/instances-create.js';
import { err } from '../../errors.js';
import { instanceMetrics } from '../../services/instance-metrics.js';
import type { InstanceState } from '../../store/types.js';

const P = 'instances';
export const InstanceStateSchema = Type.Union(
  ['stopped', 'starting', 'running', 'draining', 'stopping', 'standby', 'template', 'checkpoint'].map((s) =>
    Type.Literal(s),
  ),
  { errorMessage: 'expected one of stopped, starting, running, draining, stopping, standby, template, checkpoint' },
);

const VolumeSpec = Type.Object(
  {
    uuid: Opt(Uuid('Existing volume in state available.')),
    name: Opt(Name('Existing volume in state available.')),
    size_mb: Opt(Int('Size of a new volume created with the instance.', { minimum: 1 })),
    at: Str('Mount path in the guest (absolute).'),
    readonly: Opt(Bool('Mount read-only. Default false.')),
  },
  { additionalProperties: false },
);

const CreateBody = Type.Object(
  {
    name: Opt(Name()),
    image: Opt(Str('Image reference (tag or digest); or give template.', { minLength: 1, maxLength: 512 })),
    checkpoint: Opt(Ref('checkpoint to start from instead of an image (docs/snapshots.md)')),
    branch_from: Opt(Ref('instance to branch from (not supported: take a checkpoint, create from it)')),
    template: Opt(
      Type.Object(
        {
          uuid: Opt(Uuid()),
          name: Opt(Name()),
          prepare: Opt(Bool('Make a template at create time: not supported (refused when true).')),
        },
        {
          additionalProperties: false,
          description:
            'A template instance to start from instead of an image: its memory is restored (no boot); image, args, env and memory come from it (docs/snapshots.md).',
        },
      ),
    ),
    args: Opt(
      Type.Union([Type.String(), Type.Array(Type.String())], {
        errorMessage: 'expected a string or an array of strings',
        description: 'Application arguments (a string is split like a shell does).',
      }),
    ),
    env: Opt(
      Type.Record(Type.String({ pattern: '^[A-Za-z_][A-Za-z0-9_]*$' }), Type.String(), {
        additionalProperties: false, // a key is written into the kernel command line: no quotes, spaces or '='
        description: 'Environment variables.',
        errorMessage: 'expected an object of string values with names of letters, digits and underscores',
      }),
    ),
    memory_mb: Opt(Int('Memory in MB. Default 128.', { minimum: 1 })),
    service_group: Opt(
      Type.Object(
        {
          uuid: Opt(Uuid()),
          name: Opt(Name()),
          services: Opt(Type.Array(GroupServiceEntry)),
          domains: Opt(Type.Array(DomainIn)),
          ...GroupLimitFields,
        },
        { additionalProperties: false, description: 'Existing group (uuid or name) or a new group description.' },
      ),
    ),
    volumes: Opt(Type.Array(VolumeSpec, { description: 'At most one volume.' })),
    autostart: Opt(Bool('Start right after creation. Default false.')),
    replicas: Opt(Int('Additional instances with the same properties. Default 0.', { minimum: 0, maximum: 64 })),
    wait_timeout_ms: Opt(TimeoutMs('With autostart: wait for running. 0 no wait, -1 the longest.')),
    timeout_s: TimeoutS('wait_timeout_ms'),
    features: Opt(
      Type.Array(
        Type.Union(
          FEATURES.map((f) => Type.Literal(f)),
          { errorMessage: `expected one of ${FEATURES.join(', ')}` },
        ),
        {
          description:
            'Features: scale-to-zero (needs a service_group), stateful (with scale-to-zero: memory kept in standby), delete-on-stop.',
        },
      ),
    ),
    scale_to_zero: Opt(
      Type.Object(
        {
          policy: Opt(
            Type.Union(
              ['on', 'off', 'idle'].map((v) => Type.Literal(v)),
              { errorMessage: 'expected one of on, off, idle', description: "on (default) or off; 'idle' is refused." },
            ),
          ),
          cooldown_time_ms: Opt(Int('Idle time before standby. Default 1000.', { minimum: 0 })),
          stateful: Opt(
            Bool(
              'Keep the memory of the instance in standby (a snapshot; woken by restoring it). Same as features: [stateful].',
            ),
          ),
          notify_time_ms: Opt(Int('Notice before standby: not supported, above 0 is refused.', { minimum: 0 })),
        },
        {
          additionalProperties: false,
          description: 'The SDK form of scale-to-zero (needs a service_group); same as features: [scale-to-zero].',
        },
      ),
    ),
    restart_policy: Opt(
      Type.Union(
        RESTART_POLICIES.map((r) => Type.Literal(r)),
        {
          errorMessage: 'expected one of never, always, on-failure',
          description: 'never (default), always or on-failure (alias on_failure).',
        },
      ),
    ),
  },
  { additionalProperties: false },
);

export const instanceEndpoints = [
  endpoint({
    method: 'POST',
    path: '/v1/instances',
    plural: P,
    summary: 'Create instances.',
    target: 'none',
    batch: true,
    params: CreateBody,
    check: (p) => void checkCreate(createParams(p)),
    // Each create queues its transaction at once, so entries are created in order; their
    // waits (wait_timeout_ms) then run side by side and the instances boot concurrently.
    handleAll: async (ctx, entries) => {
      const results = await Promise.all(
        entries.map((e) =>
          ctx.services.instances.create(ctx.user, createParams(e.params), ctx.signal).then(
            (rs): Record<string, unknown>[] => rs.map((r) => ({ status: 'success', ...r })),
            (x: unknown) => [ctx.entryError(e, x)],
          ),
        ),
      );
      return results.flat();
    },
    response: InstanceCreated,
  }),
  endpoint({
    method: 'GET',
    path: '/v1/instances',
    localPath: '/v1/instances/:uuid',
    plural: P,
    summary: 'Instance status. Without a target (newer clients), lists every instance, paged by count/from.',
    target: 'required',
    batch: true,
    params: Type.Object({}),
    list: (ctx) => ctx.services.instances.list(ctx.user),
    handle: async (ctx, e, q) => ctx.services.instances.get(ctx.user, e.target!, q.details !== false),
    response: InstanceGet,
  }),
  endpoint({
    method: 'DELETE',
    path: '/v1/instances',
    localPath: '/v1/instances/:uuid',
    plural: P,
    summary: 'Delete instances (a running one is stopped at once).',
    target: 'required',
    batch: true,
    params: Type.Object({}),
    handle: async (ctx, e) => ctx.services.instances.delete(ctx.user, e.target!),
    response: InstanceDeleted,
  }),
  endpoint({
    method: 'GET',
    path: '/v1/instances/list',
    plural: P,
    summary: 'List instances.',
    target: 'none',
    batch: false,
    params: Type.Object({ state: Opt(InstanceStateSchema) }, { additionalProperties: false }),
    handleAll: async (ctx, entries) =>
      new RawArray(
        await ctx.services.instances.listJson(ctx.user, entries[0]!.params.state as InstanceState | undefined),
      ),
    response: Listed,
  }),
  endpoint({
    method: 'PUT',
    path: '/v1/instances/start',
    localPath: '/v1/instances/:uuid/start',
    plural: P,
    summary: 'Start instances.',
    target: 'required',
    batch: true,
    params: Type.Object(
      {
        wait_timeout_ms: Opt(TimeoutMs('Wait for running. 0 no wait (default), -1 the longest.')),
        timeout_s: TimeoutS('wait_timeout_ms'),
      },
      { additionalProperties: false },
    ),
    check: (p) => void timeoutOf(p, 'wait_timeout_ms'),
    concurrent: true,
    handle: async (ctx, e) =>
      ctx.services.instances.start(ctx.user, e.target!, timeoutOf(e.params, 'wait_timeout_ms'), ctx.signal),
    response: InstanceStateChange,
  }),
  endpoint({
    method: 'PUT',
    path: '/v1/instances/stop',
    localPath: '/v1/instances/:uuid/stop',
    plural: P,
    summary: 'Stop instances (does not block).',
    target: 'required',
    batch: true,
    params: Type.Object(
      {
        force: Opt(Bool('Kill at once, no clean shutdown.')),
        drain_timeout_ms: Opt(TimeoutMs('Drain connections for at most this long. -1 the longest.')),
      },
      { additionalProperties: false },
    ),
    handle: async (ctx, e) => ctx.services.instances.stop(ctx.user, e.target!, e.params),
    response: InstanceStateChange,
  }),
  endpoint({
    method: 'PUT',
    path: '/v1/instances/suspend',
    localPath: '/v1/instances/:uuid/suspend',
    plural: P,
    summary:
      'Suspend running instances: their memory goes to a snapshot and they wait in standby; start (or traffic, with scale-to-zero) resumes them where they were (does not block).',
    target: 'required',
    batch: true,
    params: Type.Object(
      { drain_timeout_ms: Opt(TimeoutMs('Drain connections for at most this long first. -1 the longest.')) },
      { additionalProperties: false },
    ),
    handle: async (ctx, e) => ctx.services.instances.suspend(ctx.user, e.target!, e.params),
    response: InstanceStateChange,
  }),
  endpoint({
    method: 'GET',
    path: '/v1/instances/wait',
    localPath: '/v1/instances/:uuid/wait',
    plural: P,
    summary: 'Wait until instances reach a state.',
    target: 'required',
    batch: true,
    params: Type.Object(
      {
        ids: Opt(Type.Array(Ref('instance'), { description: 'Targets (instead of uuid/name).' })),
        state: Opt(InstanceStateSchema),
        timeout_ms: Opt(TimeoutMs('Largest wait; -1 (default) the longest possible.')),
        timeout_s: TimeoutS('timeout_ms'),
      },
      { additionalProperties: false },
    ),
    check: (p) => void timeoutOf(p, 'timeout_ms'),
    // Each entry waits with its own state and timeout (array bodies of the Python SDK); ids share their entry's.
    handleAll: async (ctx, entries) =>
      ctx.each(
        ctx.expandIds(entries),
        (e) => {
          const p = e.params as Record<string, unknown>;
          const timeout = ctx.services.instances.timeout(timeoutOf(p, 'timeout_ms'), -1);
          const state = (p.state as InstanceState | undefined) ?? 'running';
          return ctx.services.instances.wait(ctx.user, e.target!, state, timeout, ctx.signal);
        },
        true,
      ),
    response: InstanceReached,
  }),
  endpoint({
    method: 'GET',
    path: '/v1/instances/metrics',
    localPath: '/v1/instances/:uuid/metrics',
    plural: P,
    summary: 'CPU, memory, network and boot figures of instances (those the platform measures).',
    target: 'required',
    batch: true,
    params: Type.Object({}),
    handle: async (ctx, e) => instanceMetrics(ctx.services, ctx.user, e.target!),
    response: Type.Object(
      {
        status: Type.Literal('success'),
        uuid: Uuid(),
        name: Str(),
        state: Str('The instance state.'),
        rss_bytes: Int('Resident memory of the VM process; 0 when not running.'),
        cpu_time_ms: Int('CPU time of the VM process since it started; 0 when not running.'),
        boot_time_us: Int('Boot time of the last boot (0 before the first).'),
        net_time_us: Int('Time to network readiness of the last boot (0 before the first).'),
        rx_bytes: Opt(Int('Bytes the guest received (its tap), when it has one.')),
        rx_packets: Opt(Int()),
        tx_bytes: Opt(Int('Bytes the guest sent.')),
        tx_packets: Opt(Int()),
        nconns: Opt(Int('Open connections through the gateway, when it runs.')),
      },
      { additionalProperties: false },
    ),
  }),
  endpoint({
    method: 'GET',
    path: '/v1/instances/log',
    localPath: '/v1/instances/:uuid/log',
    plural: P,
    summary: 'Read the console log.',
    target: 'required',
    batch: true,
    params: Type.Object(
      {
        offset: Opt(Int('Byte offset; negative counts from the end. Default -4096.')),
        limit: Opt(Int('Most bytes to return. Default 4096.', { minimum: 0 })),
      },
      { additionalProperties: false },
    ),
    handle: async (ctx, e) =>
      ctx.services.instances.log(ctx.user, e.target!, e.params.offset ?? -4096, e.params.limit ?? 4096),
    response: InstanceLog,
  }),
];

/**
 * The timeout of a wait given as `msKey` (milliseconds) or `timeout_s`
 * (seconds, newer clients), in milliseconds; -1 stays the longest, undefined
 * when neither is given. Both at once are refused: they could disagree.
 */
export function timeoutOf(p: Record<string, unknown>, msKey: string): number | undefined {
  const ms = p[msKey] as number | undefined;
  const s = p.timeout_s as number | undefined;
  if (ms !== undefined && s !== undefined) throw err('UH_INVALID', `give either '${msKey}' or 'timeout_s', not both`);
  if (s !== undefined) return s < 0 ? -1 : s * 1000;
  return ms;
}

/** Create parameters with `timeout_s` folded into `wait_timeout_ms`. */
function createParams(p: Record<string, unknown>): CreateParams {
  const { timeout_s: _s, ...rest } = p;
  const ms = timeoutOf(p, 'wait_timeout_ms');
  return { ...rest, ...(ms === undefined ? {} : { wait_timeout_ms: ms }) } as unknown as CreateParams;
}

export { Name };
