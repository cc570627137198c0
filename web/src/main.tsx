// The unihost web console: sign-in, the navigation, and a hash router over the views.
import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import './style.css';
import { api, ApiError, messageOf, ok, onExpired, session } from './api/client';
import * as events from './api/events';
import { Instances } from './views/instances';
import { InstanceDetail } from './views/instance';
import { Create } from './views/create';
import { Groups } from './views/groups';
import { Volumes } from './views/volumes';
import { Certificates } from './views/certificates';
import { Images } from './views/images';
import { Quotas } from './views/quotas';
import { Events } from './views/events';
import { Hosts, listHosts } from './views/hosts';

const NAV: [string, string][] = [
  ['#/instances', 'Instances'],
  ['#/create', 'Create'],
  ['#/groups', 'Service groups'],
  ['#/volumes', 'Volumes'],
  ['#/certificates', 'Certificates'],
  ['#/images', 'Images'],
  ['#/quotas', 'Quotas'],
  ['#/events', 'Events'],
];

function useHash(): string {
  const [hash, setHash] = useState(location.hash || '#/instances');
  useEffect(() => {
    const on = () => setHash(location.hash || '#/instances');
    addEventListener('hashchange', on);
    return () => removeEventListener('hashchange', on);
  }, []);
  return hash;
}

function route(hash: string) {
  const [, view = 'instances', id] = hash.replace(/^#/, '').split('/');
  switch (view) {
    case 'instances':
      return id ? <InstanceDetail key={id} uuid={decodeURIComponent(id)} /> : <Instances />;
    case 'create':
      return <Create />;
    case 'groups':
      return <Groups />;
    case 'volumes':
      return <Volumes />;
    case 'certificates':
      return <Certificates />;
    case 'images':
      return <Images />;
    case 'quotas':
      return <Quotas />;
    case 'events':
      return <Events />;
    case 'hosts':
      return <Hosts />;
    default:
      return (
        <section>
          <h1>Not found</h1>
          <p>
            There is no page '{view}'. <a href="#/instances">Go to the instances</a>.
          </p>
        </section>
      );
  }
}

/** Checks a token with a cheap authenticated call: the quotas of its user. */
async function check(token: string): Promise<void> {
  session.set(token);
  try {
    await ok(api.GET('/v1/users/quotas'), 'quotas');
  } catch (e) {
    session.clear();
    if (e instanceof ApiError && e.http === 401)
      throw new Error(
        'That token was not accepted: it is wrong, or it was revoked. Ask your operator for a new one (unihost user token).',
      );
    throw e;
  }
}

function SignIn({ onIn, reason }: { onIn: () => void; reason: string | null }) {
  const [token, setToken] = useState('');
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  return (
    <main id="main" class="signin">
      <h1>Sign in to unihost</h1>
      {reason && (
        <p class="notice" role="status">
          {reason}
        </p>
      )}
      <form
        onSubmit={async (ev) => {
          ev.preventDefault();
          const t = token.trim();
          if (!t) return setError('Enter your API token.');
          setBusy(true);
          setError(null);
          try {
            await check(t);
            onIn();
          } catch (e) {
            setError(messageOf(e));
          } finally {
            setBusy(false);
          }
        }}
      >
        <div class="field">
          <label for="token">API token</label>
          <input
            id="token"
            name="token"
            type="password"
            autocomplete="current-password"
            value={token}
            aria-describedby="token-hint"
            aria-invalid={error ? true : undefined}
            onInput={(e) => setToken(e.currentTarget.value)}
          />
          <small id="token-hint" class="hint">
            The bearer token the CLI uses (UKC_TOKEN). It is kept in this tab only and forgotten when the tab closes.
          </small>
        </div>
        {error && (
          <p class="error" role="alert">
            {error}
          </p>
        )}
        <button type="submit" disabled={busy}>
          {busy ? 'Signing in…' : 'Sign in'}
        </button>
      </form>
    </main>
  );
}

function LiveDot() {
  const [live, setLive] = useState(events.isLive());
  useEffect(() => events.onLive(setLive), []);
  return (
    <span
      class={`live ${live ? 'on' : 'off'}`}
      role="status"
      title={live ? 'Receiving live updates' : 'Reconnecting to live updates'}
    >
      {live ? 'live' : 'offline'}
    </span>
  );
}

function App() {
  const [signedIn, setSignedIn] = useState(session.token() !== null);
  const [reason, setReason] = useState<string | null>(null);
  // developer (operator) accounts also see the hosts: the API answers them, and refuses others
  const [developer, setDeveloper] = useState(false);
  const hash = useHash();
  useEffect(
    () =>
      onExpired(() => {
        session.clear();
        events.stop();
        setReason(
          'Your session ended: the token was refused (revoked or expired). Sign in again; what you typed in a form is kept.',
        );
        setSignedIn(false);
      }),
    [],
  );
  useEffect(() => {
    if (!signedIn) return setDeveloper(false);
    events.start();
    listHosts().then(
      () => setDeveloper(true),
      () => setDeveloper(false),
    );
  }, [signedIn]);
  // a new page takes the focus to its heading, for keyboard and screen reader users
  useEffect(() => {
    document.getElementById('page-title')?.focus({ preventScroll: true });
  }, [hash]);
  if (!signedIn)
    return (
      <SignIn
        reason={reason}
        onIn={() => {
          setReason(null);
          setSignedIn(true);
        }}
      />
    );
  const current = '#/' + (hash.replace(/^#\//, '').split('/')[0] ?? '');
  return (
    <>
      <a class="skip" href="#main" onClick={(e) => (e.preventDefault(), document.getElementById('main')?.focus())}>
        Skip to content
      </a>
      <header class="top">
        <a class="brand" href="#/instances">
          unihost
        </a>
        <nav aria-label="Main">
          <ul>
            {(developer ? [...NAV, ['#/hosts', 'Hosts'] as [string, string]] : NAV).map(([href, label]) => (
              <li key={href}>
                <a href={href} aria-current={current === href ? 'page' : undefined}>
                  {label}
                </a>
              </li>
            ))}
          </ul>
        </nav>
        <LiveDot />
        <button
          type="button"
          class="secondary"
          onClick={() => {
            session.clear();
            events.stop();
            setReason('You signed out.');
            setSignedIn(false);
          }}
        >
          Sign out
        </button>
      </header>
      <main id="main" tabIndex={-1}>
        {route(hash)}
      </main>
    </>
  );
}

render(<App />, document.getElementById('app')!);
