// The create form's rules, apart from the view so they can be tested: the draft, what the API would
// refuse (the same name and port checks, imported from the daemon's sources), and the request body.
import type { paths } from './api/schema.js';
import { checkName } from '../../src/domain/names.js';
import { checkServices } from '../../src/domain/ports.js';
import { parseEnv } from './decode.js';

type CreateBody = NonNullable<paths['/v1/instances']['post']['requestBody']>['content']['application/json'];
type Single = Exclude<CreateBody, unknown[]>;

export interface Port {
  port: string;
  destination: string;
  tls: boolean;
  http: boolean;
  redirect: boolean;
}
export interface Draft {
  image: string;
  name: string;
  memory: string;
  args: string;
  env: string;
  ports: Port[];
  domains: string;
  volume: string;
  at: string;
  restart: 'never' | 'always' | 'on-failure';
  s2z: 'off' | 'on';
  stateful: boolean;
  cooldown: string;
  replicas: string;
  autostart: boolean;
}

export const DRAFT_KEY = 'unihost.draft.create';
export const EMPTY: Draft = {
  image: '',
  name: '',
  memory: '128',
  args: '',
  env: '',
  ports: [],
  domains: '',
  volume: '',
  at: '/data',
  restart: 'never',
  s2z: 'off',
  stateful: false,
  cooldown: '1000',
  replicas: '0',
  autostart: true,
};

/** Why the form cannot be sent, per field; empty when it can. The same rules as the API. */
export function validate(d: Draft): Partial<Record<keyof Draft | 'form', string>> {
  const e: Partial<Record<keyof Draft | 'form', string>> = {};
  if (!d.image.trim()) e.image = 'Choose an image.';
  if (d.name.trim()) {
    const c = checkName(d.name.trim());
    if (!c.ok) e.name = `The name ${c.why}.`;
  }
  const mem = Number(d.memory);
  if (!Number.isInteger(mem) || mem < 1) e.memory = 'Memory is a whole number of MB, at least 1.';
  const env = parseEnv(d.env);
  if ('error' in env) e.env = env.error;
  const rep = Number(d.replicas);
  if (!Number.isInteger(rep) || rep < 0 || rep > 64) e.replicas = 'Replicas: a whole number from 0 to 64.';
  if (d.ports.length > 0) {
    try {
      checkServices(portsOf(d.ports));
    } catch (x) {
      e.ports = (x as Error).message;
    }
    if (d.ports.some((p) => !/^\d+$/.test(p.port) || Number(p.port) < 1 || Number(p.port) > 65535))
      e.ports = 'Each port is a number from 1 to 65535.';
  }
  for (const name of d.domains.split(/[\s,]+/).filter(Boolean)) {
    const c = checkName(name);
    if (!c.ok) e.domains = `Domain '${name}' ${c.why}.`;
  }
  if (d.s2z === 'on' && d.ports.length === 0)
    e.s2z = 'Scale-to-zero needs a published port: it wakes the instance on a request.';
  if (d.volume && !d.at.startsWith('/')) e.at = 'The mount path is absolute, like /data.';
  const c = Number(d.cooldown);
  if (d.s2z === 'on' && (!Number.isInteger(c) || c < 0)) e.cooldown = 'Cooldown is a whole number of milliseconds.';
  return e;
}

function portsOf(ports: Port[]) {
  return ports.map((p) => ({
    port: Number(p.port),
    ...(p.destination ? { destination_port: Number(p.destination) } : {}),
    handlers: (['tls', 'http', 'redirect'] as const).filter((h) => p[h]),
  }));
}

/** The API's request body for a valid draft. */
export function bodyOf(d: Draft): Single {
  const env = parseEnv(d.env);
  const b: Single = { image: d.image.trim(), memory_mb: Number(d.memory), autostart: d.autostart };
  if (d.name.trim()) b.name = d.name.trim();
  if (d.args.trim()) b.args = d.args.trim();
  if ('env' in env && Object.keys(env.env).length) b.env = env.env;
  if (d.restart !== 'never') b.restart_policy = d.restart;
  if (Number(d.replicas) > 0) b.replicas = Number(d.replicas);
  const domains = d.domains.split(/[\s,]+/).filter(Boolean);
  if (d.ports.length)
    b.service_group = {
      services: portsOf(d.ports),
      ...(domains.length ? { domains: domains.map((name) => ({ name })) } : {}),
    };
  if (d.volume) b.volumes = [{ name: d.volume, at: d.at }];
  if (d.s2z === 'on')
    b.scale_to_zero = { policy: 'on', cooldown_time_ms: Number(d.cooldown), ...(d.stateful ? { stateful: true } : {}) };
  return b;
}
