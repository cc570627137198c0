// Hosts (developer accounts only): each machine of the platform, its state, size and guest budget.
import { api, ok } from '../api/client';
import { bytes } from '../decode';
import { Badge, ErrorBox, Notice, Page, Table, useInterval, useLoad } from '../ui';

export const listHosts = () => ok(api.GET('/v1/nodes'), 'nodes');

export function Hosts() {
  const { data, error, reload } = useLoad(listHosts);
  useInterval(() => void reload(), 5000);
  return (
    <Page title="Hosts">
      <ErrorBox error={error} />
      {!data && !error && <Notice>Loading…</Notice>}
      {data && (
        <Table label="Hosts">
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">State</th>
              <th scope="col">Cores</th>
              <th scope="col">Memory</th>
              <th scope="col">Guest budget</th>
              <th scope="col">Up</th>
              <th scope="col">Last report</th>
            </tr>
          </thead>
          <tbody>
            {data.map((n) => (
              <tr key={n.uuid}>
                <td>{n.name}</td>
                <td>
                  <Badge state={n.state === 'ready' ? 'running' : 'error'} /> {n.state}
                  {n.state_message && <div class="muted">{n.state_message}</div>}
                </td>
                <td>{n.vcpus}</td>
                <td>{bytes(n.memory_mib * 1048576)}</td>
                <td>
                  {n.guest_memory_mib !== undefined ? bytes(n.guest_memory_mib * 1048576) : '—'}
                  {typeof n.guest_vcpus === 'number' ? `, ${n.guest_vcpus} vCPUs` : ''}
                </td>
                <td>{Math.round(n.uptime_seconds / 60)} min</td>
                <td>{n.updated_at ? new Date(n.updated_at).toLocaleTimeString() : '—'}</td>
              </tr>
            ))}
          </tbody>
        </Table>
      )}
    </Page>
  );
}
