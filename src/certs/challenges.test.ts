import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ChallengeAnswers, challengeFor } from './challenges.js';

describe('challengeFor', () => {
  test('a group publishing port 80 is validated over HTTP-01, then TLS-ALPN-01 after a failure where 443 is published', () => {
    assert.equal(challengeFor([80, 443], 1), 'http-01');
    assert.equal(challengeFor([80, 443], 2), 'tls-alpn-01');
    assert.equal(challengeFor([80, 443], 3), 'http-01');
    assert.equal(challengeFor([80], 2), 'http-01');
  });

  test('a group publishing 443 but not 80 uses TLS-ALPN-01 first, then HTTP-01', () => {
    assert.equal(challengeFor([443, 8080], 1), 'tls-alpn-01');
    assert.equal(challengeFor([443], 2), 'http-01');
    assert.equal(challengeFor([443], 3), 'tls-alpn-01');
  });

  test('without 80 or 443, only HTTP-01 (on the port-80 route the gateway adds) is possible', () => {
    assert.equal(challengeFor([8443], 1), 'http-01');
    assert.equal(challengeFor([8443], 2), 'http-01');
    assert.equal(challengeFor([], 2), 'http-01');
  });
});

describe('ChallengeAnswers', () => {
  test('HTTP-01 answers by host (any case) and token', () => {
    const c = new ChallengeAnswers();
    c.add('Shop.Example.Test', 'tok', 'tok.thumb');
    assert.equal(c.answer('shop.example.test', 'tok'), 'tok.thumb');
    assert.equal(c.answer('shop.example.test', 'other'), undefined);
    assert.deepEqual(c.hosts(), ['shop.example.test']);
    c.remove('shop.example.test', 'tok');
    assert.equal(c.answer('shop.example.test', 'tok'), undefined);
    assert.deepEqual(c.hosts(), []);
  });

  test('TLS-ALPN-01 certificates are listed by host and every change is announced', () => {
    const c = new ChallengeAnswers();
    let changes = 0;
    const off = c.onAlpnChange(() => {
      changes++;
    });
    void c.addAlpn('Shop.Example.Test', { cert: 'C', key: 'K' });
    assert.deepEqual(c.alpnCertificates(), [{ name: 'shop.example.test', pair: { cert: 'C', key: 'K' } }]);
    assert.equal(changes, 1);
    c.removeAlpn('other.example.test'); // nothing there: no change
    assert.equal(changes, 1);
    c.removeAlpn('shop.example.test');
    assert.deepEqual(c.alpnCertificates(), []);
    assert.equal(changes, 2);
    off();
    void c.addAlpn('a.example.test', { cert: 'C', key: 'K' });
    assert.equal(changes, 2);
  });

  test('addAlpn resolves once the data plane says the certificate is served', async () => {
    const c = new ChallengeAnswers();
    let served = false;
    c.onAlpnChange(async () => {
      await new Promise((r) => setTimeout(r, 20));
      served = true;
    });
    await c.addAlpn('a.example.test', { cert: 'C', key: 'K' });
    assert.equal(served, true);
  });
});
