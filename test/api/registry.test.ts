import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { after, before, describe, test } from 'node:test';
import { request } from 'undici';
import { kraftkitLayout, multibootKernel } from '../../src/images/testing/fixtures.js';
import { startHarness, type Harness } from '../helpers/harness.js';
import { simMachines } from '../helpers/sim-machines.js';

const sha = (b: Buffer | string): string => `sha256:${createHash('sha256').update(b).digest('hex')}`;
const basic = (user: string, token: string): string => `Basic ${Buffer.from(`${user}:${token}`).toString('base64')}`;
const MT_MANIFEST = 'application/vnd.oci.image.manifest.v1+json';
const MT_INDEX = 'application/vnd.oci.image.index.v1+json';

interface R {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
  json: any; // eslint-disable-line @typescript-eslint/no-explicit-any
}

/** The registry's one error code of a reply. */
const code = (r: R): string => (r.json as { errors: { code: string }[] }).errors[0]!.code;

describe('OCI registry at /v2/', () => {
  let h: Harness;
  let alice: string;
  let bob: string;
  let ops: string;
  let files: string;

  async function call(
    method: string,
    path: string,
    auth: string | null,
    body?: Buffer | string,
    headers: Record<string, string> = {},
  ): Promise<R> {
    const hs: Record<string, string> = { ...headers };
    if (auth) hs.authorization = auth;
    const r = await request(h.url + path, { method: method as 'GET', headers: hs, body });
    const buf = Buffer.from(await r.body.arrayBuffer());
    let json: unknown;
    try {
      json = JSON.parse(buf.toString('utf8'));
    } catch {
      json = undefined;
    }
    return { status: r.statusCode, headers: r.headers, body: buf, json };
  }
  const as = (user: string, token: string) => basic(user, token);

  /** Pushes a blob in one request (POST with digest). */
  async function pushBlob(repo: string, auth: string, data: Buffer): Promise<string> {
    const d = sha(data);
    const r = await call('POST', `/v2/${repo}/blobs/uploads/?digest=${d}`, auth, data, {
      'content-type': 'application/octet-stream',
    });
    assert.equal(r.status, 201, r.body.toString());
    assert.equal(r.headers['docker-content-digest'], d);
    return d;
  }

  /** Pushes every blob of an OCI layout's manifest, then the manifest under `ref`. */
  async function pushLayout(dir: string, repo: string, ref: string, auth: string, manifestDigest: string) {
    const blob = (d: string) => readFileSync(join(dir, 'blobs', 'sha256', d.slice(7)));
    const m = JSON.parse(blob(manifestDigest).toString()) as {
      config: { digest: string };
      layers: { digest: string }[];
    };
    for (const d of [m.config, ...m.layers]) await pushBlob(repo, auth, blob(d.digest));
    return call('PUT', `/v2/${repo}/manifests/${ref}`, auth, blob(manifestDigest), { 'content-type': MT_MANIFEST });
  }

  before(async () => {
    h = await startHarness({}, (s) => [simMachines(s)]);
    alice = await h.user('alice');
    bob = await h.user('bob');
    ops = await h.user('ops', true);
    files = mkdtempSync(join(tmpdir(), 'uh-reg-'));
  });
  after(async () => {
    await h.close();
    rmSync(files, { recursive: true, force: true });
  });

  test('the base endpoint asks for credentials with a bearer challenge; user name and API token log in', async () => {
    const anon = await call('GET', '/v2/', null);
    assert.equal(anon.status, 401);
    assert.equal(code(anon), 'UNAUTHORIZED');
    assert.match(
      String(anon.headers['www-authenticate']),
      /^Bearer realm="http:\/\/127\.0\.0\.1:\d+\/v2\/token",service="/,
    );
    assert.equal(anon.headers['docker-distribution-api-version'], 'registry/2.0');
    assert.equal((await call('GET', '/v2/', as('alice', alice))).status, 200);
    assert.equal((await call('GET', '/v2/', `Bearer ${alice}`)).status, 200, 'the API token as a bearer token');
    const wrongName = await call('GET', '/v2/', as('bob', alice));
    assert.equal(wrongName.status, 401, "alice's token under bob's name");
    assert.equal((await call('GET', '/v2/', as('alice', 'not-a-token'))).status, 401);
  });

  test('the token flow grants only what the user may do, for a short time', async () => {
    const scope = 'repository:alice/app:pull,push&scope=repository:bob/app:pull,push&scope=repository:app:pull,push';
    const t = await call('GET', `/v2/token?service=x&scope=${scope}`, as('alice', alice));
    assert.equal(t.status, 200);
    assert.equal(t.json.expires_in, 300);
    assert.equal(t.json.token, t.json.access_token);
    const tok = `Bearer ${t.json.token as string}`;
    const blob = Buffer.from('token flow blob');
    await pushBlob('alice/app', tok, blob);
    // bob's repository: not granted, so the token is insufficient (401 with the scope to ask for)
    const other = await call('POST', '/v2/bob/app/blobs/uploads/', tok);
    assert.equal(other.status, 401);
    assert.match(String(other.headers['www-authenticate']), /scope="repository:bob\/app:push"/);
    // official: pull only for a plain user
    const off = await call('POST', '/v2/app/blobs/uploads/', tok);
    assert.equal(off.status, 401);
    assert.equal((await call('GET', '/v2/token?scope=repository:alice/app:pull', null)).status, 401);
    const forged = `${(t.json.token as string).slice(0, -4)}AAAA`;
    assert.equal((await call('GET', '/v2/', `Bearer ${forged}`)).status, 401);
  });

  test('the OAuth2 form of the token endpoint: password and refresh_token grants; bad forms refused in words', async () => {
    const form = (fields: Record<string, string>) =>
      call('POST', '/v2/token', null, new URLSearchParams(fields).toString(), {
        'content-type': 'application/x-www-form-urlencoded',
      });
    const scope = 'repository:alice/app:pull,push repository:bob/app:push';
    const p = await form({
      grant_type: 'password',
      username: 'alice',
      password: alice,
      service: 'x',
      scope,
      client_id: 'docker',
      access_type: 'offline',
    });
    assert.equal(p.status, 200, p.body.toString());
    assert.equal(p.json.expires_in, 300);
    assert.equal(p.json.scope, scope);
    assert.equal(p.json.refresh_token, alice, 'offline access: a refresh token (the API token the client holds)');
    const tok = `Bearer ${p.json.access_token as string}`;
    await pushBlob('alice/app', tok, Buffer.from('oauth2 blob'));
    assert.equal((await call('POST', '/v2/bob/app/blobs/uploads/', tok)).status, 401, 'only what alice may do');
    const r = await form({ grant_type: 'refresh_token', refresh_token: alice, service: 'x', scope });
    assert.equal(r.status, 200, r.body.toString());
    assert.equal(r.json.refresh_token, undefined, 'no refresh token unless asked for offline access');
    await pushBlob('alice/app', `Bearer ${r.json.access_token as string}`, Buffer.from('oauth2 blob, refreshed'));

    const refused: [Record<string, string>, number, RegExp][] = [
      [{ grant_type: 'password', username: 'bob', password: alice }, 401, /invalid credentials/],
      [{ grant_type: 'password', username: 'alice' }, 401, /needs username and password/],
      [{ grant_type: 'refresh_token', refresh_token: 'nope' }, 401, /invalid credentials/],
      [
        { grant_type: 'refresh_token', refresh_token: p.json.access_token as string },
        401,
        /scoped registry token is not a refresh token/,
      ],
      [{ grant_type: 'client_credentials' }, 400, /'client_credentials' is not supported/],
      [{}, 400, /grant_type is missing/],
    ];
    for (const [fields, status, why] of refused) {
      const x = await form(fields);
      assert.equal(x.status, status, `${JSON.stringify(fields)}: ${x.body.toString()}`);
      assert.match(String(x.json.errors[0].message), why);
    }
    const json = await call('POST', '/v2/token', null, '{}', { 'content-type': 'application/json' });
    assert.match(String(json.json.errors[0].message), /x-www-form-urlencoded/);
    const big = await form({ grant_type: 'password', username: 'alice', password: 'x'.repeat(9000) });
    assert.equal(code(big), 'SIZE_INVALID');
  });

  test('blobs: monolithic and chunked uploads, HEAD and ranged GET, digests verified', async () => {
    const a = as('alice', alice);
    const data = Buffer.alloc(300_000, 7);
    data.write('chunked upload', 0);
    const d = sha(data);
    const start = await call('POST', '/v2/alice/chunks/blobs/uploads/', a);
    assert.equal(start.status, 202);
    const loc = String(start.headers.location);
    assert.match(loc, /^\/v2\/alice\/chunks\/blobs\/uploads\/[0-9a-f-]{36}$/);
    const p1 = await call('PATCH', loc, a, data.subarray(0, 100_000), {
      'content-type': 'application/octet-stream',
      'content-range': '0-99999',
    });
    assert.equal(p1.status, 202);
    assert.equal(p1.headers.range, '0-99999');
    // a chunk that does not continue where the upload is: 416 with the range held
    const gap = await call('PATCH', loc, a, data.subarray(150_000, 200_000), { 'content-range': '150000-199999' });
    assert.equal(gap.status, 416);
    assert.equal(gap.headers.range, '0-99999');
    const status = await call('GET', loc, a);
    assert.equal(status.status, 204);
    assert.equal(status.headers.range, '0-99999');
    assert.equal(
      (await call('PATCH', loc, a, data.subarray(100_000, 200_000), { 'content-range': '100000-199999' })).status,
      202,
    );
    const put = await call('PUT', `${loc}?digest=${d}`, a, data.subarray(200_000));
    assert.equal(put.status, 201, put.body.toString());
    assert.equal(put.headers.location, `/v2/alice/chunks/blobs/${d}`);
    const head = await call('HEAD', `/v2/alice/chunks/blobs/${d}`, a);
    assert.equal(head.status, 200);
    assert.equal(head.headers['content-length'], String(data.length));
    assert.equal(head.headers['docker-content-digest'], d);
    const part = await call('GET', `/v2/alice/chunks/blobs/${d}`, a, undefined, { range: 'bytes=0-13' });
    assert.equal(part.status, 206);
    assert.equal(part.body.toString(), 'chunked upload');
    assert.equal(part.headers['content-range'], `bytes 0-13/${data.length}`);
    assert.deepEqual((await call('GET', `/v2/alice/chunks/blobs/${d}`, a)).body, data);
    // a small range inside the blob (read whole) and a large one (streamed): the bytes asked for
    for (const [from, to] of [
      [150_000, 150_009],
      [10, 299_999],
    ] as const) {
      const r = await call('GET', `/v2/alice/chunks/blobs/${d}`, a, undefined, { range: `bytes=${from}-${to}` });
      assert.equal(r.status, 206);
      assert.deepEqual(r.body, data.subarray(from, to + 1));
      assert.equal(r.headers['content-length'], String(to - from + 1));
    }
    assert.equal(
      (await call('GET', `/v2/alice/chunks/blobs/${d}`, a, undefined, { range: 'bytes=400000-' })).status,
      416,
    );
    // the upload is over
    assert.equal(code(await call('GET', loc, a)), 'BLOB_UPLOAD_UNKNOWN');
    // a wrong digest: refused, and the upload is gone
    const bad = await call('POST', `/v2/alice/chunks/blobs/uploads/?digest=${sha('other')}`, a, Buffer.from('data'));
    assert.equal(bad.status, 400);
    assert.equal(code(bad), 'DIGEST_INVALID');
    assert.equal(readdirSync(join(h.dataDir, 'images', 'uploads')).length, 0, 'no upload left behind');
    assert.equal(code(await call('GET', `/v2/alice/chunks/blobs/${sha('data')}`, a)), 'BLOB_UNKNOWN');
    assert.equal(code(await call('GET', `/v2/alice/chunks/blobs/sha512:${'0'.repeat(128)}`, a)), 'UNSUPPORTED');
  });

  test('a 300 MiB upload cut mid-way keeps what arrived and resumes from where the status says', async () => {
    const a = as('alice', alice);
    const MB = 1024 * 1024;
    const total = 300 * MB;
    /** the blob's bytes from `from` on, 1 MiB at a time (each MiB carries its number) */
    async function* bytes(from: number, until = total): AsyncGenerator<Buffer> {
      for (let at = from; at < until;) {
        const mb = Math.floor(at / MB);
        const chunk = Buffer.alloc(MB, mb % 251);
        chunk.write(`MiB ${mb}`, 0);
        const part = chunk.subarray(at - mb * MB, Math.min(MB, until - mb * MB));
        at += part.length;
        yield part;
      }
    }
    const hash = createHash('sha256');
    for await (const c of bytes(0)) hash.update(c);
    const digest = `sha256:${hash.digest('hex')}`;
    const start = await call('POST', '/v2/alice/cut/blobs/uploads/', a);
    const loc = String(start.headers.location);
    // declare the whole blob, send about half of it, cut the connection
    await new Promise<void>((resolve) => {
      const u = new URL(h.url + loc);
      const req = httpRequest({
        host: u.hostname,
        port: u.port,
        path: u.pathname,
        method: 'PATCH',
        headers: { authorization: a, 'content-length': String(total), 'content-type': 'application/octet-stream' },
      });
      req.on('error', () => resolve());
      req.on('close', () => resolve());
      void (async () => {
        for await (const c of bytes(0, 150 * MB)) if (!req.write(c)) await new Promise((r) => req.once('drain', r));
        setTimeout(() => req.destroy(), 100);
      })();
    });
    // the status settles on what the server kept
    let held = -1;
    await h.until(async () => {
      const r = await call('GET', loc, a);
      const end = Number(/^0-(\d+)$/.exec(String(r.headers.range))?.[1] ?? -1);
      const same = end === held;
      held = end;
      return same && end > 0 && !h.daemon.services.registry.uploads.isBusy(loc.split('/').pop()!);
    }, 20_000);
    assert.ok(held > 10 * MB && held < 150 * MB, `kept ${held + 1} bytes of the 150 MiB sent`);
    const rest = await request(h.url + loc, {
      method: 'PATCH',
      headers: {
        authorization: a,
        'content-range': `${held + 1}-${total - 1}`,
        'content-type': 'application/octet-stream',
      },
      body: Readable.from(bytes(held + 1)),
    });
    await rest.body.dump();
    assert.equal(rest.statusCode, 202);
    assert.equal(rest.headers.range, `0-${total - 1}`);
    const put = await call('PUT', `${loc}?digest=${digest}`, a);
    assert.equal(put.status, 201, put.body.toString());
    const back = await request(`${h.url}/v2/alice/cut/blobs/${digest}`, { headers: { authorization: a } });
    const check = createHash('sha256');
    for await (const c of back.body) check.update(c as Buffer);
    assert.equal(`sha256:${check.digest('hex')}`, digest);
  });

  test('the same blob pushed by two clients at once: both succeed, one copy is kept', async () => {
    const data = Buffer.alloc(2 * 1024 * 1024, 9);
    const d = sha(data);
    const [x, y] = await Promise.all([
      call('POST', `/v2/alice/twice/blobs/uploads/?digest=${d}`, as('alice', alice), data),
      call('POST', `/v2/alice/twice/blobs/uploads/?digest=${d}`, as('alice', alice), data),
    ]);
    assert.equal(x.status, 201);
    assert.equal(y.status, 201);
    assert.deepEqual((await call('GET', `/v2/alice/twice/blobs/${d}`, as('alice', alice))).body, data);
    const links = await h.daemon.store.read((tx) => tx.registry.links('alice/twice'));
    assert.deepEqual(
      links.map((l) => [l.digest, l.size]),
      [[d, data.length]],
    );
  });

  test('a pushed unikernel image is a platform image at once: listed, and an instance boots from it', async () => {
    const dir = join(files, 'kk');
    const { digests } = await kraftkitLayout(dir, [
      { os: 'qemu', architecture: 'x86_64', kernel: multibootKernel('pushed app'), cmd: ['-p', '8080'] },
    ]);
    const put = await pushLayout(dir, 'alice/web', '1.0', as('alice', alice), digests[0]!);
    assert.equal(put.status, 201, put.body.toString());
    assert.equal(put.headers['docker-content-digest'], digests[0]);
    const list = await h.call('GET', '/v1/images/list?namespace=alice', alice);
    const img = (list.body.data.images as { digest: string; tags: string[]; args: string }[]).find(
      (i) => i.digest === digests[0],
    );
    assert.ok(img, JSON.stringify(list.body));
    assert.deepEqual(img.tags, ['alice/web:1.0']);
    assert.equal(img.args, '-p 8080');
    const inst = await h.call('POST', '/v1/instances', alice, { image: 'alice/web:1.0', autostart: true });
    assert.equal(inst.status, 200, inst.text);
    const got = await h.call('GET', `/v1/instances/${inst.body.data.instances[0].uuid as string}`, alice);
    assert.match(String(got.body.data.instances[0].image), new RegExp(digests[0]!));
    // bob sees neither the image nor the repository
    const bobList = await h.call('GET', '/v1/images/list', bob);
    assert.ok(!JSON.stringify(bobList.body).includes(digests[0]!));
    assert.equal(code(await call('GET', `/v2/alice/web/manifests/1.0`, as('bob', bob))), 'DENIED');
    // the manifest comes back byte for byte, by tag and by digest
    const man = await call('GET', '/v2/alice/web/manifests/1.0', as('alice', alice));
    assert.equal(man.headers['content-type'], MT_MANIFEST);
    assert.equal(sha(man.body), digests[0]);
    assert.equal((await call('HEAD', `/v2/alice/web/manifests/${digests[0]!}`, as('alice', alice))).status, 200);
  });

  test('an index with several platforms: the x86_64 QEMU manifest becomes the image', async () => {
    const dir = join(files, 'multi');
    const { digests } = await kraftkitLayout(dir, [
      { os: 'fc', architecture: 'x86_64', kernel: multibootKernel('fc build') },
      { os: 'qemu', architecture: 'x86_64', kernel: multibootKernel('qemu build') },
      { os: 'qemu', architecture: 'arm64', kernel: multibootKernel('arm build') },
    ]);
    const a = as('alice', alice);
    for (const d of digests) assert.equal((await pushLayout(dir, 'alice/multi', d, a, d)).status, 201);
    const index = JSON.parse(readFileSync(join(dir, 'index.json'), 'utf8')) as object;
    const body = Buffer.from(JSON.stringify(index));
    const put = await call('PUT', '/v2/alice/multi/manifests/2.0', a, body, { 'content-type': MT_INDEX });
    assert.equal(put.status, 201, put.body.toString());
    const tag = await h.daemon.store.read((tx) => tx.images.tag('alice/multi:2.0'));
    assert.equal(tag?.digest, digests[1]);
    const man = await call('GET', '/v2/alice/multi/manifests/2.0', a);
    assert.equal(man.headers['content-type'], MT_INDEX);
    assert.equal(sha(man.body), sha(body));
  });

  test('bad manifests: missing blobs, wrong digest, wrong type, a kernel that cannot boot', async () => {
    const a = as('alice', alice);
    const cfg = await pushBlob('alice/bad', a, Buffer.from('{"architecture":"x86_64","os":"qemu"}'));
    const missing = sha('not pushed');
    const m = (layers: object[]) =>
      Buffer.from(
        JSON.stringify({
          schemaVersion: 2,
          mediaType: MT_MANIFEST,
          config: { mediaType: 'application/vnd.oci.image.config.v1+json', digest: cfg, size: 37 },
          layers,
        }),
      );
    const nolayer = m([{ mediaType: 'application/vnd.oci.image.layer.v1.tar', digest: missing, size: 10 }]);
    const r1 = await call('PUT', '/v2/alice/bad/manifests/1', a, nolayer, { 'content-type': MT_MANIFEST });
    assert.equal(code(r1), 'MANIFEST_BLOB_UNKNOWN');
    const good = m([]);
    const r2 = await call('PUT', `/v2/alice/bad/manifests/${sha('x')}`, a, good, { 'content-type': MT_MANIFEST });
    assert.equal(code(r2), 'DIGEST_INVALID');
    const r3 = await call('PUT', '/v2/alice/bad/manifests/1', a, good, { 'content-type': 'text/plain' });
    assert.equal(code(r3), 'MANIFEST_INVALID');
    const r4 = await call('PUT', '/v2/alice/bad/manifests/1', a, Buffer.from('{not json'), {
      'content-type': MT_MANIFEST,
    });
    assert.equal(code(r4), 'MANIFEST_INVALID');
    // a QEMU x86_64 image without a kernel layer: refused with the reason, and no tag appears
    const r5 = await call('PUT', '/v2/alice/bad/manifests/1', a, good, { 'content-type': MT_MANIFEST });
    assert.equal(code(r5), 'MANIFEST_INVALID');
    assert.match(r5.json.errors[0].message, /cannot be booted/);
    assert.equal(code(await call('GET', '/v2/alice/bad/manifests/1', a)), 'MANIFEST_UNKNOWN');
  });

  test('namespaces: only your own, official ones read by all and written by operators', async () => {
    const b = as('bob', bob);
    const data = Buffer.from('bob data');
    const into = await call('POST', `/v2/alice/web/blobs/uploads/?digest=${sha(data)}`, b, data);
    assert.equal(into.status, 403);
    assert.equal(code(into), 'DENIED');
    assert.match(into.json.errors[0].message, /push under 'bob\//);
    assert.equal(code(await call('POST', `/v2/base/blobs/uploads/`, b)), 'DENIED');
    const d = await pushBlob('base', as('ops', ops), Buffer.from('official layer'));
    assert.equal((await call('GET', `/v2/base/blobs/${d}`, b)).status, 200, 'official content is readable by all');
    for (const name of ['Alice/web', 'alice/we..b', 'alice/-web', 'alice/web/deep', 'official/x', 'a//b']) {
      const r = await call('GET', `/v2/${name}/tags/list`, as('alice', alice));
      assert.equal(code(r), 'NAME_INVALID', name);
    }
    // `..` as a path segment, sent as is (URL parsers of clients would resolve it)
    const raw = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const u = new URL(h.url);
      const req = httpRequest(
        {
          host: u.hostname,
          port: u.port,
          path: '/v2/alice/../bob/tags/list',
          headers: { authorization: as('alice', alice) },
        },
        (res) => {
          let body = '';
          res.on('data', (c: Buffer) => (body += c.toString()));
          res.on('end', () => resolve({ status: res.statusCode!, body }));
        },
      );
      req.on('error', reject);
      req.end();
    });
    assert.equal(raw.status, 400);
    assert.match(raw.body, /NAME_INVALID/);
    const pct = await call('GET', '/v2/alice/%E0%A4%A/tags/list', as('alice', alice));
    assert.equal(pct.status, 400);
    assert.equal(code(pct), 'NAME_INVALID');
  });

  test('cross-repository mount: within what the user may read, otherwise an upload', async () => {
    const a = as('alice', alice);
    const d = await pushBlob('alice/src', a, Buffer.from('mount me'));
    const ok = await call('POST', `/v2/alice/dst/blobs/uploads/?mount=${d}&from=alice/src`, a);
    assert.equal(ok.status, 201);
    assert.equal(ok.headers.location, `/v2/alice/dst/blobs/${d}`);
    const b = as('bob', bob);
    const no = await call('POST', `/v2/bob/dst/blobs/uploads/?mount=${d}&from=alice/src`, b);
    assert.equal(no.status, 202, "bob cannot read alice's: he gets an upload instead");
    assert.equal(code(await call('GET', `/v2/bob/dst/blobs/${d}`, b)), 'BLOB_UNKNOWN');
  });

  test('referrers: manifests pushed with a subject are listed by it, filtered by artifactType; others see nothing', async () => {
    const a = as('alice', alice);
    const cfg = await pushBlob('alice/refs', a, Buffer.from('{"architecture":"arm64","os":"linux"}'));
    const manifest = (extra: object) =>
      Buffer.from(
        JSON.stringify({
          schemaVersion: 2,
          mediaType: MT_MANIFEST,
          config: { mediaType: 'application/vnd.oci.image.config.v1+json', digest: cfg, size: 37 },
          layers: [],
          ...extra,
        }),
      );
    const put = async (body: Buffer, ref: string) => {
      const r = await call('PUT', `/v2/alice/refs/manifests/${ref}`, a, body, { 'content-type': MT_MANIFEST });
      assert.equal(r.status, 201, r.body.toString());
      return r;
    };
    const subjectBody = manifest({});
    await put(subjectBody, 'v1');
    const subject = { mediaType: MT_MANIFEST, digest: sha(subjectBody), size: subjectBody.length };
    const sig = manifest({ artifactType: 'application/vnd.example.signature', subject, annotations: { by: 'alice' } });
    const sbom = manifest({ artifactType: 'application/spdx+json', subject });
    const r1 = await put(sig, sha(sig));
    assert.equal(r1.headers['oci-subject'], subject.digest);
    await put(sbom, sha(sbom));

    const all = await call('GET', `/v2/alice/refs/referrers/${subject.digest}`, a);
    assert.equal(all.status, 200);
    assert.match(String(all.headers['content-type']), /application\/vnd\.oci\.image\.index\.v1\+json/);
    assert.equal(all.json.mediaType, 'application/vnd.oci.image.index.v1+json');
    const byDigest = new Map((all.json.manifests as any[]).map((m) => [m.digest, m])); // eslint-disable-line @typescript-eslint/no-explicit-any
    assert.deepEqual([...byDigest.keys()].sort(), [sha(sig), sha(sbom)].sort());
    assert.deepEqual(byDigest.get(sha(sig)), {
      mediaType: MT_MANIFEST,
      digest: sha(sig),
      size: sig.length,
      artifactType: 'application/vnd.example.signature',
      annotations: { by: 'alice' },
    });
    const some = await call(
      'GET',
      `/v2/alice/refs/referrers/${subject.digest}?artifactType=application/spdx%2Bjson`,
      a,
    );
    assert.equal(some.headers['oci-filters-applied'], 'artifactType');
    assert.deepEqual(
      (some.json.manifests as { digest: string }[]).map((m) => m.digest),
      [sha(sbom)],
    );
    // a digest nothing refers to: an empty index, not an error
    const none = await call('GET', `/v2/alice/refs/referrers/sha256:${'0'.repeat(64)}`, a);
    assert.equal(none.status, 200);
    assert.deepEqual(none.json.manifests, []);
    // another user may not read alice's repository; a bad digest is named
    assert.equal((await call('GET', `/v2/alice/refs/referrers/${subject.digest}`, as('bob', bob))).status, 403);
    const bad = await call('GET', '/v2/alice/refs/referrers/sha256:nothex', a);
    assert.equal(bad.status, 400);
    assert.equal(bad.json.errors[0].code, 'DIGEST_INVALID');
  });

  test('tags list and catalog page with n and last; catalog shows only your repositories', async () => {
    const a = as('alice', alice);
    const cfg = await pushBlob('alice/tags', a, Buffer.from('{"architecture":"arm64","os":"linux"}'));
    const body = Buffer.from(
      JSON.stringify({
        schemaVersion: 2,
        mediaType: MT_MANIFEST,
        config: { mediaType: 'application/vnd.oci.image.config.v1+json', digest: cfg, size: 37 },
        layers: [],
      }),
    );
    for (const t of ['c', 'a', 'b', 'd'])
      assert.equal(
        (await call('PUT', `/v2/alice/tags/manifests/${t}`, a, body, { 'content-type': MT_MANIFEST })).status,
        201,
      );
    const p1 = await call('GET', '/v2/alice/tags/tags/list?n=2', a);
    assert.deepEqual(p1.json, { name: 'alice/tags', tags: ['a', 'b'] });
    assert.equal(p1.headers.link, '</v2/alice/tags/tags/list?n=2&last=b>; rel="next"');
    const p2 = await call('GET', '/v2/alice/tags/tags/list?n=2&last=b', a);
    assert.deepEqual(p2.json.tags, ['c', 'd']);
    assert.equal(p2.headers.link, undefined);
    assert.equal(code(await call('GET', '/v2/alice/nothing/tags/list', a)), 'NAME_UNKNOWN');
    const cat = await call('GET', '/v2/_catalog', a);
    assert.ok((cat.json.repositories as string[]).includes('alice/tags'));
    assert.ok((cat.json.repositories as string[]).every((r) => r.startsWith('alice/')));
    const bc = await call('GET', '/v2/_catalog', as('bob', bob));
    assert.ok(!(bc.json.repositories as string[]).some((r) => r.startsWith('alice/')));
    // a non-unikernel image is stored but is no platform image
    assert.equal(await h.daemon.store.read((tx) => tx.images.tag('alice/tags:a')), undefined);
    // delete a tag, then the manifest by digest
    assert.equal((await call('DELETE', '/v2/alice/tags/manifests/a', a)).status, 202);
    assert.deepEqual((await call('GET', '/v2/alice/tags/tags/list', a)).json.tags, ['b', 'c', 'd']);
    assert.equal((await call('DELETE', `/v2/alice/tags/manifests/${sha(body)}`, a)).status, 202);
    assert.deepEqual((await call('GET', '/v2/alice/tags/tags/list', a)).json.tags, []);
    assert.equal(code(await call('GET', `/v2/alice/tags/manifests/${sha(body)}`, a)), 'MANIFEST_UNKNOWN');
  });

  test('deleting a tag of a platform image removes the image tag; instances keep their digest', async () => {
    const a = as('alice', alice);
    assert.ok(await h.daemon.store.read((tx) => tx.images.tag('alice/web:1.0')));
    assert.equal((await call('DELETE', '/v2/alice/web/manifests/1.0', a)).status, 202);
    assert.equal(await h.daemon.store.read((tx) => tx.images.tag('alice/web:1.0')), undefined);
    const r = await h.call('POST', '/v1/instances', alice, { image: 'alice/web:1.0' });
    assert.equal(r.body.errors?.[0]?.error ?? r.body.data?.instances?.[0]?.error, 8);
  });

  test('registry storage counts toward registry_mb; a push over it is refused and leaves nothing', async () => {
    await h.daemon.services.users.setQuotas('bob', { hard: { registry_mb: 2 } });
    const b = as('bob', bob);
    await pushBlob('bob/q', b, Buffer.alloc(1024 * 1024, 1));
    const q = await h.call('GET', '/v1/users/quotas', bob);
    assert.equal(q.body.data.quotas[0].used.registry_mb, 1);
    assert.equal(q.body.data.quotas[0].hard.registry_mb, 2);
    const big = Buffer.alloc(3 * 1024 * 1024, 2);
    const r = await call('POST', `/v2/bob/q/blobs/uploads/?digest=${sha(big)}`, b, big);
    assert.equal(r.status, 403);
    assert.equal(code(r), 'DENIED');
    assert.match(r.json.errors[0].message, /registry_mb/);
    const uploads = readdirSync(join(h.dataDir, 'images', 'uploads')).filter((f) => f.endsWith('.json'));
    assert.ok(uploads.every((f) => !readFileSync(join(h.dataDir, 'images', 'uploads', f), 'utf8').includes('bob/q')));
    assert.equal(existsSync(join(h.dataDir, 'images', 'blobs', 'sha256', sha(big).slice(7))), false);
    // the same 1 MiB blob again does not count twice
    await pushBlob('bob/q2', b, Buffer.alloc(1024 * 1024, 1));
    assert.equal((await h.call('GET', '/v1/users/quotas', bob)).body.data.quotas[0].used.registry_mb, 1);
  });

  test('abandoned uploads are reclaimed', async () => {
    const a = as('alice', alice);
    const start = await call('POST', '/v2/alice/gone/blobs/uploads/', a);
    await call('PATCH', String(start.headers.location), a, Buffer.alloc(1000, 1));
    assert.equal(await h.daemon.services.registry.reclaimUploads(60_000), 0, 'a fresh upload stays');
    assert.ok((await h.daemon.services.registry.reclaimUploads(-1)) >= 1);
    assert.equal(code(await call('GET', String(start.headers.location), a)), 'BLOB_UPLOAD_UNKNOWN');
  });

  test('the collector removes what nothing references, never what an instance is pinned to', async () => {
    const a = as('alice', alice);
    const pushed: Record<string, string[]> = {};
    for (const app of ['gckeep', 'gcdrop']) {
      const dir = join(files, app);
      const { digests } = await kraftkitLayout(dir, [
        { os: 'qemu', architecture: 'x86_64', kernel: multibootKernel(`collector ${app}`) },
      ]);
      assert.equal((await pushLayout(dir, `alice/${app}`, '1', a, digests[0]!)).status, 201);
      const m = JSON.parse(readFileSync(join(dir, 'blobs', 'sha256', digests[0]!.slice(7)), 'utf8')) as {
        config: { digest: string };
        layers: { digest: string }[];
      };
      pushed[app] = [digests[0]!, m.config.digest, ...m.layers.map((l) => l.digest)];
    }
    const inst = await h.call('POST', '/v1/instances', alice, { image: 'alice/gckeep:1' });
    assert.equal(inst.status, 200, inst.text);
    for (const app of ['gckeep', 'gcdrop'])
      assert.equal((await call('DELETE', `/v2/alice/${app}/manifests/${pushed[app]![0]!}`, a)).status, 202);
    for (const app of ['gckeep', 'gcdrop'])
      for (const d of pushed[app]!.slice(1))
        assert.equal((await call('DELETE', `/v2/alice/${app}/blobs/${d}`, a)).status, 202);
    const blobFile = (d: string) => join(h.dataDir, 'images', 'blobs', 'sha256', d.slice(7));
    assert.equal((await h.daemon.services.registry.collect(3600_000)).blobs, 0, 'nothing older than the grace time');
    const r = await h.daemon.services.registry.collect(-1);
    assert.ok(r.blobs >= 3, JSON.stringify(r));
    for (const d of pushed.gcdrop!) assert.equal(existsSync(blobFile(d)), false, `${d} of the unreferenced image`);
    for (const d of pushed.gckeep!) assert.equal(existsSync(blobFile(d)), true, `${d} of the pinned image`);
    assert.equal(await h.daemon.store.read((tx) => tx.images.get(pushed.gcdrop![0]!)), undefined);
    assert.ok(await h.daemon.store.read((tx) => tx.images.get(pushed.gckeep![0]!)));
  });

  test('the collector running over and over while a push goes on loses nothing of the push', async () => {
    const a = as('alice', alice);
    let running = true;
    const loop = (async () => {
      let n = 0;
      while (running) {
        await h.daemon.services.registry.collect(-1);
        n++;
      }
      return n;
    })();
    const blobs: Buffer[] = [];
    for (let i = 0; i < 30; i++) blobs.push(Buffer.from(`concurrent blob ${i} `.repeat(1000)));
    const digests = [];
    for (const b of blobs) digests.push(await pushBlob('alice/race', a, b));
    const cfg = await pushBlob('alice/race', a, Buffer.from('{"architecture":"arm64","os":"linux"}'));
    const manifest = Buffer.from(
      JSON.stringify({
        schemaVersion: 2,
        mediaType: MT_MANIFEST,
        config: { mediaType: 'application/vnd.oci.image.config.v1+json', digest: cfg, size: 37 },
        layers: digests.map((digest, i) => ({
          mediaType: 'application/vnd.oci.image.layer.v1.tar',
          digest,
          size: blobs[i]!.length,
        })),
      }),
    );
    const put = await call('PUT', '/v2/alice/race/manifests/1', a, manifest, { 'content-type': MT_MANIFEST });
    running = false;
    const rounds = await loop;
    assert.equal(put.status, 201, put.body.toString());
    assert.ok(rounds >= 2, `the collector ran ${rounds} times during the push`);
    await h.daemon.services.registry.collect(-1);
    for (const [i, d] of digests.entries())
      assert.deepEqual((await call('GET', `/v2/alice/race/blobs/${d}`, a)).body, blobs[i]);
    assert.equal(sha((await call('GET', '/v2/alice/race/manifests/1', a)).body), sha(manifest));
  });
});
