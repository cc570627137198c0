// Small shared pieces of the console: badges, tables, messages, sparklines, and the hooks that
// load data and keep it live.
import type { ButtonHTMLAttributes, ComponentChildren } from 'preact';
import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import { messageOf } from './api/client';
import { subscribe, type InstanceEvent } from './api/events';

export function Badge({ state }: { state: string | undefined }) {
  const s = state ?? 'unknown';
  return <span class={`badge badge-${s.replace(/[^a-z-]/g, '')}`}>{s}</span>;
}

export function ErrorBox({ error }: { error: unknown }) {
  if (!error) return null;
  return (
    <p class="error" role="alert">
      {messageOf(error)}
    </p>
  );
}

export function Notice({ children }: { children: ComponentChildren }) {
  return (
    <p class="notice" role="status">
      {children}
    </p>
  );
}

/** What an empty list means and what to do next. */
export function Empty({ title, children }: { title: string; children?: ComponentChildren }) {
  return (
    <div class="empty">
      <p>
        <strong>{title}</strong>
      </p>
      {children}
    </div>
  );
}

export function Page({
  title,
  actions,
  children,
}: {
  title: string;
  actions?: ComponentChildren;
  children: ComponentChildren;
}) {
  useEffect(() => {
    document.title = `${title} · unihost`;
  }, [title]);
  return (
    <section aria-labelledby="page-title">
      <div class="page-head">
        <h1 id="page-title" tabIndex={-1}>
          {title}
        </h1>
        {actions && <div class="actions">{actions}</div>}
      </div>
      {children}
    </section>
  );
}

/** A table that scrolls sideways on a narrow screen instead of breaking the page. */
export function Table({ label, children }: { label: string; children: ComponentChildren }) {
  return (
    <div class="table-wrap" role="region" aria-label={label} tabIndex={0}>
      <table>{children}</table>
    </div>
  );
}

/** A small line chart of the last values (no axes: the newest value is written beside it). */
export function Sparkline({ values, label, unit }: { values: number[]; label: string; unit: string }) {
  const w = 120;
  const h = 28;
  const max = Math.max(1, ...values);
  const pts = values.map(
    (v, i) => `${((i / Math.max(1, values.length - 1)) * w).toFixed(1)},${(h - (v / max) * (h - 2) - 1).toFixed(1)}`,
  );
  const last = values[values.length - 1];
  return (
    <figure class="spark">
      <svg
        width={w}
        height={h}
        viewBox={`0 0 ${w} ${h}`}
        role="img"
        aria-label={`${label}: last ${values.length} samples`}
      >
        <polyline points={pts.join(' ')} fill="none" stroke="currentColor" stroke-width="1.5" />
      </svg>
      <figcaption>
        {label}: <strong>{last === undefined ? '—' : `${last.toFixed(unit === '%' ? 0 : 1)} ${unit}`}</strong>
      </figcaption>
    </figure>
  );
}

/** Loads `fn` once and on `reload()`; `error` holds the API's message. */
export function useLoad<T>(fn: () => Promise<T>, deps: unknown[] = []) {
  const [data, setData] = useState<T | undefined>(undefined);
  const [error, setError] = useState<unknown>(null);
  const [loading, setLoading] = useState(true);
  const seq = useRef(0);
  const reload = useCallback(async () => {
    const n = ++seq.current;
    try {
      const v = await fn();
      if (n === seq.current) {
        setData(v);
        setError(null);
      }
    } catch (e) {
      if (n === seq.current) setError(e);
    } finally {
      if (n === seq.current) setLoading(false);
    }
  }, deps);
  useEffect(() => {
    setLoading(true);
    void reload();
  }, [reload]);
  return { data, setData, error, loading, reload };
}

/** Calls `fn` for each instance event, while mounted. */
export function useEvents(fn: (e: InstanceEvent) => void, deps: unknown[] = []) {
  useEffect(() => subscribe(fn), deps);
}

/** Reloads after any instance event, at most every `ms` (lists that only need a refresh). */
export function useRefreshOnEvents(reload: () => unknown, ms = 300) {
  const timer = useRef<ReturnType<typeof setTimeout> | null>(null);
  useEvents(() => {
    if (timer.current) return;
    timer.current = setTimeout(() => {
      timer.current = null;
      reload();
    }, ms);
  }, [reload]);
  useEffect(() => () => void (timer.current && clearTimeout(timer.current)), []);
}

/** Calls `fn` every `ms` while mounted (and `on`). */
export function useInterval(fn: () => void, ms: number, on = true) {
  const saved = useRef(fn);
  saved.current = fn;
  useEffect(() => {
    if (!on) return;
    const t = setInterval(() => saved.current(), ms);
    return () => clearInterval(t);
  }, [ms, on]);
}

/** A button that runs an async action, shows it is busy, and reports the API's refusal. */
export function ActionButton({
  onClick,
  children,
  danger,
  confirm: ask,
  ...rest
}: { onClick: () => Promise<unknown>; children: ComponentChildren; danger?: boolean; confirm?: string } & Omit<
  ButtonHTMLAttributes<HTMLButtonElement>,
  'onClick'
>) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  return (
    <span class="action">
      <button
        type="button"
        class={danger ? 'danger' : undefined}
        disabled={busy}
        aria-busy={busy}
        onClick={async () => {
          if (ask && !window.confirm(ask)) return;
          setBusy(true);
          setError(null);
          try {
            await onClick();
          } catch (e) {
            setError(e);
          } finally {
            setBusy(false);
          }
        }}
        {...rest}
      >
        {children}
      </button>
      <ErrorBox error={error} />
    </span>
  );
}

/** A labelled form field (the label is tied to the control by id). */
export function Field({
  id,
  label,
  hint,
  error,
  children,
}: {
  id: string;
  label: string;
  hint?: string;
  error?: string | null;
  children: ComponentChildren;
}) {
  return (
    <div class={`field${error ? ' invalid' : ''}`}>
      <label for={id}>{label}</label>
      {children}
      {hint && (
        <small id={`${id}-hint`} class="hint">
          {hint}
        </small>
      )}
      {error && (
        <small id={`${id}-error`} class="field-error" role="alert">
          {error}
        </small>
      )}
    </div>
  );
}
