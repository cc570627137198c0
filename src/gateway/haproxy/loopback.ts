import type net from 'node:net';

/** Listens on 127.0.0.1 at a free port; resolves with the port (the activator's listeners). */
export async function listenLoopback(server: net.Server): Promise<number> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host: '127.0.0.1', port: 0 }, () => resolve());
  });
  return (server.address() as net.AddressInfo).port;
}
