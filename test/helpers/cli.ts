import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { resolve } from 'node:path';

const ROOT = resolve(import.meta.dirname, '../..');
/** The CLI's entry module (bin/unihost.js runs its compiled form), run through tsx. */
const MAIN = resolve(ROOT, 'src/cli/main.ts');

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** The parent's environment without anything that configures the client, plus `env`. */
function cleanEnv(env: Record<string, string>): NodeJS.ProcessEnv {
  const out: NodeJS.ProcessEnv = { ...process.env };
  for (const k of Object.keys(out)) {
    if (/^(UKC_|UNIHOST_PROFILE|UNIHOST_CLIENT_CONFIG|XDG_CONFIG_HOME)|_TOKEN$/.test(k)) delete out[k];
  }
  // a profile file that does not exist unless a test says otherwise
  out.UNIHOST_CLIENT_CONFIG = resolve(ROOT, '.no-such-unihost-profile.json');
  return { ...out, ...env };
}

/** Starts the real `unihost` CLI in a child process. */
export function spawnCli(args: string[], env: Record<string, string> = {}): ChildProcessWithoutNullStreams {
  return spawn(process.execPath, ['--import', 'tsx', MAIN, ...args], { cwd: ROOT, env: cleanEnv(env) });
}

/** Runs the CLI to its end (killed after `timeoutMs`) and returns its exit code and output. */
export function runCli(args: string[], env: Record<string, string> = {}, timeoutMs = 60_000): Promise<CliResult> {
  return new Promise((resolvePromise, reject) => {
    const p = spawnCli(args, env);
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    p.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => p.kill('SIGKILL'), timeoutMs);
    p.on('error', reject);
    p.on('close', (code) => {
      clearTimeout(timer);
      resolvePromise({ code, stdout, stderr });
    });
  });
}

/** Resolves when `text` (accumulated stdout) matches `re`; rejects when the process ends first. */
export function untilOutput(p: ChildProcessWithoutNullStreams, re: RegExp, timeoutMs = 30_000): Promise<string> {
  return new Promise((resolvePromise, reject) => {
    let text = '';
    const onData = (d: Buffer) => {
      text += d.toString();
      if (re.test(text)) done(() => resolvePromise(text));
    };
    const onClose = (code: number | null) =>
      done(() => reject(new Error(`CLI ended (code ${code}) before printing ${re}; it printed: ${text}`)));
    const timer = setTimeout(
      () => done(() => reject(new Error(`CLI did not print ${re} within ${timeoutMs} ms; it printed: ${text}`))),
      timeoutMs,
    );
    const done = (f: () => void) => {
      clearTimeout(timer);
      p.stdout.off('data', onData);
      p.off('close', onClose);
      f();
    };
    p.stdout.on('data', onData);
    p.on('close', onClose);
  });
}
