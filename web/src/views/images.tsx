// Images: namespaces and tags, size, and how to push one.
import { api, ok } from '../api/client';
import { bytes, shortDigest } from '../decode';
import { Empty, ErrorBox, Notice, Page, Table, useLoad } from '../ui';

export function Images() {
  const { data, error, loading } = useLoad(() => ok(api.GET('/v1/images/list'), 'images'));
  const host = location.host;
  return (
    <Page title="Images">
      <ErrorBox error={error} />
      <details class="howto">
        <summary>How to push an image</summary>
        <p>Push to the platform's registry with your user name and API token, then create instances from the tag:</p>
        <pre>
          {`skopeo login --username <you> ${host}
skopeo copy oci-archive:app.tar docker://${host}/<you>/app:1.0
unihost instance create --start <you>/app:1.0`}
        </pre>
        <p>Unikraft kernels packaged by kraftkit push the same way (kraft pkg, then kraft pkg push).</p>
      </details>
      {loading && !data && <Notice>Loading…</Notice>}
      {data && data.length === 0 && (
        <Empty title="No images yet.">Push one as shown above, or ask your operator to import one.</Empty>
      )}
      {data && data.length > 0 && (
        <Table label="Images">
          <thead>
            <tr>
              <th scope="col">Tags</th>
              <th scope="col">Namespace</th>
              <th scope="col">Digest</th>
              <th scope="col">Size</th>
              <th scope="col">Initrd</th>
            </tr>
          </thead>
          <tbody>
            {data.map((i) => (
              <tr key={i.digest}>
                <td>{i.tags?.length ? i.tags.join(', ') : <span class="muted">untagged</span>}</td>
                <td>{i.tags?.[0]?.includes('/') ? i.tags[0].split('/')[0] : 'official'}</td>
                <td>
                  <code title={i.digest}>{shortDigest(i.digest)}</code>
                </td>
                <td>{bytes(i.size_in_bytes)}</td>
                <td>{i.initrd ? 'yes' : 'no'}</td>
              </tr>
            ))}
          </tbody>
        </Table>
      )}
    </Page>
  );
}
