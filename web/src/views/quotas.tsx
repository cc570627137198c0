// Quotas: what the user uses of each limit, as bars.
import { api, one } from '../api/client';
import { ErrorBox, Notice, Page, useLoad, useRefreshOnEvents } from '../ui';

const LABELS: Record<string, string> = {
  instances: 'Instances',
  live_instances: 'Running instances',
  live_memory_mb: 'Memory of running instances (MB)',
  service_groups: 'Service groups',
  services: 'Published ports',
  volumes: 'Volumes',
  total_volume_mb: 'Volume space (MB)',
  registry_mb: 'Registry storage (MiB)',
  domains: 'Domains',
  certificates: 'Certificates',
  snapshot_mb: 'Memory snapshots (MiB)',
};

export function Quotas() {
  const { data, error, reload } = useLoad(() => one(api.GET('/v1/users/quotas'), 'quotas'));
  useRefreshOnEvents(reload, 1000);
  return (
    <Page title="Quotas">
      <ErrorBox error={error} />
      {!data && !error && <Notice>Loading…</Notice>}
      {data && (
        <ul class="quotas">
          {Object.entries(data.used as Record<string, number>).map(([k, used]) => {
            const hard = (data.hard as Record<string, number | null | undefined>)[k];
            const pct = hard ? Math.min(100, Math.round((used / hard) * 100)) : 0;
            return (
              <li key={k}>
                <label for={`q-${k}`}>{LABELS[k] ?? k}</label>
                <meter
                  id={`q-${k}`}
                  min={0}
                  max={hard ?? Math.max(1, used)}
                  value={used}
                  high={(hard ?? 1) * 0.8}
                  optimum={0}
                />
                <span>
                  {used} of {hard ?? 'no limit'}
                  {hard ? ` (${pct}%)` : ''}
                </span>
              </li>
            );
          })}
        </ul>
      )}
    </Page>
  );
}
