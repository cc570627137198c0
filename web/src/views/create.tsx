// Create an instance: the form checks what the API checks (the same name and port rules, imported
// from the daemon's sources) and still shows the API's own message when it refuses.
import { useEffect, useState } from 'preact/hooks';
import { api, ok } from '../api/client';
import { bodyOf, DRAFT_KEY, EMPTY, validate, type Draft, type Port } from '../create-form';
import { ErrorBox, Field, Page, useLoad } from '../ui';
import { imageTags } from './instances';

function loadDraft(): Draft {
  try {
    return { ...EMPTY, ...(JSON.parse(sessionStorage.getItem(DRAFT_KEY) ?? '{}') as Partial<Draft>) };
  } catch {
    return EMPTY;
  }
}

export function Create() {
  const [d, setD] = useState<Draft>(loadDraft);
  const [touched, setTouched] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const images = useLoad(() => imageTags(true));
  const volumes = useLoad(() => ok(api.GET('/v1/volumes'), 'volumes'));
  // kept while typing: a session that ends mid-form returns here with the same values
  useEffect(() => sessionStorage.setItem(DRAFT_KEY, JSON.stringify(d)), [d]);
  const set = <K extends keyof Draft>(k: K, v: Draft[K]) => setD((cur) => ({ ...cur, [k]: v }));
  const problems = touched ? validate(d) : {};
  const input = (k: keyof Draft, extra: Record<string, unknown> = {}) => ({
    id: `f-${k}`,
    value: d[k] as string,
    'aria-invalid': problems[k] ? true : undefined,
    'aria-describedby': problems[k] ? `f-${k}-error` : undefined,
    onInput: (e: Event) => set(k, (e.currentTarget as HTMLInputElement).value as never),
    ...extra,
  });
  const tagList = [...(images.data?.values() ?? [])].flat().sort();
  const setPort = (i: number, p: Partial<Port>) =>
    set(
      'ports',
      d.ports.map((x, k) => (k === i ? { ...x, ...p } : x)),
    );

  return (
    <Page title="Create an instance">
      <form
        noValidate
        onSubmit={async (ev) => {
          ev.preventDefault();
          setTouched(true);
          if (Object.keys(validate(d)).length > 0) {
            document.querySelector<HTMLElement>('[aria-invalid="true"]')?.focus();
            return;
          }
          setBusy(true);
          setError(null);
          try {
            const [made] = await ok(api.POST('/v1/instances', { body: bodyOf(d) }), 'instances');
            sessionStorage.removeItem(DRAFT_KEY);
            location.hash = made?.uuid ? `#/instances/${made.uuid}` : '#/instances';
          } catch (x) {
            setError(x);
          } finally {
            setBusy(false);
          }
        }}
      >
        <Field
          id="f-image"
          label="Image"
          hint="A tag from the list, or any reference the platform can pull."
          error={problems.image}
        >
          <input {...input('image', { list: 'image-tags', required: true, autocomplete: 'off' })} />
          <datalist id="image-tags">
            {tagList.map((t) => (
              <option key={t} value={t} />
            ))}
          </datalist>
        </Field>
        <Field
          id="f-name"
          label="Name (optional)"
          hint="Letters, digits and hyphens; a default is made from the image."
          error={problems.name}
        >
          <input {...input('name', { autocomplete: 'off' })} />
        </Field>
        <Field id="f-memory" label="Memory (MB)" error={problems.memory}>
          <input {...input('memory', { type: 'number', min: 1, inputMode: 'numeric' })} />
        </Field>
        <Field id="f-args" label="Arguments" hint="Split like a shell does." error={problems.args}>
          <input {...input('args', { autocomplete: 'off' })} />
        </Field>
        <Field id="f-env" label="Environment" hint="One KEY=VALUE per line." error={problems.env}>
          <textarea {...input('env', { rows: 3 })} />
        </Field>
        <fieldset>
          <legend>Published ports (a new service group)</legend>
          {d.ports.length === 0 && <p class="muted">None: the instance is reachable only on the private network.</p>}
          {d.ports.map((p, i) => (
            <div class="port-row" key={i} role="group" aria-label={`Port ${i + 1}`}>
              <label>
                Port{' '}
                <input
                  type="number"
                  min={1}
                  max={65535}
                  value={p.port}
                  onInput={(e) => setPort(i, { port: e.currentTarget.value })}
                />
              </label>
              <label>
                to port{' '}
                <input
                  type="number"
                  min={1}
                  max={65535}
                  value={p.destination}
                  placeholder="same"
                  onInput={(e) => setPort(i, { destination: e.currentTarget.value })}
                />
              </label>
              {(['tls', 'http', 'redirect'] as const).map((h) => (
                <label key={h} class="check">
                  <input
                    type="checkbox"
                    checked={p[h]}
                    onChange={(e) => setPort(i, { [h]: e.currentTarget.checked })}
                  />{' '}
                  {h}
                </label>
              ))}
              <button
                type="button"
                class="secondary"
                onClick={() =>
                  set(
                    'ports',
                    d.ports.filter((_, k) => k !== i),
                  )
                }
              >
                Remove port {p.port}
              </button>
            </div>
          ))}
          <button
            type="button"
            class="secondary"
            onClick={() =>
              set('ports', [...d.ports, { port: '443', destination: '8080', tls: true, http: true, redirect: false }])
            }
          >
            Add a port
          </button>
          {problems.ports && (
            <p class="field-error" role="alert">
              {problems.ports}
            </p>
          )}
          <Field
            id="f-domains"
            label="Domains (optional)"
            hint="Names under the metro domain, or your own (a certificate is requested)."
            error={problems.domains}
          >
            <input {...input('domains', { autocomplete: 'off' })} />
          </Field>
        </fieldset>
        <fieldset>
          <legend>Volume</legend>
          <Field id="f-volume" label="Volume" error={problems.volume}>
            <select id="f-volume" value={d.volume} onChange={(e) => set('volume', e.currentTarget.value)}>
              <option value="">none</option>
              {volumes.data?.map((v) => (
                <option
                  key={v.uuid}
                  value={v.name}
                  disabled={v.attached_to !== undefined && (v.attached_to as unknown[]).length > 0}
                >
                  {v.name} ({v.size_mb} MB, {v.state})
                </option>
              ))}
            </select>
          </Field>
          {d.volume && (
            <Field id="f-at" label="Mount path" error={problems.at}>
              <input {...input('at')} />
            </Field>
          )}
        </fieldset>
        <fieldset>
          <legend>Lifecycle</legend>
          <Field id="f-restart" label="Restart policy">
            <select
              id="f-restart"
              value={d.restart}
              onChange={(e) => set('restart', e.currentTarget.value as Draft['restart'])}
            >
              <option value="never">never</option>
              <option value="on-failure">on-failure</option>
              <option value="always">always</option>
            </select>
          </Field>
          <Field id="f-s2z" label="Scale to zero" error={problems.s2z}>
            <select id="f-s2z" value={d.s2z} onChange={(e) => set('s2z', e.currentTarget.value as Draft['s2z'])}>
              <option value="off">off</option>
              <option value="on">on: standby when idle, woken by a request</option>
            </select>
          </Field>
          {d.s2z === 'on' && (
            <>
              <Field id="f-cooldown" label="Cooldown (ms)" error={problems.cooldown}>
                <input {...input('cooldown', { type: 'number', min: 0 })} />
              </Field>
              <label class="check">
                <input
                  type="checkbox"
                  checked={d.stateful}
                  onChange={(e) => set('stateful', e.currentTarget.checked)}
                />{' '}
                stateful: keep memory in standby
              </label>
            </>
          )}
          <Field
            id="f-replicas"
            label="Replicas"
            hint="Additional instances with the same settings."
            error={problems.replicas}
          >
            <input {...input('replicas', { type: 'number', min: 0, max: 64 })} />
          </Field>
          <label class="check">
            <input type="checkbox" checked={d.autostart} onChange={(e) => set('autostart', e.currentTarget.checked)} />{' '}
            start it now
          </label>
        </fieldset>
        <ErrorBox error={error} />
        <div class="form-actions">
          <button type="submit" disabled={busy}>
            {busy ? 'Creating…' : 'Create instance'}
          </button>
          <button type="button" class="secondary" onClick={() => (setD(EMPTY), setTouched(false), setError(null))}>
            Clear the form
          </button>
        </div>
      </form>
    </Page>
  );
}
