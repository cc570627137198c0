import type { Command } from 'commander';
import { type CreateParams, type CreatedInstance } from '../../client/index.js';
import { ctxOf, examples } from '../shared/context.js';
import { listTable } from '../shared/output.js';
import { collect, durationMs, keyValues, portSpec, positiveInt } from '../shared/parse.js';
import { withSpinner } from '../shared/spinner.js';
import { UsageError } from '../shared/exit.js';

interface CreateOpts {
  name?: string;
  template?: string;
  checkpoint?: string;
  memory?: string;
  env: string[];
  port: string[];
  domain: string[];
  serviceGroup?: string;
  volume: string[];
  replicas?: string;
  restart?: string;
  scaleToZero?: boolean;
  deleteOnStop?: boolean;
  start?: boolean;
  wait: string;
}

/** `NAME:/path[:ro]` of an existing volume. */
function volumeSpec(v: string): NonNullable<CreateParams['volumes']>[number] {
  const m = /^([^:]+):(\/[^:]*)(?::(ro|rw))?$/.exec(v);
  if (!m) throw new UsageError(`--volume '${v}' is not NAME:/PATH[:ro]`);
  return { name: m[1]!, at: m[2]!, ...(m[3] === 'ro' ? { readonly: true } : {}) };
}

export function createParams(image: string | undefined, args: string[], o: CreateOpts): CreateParams {
  const from = o.template !== undefined ? '--template' : o.checkpoint !== undefined ? '--checkpoint' : null;
  if ([image, o.template, o.checkpoint].filter((x) => x !== undefined).length !== 1)
    throw new UsageError(
      'give an image, or --template NAME (a template instance) or --checkpoint NAME to start from (one of them)',
    );
  if (from && (args.length > 0 || o.env.length > 0 || o.memory !== undefined || o.volume.length > 0))
    throw new UsageError(
      `${from}: arguments, --env, --memory and --volume are its own (its memory was booted with them)`,
    );
  const p: CreateParams =
    image !== undefined
      ? { image }
      : o.template !== undefined
        ? { template: { name: o.template } }
        : { checkpoint: { name: o.checkpoint! } };
  if (o.name !== undefined) p.name = o.name;
  if (args.length > 0) p.args = args;
  if (o.env.length > 0) p.env = keyValues('--env', o.env);
  if (o.memory !== undefined) p.memory_mb = positiveInt('--memory', o.memory);
  if (o.serviceGroup !== undefined && (o.port.length > 0 || o.domain.length > 0))
    throw new UsageError('--service-group attaches to an existing group: --port and --domain describe a new one');
  if (o.serviceGroup !== undefined) p.service_group = { name: o.serviceGroup };
  else if (o.port.length > 0)
    p.service_group = {
      services: o.port.map(portSpec),
      ...(o.domain.length > 0 ? { domains: o.domain.map((name) => ({ name })) } : {}),
    };
  else if (o.domain.length > 0) throw new UsageError('--domain needs at least one --port');
  if (o.volume.length > 0) p.volumes = o.volume.map(volumeSpec);
  if (o.replicas !== undefined) p.replicas = positiveInt('--replicas', o.replicas, 0);
  if (o.restart !== undefined) p.restart_policy = o.restart;
  const features = [...(o.scaleToZero ? ['scale-to-zero'] : []), ...(o.deleteOnStop ? ['delete-on-stop'] : [])];
  if (features.length > 0) p.features = features;
  if (o.start) {
    p.autostart = true;
    p.wait_timeout_ms = durationMs('--wait', o.wait);
  }
  return p;
}

export function createdTable(list: CreatedInstance[]): string {
  return listTable(
    list,
    [
      { header: 'NAME', value: (i) => i.name },
      { header: 'UUID', value: (i) => i.uuid },
      { header: 'STATE', value: (i) => i.state },
      { header: 'IP', value: (i) => i.private_ip ?? '' },
      { header: 'FQDN', value: (i) => (i.service_group?.domains ?? []).map((d) => d.fqdn).join(',') },
    ],
    'nothing created',
  );
}

export function registerInstanceCreate(instance: Command): void {
  const cmd = instance
    .command('create')
    .description(
      'create an instance from an image (arguments after the image go to the application), or from a template instance',
    )
    .argument('[image]', 'image reference: app:tag, user/app:tag or a digest (or give --template)')
    .argument('[args...]', 'application arguments (put them after -- when they start with -)')
    .option('-n, --name <name>', 'instance name (default <app>-<random>)')
    .option('-t, --template <name>', "start from this template instance's memory instead of booting an image")
    .option('--checkpoint <name>', "start from this checkpoint's memory instead of booting an image")
    .option('-m, --memory <MB>', 'memory in MiB (default 128)')
    .option('-e, --env <KEY=VALUE>', 'environment variable (repeatable)', collect, [])
    .option(
      '-p, --port <spec>',
      'publish a port in a new service group: PORT[:DEST][/tls+http] (repeatable)',
      collect,
      [],
    )
    .option('-d, --domain <name>', 'domain of the new service group (repeatable; with --port)', collect, [])
    .option('-g, --service-group <name>', 'attach to an existing service group')
    .option('-v, --volume <NAME:/PATH[:ro]>', 'mount an existing volume (repeatable)', collect, [])
    .option('-r, --replicas <n>', 'additional identical instances')
    .option('--restart <policy>', 'restart policy: never, always or on-failure')
    .option('--scale-to-zero', 'stop when idle, start on the next request (needs --port)')
    .option('--delete-on-stop', 'delete the instance once it stops')
    .option('-S, --start', 'start it right away and wait until it runs')
    .option('-w, --wait <duration>', 'with --start: longest wait for running (0: do not wait)', '60s')
    .action(async (image: string | undefined, args: string[], o: CreateOpts, c: Command) => {
      const ctx = ctxOf(c);
      const p = createParams(image, args, o);
      const what = p.name ?? image ?? `a copy of ${o.template ?? o.checkpoint}`;
      const created = await withSpinner(
        p.autostart && p.wait_timeout_ms ? `creating and starting ${what}` : `creating ${what}`,
        () => ctx.client.instances.create(p),
      );
      ctx.print(created, () => createdTable(created));
    });
  examples(cmd, [
    'unihost instance create echo:latest -- hello world',
    'unihost instance create -n web -m 256 -p 443:8080 --start http:latest',
    'unihost instance create -n job -e MODE=batch --restart on-failure --start exit:latest -- 3',
    'unihost instance create -n db -v data:/var/lib/db -o json app:1.0',
    'unihost instance create -n web-2 --template web-golden -p 443:8080 --start',
  ]);
}
