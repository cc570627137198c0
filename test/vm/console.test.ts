/**
 * The web console in a real browser (Debian's Chromium driven by
 * playwright-core) against a real daemon booting real guests, inside a
 * network namespace this test creates and deletes: a wrong token; sign in;
 * create an instance from the form and watch it turn `running` without a
 * reload; read its log (where a planted `<img onerror>` stays text); publish
 * a port and open the app through the gateway; the console itself through
 * the gateway at `console.<metro domain>`; stop and delete; a session that
 * ends mid-form keeps what was typed; every view at 360 px and by keyboard;
 * axe-core finds no serious or critical violation.
 *
 * With UNIHOST_CONSOLE_SCREENSHOTS=<dir> it also saves a screenshot of each
 * main view there (scripts/console-screenshots.sh refreshes docs/console/).
 */
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import pino from 'pino';
import { chromium, type Browser, type Page } from 'playwright-core';
import { CONSOLE_DIR } from '../../src/api/console.js';
import { defaultControllers } from '../../src/controllers.js';
import { importGuestImages } from '../../src/images/guest.js';
import type { GatewayController } from '../../src/reconcile/gateway.js';
import { startHarness, type Harness } from '../helpers/harness.js';
import { canRunNetns, insideTestNetns, runInTestNetns } from '../helpers/netns.js';
import { closeVmHarness, guestOut, importCHttp, unikraftDir } from '../helpers/vm.js';

const CHROMIUM = process.env.UNIHOST_CHROMIUM ?? '/usr/bin/chromium';
const UK = unikraftDir();
const SHOTS = process.env.UNIHOST_CONSOLE_SCREENSHOTS;
const AXE = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

if (!insideTestNetns()) {
  runInTestNetns(
    import.meta.url,
    'the web console in Chromium against a real daemon, in a test-made namespace',
    !existsSync(CHROMIUM)
      ? `no Chromium at ${CHROMIUM} (apt-get install chromium; or set UNIHOST_CHROMIUM)`
      : !existsSync(`${CONSOLE_DIR}index.html`)
        ? 'the web console is not built (npm run build:web)'
        : !existsSync(join(guestOut(), 'echo.json'))
          ? 'no test guest images (guest/build-images.sh)'
          : !canRunNetns() && 'needs root, ip, nft, QEMU and mkfs.ext4',
  );
} else {
  describe('web console in Chromium, inside the namespace', () => {
    let h: Harness;
    let t: string;
    let browser: Browser;
    let page: Page;
    let gwPort = 0;
    let metro = '';
    // the app behind the published port: Unikraft's c-http where the kernels are, else the Linux httpd guest
    const app = UK
      ? { image: 'c-http:latest', memory: '16', says: /Hello from Unikraft!/, log: /Powered by/ }
      : { image: 'http:latest', memory: '128', says: /./, log: /./ };

    const shot = async (name: string) => {
      if (!SHOTS) return;
      mkdirSync(SHOTS, { recursive: true });
      await page.waitForTimeout(300); // fonts and the last live update settle
      await page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });
    };
    /** axe-core on the page as it is: no serious or critical violation. */
    const axe = async (where: string) => {
      // through the debugger protocol, which the page's CSP does not govern (a script tag would be refused)
      if (!(await page.evaluate(() => 'axe' in window))) await page.evaluate(AXE);
      const found = await page.evaluate(async () => {
        const w = window as unknown as {
          axe: {
            run(
              c: unknown,
              o: unknown,
            ): Promise<{ violations: { id: string; impact: string; nodes: { target: string[] }[] }[] }>;
          };
        };
        const r = await w.axe.run(document, { resultTypes: ['violations'] });
        return r.violations.map((v) => ({ id: v.id, impact: v.impact, nodes: v.nodes.map((n) => n.target.join(' ')) }));
      });
      const bad = found.filter((v) => v.impact === 'serious' || v.impact === 'critical');
      assert.deepEqual(bad, [], `${where}: axe-core violations ${JSON.stringify(bad)}`);
    };
    const go = async (hash: string) => {
      await page.evaluate((hh) => (location.hash = hh), hash);
      await page.locator('#page-title').waitFor();
    };
    /** Creates an instance through the form; resolves on its page. */
    const createFromForm = async (f: {
      image: string;
      name: string;
      memory: string;
      args?: string;
      port?: boolean;
    }) => {
      await go('#/create');
      await page.getByRole('button', { name: 'Clear the form' }).click();
      await page.getByLabel('Image').fill(f.image);
      await page.getByLabel('Name (optional)').fill(f.name);
      await page.getByLabel('Memory (MB)').fill(f.memory);
      if (f.args) await page.getByLabel('Arguments').fill(f.args);
      if (f.port) await page.getByRole('button', { name: 'Add a port' }).click();
      await page.getByRole('button', { name: 'Create instance' }).click();
      await page.waitForFunction((n) => document.querySelector('#page-title')?.textContent === n, f.name, {
        timeout: 30_000,
      });
    };
    const badge = () => page.locator('.state-line .badge').textContent();

    before(async () => {
      h = await startHarness(
        {
          machines: { accel: 'tcg', bootTimeoutMs: 30_000 },
          subnet: '10.79.0.0/24',
          network: { enabled: true, bridge: 'uhbr0', dns: true, dnsPort: 53 },
        },
        (s) => defaultControllers(s, pino({ level: process.env.UNIHOST_TEST_LOG ?? 'silent' })),
      );
      await importGuestImages(h.daemon.services.images, guestOut());
      if (UK) await importCHttp(h.daemon.services.images, UK);
      t = await h.user('web');
      const gwc = h.daemon.controllers.find((c) => (c as GatewayController).dataPlane !== undefined) as
        GatewayController | undefined;
      assert.ok(gwc?.dataPlane, 'the gateway runs');
      gwPort = gwc.dataPlane.boundPort(443)!;
      metro = h.daemon.config.metroDomain;
      browser = await chromium.launch({
        executablePath: CHROMIUM,
        // root in a namespace: Chromium's own sandbox needs user namespaces it cannot have here
        args: ['--no-sandbox', `--host-resolver-rules=MAP *.${metro} 127.0.0.1`],
      });
      // TLS through the gateway is checked against the platform's CA in test/vm/unikraft.test.ts
      const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 }, ignoreHTTPSErrors: true });
      page = await ctx.newPage();
      page.on('pageerror', (e) => assert.fail(`script error in the page: ${e.message}`));
    });

    after(async () => {
      await browser?.close();
      if (h) await closeVmHarness(h, [t]);
    });

    test('a wrong token is refused in words; the right one signs in; the token is in no URL or cookie', async () => {
      await page.goto(`${h.url}/`);
      await shot('signin');
      await axe('sign-in');
      await page.getByLabel('API token').fill('not-a-token');
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.getByText('That token was not accepted').waitFor();
      // by keyboard alone: the field, the token, Enter
      await page.getByLabel('API token').fill('');
      await page.keyboard.press('Tab'); // away and back, as a keyboard user would move
      await page.getByLabel('API token').focus();
      await page.keyboard.type(t);
      await page.keyboard.press('Enter');
      await page.getByText('No instances yet.').waitFor();
      assert.ok(!page.url().includes(t), 'not in the URL');
      assert.deepEqual(await page.context().cookies(), [], 'no cookie');
      await page.locator('.live.on').waitFor();
      await axe('instances, empty');
    });

    test('create from the form: it turns running without a reload; its log shows planted HTML as text', async () => {
      await page.evaluate(() => ((window as unknown as { __same: boolean }).__same = true));
      const planted = '<img src=x onerror="window.__xss=1">';
      await createFromForm({ image: 'echo:latest', name: 'hello', memory: '128', args: `'${planted}'` });
      await page.waitForFunction(() => document.querySelector('.state-line .badge')?.textContent === 'running', null, {
        timeout: 60_000,
      });
      assert.equal(await page.evaluate(() => (window as unknown as { __same?: boolean }).__same), true, 'no reload');
      await page.locator('pre.log', { hasText: planted }).waitFor({ timeout: 30_000 });
      assert.equal(await page.locator('pre.log img').count(), 0, 'no element made from the log');
      assert.equal(await page.evaluate(() => (window as unknown as { __xss?: number }).__xss), undefined);
      await shot('instance');
      await axe('instance detail');
    });

    test('publish a port from the form and open the app through the gateway; the console too', async () => {
      await createFromForm({ image: app.image, name: 'site', memory: app.memory, port: true });
      await page.waitForFunction(() => document.querySelector('.state-line .badge')?.textContent === 'running', null, {
        timeout: 60_000,
      });
      const fqdn = await page.locator(`a[href$=".${metro}/"]`).first().textContent();
      assert.ok(fqdn?.endsWith(metro), `the group's name: ${fqdn}`);
      await page.locator('pre.log', { hasText: app.log }).waitFor({ timeout: 30_000 });
      const site = await page.context().newPage();
      try {
        let body = '';
        for (let i = 0; i < 50 && !app.says.test(body); i++) {
          const r = await site.goto(`https://${fqdn}:${gwPort}/`).catch(() => null);
          body = r?.ok() ? await site.content() : '';
          if (!app.says.test(body)) await site.waitForTimeout(300);
        }
        assert.match(body, app.says, 'the app answers through the gateway');
        // the gateway's counters of the group: requests HAProxy routes to the instance are counted (its stats
        // poll is periodic). A request that came before the gateway's routes had the new instance was carried
        // by the activator, whose connections count as bytes only (docs/gateway.md): more requests, until counted.
        await go('#/groups');
        const row = page.locator('tr', { hasText: fqdn! });
        await row.waitFor();
        for (let i = 0; i < 40 && !/[1-9]\d* requests/.test(await row.innerText()); i++) {
          await site.goto(`https://${fqdn}:${gwPort}/`).catch(() => null);
          await page.waitForTimeout(250);
          await go('#/instances');
          await go('#/groups');
        }
        assert.match(await row.innerText(), /[1-9]\d* requests/);
        // the console under the platform's own name, through the same gateway
        await site.goto(`https://console.${metro}:${gwPort}/`);
        await site.getByRole('heading', { name: 'Sign in to unihost' }).waitFor();
      } finally {
        await site.close();
      }
      await go('#/groups');
      await page.locator('tr', { hasText: fqdn! }).waitFor();
      await shot('groups');
      await axe('service groups');
    });

    test('every view: live list, 360 px without sideways scrolling, keyboard navigation, axe', async () => {
      await go('#/instances');
      await page.locator('tr', { hasText: 'hello' }).locator('.badge', { hasText: 'running' }).waitFor();
      await shot('instances');
      for (const [hash, title] of [
        ['#/create', 'Create an instance'],
        ['#/volumes', 'Volumes'],
        ['#/certificates', 'Certificates'],
        ['#/images', 'Images'],
        ['#/quotas', 'Quotas'],
        ['#/events', 'Events'],
      ]) {
        await go(hash!);
        await page.getByRole('heading', { name: title, level: 1 }).waitFor();
        await shot(hash!.slice(2));
        await axe(title!);
      }
      // the events seen since sign-in, newest first
      await page.getByRole('cell', { name: 'running' }).first().waitFor();
      await page.setViewportSize({ width: 360, height: 740 });
      for (const hash of ['#/instances', '#/create', '#/groups', '#/quotas']) {
        await go(hash);
        const wide = await page.evaluate(() => document.documentElement.scrollWidth);
        assert.ok(wide <= 362, `${hash} at 360 px is ${wide} px wide: tables must scroll inside their frame`);
      }
      await go('#/instances');
      await shot('instances-360');
      await axe('instances at 360 px');
      await page.setViewportSize({ width: 1280, height: 800 });
      // keyboard: Tab reaches the navigation, Enter follows a link
      await page.locator('#page-title').focus();
      let reached = false;
      for (let i = 0; i < 40 && !reached; i++) {
        await page.keyboard.press('Shift+Tab');
        reached = await page.evaluate(() => document.activeElement?.textContent === 'Quotas');
      }
      assert.ok(reached, 'the Quotas link is reachable by keyboard');
      await page.keyboard.press('Enter');
      await page.getByRole('heading', { name: 'Quotas', level: 1 }).waitFor();
    });

    test('stop and delete from the instance page: the stop reason in words, then gone; bulk delete from the list', async () => {
      await go('#/instances');
      await page.getByRole('link', { name: 'hello' }).click();
      await page.getByRole('button', { name: 'Stop' }).click();
      await page.waitForFunction(() => document.querySelector('.state-line .badge')?.textContent === 'stopped', null, {
        timeout: 60_000,
      });
      await page.getByRole('heading', { name: 'Why it stopped' }).waitFor();
      assert.match(await page.locator('.stop').innerText(), /by the user/);
      assert.equal(await badge(), 'stopped');
      page.once('dialog', (d) => void d.accept());
      await page.getByRole('button', { name: 'Delete' }).click();
      await page.getByRole('heading', { name: 'Instances', level: 1 }).waitFor();
      await page.locator('tr', { hasText: 'hello' }).waitFor({ state: 'detached' });
      // bulk: select every shown row (the published app), delete them together
      await page.getByLabel('Select all shown').check();
      page.once('dialog', (d) => void d.accept());
      await page
        .getByRole('group', { name: 'Actions on the selected instances' })
        .getByRole('button', { name: 'Delete' })
        .click();
      await page.getByText('No instances yet.').waitFor({ timeout: 30_000 });
    });

    test('bad input in words; a session that ends mid-form returns to sign-in and keeps the form', async () => {
      await go('#/create');
      await page.getByRole('button', { name: 'Clear the form' }).click();
      // the client's check, with the same words as the API's; HTML in a name is text
      await page.getByLabel('Image').fill('echo:latest');
      await page.getByLabel('Name (optional)').fill('<img src=x onerror="window.__xss=2">');
      await page.getByRole('button', { name: 'Create instance' }).click();
      await page.getByText("The name contains '<'").waitFor();
      // the API's own refusal, shown as it says it
      await page.getByLabel('Name (optional)').fill('nowhere');
      await page.getByLabel('Image').fill('no-such-image:1');
      await page.getByRole('button', { name: 'Create instance' }).click();
      await page.locator('.error', { hasText: 'no-such-image' }).waitFor();
      assert.equal(await page.evaluate(() => (window as unknown as { __xss?: number }).__xss), undefined);

      // the token is revoked while the user types
      const second = await h.daemon.services.users.newToken('web');
      await page.evaluate((tok) => sessionStorage.setItem('unihost.token', tok), second.token);
      await page.getByLabel('Image').fill('echo:latest');
      await page.getByLabel('Arguments').fill('typed before the session ended');
      await h.daemon.services.users.revokeTokens('web', { id: second.id });
      await page.getByRole('button', { name: 'Create instance' }).click();
      await page.getByText('Your session ended').waitFor();
      await page.getByLabel('API token').fill(t);
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.getByRole('heading', { name: 'Create an instance' }).waitFor();
      assert.equal(await page.getByLabel('Arguments').inputValue(), 'typed before the session ended');
      await page.getByRole('button', { name: 'Clear the form' }).click();
      // sign out: the token leaves the tab
      await page.getByRole('button', { name: 'Sign out' }).click();
      await page.getByText('You signed out.').waitFor();
      assert.equal(await page.evaluate(() => sessionStorage.getItem('unihost.token')), null);
      assert.equal(await page.getByRole('link', { name: 'Hosts' }).count(), 0, 'no hosts for a tenant');
      // an operator (developer account) also sees the hosts
      await page.getByLabel('API token').fill(await h.user('ops', true));
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.getByRole('link', { name: 'Hosts' }).click();
      await page.getByRole('heading', { name: 'Hosts', level: 1 }).waitFor();
      await page.locator('tbody tr').first().waitFor();
      await shot('hosts');
      await axe('hosts');
    });
  });
}
