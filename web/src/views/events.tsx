// The live feed of instance events since this tab signed in.
import { useState } from 'preact/hooks';
import { recent, type InstanceEvent } from '../api/events';
import { Empty, Page, Table, useEvents } from '../ui';

export function Events() {
  const [list, setList] = useState<InstanceEvent[]>(() => [...recent].reverse());
  useEvents((e) => setList((l) => [e, ...l].slice(0, 500)), []);
  return (
    <Page title="Events">
      {list.length === 0 ? (
        <Empty title="No events since you signed in.">
          <p>
            Start or stop an instance and its events appear here as they happen. Older ones: <code>unihost events</code>
            .
          </p>
        </Empty>
      ) : (
        <Table label="Events">
          <thead>
            <tr>
              <th scope="col">Time</th>
              <th scope="col">Instance</th>
              <th scope="col">Event</th>
              <th scope="col">Change</th>
              <th scope="col">Message</th>
            </tr>
          </thead>
          <tbody aria-live="polite">
            {list.map((e) => (
              <tr key={e.id}>
                <td>{new Date(e.at).toLocaleTimeString()}</td>
                <td>
                  <a href={`#/instances/${e.instance.uuid}`}>{e.instance.name}</a>
                </td>
                <td>{e.type}</td>
                <td>{e.from_state && e.to_state ? `${e.from_state} → ${e.to_state}` : (e.to_state ?? '')}</td>
                <td>{e.message ?? ''}</td>
              </tr>
            ))}
          </tbody>
        </Table>
      )}
    </Page>
  );
}
