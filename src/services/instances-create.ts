import { NEVER_RUN, specDefaults } from '../domain/instance-states.js';
import { randomUUID } from 'node:crypto';
import { parse as shellParse } from 'shell-quote';
import { envValueProblem, wordProblem } from '../domain/cmdline.js';
import { allocateIp } from '../domain/ipam.js';
import { macFor } from '../network/address.js';
import { instanceDefaultName, NAME_MAX, randomSuffix } from '../domain/names.js';
import { err } from '../errors.js';
import type { InstanceRec, RestartPolicy, ServiceGroupRec, Tx, UserRec, VolumeRec } from '../store/types.js';
import type { AutoscaleService } from './autoscale.js';
import type { ServiceBase } from './deps.js';
import type { GroupDescription, GroupService } from './groups.js';
import type { ImageService } from './images.js';
import type { VolumeService } from './volumes.js';
import { ADMISSION, placeInTx } from './capacity.js';
import { assertQuota, effectiveQuotas } from './users.js';
import { checkMountPath } from '../domain/mount-path.js';
import { refTarget, type Ref } from '../domain/refs.js';
import { readyCheckpoint } from './instance-checkpoints.js';
import { findTemplate } from './instance-templates.js';

export interface VolumeSpec {
  uuid?: string;
  name?: string;
  size_mb?: number;
  at: string;
  readonly?: boolean;
}

export interface CreateParams {
  name?: string;
  /** the image to boot; or `template`, whose memory the instance starts from */
  image?: string;
  template?: TemplateRef;
  /** a checkpoint (uuid or name) whose memory the instance starts from */
  checkpoint?: Ref;
  /** the SDK's branch from a running instance: refused (a checkpoint does it in two steps) */
  branch_from?: Ref;
  args?: string | string[];
  env?: Record<string, string>;
  memory_mb?: number;
  service_group?: GroupDescription & { uuid?: string; name?: string };
  volumes?: VolumeSpec[];
  autostart?: boolean;
  replicas?: number;
  wait_timeout_ms?: number;
  features?: string[];
  restart_policy?: string;
  /** the official SDK's form of scale-to-zero (docs/autoscale.md) */
  scale_to_zero?: ScaleToZeroIn;
}

/** The SDK's CreateInstanceRequestTemplate: which template (uuid or name); `prepare` is refused. */
export interface TemplateRef {
  uuid?: string;
  name?: string;
  prepare?: boolean;
}

/** What an instance created from a template takes from it: it must not be given as well. */
const FROM_TEMPLATE = ['args', 'env', 'memory_mb', 'volumes'] as const;

export interface ScaleToZeroIn {
  policy?: 'on' | 'off' | 'idle';
  cooldown_time_ms?: number;
  stateful?: boolean;
  notify_time_ms?: number;
}

/**
 * Scale-to-zero asked for by `features: [scale-to-zero]` or the SDK's
 * `scale_to_zero` object: null when off, else the cooldown to configure
 * (undefined = the autoscale default). What unihost cannot do is refused.
 */
export function scaleToZeroOf(
  p: Pick<CreateParams, 'features' | 'scale_to_zero'>,
): { cooldownMs?: number; stateful: boolean } | null {
  const feature = p.features?.includes('scale-to-zero') ?? false;
  const statefulFeature = p.features?.includes('stateful') ?? false;
  const o = p.scale_to_zero;
  const at = (k: string) => `parameter 'scale_to_zero.${k}'`;
  if (statefulFeature && !feature && !(o && o.policy !== 'off'))
    throw err(
      'UH_INVALID',
      "parameter 'features': 'stateful' keeps the memory of a scale-to-zero instance in standby; it needs 'scale-to-zero' (or scale_to_zero.policy 'on')",
    );
  if (o?.stateful === true && o.policy === 'off')
    throw err('UH_INVALID', `${at('stateful')}: stateful needs scale-to-zero, and policy is 'off'`);
  if (!o) return feature ? { stateful: statefulFeature } : null;
  const stateful = statefulFeature || o.stateful === true;
  if ((o.notify_time_ms ?? 0) > 0)
    throw err('UH_INVALID', `${at('notify_time_ms')}: notifying the instance before standby is not supported`);
  if (o.policy === 'idle')
    throw err(
      'UH_INVALID',
      `${at('policy')}: 'idle' (standby despite open idle connections) is not supported; use 'on' (standby once no connection is open)`,
    );
  if (o.policy === 'off') {
    if (feature) throw err('UH_INVALID', `${at('policy')}: 'off' contradicts feature 'scale-to-zero'`);
    return null;
  }
  return o.cooldown_time_ms === undefined ? { stateful } : { cooldownMs: o.cooldown_time_ms, stateful };
}

/** `stateful`: with scale-to-zero, the idle master's memory is kept in a snapshot (docs/snapshots.md). */
export const FEATURES = ['scale-to-zero', 'stateful', 'delete-on-stop'] as const;
const POLICIES: Record<string, RestartPolicy> = {
  never: 'never',
  always: 'always',
  'on-failure': 'on-failure',
  on_failure: 'on-failure',
};
/** Accepted `restart_policy` values: the spec's and the public variant `on_failure`. */
export const RESTART_POLICIES = Object.keys(POLICIES);

/**
 * `args` as a string is split like a shell splits words, as the official clients do.
 * There is no shell environment to expand against, so `$VAR` and globs stay
 * literal (as a shell leaves an unmatched glob); a comment ends the words.
 */
export function splitArgs(args: string | string[] | undefined): string[] | undefined {
  if (args === undefined || Array.isArray(args)) return args;
  const out: string[] = [];
  for (const p of shellParse(args, (key) => `$${key}`)) {
    if (typeof p === 'string') out.push(p);
    else if ('comment' in p) break;
    else if (p.op === 'glob') out.push((p as { pattern: string }).pattern);
    else
      throw err(
        'UH_INVALID',
        `parameter 'args': shell operator '${p.op}' is not allowed (no shell runs the arguments)`,
      );
  }
  return out;
}

/** Checks create parameters that need no store; returns normalized values. */
export function checkCreate(p: CreateParams) {
  const sources = [p.image, p.template, p.checkpoint].filter((x) => x !== undefined).length;
  if (sources !== 1)
    throw err(
      sources === 0 ? 'UH_MISSING_ID' : 'UH_NOT_BOTH',
      "give one of 'image' (an image to boot), 'template' (a template instance to start from) or 'checkpoint' (a checkpoint to start from)",
    );
  if (p.branch_from !== undefined)
    throw err(
      'UH_INVALID',
      "parameter 'branch_from': not supported; take a checkpoint of the instance (POST /v1/instances/checkpoints) and create from it (checkpoint)",
    );
  if (p.template?.prepare)
    throw err(
      'UH_INVALID',
      "parameter 'template.prepare': making a template at create time is not supported; create and start the instance, then make it a template (POST /v1/instances/templates)",
    );
  const from = p.template ? 'template' : p.checkpoint ? 'checkpoint' : null;
  if (from) {
    refTarget((p.template ?? p.checkpoint)!, `parameter '${from}'`);
    for (const k of FROM_TEMPLATE)
      if (p[k] !== undefined)
        throw err(
          'UH_INVALID',
          `parameter '${k}': an instance created from a ${from} has the ${from}'s (its memory was booted with them)`,
        );
  }
  if (p.wait_timeout_ms !== undefined && p.wait_timeout_ms !== 0 && !p.autostart) {
    throw err('UH_INVALID', "parameter 'wait_timeout_ms' is only valid together with 'autostart: true'");
  }
  const policy = POLICIES[p.restart_policy ?? 'never'];
  if (!policy)
    throw err(
      'UH_INVALID',
      `parameter 'restart_policy': '${p.restart_policy}' is not one of never, always, on-failure`,
    );
  for (const f of p.features ?? []) {
    if (!(FEATURES as readonly string[]).includes(f)) {
      throw err('UH_INVALID', `parameter 'features': '${f}' is not one of ${FEATURES.join(', ')}`);
    }
  }
  const scaleToZero = scaleToZeroOf(p);
  if (scaleToZero && !p.service_group) {
    throw err(
      'UH_INVALID',
      "feature 'scale-to-zero' needs a 'service_group' to receive the requests that wake the instance",
    );
  }
  if ((p.replicas ?? 0) > 0 && (p.volumes?.length ?? 0) > 0) {
    throw err(
      'UH_INVALID',
      "parameter 'replicas': instances with a volume cannot have replicas (a volume attaches to one instance)",
    );
  }
  for (const [i, v] of (p.volumes ?? []).entries()) checkVolumeSpec(v, i);
  if ((p.volumes?.length ?? 0) > 1)
    throw err('UH_INVALID', "parameter 'volumes': an instance can have at most one volume");
  const sg = p.service_group;
  if (
    sg &&
    (sg.uuid !== undefined || sg.name !== undefined) &&
    (sg.services !== undefined ||
      sg.domains !== undefined ||
      sg.soft_limit !== undefined ||
      sg.hard_limit !== undefined)
  ) {
    throw err(
      'UH_INVALID',
      "parameter 'service_group': give either a reference (uuid or name) or a new group's services and domains",
    );
  }
  if (sg && sg.uuid !== undefined && sg.name !== undefined) {
    throw err('UH_NOT_BOTH', "parameter 'service_group': give either 'uuid' or 'name', not both");
  }
  for (const [k, v] of Object.entries(p.env ?? {})) {
    const why = envValueProblem(v);
    if (why)
      throw err('UH_INVALID', `parameter 'env': the value of '${k}' ${why} (it travels on the kernel command line)`);
  }
  const args = splitArgs(p.args);
  for (const [i, a] of (args ?? []).entries()) {
    const why = wordProblem(a);
    if (why) throw err('UH_INVALID', `parameter 'args': argument ${i} ${why} (it travels on the kernel command line)`);
  }
  return { policy, args, scaleToZero };
}

/** A volume entry names an existing volume (uuid or name) or sizes a new one: exactly one of the three. */
function checkVolumeSpec(v: VolumeSpec, i: number): void {
  const given = [v.uuid, v.name, v.size_mb].filter((x) => x !== undefined).length;
  if (given !== 1) {
    throw err(
      given === 0 ? 'UH_MISSING_ID' : 'UH_NOT_BOTH',
      `parameter 'volumes[${i}]': give exactly one of 'uuid', 'name' or 'size_mb'`,
    );
  }
  checkMountPath(v.at);
}

/** The peers the instance rules call (instances.ts and this file). */
export type InstanceDeps = ServiceBase & {
  images: ImageService;
  groups: GroupService;
  volumes: VolumeService;
  autoscale: AutoscaleService;
};

/** Creates one instance (and its replicas, group, volume) inside `tx`. Returns the new records. */
export async function createInTx(
  deps: InstanceDeps,
  tx: Tx,
  user: UserRec,
  p: CreateParams,
): Promise<{ instances: InstanceRec[]; group: ServiceGroupRec | null }> {
  const { policy, args, scaleToZero } = checkCreate(p);
  // creates share the address pool and the host's totals: one at a time (not one conflict and retry each)
  await tx.lock(ADMISSION);
  // a template or checkpoint: the instance starts from its memory, with its image, memory, args and env
  const tpl = p.template
    ? await findTemplate(tx, user, refTarget(p.template, "parameter 'template'"))
    : p.checkpoint
      ? await readyCheckpoint(tx, user, refTarget(p.checkpoint, "parameter 'checkpoint'"))
      : null;
  const image = await deps.images.resolve(tx, user, tpl ? tpl.image : p.image!);
  const memory = tpl ? tpl.memory_mb : (p.memory_mb ?? 128);
  const { limits } = effectiveQuotas(deps.config, user);
  if (memory < limits.min_memory_mb || memory > limits.max_memory_mb) {
    throw err(
      'UH_LIMIT',
      `memory_mb ${memory} is outside the account limits [${limits.min_memory_mb}, ${limits.max_memory_mb}]`,
    );
  }
  if (memory < image.minMemoryMb) {
    throw err(
      'UH_MEMORY_TOO_SMALL',
      `memory_mb ${memory} is too small for image '${p.image ?? tpl?.image_ref}': it needs at least ${image.minMemoryMb}`,
    );
  }
  const count = 1 + (p.replicas ?? 0);
  const live = p.autostart ? count : 0;
  await assertQuota(tx, deps.config, user, { instances: count, live_instances: live, live_memory_mb: live * memory });

  let group: ServiceGroupRec | null = null;
  const sg = p.service_group;
  if (sg) {
    if (sg.uuid !== undefined || sg.name !== undefined) {
      group = await deps.groups.resolveInTx(tx, user, sg.uuid !== undefined ? { uuid: sg.uuid } : { name: sg.name! });
    } else {
      group = await deps.groups.createInTx(
        tx,
        user,
        { services: sg.services ?? [], domains: sg.domains, soft_limit: sg.soft_limit, hard_limit: sg.hard_limit },
        false,
      );
    }
  }

  let volume: { rec: VolumeRec; at: string; readonly: boolean } | null = null;
  const vs = p.volumes?.[0];
  if (vs) {
    const rec =
      vs.size_mb !== undefined
        ? await deps.volumes.createInTx(tx, user, { size_mb: vs.size_mb }, false, null)
        : await deps.volumes.resolveInTx(tx, user, vs);
    volume = { rec, at: vs.at, readonly: vs.readonly ?? false };
  }

  const now = new Date(deps.clock.now()).toISOString();
  // a volume's file, a template's memory are on one host: the instances go there (docs/hosts.md)
  const volHost = volume?.rec.host_id;
  const pinned = volHost
    ? { hostId: volHost, why: `volume '${volume!.rec.name}' is on one host (volumes are files there)` }
    : tpl?.host_id && tpl.snapshot
      ? { hostId: tpl.host_id, why: `the memory of '${tpl.name}' is a file on one host` }
      : null;
  const hostIds = await placeInTx(tx, deps.config.capacity, {
    count,
    memoryMb: memory,
    live: live > 0,
    groupId: group?.id,
    pinned,
  });
  if (volume && !volHost) await tx.volumes.update(volume.rec.id, { host_id: hostIds[0]! });
  const instances: InstanceRec[] = [];
  for (let k = 0; k < count; k++) {
    let name = p.name ?? instanceDefaultName(image.app);
    if (p.name !== undefined && k > 0) name = `${p.name.slice(0, NAME_MAX - 6)}-${randomSuffix(5)}`;
    if (await tx.instances.getByName(user.id, name))
      throw err('UH_EXISTS', `an instance named '${name}' already exists`);
    const nic = randomUUID();
    const inst: InstanceRec = {
      id: randomUUID(),
      user_id: user.id,
      name,
      created_at: now,
      image: image.digest,
      image_ref: tpl ? tpl.image_ref : p.image!,
      memory_mb: memory,
      args: tpl ? tpl.args : (args ?? []),
      env: tpl ? tpl.env : (p.env ?? {}),
      features: scaleToZero
        ? [...new Set([...(p.features ?? []), 'scale-to-zero', ...(scaleToZero.stateful ? ['stateful'] : [])])]
        : (p.features ?? []),
      restart_policy: policy,
      state: p.autostart ? 'starting' : 'stopped',
      desired: p.autostart ? 'running' : 'stopped',
      ...NEVER_RUN,
      ...specDefaults(),
      service_group_id: group?.id ?? null,
      private_ip: await allocateIp(tx, deps.subnet),
      mac: macFor(nic),
      nic_id: nic,
      autoscale_group_id: null,
      host_id: hostIds[k]!,
      runtime: {},
      // its first start restores the template's (checkpoint's) memory (the file stays theirs; counted there)
      ...(tpl?.snapshot
        ? {
            snapshot: { ...tpl.snapshot, reason: tpl.snapshot.reason, bytes: 0, source: tpl.id, taken_from: undefined },
          }
        : {}),
    };
    await tx.instances.insert(inst);
    if (group) await deps.groups.onInstanceAttachedInTx(tx, user, group.id);
    if (volume) await deps.volumes.attachInTx(tx, volume.rec, inst, volume.at, volume.readonly, true);
    instances.push(inst);
  }
  if (scaleToZero && group) {
    await deps.autoscale.configureScaleToZeroInTx(tx, user, group, instances[0]!, scaleToZero.cooldownMs);
  }
  return { instances, group };
}
