/* eslint-disable @typescript-eslint/no-explicit-any -- API replies are JSON; the assertions check their shape. */
import assert from 'node:assert/strict';
import type { Reply } from './harness.js';

/**
 * Assertions on API replies for one category (`plural` is the result array's
 * name): `ok` returns the entries of a success, `entryError` the failed entry
 * of a per-target error with its numeric code, `bad` checks a 400.
 */
export function replyAsserts(defaultPlural: string) {
  return {
    ok(r: Reply, plural = defaultPlural): any[] {
      assert.equal(r.status, 200, r.text);
      assert.equal(r.body.status, 'success', r.text);
      return r.body.data[plural];
    },
    entryError(r: Reply, code: number, re?: RegExp, plural = defaultPlural): any {
      assert.equal(r.status, 200, r.text);
      assert.equal(r.body.status, 'error', r.text);
      const e = r.body.data[plural][0];
      assert.equal(e.status, 'error', r.text);
      assert.equal(e.error, code, r.text);
      if (re) assert.match(e.message, re);
      return e;
    },
    bad(r: Reply, re: RegExp): void {
      assert.equal(r.status, 400, r.text);
      assert.equal(r.body.status, 'error', r.text);
      assert.match(r.body.message, re);
    },
  };
}
