// One instance: every field, the stop reason and code in words, the console log as it grows,
// sparklines of CPU, memory and network, the restart history, and actions.
import { useEffect, useRef, useState } from 'preact/hooks';
import { api, ok, one } from '../api/client';
import { age, bytes, micros, stopCode, stopReason } from '../decode';
import { ActionButton, Badge, ErrorBox, Notice, Page, Sparkline, Table, useEvents, useInterval, useLoad } from '../ui';
import { getInstance, imageTags, ImageName, type Instance } from './instances';

const LOG_CHUNK = 65_536;
const SAMPLES = 30;

function Stop({ i }: { i: Instance }) {
  if (i.stop_reason === undefined) return null;
  const r = stopReason(i.stop_reason);
  const c = i.stop_code !== undefined ? stopCode(i.stop_code) : null;
  return (
    <div class="stop" aria-label="Why it stopped">
      <h2>Why it stopped</h2>
      <p>
        <strong>{r.summary}</strong>{' '}
        <span class="muted">
          (stop_reason {i.stop_reason}: {r.bits.join(', ') || 'no bits set'})
        </span>
      </p>
      {i.exit_code !== undefined && <p>The application exited with code {i.exit_code}.</p>}
      {c && (
        <p>
          Kernel stop code {i.stop_code}: <strong>{c.summary}</strong> <span class="muted">({c.parts.join(', ')})</span>
        </p>
      )}
    </div>
  );
}

/** The console log, read like `logs -f`: from the last 16 KiB on, new bytes every second. */
function Log({ uuid, follow }: { uuid: string; follow: boolean }) {
  const [text, setText] = useState('');
  const [error, setError] = useState<unknown>(null);
  const next = useRef<number>(-16_384);
  const decoder = useRef(new TextDecoder());
  const pre = useRef<HTMLPreElement>(null);
  const busy = useRef(false);
  const read = async () => {
    if (busy.current) return;
    busy.current = true;
    try {
      for (let n = 0; n < 8; n++) {
        const e = await one(
          api.GET('/v1/instances/{uuid}/log', {
            params: { path: { uuid }, query: { offset: next.current, limit: LOG_CHUNK } },
          }),
          'instances',
        );
        const raw = Uint8Array.from(atob(e.output ?? ''), (ch) => ch.charCodeAt(0));
        if (raw.length === 0) break;
        const atBottom = pre.current
          ? pre.current.scrollHeight - pre.current.scrollTop - pre.current.clientHeight < 40
          : true;
        setText((t) => (t + decoder.current.decode(raw, { stream: true })).slice(-400_000));
        next.current = (e.range?.end ?? 0) + 1;
        if (atBottom) requestAnimationFrame(() => pre.current && (pre.current.scrollTop = pre.current.scrollHeight));
        if (raw.length < LOG_CHUNK) break;
      }
      setError(null);
    } catch (x) {
      setError(x);
    } finally {
      busy.current = false;
    }
  };
  useEffect(() => void read(), [uuid]);
  useInterval(read, 1000, follow);
  return (
    <div>
      <h2 id="log-title">Console log {follow && <span class="muted">(following)</span>}</h2>
      <ErrorBox error={error} />
      <pre class="log" ref={pre} tabIndex={0} aria-labelledby="log-title">
        {text || 'The log is empty.'}
      </pre>
    </div>
  );
}

interface Sample {
  cpu: number;
  rss: number;
  net: number;
}

function Metrics({ uuid, running }: { uuid: string; running: boolean }) {
  const [samples, setSamples] = useState<Sample[]>([]);
  const prev = useRef<{ t: number; cpu: number; net: number } | null>(null);
  const sample = async () => {
    try {
      const m = await one(api.GET('/v1/instances/{uuid}/metrics', { params: { path: { uuid } } }), 'instances');
      const t = performance.now();
      const cpu = m.cpu_time_ms ?? 0;
      const net = (m.rx_bytes ?? 0) + (m.tx_bytes ?? 0);
      const p = prev.current;
      prev.current = { t, cpu, net };
      if (!p) return;
      const dt = (t - p.t) / 1000;
      const s = {
        cpu: Math.max(0, ((cpu - p.cpu) / 1000 / dt) * 100),
        rss: (m.rss_bytes ?? 0) / 1048576,
        net: Math.max(0, (net - p.net) / 1024 / dt),
      };
      setSamples((list) => [...list, s].slice(-SAMPLES));
    } catch {
      /* a stopped instance has no figures */
    }
  };
  useEffect(() => void sample(), [uuid]);
  useInterval(sample, 2000, running);
  if (!running && samples.length === 0) return <p class="muted">Figures appear while the instance runs.</p>;
  return (
    <div class="sparks">
      <Sparkline label="CPU" unit="%" values={samples.map((s) => s.cpu)} />
      <Sparkline label="Memory" unit="MiB" values={samples.map((s) => s.rss)} />
      <Sparkline label="Network" unit="KiB/s" values={samples.map((s) => s.net)} />
    </div>
  );
}

function History({ uuid, version }: { uuid: string; version: number }) {
  const { data, error, reload } = useLoad(
    async () =>
      (await one(api.GET('/v1/instances/{uuid}/history', { params: { path: { uuid } } }), 'instances')).history,
    [uuid],
  );
  useEffect(() => void reload(), [version]);
  return (
    <div>
      <h2>History</h2>
      <ErrorBox error={error} />
      {data && (
        <Table label="History">
          <thead>
            <tr>
              <th scope="col">When</th>
              <th scope="col">Event</th>
              <th scope="col">State</th>
              <th scope="col">Why</th>
            </tr>
          </thead>
          <tbody>
            {[...data]
              .reverse()
              .slice(0, 50)
              .map((h) => (
                <tr key={h.event_id}>
                  <td title={h.created_at}>{age(h.created_at)} ago</td>
                  <td>{h.event}</td>
                  <td>{h.from_state && h.to_state ? `${h.from_state} → ${h.to_state}` : (h.to_state ?? '')}</td>
                  <td>
                    {h.message ?? ''}
                    {h.stop_reason !== undefined ? ` ${stopReason(h.stop_reason).summary}` : ''}
                    {h.exit_code !== undefined ? ` Exit code ${h.exit_code}.` : ''}
                    {h.stop_code !== undefined && stopCode(h.stop_code).crash
                      ? ` ${stopCode(h.stop_code).summary}`
                      : ''}
                  </td>
                </tr>
              ))}
          </tbody>
        </Table>
      )}
    </div>
  );
}

const FIELDS: [keyof Instance, string, (v: never) => string][] = [
  ['uuid', 'UUID', String],
  ['created_at', 'Created', String],
  ['started_at', 'Last started', String],
  ['stopped_at', 'Stopped', String],
  ['memory_mb', 'Memory', (v: number) => `${v} MB`],
  ['private_ip', 'Private IP', String],
  ['private_fqdn', 'Private name', String],
  ['restart_policy', 'Restart policy', String],
  ['restart_count', 'Restarts by policy', String],
  ['start_count', 'Times started', String],
  ['uptime_ms', 'Uptime', (v: number) => micros(v * 1000)],
  ['boot_time_us', 'Boot time', micros],
  ['net_time_us', 'Network ready', micros],
  ['vmm_start_time_us', 'VMM start', micros],
  ['vmm_load_time_us', 'VMM load', micros],
  ['vmm_ready_time_us', 'VMM ready', micros],
  ['cpu_millicores', 'CPU', (v: number) => `${v} millicores`],
  ['hostname', 'Host', String],
];

export function InstanceDetail({ uuid }: { uuid: string }) {
  const { data: i, setData, error, reload } = useLoad(() => getInstance(uuid), [uuid]);
  const { data: tags } = useLoad(() => imageTags());
  const [version, setVersion] = useState(0);
  const [gone, setGone] = useState(false);
  useEvents(
    (e) => {
      if (e.instance.uuid !== i?.uuid && e.instance.uuid !== uuid) return;
      if (e.type === 'deleted') return setGone(true);
      if (e.to_state) setData((cur) => (cur ? ({ ...cur, state: e.to_state } as Instance) : cur));
      void reload();
      setVersion((v) => v + 1);
    },
    [i?.uuid, uuid, reload],
  );
  if (gone)
    return (
      <Page title="Instance deleted">
        <p>
          This instance was deleted. <a href="#/instances">Back to the instances</a>.
        </p>
      </Page>
    );
  if (!i)
    return (
      <Page title="Instance">
        {error ? <ErrorBox error={error} /> : <Notice>Loading…</Notice>}
        <p>
          <a href="#/instances">Back to the instances</a>
        </p>
      </Page>
    );
  const running = i.state === 'running' || i.state === 'draining';
  const act = async (what: 'start' | 'stop' | 'suspend') => {
    const path = { params: { path: { uuid: i.uuid } } };
    if (what === 'start') await ok(api.PUT('/v1/instances/{uuid}/start', path), 'instances');
    else if (what === 'stop') await ok(api.PUT('/v1/instances/{uuid}/stop', path), 'instances');
    else await ok(api.PUT('/v1/instances/{uuid}/suspend', path), 'instances');
    await reload();
  };
  return (
    <Page
      title={i.name}
      actions={
        <>
          <ActionButton onClick={() => act('start')} disabled={running}>
            Start
          </ActionButton>
          <ActionButton onClick={() => act('stop')} disabled={!running}>
            Stop
          </ActionButton>
          <ActionButton onClick={() => act('suspend')} disabled={!running}>
            Suspend
          </ActionButton>
          <ActionButton
            danger
            confirm={`Delete ${i.name}? This cannot be undone.`}
            onClick={async () => {
              await ok(api.DELETE('/v1/instances/{uuid}', { params: { path: { uuid: i.uuid } } }), 'instances');
              location.hash = '#/instances';
            }}
          >
            Delete
          </ActionButton>
        </>
      }
    >
      <p>
        <a href="#/instances">← Instances</a>
      </p>
      <ErrorBox error={error} />
      <p class="state-line">
        State: <Badge state={i.state} /> · Image: <ImageName digest={i.image} tags={tags} />
        {i.restart?.next_at && (
          <>
            {' '}
            · next restart {new Date(i.restart.next_at).toLocaleTimeString()} (attempt {i.restart.attempt})
          </>
        )}
      </p>
      <Stop i={i} />
      <div class="columns">
        <dl class="fields">
          {FIELDS.filter(([k]) => i[k] !== undefined && i[k] !== null).map(([k, label, fmt]) => (
            <div key={k}>
              <dt>{label}</dt>
              <dd>{fmt(i[k] as never)}</dd>
            </div>
          ))}
          <div>
            <dt>Arguments</dt>
            <dd>{i.args.length ? <code>{i.args.join(' ')}</code> : 'none'}</dd>
          </div>
          <div>
            <dt>Environment</dt>
            <dd>
              {Object.keys(i.env).length === 0
                ? 'none'
                : Object.entries(i.env).map(([k, v]) => (
                    <div key={k}>
                      <code>
                        {k}={v}
                      </code>
                    </div>
                  ))}
            </dd>
          </div>
          {i.service_group && (
            <div>
              <dt>Service group</dt>
              <dd>
                <a href="#/groups">{i.service_group.name}</a>
                {i.service_group.domains?.map((d) => (
                  <div key={d.fqdn}>
                    <a href={`https://${d.fqdn}/`} target="_blank" rel="noopener noreferrer">
                      {d.fqdn}
                    </a>
                    {d.certificate && <span class="muted"> (certificate {d.certificate.state})</span>}
                  </div>
                ))}
              </dd>
            </div>
          )}
          {i.volumes.length > 0 && (
            <div>
              <dt>Volumes</dt>
              <dd>
                {i.volumes.map((v) => (
                  <div key={v.uuid}>
                    {v.name} at <code>{v.at}</code>
                    {v.readonly ? ' (read-only)' : ''}
                  </div>
                ))}
              </dd>
            </div>
          )}
          {i.network_interfaces.map((n) => (
            <div key={n.uuid}>
              <dt>Network interface</dt>
              <dd>
                {n.private_ip} <span class="muted">{n.mac}</span>
              </dd>
            </div>
          ))}
          {i.snapshot && (
            <div>
              <dt>Memory snapshot</dt>
              <dd>{bytes((i.snapshot as { size_bytes?: number }).size_bytes)}</dd>
            </div>
          )}
        </dl>
        <div>
          <h2>Figures</h2>
          <Metrics uuid={i.uuid} running={running} />
        </div>
      </div>
      <Log uuid={i.uuid} follow={i.state !== 'stopped'} />
      <History uuid={i.uuid} version={version} />
    </Page>
  );
}
