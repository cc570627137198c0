/**
 * Pending HTTP-01 challenges: the key authorization the data plane answers
 * for `http://<host>/.well-known/acme-challenge/<token>` while an order is
 * being validated. In memory only: an order that outlives the daemon is
 * simply tried again.
 */
export class ChallengeAnswers {
  private readonly byHost = new Map<string, Map<string, string>>();

  add(host: string, token: string, keyAuthorization: string): void {
    const h = host.toLowerCase();
    const m = this.byHost.get(h) ?? new Map<string, string>();
    m.set(token, keyAuthorization);
    this.byHost.set(h, m);
  }

  remove(host: string, token: string): void {
    const h = host.toLowerCase();
    const m = this.byHost.get(h);
    m?.delete(token);
    if (m?.size === 0) this.byHost.delete(h);
  }

  /** The answer for (host, token), or undefined (the data plane goes on as usual). */
  answer(host: string, token: string): string | undefined {
    return this.byHost.get(host.toLowerCase())?.get(token);
  }

  /** hosts with a challenge open (the data plane must listen on port 80 for them) */
  hosts(): string[] {
    return [...this.byHost.keys()];
  }
}
