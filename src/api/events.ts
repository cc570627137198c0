import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { ServerResponse } from 'node:http';
import { err } from '../errors.js';
import { findGroup } from '../services/groups.js';
import type { Services } from '../services/index.js';
import type { EventFilter, EventRec, UserRec } from '../store/types.js';
import { UUID_RE } from './request.js';

/** Events read from the store per query: a long backlog goes out in pages. */
const PAGE = 500;
/** A comment line this often keeps proxies from closing an idle stream. */
const HEARTBEAT_MS = 15_000;

const QUERY_KEYS = new Set(['from', 'instance', 'group']);

/** The event as the stream sends it (`data:` of one server-sent event). */
function view(e: EventRec): Record<string, unknown> {
  const out: Record<string, unknown> = {
    id: e.id,
    at: e.at,
    type: e.type,
    instance: { uuid: e.instance_id, name: e.instance_name },
  };
  if (e.group_id) out.service_group = { uuid: e.group_id };
  if (e.from_state) out.from_state = e.from_state;
  if (e.to_state) out.to_state = e.to_state;
  if (e.message) out.message = e.message;
  return out;
}

/** Resolves when `w` has taken what was written (or closed). */
function drained(w: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      w.off('drain', done);
      w.off('close', done);
      resolve();
    };
    w.once('drain', done);
    w.once('close', done);
  });
}

/** Where to resume: `Last-Event-ID` (a reconnecting EventSource) wins over `from`; else only new events. */
async function startId(req: FastifyRequest, q: Record<string, string>, services: Services): Promise<number> {
  const raw = (req.headers['last-event-id'] as string | undefined) ?? q.from;
  if (raw === undefined) return services.store.read((tx) => tx.events.lastId(req.user!.id));
  if (!/^\d{1,15}$/.test(raw)) throw err('UH_INVALID', `'from' / Last-Event-ID: '${raw}' is not an event id`);
  return Number(raw);
}

/** The filter of `instance` (uuid or name) and `group` (uuid or name; it must exist). */
async function filterOf(q: Record<string, string>, user: UserRec, services: Services): Promise<EventFilter> {
  for (const k of Object.keys(q)) {
    if (!QUERY_KEYS.has(k)) throw err('UH_INVALID', `unknown query parameter '${k}'`);
    if (typeof q[k] !== 'string') throw err('UH_INVALID', `query parameter '${k}' given more than once`);
  }
  const f: EventFilter = {};
  if (q.instance !== undefined) {
    if (UUID_RE.test(q.instance)) f.instanceId = q.instance.toLowerCase();
    else f.instanceName = q.instance.toLowerCase();
  }
  if (q.group !== undefined) {
    const t = UUID_RE.test(q.group) ? { uuid: q.group.toLowerCase() } : { name: q.group.toLowerCase() };
    f.groupId = (await services.store.read((tx) => findGroup(tx, user, t))).id;
  }
  return f;
}

/**
 * `GET /v1/events`: the user's instance events as server-sent events, the
 * backlog after the resume point first, then live ones as they commit. Each
 * event's SSE id is its log id, so a client that reconnects with
 * `Last-Event-ID` (or `from`) gets every later event once.
 */
export function serveEvents(app: FastifyInstance, services: Services, perUser: number): void {
  /** open streams per user id */
  const streams = new Map<string, number>();
  // Open streams never end by themselves: closing the daemon ends them, or close would wait forever.
  const open = new Set<() => void>();
  app.addHook('preClose', (done) => {
    for (const end of open) end();
    done();
  });
  app.get('/v1/events', async (req: FastifyRequest, reply: FastifyReply) => {
    const user = req.user!;
    const q = req.query as Record<string, string>;
    const filter = await filterOf(q, user, services);
    let last = await startId(req, q, services);
    const mine = streams.get(user.id) ?? 0;
    if (mine >= perUser)
      throw err(
        'UH_TOO_MANY',
        `too many event streams: this user has ${mine} open (at most ${perUser}); close one, or follow several instances with one stream`,
      );
    streams.set(user.id, mine + 1);

    reply.hijack();
    const res = reply.raw;
    res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      // the socket goes with the stream: an ended stream's connection must not linger as keep-alive
      connection: 'close',
      'x-request-id': req.id,
    });
    res.write(': unihost events\n\n');

    let closed = false;
    let again = false;
    let caughtUp = false;
    let running: Promise<void> | null = null;
    // One reader at a time: a change during a read makes it read once more, so nothing is sent twice.
    const pump = (): void => {
      if (closed) return;
      if (running) {
        again = true;
        return;
      }
      running = (async () => {
        do {
          again = false;
          for (;;) {
            const batch = await services.store.read((tx) => tx.events.after(user.id, last, filter, PAGE));
            if (closed) return;
            let full = false;
            for (const e of batch)
              full = !res.write(`id: ${e.id}\nevent: ${e.type}\ndata: ${JSON.stringify(view(e))}\n\n`) || full;
            // back-pressure: a slow reader is not sent the next page until it has taken this one
            if (full && !closed) await drained(res);
            if (batch.length > 0) last = batch[batch.length - 1]!.id;
            if (batch.length < PAGE) break;
          }
        } while (again && !closed);
        // Tells a reader that wants only the backlog (`unihost events` without -f) where it ends.
        if (!caughtUp && !closed) res.write(': caught-up\n\n');
        caughtUp = true;
      })()
        .catch((e: unknown) => {
          req.log.warn({ err: e, reqId: req.id }, 'events stream: read failed');
          res.end();
        })
        .finally(() => {
          running = null;
        });
    };
    // the feed says when another process (or this one) committed instance changes: their events are then in the log
    const off = services.store.watch('now', (e) => {
      if (e.type === 'resync' || e.kind === 'instance') pump();
    });
    const heartbeat = setInterval(() => res.write(': keep-alive\n\n'), HEARTBEAT_MS);
    heartbeat.unref();
    const end = () => res.end();
    open.add(end);
    res.on('close', () => {
      closed = true;
      const n = (streams.get(user.id) ?? 1) - 1;
      if (n > 0) streams.set(user.id, n);
      else streams.delete(user.id);
      open.delete(end);
      off();
      clearInterval(heartbeat);
    });
    pump();
  });
}
