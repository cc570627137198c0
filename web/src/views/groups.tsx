// Service groups: published ports, domains with their certificate state, attached instances,
// and the autoscale configuration with its policies.
import { api, full, ok } from '../api/client';
import { bytes } from '../decode';
import { Badge, Empty, ErrorBox, Notice, Page, Table, useLoad, useRefreshOnEvents } from '../ui';

function Autoscale({ uuid }: { uuid: string }) {
  const { data, error } = useLoad(async () => {
    const r = await api.GET('/v1/services/{uuid}/autoscale', { params: { path: { uuid } } });
    // a group without autoscale answers with an error entry: that is "off", not a failure
    const e = (r.data?.data?.service_groups?.[0] ?? null) as { status?: string; enabled?: boolean } | null;
    return e && e.status !== 'error'
      ? (e as Awaited<ReturnType<typeof ok<typeof r.data & object, 'service_groups'>>>[number])
      : null;
  }, [uuid]);
  if (error) return <ErrorBox error={error} />;
  if (!data) return <span class="muted">autoscale off</span>;
  const a = data as {
    min_size?: number;
    max_size?: number;
    cooldown_time_ms?: number;
    warmup_time_ms?: number;
    policies?: { name: string; metric?: string }[];
  };
  return (
    <span>
      autoscale {a.min_size}–{a.max_size} instances, warm-up {a.warmup_time_ms} ms, cooldown {a.cooldown_time_ms} ms
      {a.policies?.length
        ? `; policies: ${a.policies.map((p) => `${p.name} (${p.metric ?? 'cpu'})`).join(', ')}`
        : '; no policy'}
    </span>
  );
}

export function Groups() {
  const { data, error, loading, reload } = useLoad(async () =>
    full(await ok(api.GET('/v1/services'), 'service_groups'), 'services'),
  );
  useRefreshOnEvents(reload);
  return (
    <Page title="Service groups">
      <ErrorBox error={error} />
      {loading && !data && <Notice>Loading…</Notice>}
      {data && data.length === 0 && (
        <Empty title="No service groups.">
          <p>
            A group publishes ports under a domain name. <a href="#/create">Create an instance</a> with a published
            port, or run <code>unihost service create 443:8080/tls+http</code>.
          </p>
        </Empty>
      )}
      {data && data.length > 0 && (
        <Table label="Service groups">
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">Ports</th>
              <th scope="col">Domains</th>
              <th scope="col">Instances</th>
              <th scope="col">Traffic</th>
              <th scope="col">Autoscale</th>
            </tr>
          </thead>
          <tbody>
            {data.map((g) => (
              <tr key={g.uuid}>
                <td>
                  {g.name}
                  {!g.persistent && <span class="muted"> (goes with its instance)</span>}
                </td>
                <td>
                  {g.services.map((s) => (
                    <div key={s.port}>
                      {s.port} → {s.destination_port} <span class="muted">{s.handlers.join('+') || 'tcp'}</span>
                    </div>
                  ))}
                </td>
                <td>
                  {g.domains.map((d) => (
                    <div key={d.fqdn}>
                      {d.fqdn}{' '}
                      {d.certificate ? (
                        <Badge state={d.certificate.state} />
                      ) : (
                        <span class="muted">metro certificate</span>
                      )}
                    </div>
                  ))}
                </td>
                <td>
                  {g.instances.length === 0
                    ? 'none'
                    : g.instances.map((i) => (
                        <div key={i.uuid}>
                          <a href={`#/instances/${i.uuid}`}>{i.name}</a>
                        </div>
                      ))}
                </td>
                <td>
                  {g.traffic ? (
                    <>
                      <div>{g.traffic.requests} requests</div>
                      <div>{g.traffic.open_connections} open</div>
                      <div class="muted">
                        in {bytes(g.traffic.bytes_in)}, out {bytes(g.traffic.bytes_out)}
                      </div>
                    </>
                  ) : (
                    <span class="muted">not measured</span>
                  )}
                </td>
                <td>{g.autoscale ? <Autoscale uuid={g.uuid} /> : <span class="muted">off</span>}</td>
              </tr>
            ))}
          </tbody>
        </Table>
      )}
    </Page>
  );
}
