// Volumes: create, attach to a stopped instance, detach, delete.
import { useState } from 'preact/hooks';
import { api, ok } from '../api/client';
import { checkName } from '../../../src/domain/names';
import { ActionButton, Badge, Empty, ErrorBox, Field, Notice, Page, Table, useLoad, useRefreshOnEvents } from '../ui';
import { listInstances } from './instances';

function NewVolume({ done }: { done: () => unknown }) {
  const [name, setName] = useState('');
  const [size, setSize] = useState('64');
  const [error, setError] = useState<unknown>(null);
  const c = name ? checkName(name) : null;
  const bad = c && !c.ok ? `The name ${c.why}.` : null;
  return (
    <form
      class="inline-form"
      onSubmit={async (e) => {
        e.preventDefault();
        if (bad) return;
        setError(null);
        try {
          await ok(api.POST('/v1/volumes', { body: { ...(name ? { name } : {}), size_mb: Number(size) } }), 'volumes');
          setName('');
          await done();
        } catch (x) {
          setError(x);
        }
      }}
    >
      <Field id="v-name" label="Name" error={bad}>
        <input id="v-name" value={name} onInput={(e) => setName(e.currentTarget.value)} />
      </Field>
      <Field id="v-size" label="Size (MB)">
        <input id="v-size" type="number" min={1} value={size} onInput={(e) => setSize(e.currentTarget.value)} />
      </Field>
      <button type="submit">Create volume</button>
      <ErrorBox error={error} />
    </form>
  );
}

export function Volumes() {
  const { data, error, loading, reload } = useLoad(() => ok(api.GET('/v1/volumes'), 'volumes'));
  const instances = useLoad(listInstances);
  useRefreshOnEvents(reload);
  const [target, setTarget] = useState<Record<string, { to: string; at: string }>>({});
  return (
    <Page title="Volumes">
      <ErrorBox error={error} />
      <NewVolume done={reload} />
      {loading && !data && <Notice>Loading…</Notice>}
      {data && data.length === 0 && (
        <Empty title="No volumes.">
          <p>
            A volume is an ext4 file system that outlives instances. Create one above, then attach it to a stopped
            instance.
          </p>
        </Empty>
      )}
      {data && data.length > 0 && (
        <Table label="Volumes">
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">State</th>
              <th scope="col">Size</th>
              <th scope="col">Attached to</th>
              <th scope="col">Actions</th>
            </tr>
          </thead>
          <tbody>
            {data.map((v) => {
              const att = (v.attached_to ?? []) as { uuid: string; name: string }[];
              const t = target[v.uuid] ?? { to: '', at: '/data' };
              return (
                <tr key={v.uuid}>
                  <td>{v.name}</td>
                  <td>
                    <Badge state={v.state} />
                  </td>
                  <td>
                    {v.size_mb} MB{v.free_mb !== undefined && <span class="muted"> ({v.free_mb} MB free)</span>}
                  </td>
                  <td>
                    {att.length
                      ? att.map((a) => (
                          <a key={a.uuid} href={`#/instances/${a.uuid}`}>
                            {a.name}
                          </a>
                        ))
                      : '—'}
                  </td>
                  <td class="row-actions">
                    {att.length ? (
                      <ActionButton
                        onClick={async () => (
                          await ok(
                            api.PUT('/v1/volumes/{uuid}/detach', { params: { path: { uuid: v.uuid } } }),
                            'volumes',
                          ),
                          reload()
                        )}
                      >
                        Detach
                      </ActionButton>
                    ) : (
                      <span class="attach">
                        <label>
                          <span class="sr-only">Instance to attach {v.name} to</span>
                          <select
                            value={t.to}
                            onChange={(e) => setTarget({ ...target, [v.uuid]: { ...t, to: e.currentTarget.value } })}
                          >
                            <option value="">attach to…</option>
                            {instances.data
                              ?.filter((i) => i.state === 'stopped')
                              .map((i) => (
                                <option key={i.uuid} value={i.uuid}>
                                  {i.name}
                                </option>
                              ))}
                          </select>
                        </label>
                        <label>
                          <span class="sr-only">Mount path</span>
                          <input
                            size={8}
                            value={t.at}
                            onInput={(e) => setTarget({ ...target, [v.uuid]: { ...t, at: e.currentTarget.value } })}
                          />
                        </label>
                        <ActionButton
                          disabled={!t.to}
                          onClick={async () => {
                            await ok(
                              api.PUT('/v1/volumes/{uuid}/attach', {
                                params: { path: { uuid: v.uuid } },
                                body: { attach_to: { uuid: t.to }, at: t.at },
                              }),
                              'volumes',
                            );
                            await reload();
                          }}
                        >
                          Attach
                        </ActionButton>
                      </span>
                    )}
                    <ActionButton
                      danger
                      confirm={`Delete volume ${v.name} and its data?`}
                      onClick={async () => (
                        await ok(api.DELETE('/v1/volumes/{uuid}', { params: { path: { uuid: v.uuid } } }), 'volumes'),
                        reload()
                      )}
                    >
                      Delete
                    </ActionButton>
                  </td>
                </tr>
              );
            })}
          </tbody>
        </Table>
      )}
    </Page>
  );
}
