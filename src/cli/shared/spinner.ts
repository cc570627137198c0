import ora from 'ora';

/**
 * Runs `fn` under a spinner on stderr. The spinner shows only when stderr is
 * a terminal, so scripts and pipes see no control characters.
 */
export async function withSpinner<T>(text: string, fn: () => Promise<T>, done?: (r: T) => string): Promise<T> {
  if (!process.stderr.isTTY) return fn();
  const s = ora({ text, stream: process.stderr }).start();
  try {
    const r = await fn();
    if (done) s.succeed(done(r));
    else s.stop();
    return r;
  } catch (e) {
    s.stop();
    throw e;
  }
}
