// The instances table: live state badges, a filter, and bulk start / stop / delete.
import { useMemo, useState } from 'preact/hooks';
import { api, ok, one, results, type Ok } from '../api/client';
import type { paths } from '../api/schema';
import { age, micros, shortDigest } from '../decode';
import { ActionButton, Badge, Empty, ErrorBox, Notice, Page, Table, useEvents, useInterval, useLoad } from '../ui';

type ListAnswer = paths['/v1/instances']['get']['responses']['200']['content']['application/json'];
/** An instance with every field (the list's short form, `details=false`, is not used here). */
export type Instance = Extract<
  Ok<NonNullable<NonNullable<ListAnswer['data']>['instances']>[number]>,
  { image: string }
>;

export const listInstances = async () => (await ok(api.GET('/v1/instances'), 'instances')) as Instance[];
export const getInstance = async (uuid: string) =>
  (await one(api.GET('/v1/instances/{uuid}', { params: { path: { uuid } } }), 'instances')) as Instance;

let tagCache: Promise<Map<string, string[]>> | null = null;
/** Tags of each image digest (from the images list), for showing `nginx:latest` beside a digest. */
export function imageTags(refresh = false): Promise<Map<string, string[]>> {
  if (!tagCache || refresh)
    tagCache = ok(api.GET('/v1/images/list'), 'images').then(
      (list) => new Map(list.map((i) => [i.digest, i.tags ?? []])),
      () => new Map(),
    );
  return tagCache;
}

export function ImageName({ digest, tags }: { digest: string; tags: Map<string, string[]> | undefined }) {
  const t = tags?.get(digest)?.[0];
  return (
    <span title={digest}>
      {t ? <>{t} </> : null}
      <code class="digest">{shortDigest(digest)}</code>
    </span>
  );
}

const PAGE = 100;

export function Instances() {
  const { data, setData, error, loading, reload } = useLoad(listInstances);
  const { data: tags } = useLoad(() => imageTags());
  const [filter, setFilter] = useState('');
  const [picked, setPicked] = useState<Set<string>>(new Set());
  const [report, setReport] = useState<string | null>(null);
  // rows rendered at once: a long list grows on request instead of laying out a thousand rows first
  const [limit, setLimit] = useState(PAGE);
  const [, tick] = useState(0);
  useInterval(() => tick((n) => n + 1), 10_000); // ages move on

  // An event changes the badge at once, then the whole row is fetched again.
  useEvents(
    (e) => {
      const id = e.instance.uuid;
      setData((list) => {
        if (!list) return list;
        const i = list.findIndex((x) => x.uuid === id);
        if (i < 0) {
          if (e.type === 'created') void reload();
          return list;
        }
        if (e.type === 'deleted') return list.filter((x) => x.uuid !== id);
        if (!e.to_state) return list;
        const next = list.slice();
        next[i] = { ...next[i]!, state: e.to_state } as Instance;
        return next;
      });
      if (e.type !== 'deleted')
        getInstance(id).then(
          (fresh) => setData((list) => list?.map((x) => (x.uuid === id ? fresh : x))),
          () => undefined,
        );
    },
    [reload],
  );

  const shown = useMemo(() => {
    const f = filter.trim().toLowerCase();
    if (!data) return [];
    if (!f) return data;
    return data.filter((i) =>
      [i.name, i.state, i.private_ip, i.private_fqdn, i.image, i.service_group?.name].some((v) =>
        v?.toLowerCase().includes(f),
      ),
    );
  }, [data, filter]);

  const ids = [...picked].filter((id) => data?.some((i) => i.uuid === id));
  const bulk = async (what: 'start' | 'stop' | 'delete') => {
    const body = ids.map((uuid) => ({ uuid }));
    const r =
      what === 'start'
        ? await results(api.PUT('/v1/instances/start', { body }), 'instances')
        : what === 'stop'
          ? await results(api.PUT('/v1/instances/stop', { body }), 'instances')
          : await results(api.DELETE('/v1/instances', { body }), 'instances');
    const failed = r.filter((x) => x.status === 'error') as { name?: string; uuid?: string; message?: string }[];
    setReport(
      failed.length === 0
        ? `${what}: done for ${r.length} instance${r.length === 1 ? '' : 's'}.`
        : `${what}: ${r.length - failed.length} done, ${failed.length} refused: ${failed.map((f) => `${f.name ?? f.uuid}: ${f.message}`).join('; ')}`,
    );
    if (what === 'delete') setPicked(new Set());
    await reload();
  };

  const visible = shown.length > limit ? shown.slice(0, limit) : shown;
  const allShown = visible.length > 0 && visible.every((i) => picked.has(i.uuid));
  return (
    <Page
      title="Instances"
      actions={
        <a class="button" href="#/create">
          Create instance
        </a>
      }
    >
      <ErrorBox error={error} />
      {loading && !data && <Notice>Loading instances…</Notice>}
      {data && data.length === 0 && (
        <Empty title="No instances yet.">
          <p>
            <a href="#/create">Create one from an image</a>, or from a terminal:{' '}
            <code>unihost instance create --start nginx:latest</code>.
          </p>
        </Empty>
      )}
      {data && data.length > 0 && (
        <>
          <div class="toolbar">
            <div class="field inline">
              <label for="filter">Filter</label>
              <input
                id="filter"
                type="search"
                value={filter}
                placeholder="name, state, IP, image…"
                onInput={(e) => setFilter(e.currentTarget.value)}
              />
            </div>
            <div class="bulk" role="group" aria-label="Actions on the selected instances">
              <span>{ids.length} selected</span>
              <ActionButton disabled={ids.length === 0} onClick={() => bulk('start')}>
                Start
              </ActionButton>
              <ActionButton disabled={ids.length === 0} onClick={() => bulk('stop')}>
                Stop
              </ActionButton>
              <ActionButton
                danger
                disabled={ids.length === 0}
                confirm={`Delete ${ids.length} instance(s)? This cannot be undone.`}
                onClick={() => bulk('delete')}
              >
                Delete
              </ActionButton>
            </div>
          </div>
          {report && <Notice>{report}</Notice>}
          <Table label="Instances">
            <thead>
              <tr>
                <th scope="col">
                  <input
                    type="checkbox"
                    aria-label="Select all shown"
                    checked={allShown}
                    onChange={(e) =>
                      setPicked(e.currentTarget.checked ? new Set(visible.map((i) => i.uuid)) : new Set())
                    }
                  />
                </th>
                <th scope="col">Name</th>
                <th scope="col">State</th>
                <th scope="col">Image</th>
                <th scope="col">Memory</th>
                <th scope="col">Private IP</th>
                <th scope="col">FQDN</th>
                <th scope="col">Boot</th>
                <th scope="col">Age</th>
              </tr>
            </thead>
            <tbody>
              {visible.map((i) => (
                <tr key={i.uuid} data-uuid={i.uuid}>
                  <td>
                    <input
                      type="checkbox"
                      aria-label={`Select ${i.name}`}
                      checked={picked.has(i.uuid)}
                      onChange={(e) => {
                        const next = new Set(picked);
                        if (e.currentTarget.checked) next.add(i.uuid);
                        else next.delete(i.uuid);
                        setPicked(next);
                      }}
                    />
                  </td>
                  <td>
                    <a href={`#/instances/${i.uuid}`}>{i.name}</a>
                  </td>
                  <td>
                    <Badge state={i.state} />
                  </td>
                  <td>
                    <ImageName digest={i.image} tags={tags} />
                  </td>
                  <td>{i.memory_mb} MB</td>
                  <td>{i.private_ip ?? '—'}</td>
                  <td>{i.service_group?.domains?.[0]?.fqdn ?? i.private_fqdn ?? '—'}</td>
                  <td>{micros(i.boot_time_us)}</td>
                  <td>{age(i.created_at)}</td>
                </tr>
              ))}
            </tbody>
          </Table>
          {shown.length === 0 && <Notice>No instance matches '{filter}'.</Notice>}
          {shown.length > limit && (
            <div class="more">
              <span>
                Showing {limit} of {shown.length}
                {shown.length < data.length ? ` matching (${data.length} in all)` : ''}.
              </span>
              <button type="button" class="secondary" onClick={() => setLimit(limit + PAGE)}>
                Show {Math.min(PAGE, shown.length - limit)} more
              </button>
              <button type="button" class="secondary" onClick={() => setLimit(Infinity)}>
                Show all {shown.length}
              </button>
            </div>
          )}
        </>
      )}
    </Page>
  );
}
