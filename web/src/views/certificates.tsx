// Certificates: state and expiry, upload of a chain and key, delete.
import { useState } from 'preact/hooks';
import { api, full, ok } from '../api/client';
import { ActionButton, Badge, Empty, ErrorBox, Field, Notice, Page, Table, useLoad } from '../ui';

function Upload({ done }: { done: () => unknown }) {
  const [f, setF] = useState({ name: '', cn: '', chain: '', pkey: '' });
  const [error, setError] = useState<unknown>(null);
  const [open, setOpen] = useState(false);
  if (!open)
    return (
      <button type="button" onClick={() => setOpen(true)}>
        Upload a certificate
      </button>
    );
  const bind = (k: keyof typeof f) => ({
    id: `c-${k}`,
    value: f[k],
    onInput: (e: Event) => setF({ ...f, [k]: (e.currentTarget as HTMLInputElement).value }),
  });
  return (
    <form
      onSubmit={async (e) => {
        e.preventDefault();
        setError(null);
        if (!f.chain.includes('BEGIN CERTIFICATE') || !f.pkey.includes('PRIVATE KEY'))
          return setError(new Error('Paste the PEM chain (BEGIN CERTIFICATE …) and its PEM private key.'));
        try {
          await ok(
            api.POST('/v1/certificates', {
              body: {
                ...(f.name ? { name: f.name } : {}),
                ...(f.cn ? { cn: f.cn } : {}),
                chain: f.chain,
                pkey: f.pkey,
              },
            }),
            'certificates',
          );
          setOpen(false);
          setF({ name: '', cn: '', chain: '', pkey: '' });
          await done();
        } catch (x) {
          setError(x);
        }
      }}
    >
      <Field id="c-name" label="Name (optional)">
        <input {...bind('name')} />
      </Field>
      <Field id="c-cn" label="Domain (optional)" hint="The name it is for; its subject names must cover it.">
        <input {...bind('cn')} />
      </Field>
      <Field id="c-chain" label="Certificate chain (PEM, leaf first)">
        <textarea rows={5} {...bind('chain')} />
      </Field>
      <Field id="c-pkey" label="Private key (PEM)">
        <textarea rows={4} {...bind('pkey')} />
      </Field>
      <ErrorBox error={error} />
      <div class="form-actions">
        <button type="submit">Upload</button>
        <button type="button" class="secondary" onClick={() => setOpen(false)}>
          Cancel
        </button>
      </div>
    </form>
  );
}

export function Certificates() {
  const { data, error, loading, reload } = useLoad(async () =>
    full(await ok(api.GET('/v1/certificates'), 'certificates'), 'common_name'),
  );
  return (
    <Page title="Certificates">
      <ErrorBox error={error} />
      <Upload done={reload} />
      {loading && !data && <Notice>Loading…</Notice>}
      {data && data.length === 0 && (
        <Empty title="No certificates.">
          <p>
            Names under the metro domain use its wildcard certificate. For your own domain, add it to a service group: a
            certificate is requested for it, or upload one here.
          </p>
        </Empty>
      )}
      {data && data.length > 0 && (
        <Table label="Certificates">
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">Domain</th>
              <th scope="col">State</th>
              <th scope="col">Expires</th>
              <th scope="col">Issuer</th>
              <th scope="col">Actions</th>
            </tr>
          </thead>
          <tbody>
            {data.map((c) => (
              <tr key={c.uuid}>
                <td>{c.name}</td>
                <td>{c.common_name}</td>
                <td>
                  <Badge state={c.state} />
                  {c.message && <div class="muted">{c.message}</div>}
                </td>
                <td>{c.not_after ? new Date(c.not_after).toLocaleDateString() : '—'}</td>
                <td>{c.issuer ?? '—'}</td>
                <td>
                  <ActionButton
                    danger
                    confirm={`Delete certificate ${c.name}?`}
                    onClick={async () => (
                      await ok(
                        api.DELETE('/v1/certificates/{uuid}', { params: { path: { uuid: c.uuid } } }),
                        'certificates',
                      ),
                      reload()
                    )}
                  >
                    Delete
                  </ActionButton>
                </td>
              </tr>
            ))}
          </tbody>
        </Table>
      )}
    </Page>
  );
}
