import { createParser, type EventSourceMessage } from 'eventsource-parser';
import { setTimeout as sleep } from 'node:timers/promises';
import { request } from 'undici';
import type { Connection } from './config.js';
import { ApiError, ConnectionError } from './errors.js';
import { parseReply, queryString, transportReason } from './http.js';
import type { InstanceEvent } from './types.js';

export interface EventsOptions {
  /** replay the events after this id (0: the whole log); default: only new ones */
  from?: number;
  /** only this instance's events (uuid or name) */
  instance?: string;
  /** only this service group's events (uuid or name; must exist) */
  group?: string;
  /** keep following after the backlog (else end at the server's `: caught-up` marker) */
  follow?: boolean;
  signal?: AbortSignal;
  /** called before each reconnect after a dropped stream, with the id it resumes after */
  onReconnect?: (lastId: number, attempt: number, error: string) => void;
}

/** Back-off between reconnects: 200 ms doubling to 5 s; reset once a stream opens. */
const FIRST_DELAY_MS = 200;
const MAX_DELAY_MS = 5_000;
/** Without -f, this many failed reconnects in a row end the read with a ConnectionError. */
const MAX_ATTEMPTS_BACKLOG = 6;

type Item = { event: InstanceEvent } | { caughtUp: true };

/** Opens one stream after `last`; throws ApiError for a refused request, ConnectionError when unreachable. */
async function open(conn: Connection, o: EventsOptions, last: number | undefined) {
  const query = queryString({ instance: o.instance, group: o.group });
  const headers: Record<string, string> = { authorization: `Bearer ${conn.token}`, accept: 'text/event-stream' };
  if (last !== undefined) headers['last-event-id'] = String(last);
  let r;
  try {
    // no body timeout: an idle stream is normal (the server's keep-alive comments arrive every 15 s)
    r = await request(`${conn.baseUrl}/v1/events${query}`, { headers, signal: o.signal, bodyTimeout: 0 });
  } catch (e) {
    if (o.signal?.aborted) throw e;
    throw new ConnectionError(conn.baseUrl, transportReason(e));
  }
  if (r.statusCode !== 200) {
    parseReply(r.statusCode, await r.body.text(), 'events');
    throw new ConnectionError(conn.baseUrl, `events stream answered HTTP ${r.statusCode}`);
  }
  return r.body;
}

/** The events and markers of one open stream, in order; ends when the stream does. */
async function* items(body: AsyncIterable<Buffer>): AsyncGenerator<Item> {
  const queue: Item[] = [];
  const parser = createParser({
    onEvent: (m: EventSourceMessage) => queue.push({ event: JSON.parse(m.data) as InstanceEvent }),
    onComment: (c: string) => {
      if (c.trim() === 'caught-up') queue.push({ caughtUp: true });
    },
  });
  const decoder = new TextDecoder();
  for await (const chunk of body) {
    parser.feed(decoder.decode(chunk, { stream: true }));
    yield* queue.splice(0);
  }
}

/**
 * Streams `GET /v1/events`. A dropped stream is reopened with
 * `Last-Event-ID` set to the last id seen (after a back-off), so every event
 * comes once, in id order. The first connection's failure, and any refusal
 * by the API (bad token, unknown group), is thrown; later transport failures
 * are retried (without `follow`, up to MAX_ATTEMPTS_BACKLOG in a row).
 */
export async function* streamEvents(conn: Connection, o: EventsOptions = {}): AsyncGenerator<InstanceEvent> {
  let last = o.from;
  let connected = false;
  let attempt = 0;
  for (;;) {
    let error = 'the stream ended';
    try {
      const body = await open(conn, o, last);
      connected = true;
      attempt = 0;
      for await (const it of items(body)) {
        if ('caughtUp' in it) {
          if (!o.follow) return;
          continue;
        }
        // a resumed stream starts after `last`; the check keeps a duplicate out whatever happens
        if (last !== undefined && it.event.id <= last) continue;
        last = it.event.id;
        yield it.event;
      }
    } catch (e) {
      if (o.signal?.aborted || !connected || !isTransport(e)) throw e;
      error = e instanceof ConnectionError ? e.reason : transportReason(e);
    }
    attempt++;
    if (!o.follow && attempt > MAX_ATTEMPTS_BACKLOG) throw new ConnectionError(conn.baseUrl, error);
    o.onReconnect?.(last ?? 0, attempt, error);
    await sleep(Math.min(MAX_DELAY_MS, FIRST_DELAY_MS * 2 ** (attempt - 1)), undefined, { signal: o.signal });
  }
}

/** Errors of a stream cut mid-way (socket closed or reset, a truncated reply), as opposed to a refusal or a bug. */
function isTransport(e: unknown): boolean {
  return e instanceof Error && !(e instanceof ApiError) && !(e instanceof SyntaxError) && !(e instanceof TypeError);
}
