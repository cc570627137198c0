import type { Command } from 'commander';
import YAML from 'yaml';
import type { InstanceEvent } from '../../client/index.js';
import { addClientOptions, ctxOf, examples } from '../shared/context.js';
import { table } from '../shared/output.js';
import { positiveInt } from '../shared/parse.js';

interface EventsOpts {
  follow?: boolean;
  instance?: string;
  group?: string;
  from: string;
}

/** The change an event records, in a few words. */
function change(e: InstanceEvent): string {
  if (e.type === 'state') return `${e.from_state ?? '?'} -> ${e.to_state ?? '?'}`;
  if (e.type === 'notice') return `notice: ${e.message ?? ''}`;
  return e.type;
}

/** One table row; columns are fixed-width so rows printed one by one still line up. */
function row(e: InstanceEvent): string {
  return table([
    [String(e.id).padEnd(6), e.at.padEnd(24), e.instance.name.padEnd(20), e.instance.uuid.padEnd(36), change(e)],
  ]);
}

const HEADER = table([['ID'.padEnd(6), 'AT'.padEnd(24), 'INSTANCE'.padEnd(20), 'UUID'.padEnd(36), 'CHANGE']]);

/**
 * `unihost events`: the instance event log. Events print as they arrive (a
 * table row, one JSON object per line, or one YAML document each), so `-f`
 * output can be piped. Without -f the command ends at the server's
 * `: caught-up` marker, i.e. after the events that existed when it connected.
 */
export function registerEvents(program: Command): void {
  const cmd = addClientOptions(
    program
      .command('events')
      .description('print instance events (created, state changes, deleted); -f keeps following')
      .option('-f, --follow', 'keep printing new events until Ctrl-C')
      .option('--instance <instance>', 'only events of this instance (name or UUID)')
      .option('--group <group>', 'only events of instances of this service group (name or UUID)')
      .option('--from <id>', 'start after this event id (0: from the beginning)', '0'),
  ).action(async (o: EventsOpts, c: Command) => {
    const { client, format } = ctxOf(c);
    const from = positiveInt('--from', o.from, 0);
    const stop = new AbortController();
    process.once('SIGINT', () => stop.abort());
    let first = true;
    try {
      for await (const e of client.events({
        from,
        instance: o.instance,
        group: o.group,
        follow: o.follow,
        signal: stop.signal,
        onReconnect: (id, n, why) =>
          console.error(`unihost: events stream lost (${why}); reconnecting after ${id} (#${n})`),
      })) {
        if (format === 'json') console.log(JSON.stringify(e));
        else if (format === 'yaml') console.log(`---\n${YAML.stringify(e).trimEnd()}`);
        else console.log(first ? `${HEADER}\n${row(e)}` : row(e));
        first = false;
      }
    } catch (e) {
      if (!stop.signal.aborted) throw e;
    }
    if (first && format === 'table' && !o.follow) console.log('no events');
  });
  examples(cmd, [
    'unihost events',
    'unihost events -f --group web',
    'unihost events --instance api --from 120 -o json',
  ]);
}
