import { Type } from '@sinclair/typebox';
import {
  CertificateDeleted,
  CertificateGet,
  CertificateReplaced,
  CertificateUploaded,
} from '../schemas/certificate-responses.js';
import { endpoint } from '../endpoint.js';
import { Listed, Name, Opt, Str } from '../schemas/common.js';

const C = 'certificates';

const Pem = (what: string, max: number) => Str(what, { minLength: 1, maxLength: max });

export const certificateEndpoints = [
  endpoint({
    method: 'POST',
    path: '/v1/certificates',
    plural: C,
    summary: 'Upload certificates (chain and key are checked; the key is never returned).',
    target: 'none',
    batch: true,
    params: Type.Object(
      {
        name: Opt(Name()),
        cn: Opt(Str('Domain the certificate is for (its names must cover it); alias common_name.')),
        common_name: Opt(Str('Same as cn.')),
        chain: Pem('PEM certificates, leaf first, then intermediates.', 65536),
        pkey: Pem('PEM private key of the leaf (unencrypted); stored in a 0600 file, never returned.', 16384),
      },
      { additionalProperties: false },
    ),
    handle: async (ctx, e) => {
      const c = await ctx.services.certificates.create(ctx.user, e.params);
      ctx.log.info({ certificate: c.uuid, common_name: c.common_name }, 'certificate uploaded');
      return c;
    },
    response: CertificateUploaded,
  }),
  endpoint({
    method: 'PUT',
    path: '/v1/certificates',
    localPath: '/v1/certificates/:uuid',
    plural: C,
    summary:
      'Replace certificates: a new chain and key covering the common name and every domain using it; served from the next TLS handshake, open connections stay.',
    target: 'required',
    batch: true,
    params: Type.Object(
      {
        chain: Pem('PEM certificates, leaf first, then intermediates.', 65536),
        pkey: Pem('PEM private key of the leaf (unencrypted); stored in a 0600 file, never returned.', 16384),
      },
      { additionalProperties: false },
    ),
    handle: async (ctx, e) => {
      const c = await ctx.services.certificates.replace(ctx.user, e.target!, e.params);
      ctx.log.info({ certificate: c.uuid, serial: c.serial_number }, 'certificate replaced');
      return c;
    },
    response: CertificateReplaced,
  }),
  endpoint({
    method: 'GET',
    path: '/v1/certificates',
    localPath: '/v1/certificates/:uuid',
    plural: C,
    summary: 'Certificate status. Without a target, lists every certificate, paged by count/from.',
    target: 'required',
    batch: true,
    params: Type.Object({}),
    list: (ctx) => ctx.services.certificates.list(ctx.user),
    handle: async (ctx, e, q) => {
      const c = await ctx.services.certificates.get(ctx.user, e.target!);
      return q.details === false ? { uuid: c.uuid, name: c.name, state: c.state } : c;
    },
    response: CertificateGet,
  }),
  endpoint({
    method: 'DELETE',
    path: '/v1/certificates',
    localPath: '/v1/certificates/:uuid',
    plural: C,
    summary: 'Delete certificates (refused while a service group uses it).',
    target: 'required',
    batch: true,
    params: Type.Object({}),
    handle: async (ctx, e) => ctx.services.certificates.delete(ctx.user, e.target!),
    response: CertificateDeleted,
  }),
  endpoint({
    method: 'GET',
    path: '/v1/certificates/list',
    plural: C,
    summary: 'List certificates.',
    target: 'none',
    batch: false,
    params: Type.Object({ common_name: Opt(Str('Filter by common name.')) }, { additionalProperties: false }),
    handleAll: async (ctx, entries) => ctx.services.certificates.list(ctx.user, entries[0]!.params.common_name),
    response: Listed,
  }),
];
