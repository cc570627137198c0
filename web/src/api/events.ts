// The live feed: one `GET /v1/events` stream per tab, read with fetch (it carries the token header,
// which EventSource cannot) and parsed with eventsource-parser; reconnects resume after the last id.
import { createParser } from 'eventsource-parser';
import type { paths } from './schema';
import { session } from './client';

export type InstanceEvent = paths['/v1/events']['get']['responses']['200']['content']['text/event-stream'];

type Listener = (e: InstanceEvent) => void;
const listeners = new Set<Listener>();
const stateListeners = new Set<(live: boolean) => void>();
/** The newest events, for the events view (oldest first). */
export const recent: InstanceEvent[] = [];
const RECENT_MAX = 500;

let ctl: AbortController | null = null;
let live = false;

function setLive(v: boolean): void {
  if (v === live) return;
  live = v;
  for (const fn of stateListeners) fn(v);
}

export const isLive = (): boolean => live;
export function onLive(fn: (live: boolean) => void): () => void {
  stateListeners.add(fn);
  return () => stateListeners.delete(fn);
}
export function subscribe(fn: Listener): () => void {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

/** Starts following (once per sign-in); `stop` ends it at sign-out. */
export function start(): void {
  if (ctl) return;
  const c = (ctl = new AbortController());
  void run(c.signal);
}
export function stop(): void {
  ctl?.abort();
  ctl = null;
  recent.length = 0;
  setLive(false);
}

async function run(signal: AbortSignal): Promise<void> {
  let last: string | undefined;
  let backoff = 500;
  while (!signal.aborted) {
    try {
      const token = session.token();
      if (!token) return;
      const headers: Record<string, string> = { authorization: `Bearer ${token}`, accept: 'text/event-stream' };
      if (last) headers['last-event-id'] = last;
      const res = await fetch('/v1/events', { headers, signal, cache: 'no-store' });
      if (res.status === 401) return; // the API client's own calls take the user back to sign-in
      if (!res.ok || !res.body) throw new Error(`events: ${res.status}`);
      setLive(true);
      backoff = 500;
      const parser = createParser({
        onEvent(m) {
          if (m.id) last = m.id;
          let e: InstanceEvent;
          try {
            e = JSON.parse(m.data) as InstanceEvent;
          } catch {
            return;
          }
          recent.push(e);
          if (recent.length > RECENT_MAX) recent.splice(0, recent.length - RECENT_MAX);
          for (const fn of listeners) fn(e);
        },
      });
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        parser.feed(value);
      }
    } catch {
      if (signal.aborted) return;
    }
    setLive(false);
    await new Promise((r) => setTimeout(r, backoff));
    backoff = Math.min(backoff * 2, 10_000);
  }
}
