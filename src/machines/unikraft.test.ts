import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { parseControl, deriveStop, isFailure } from './stop-info.js';
import { handoverOffset, unikraftCrash } from './unikraft.js';

const FIXTURES = join(import.meta.dirname, '..', '..', 'test', 'fixtures', 'unikraft');
const capture = (name: string): string => readFileSync(join(FIXTURES, `${name}.console`), 'utf8');

const decode = (code: number | null) =>
  code === null
    ? null
    : { reason: code & 0xff, initlvl: (code >> 8) & 0x7f, shutdown: (code >> 15) & 1, errno: (code >> 16) & 0xff };

/** Stop fields of a Unikraft VM that ended by itself with QEMU exit `status`. */
const ended = (console: string, status: number | null) =>
  deriveStop({
    control: parseControl(''),
    status,
    panicked: false,
    initiator: 'none',
    forced: false,
    console,
    contract: 'unikraft',
  });

describe('Unikraft consoles (test/fixtures/unikraft): handover and stop codes', () => {
  const table: Array<{
    name: string;
    status: number | null;
    handover: boolean;
    stop_reason: number;
    code: ReturnType<typeof decode>;
  }> = [
    // main returned: isa-debug-exit 83, a clean kernel exit
    { name: 'helloworld', status: 83, handover: true, stop_reason: 1, code: decode(0) },
    // abort(): EXP in the application
    {
      name: 'crash-abort',
      status: 85,
      handover: true,
      stop_reason: 1,
      code: { reason: 1, initlvl: 127, shutdown: 0, errno: 0 },
    },
    // page fault in main: PGFAULT, errno EFAULT
    {
      name: 'page-fault',
      status: 85,
      handover: true,
      stop_reason: 1,
      code: { reason: 4, initlvl: 127, shutdown: 0, errno: 14 },
    },
    // HWRNG missing under TCG: EXP with its errno (EOPNOTSUPP) in init class 1
    {
      name: 'hwrng',
      status: 85,
      handover: false,
      stop_reason: 1,
      code: { reason: 1, initlvl: 1, shutdown: 0, errno: 95 },
    },
    // an assertion before the banner (c-http 0.16.3 under qboot)
    {
      name: 'c-http-qboot',
      status: 85,
      handover: false,
      stop_reason: 1,
      code: { reason: 1, initlvl: 0, shutdown: 0, errno: 0 },
    },
  ];
  for (const row of table) {
    test(`${row.name}: handover ${row.handover}, stop_reason ${row.stop_reason}`, () => {
      const text = capture(row.name);
      assert.equal(handoverOffset(text) >= 0, row.handover);
      const s = ended(text, row.status);
      assert.equal(s.stop_reason, row.stop_reason);
      assert.equal(s.exit_code, null, 'stock kernels do not pass main’s return value to the host');
      assert.deepEqual(decode(s.stop_code), row.code);
      assert.equal(isFailure(s), row.code!.reason !== 0);
    });
  }

  test('c-http: the handover is the end of the banner’s version line, before the app’s first line', () => {
    const text = capture('c-http');
    const at = handoverOffset(text);
    assert.ok(at > 0);
    assert.match(text.slice(0, at), /Telesto 0\.16\.3\r?\n$/);
    assert.match(text.slice(at), /^Listening on port 8080/);
    assert.equal(unikraftCrash(text), null, 'a running server shows no crash');
  });

  test('a banner cut before its version line is not a handover yet', () => {
    const text = capture('helloworld');
    const cut = text.indexOf('Calypso');
    assert.equal(handoverOffset(text.slice(0, cut + 'Calypso 0.1'.length)), -1);
    assert.equal(
      handoverOffset(text.slice(0, text.indexOf('\n', cut))),
      -1,
      'the line is complete only with its newline',
    );
  });

  test('a user stop of a crashed kernel keeps the cause and sets the shutdown bit', () => {
    const s = deriveStop({
      control: parseControl(''),
      status: 85,
      panicked: false,
      initiator: 'user',
      forced: false,
      console: capture('crash-abort'),
      contract: 'unikraft',
    });
    assert.equal(s.stop_reason, 13);
    assert.deepEqual(decode(s.stop_code), { reason: 1, initlvl: 127, shutdown: 1, errno: 0 });
  });
});
