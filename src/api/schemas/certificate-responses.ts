import { Type } from '@sinclair/typebox';
import { Int, Opt, Str, Uuid, closed } from './common.js';

/**
 * Response entries of the certificate endpoints (closed: every field named;
 * test/api/responses.test.ts checks real answers against them).
 */

const Time = () => Type.String({ format: 'date-time' });
const State = () => Type.Union([Type.Literal('pending'), Type.Literal('valid'), Type.Literal('error')]);

/** GET /v1/certificates: the certificate (in the list form without `status`). */
export const CertificateStatus = closed(
  {
    status: Opt(Type.Literal('success')),
    uuid: Uuid(),
    name: Str(),
    created_at: Time(),
    common_name: Str(),
    state: State(),
    validation: Opt(
      closed({ attempt: Int(), next: Opt(Time()) }, 'A pending order: attempts made and when the next is due.'),
    ),
    subject: Opt(Str()),
    issuer: Opt(Str()),
    serial_number: Opt(Str('Lower-case hex.')),
    not_before: Opt(Time()),
    not_after: Opt(Time()),
    message: Opt(Str('Why the certificate is in error.')),
    service_groups: Type.Array(closed({ uuid: Uuid(), name: Str() }, 'A group that uses it.')),
  },
  'A certificate (GET /v1/certificates).',
);

/** DELETE /v1/certificates. */
export const CertificateDeleted = closed(
  { status: Type.Literal('success'), uuid: Uuid(), name: Str() },
  'A deleted certificate.',
);

/** GET /v1/certificates with `details: false`. */
export const CertificateBrief = closed(
  { status: Type.Literal('success'), uuid: Uuid(), name: Str(), state: State() },
  'A certificate without details.',
);

/** Either form of GET /v1/certificates. */
export const CertificateGet = Type.Union([CertificateStatus, CertificateBrief]);

/** What a certificate's leaf shows (subject and issuer on one line, serial in lower-case hex). */
const shown = {
  subject: Str(),
  issuer: Str(),
  serial_number: Str('Lower-case hex.'),
  not_before: Time(),
  not_after: Time(),
};

/** POST /v1/certificates: the uploaded certificate. */
export const CertificateUploaded = closed(
  {
    status: Type.Literal('success'),
    uuid: Uuid(),
    name: Str(),
    common_name: Str(),
    state: Type.Literal('valid'),
    ...shown,
  },
  'An uploaded certificate.',
);

/** PUT /v1/certificates: the certificate with its new chain. */
export const CertificateReplaced = closed(
  {
    status: Type.Literal('success'),
    uuid: Uuid(),
    name: Str(),
    state: Type.Literal('valid'),
    ...shown,
    message: Str('What was replaced.'),
  },
  'A replaced certificate.',
);
