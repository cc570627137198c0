import { Type } from '@sinclair/typebox';
import { Bool, Int, Opt, Str, Uuid, closed } from './common.js';

/**
 * Response entries of the instance endpoints (the OpenAPI document's
 * `data.instances` items; test/api/responses.test.ts checks real answers
 * against them). Closed objects: a field the API adds must be named here.
 */

const State = () =>
  Type.Union(
    ['stopped', 'starting', 'running', 'draining', 'stopping', 'standby', 'template', 'checkpoint'].map((s) =>
      Type.Literal(s),
    ),
    { description: 'Instance state.' },
  );
const Success = () => Type.Literal('success');
/** A time (ISO 8601). */
const Time = () => Type.String({ format: 'date-time' });

/** How a run ended (API spec: stop_reason bits, exit code, Unikraft's stop code). */
const stopFields = {
  stop_reason: Opt(Int('Why the instance stopped (bit field of the API spec).')),
  exit_code: Opt(Int('The application exit code.')),
  stop_code: Opt(Int('Unikraft stop code (reason, errno, init level).')),
};

/** A service group as shown in instance answers: its domains with their certificates' state. */
export const GroupSummary = closed(
  {
    uuid: Uuid(),
    name: Str(),
    domains: Type.Array(
      closed(
        {
          fqdn: Str('Public name (a custom one ends with a dot).'),
          certificate: Opt(
            closed({ uuid: Uuid(), name: Str(), state: Str() }, 'The certificate of a custom name and its state.'),
          ),
        },
        'A public name of the group.',
      ),
    ),
  },
  'The service group the instance is in.',
);

/** GET /v1/instances (details): the instance status object. */
export const InstanceStatus = closed(
  {
    // absent in the list form (GET without a target)
    status: Opt(Success()),
    uuid: Uuid(),
    name: Str(),
    created_at: Time(),
    state: State(),
    image: Str('Image reference with its digest.'),
    memory_mb: Int(),
    args: Type.Array(Str()),
    env: Type.Record(Type.String(), Type.String()),
    start_count: Int(),
    started_at: Opt(Time()),
    stopped_at: Opt(Time()),
    uptime_ms: Int(),
    vmm_start_time_us: Opt(Int('Developer users: time to spawn the VMM.')),
    vmm_load_time_us: Opt(Int('Developer users: time to load the guest.')),
    vmm_ready_time_us: Opt(Int('Developer users: time until the guest signalled ready.')),
    net_time_us: Opt(Int('Developer users: time to set up the network.')),
    cpu_millicores: Opt(Type.Number({ description: "Developer users: the autoscaler's CPU figure." })),
    boot_time_us: Opt(Int()),
    ...stopFields,
    restart_policy: Str(),
    restart: closed(
      { attempt: Int(), next_at: Opt(Time()) },
      'The restart sequence: attempt and when the next restart is due.',
    ),
    restart_count: Int(),
    private_fqdn: Str(),
    private_ip: Opt(Str()),
    service_group: Opt(GroupSummary),
    volumes: Type.Array(
      closed(
        { uuid: Uuid(), name: Str(), at: Type.Union([Str('Mount path.'), Type.Null()]), readonly: Bool() },
        'An attached volume.',
      ),
    ),
    network_interfaces: Type.Array(
      closed({ uuid: Uuid(), private_ip: Type.Union([Str(), Type.Null()]), mac: Str() }, 'A network interface.'),
    ),
    features: Opt(Type.Array(Str())),
    tags: Opt(Type.Array(Str())),
    annotations: Opt(Type.Record(Type.String(), Type.String())),
    delete_lock: Opt(Bool()),
    hostname: Opt(Str()),
    snapshot: Opt(
      closed(
        {
          size_bytes: Int(),
          created_at: Time(),
          reason: Str(),
          taken_from: Opt(Uuid()),
          pending: Opt(Bool()),
        },
        'The memory snapshot a start resumes from (docs/snapshots.md).',
      ),
    ),
  },
  'An instance (GET /v1/instances).',
);

/** GET /v1/instances with `details: false`. */
export const InstanceBrief = closed(
  { status: Success(), uuid: Uuid(), name: Str(), state: State() },
  'An instance without details.',
);

/** POST /v1/instances: what was created (and, with a wait, how its boot went). */
export const InstanceCreated = closed(
  {
    status: Success(),
    uuid: Uuid(),
    name: Str(),
    state: State(),
    private_fqdn: Str(),
    private_ip: Type.Union([Str(), Type.Null()]),
    service_group: Opt(GroupSummary),
    boot_time_us: Opt(Int('With autostart and a wait: the boot time of a boot that reached running.')),
    ...stopFields,
  },
  'A created instance.',
);

/** PUT start, stop, suspend: the state after the call and before it. */
export const InstanceStateChange = closed(
  { status: Success(), uuid: Uuid(), name: Str(), state: State(), previous_state: State(), ...stopFields },
  'The state an instance is in after the call, and before it.',
);

/** DELETE /v1/instances. */
export const InstanceDeleted = closed(
  { status: Success(), uuid: Uuid(), name: Str(), previous_state: State() },
  'A deleted instance and the state it was in.',
);

/** GET /v1/instances/wait. */
export const InstanceReached = closed(
  { status: Success(), uuid: Uuid(), name: Str(), state: State() },
  'The state the instance reached.',
);

/** GET /v1/instances/log. */
export const InstanceLog = closed(
  {
    status: Success(),
    uuid: Uuid(),
    name: Str(),
    output: Str('The chunk, base64.', { contentEncoding: 'base64' }),
    available: closed({ start: Int(), end: Int() }, 'The byte range the log holds now.'),
    range: closed({ start: Int(), end: Int() }, 'The byte range of this chunk.'),
  },
  'A chunk of the console log.',
);

/** Either form of GET /v1/instances. */
export const InstanceGet = Type.Union([InstanceStatus, InstanceBrief]);

/** POST /v1/instances/checkpoints: the checkpoint made (state `checkpoint`). */
export const CheckpointCreated = closed(
  { status: Success(), uuid: Uuid(), name: Str(), state: State() },
  'A checkpoint (an instance record in state checkpoint).',
);

/** GET /v1/instances/checkpoints/history: the checkpoints kept of an instance, oldest first. */
export const CheckpointHistory = closed(
  {
    status: Success(),
    uuid: Uuid(),
    name: Str(),
    history: Type.Array(
      closed({ uuid: Uuid(), name: Str(), created_at: Time() }, 'A checkpoint of the instance and when it was taken.'),
    ),
  },
  'The checkpoints of an instance.',
);
