// Bare Fastify server for bench/api: returns the bodies it is sent, as JSON.
import Fastify from 'fastify';

const bodies = await new Promise((r) => process.once('message', r));
const app = Fastify({ logger: false });
app.get('/one', async () => bodies.one);
app.get('/list', async () => bodies.list);
// the create benchmark's peer: parses the JSON body, answers a body of the same size as the API's
app.post('/create', async (req) => ({ ...bodies.created, name: req.body.name }));
await app.listen({ host: '127.0.0.1', port: 0 });
process.send({ url: `http://127.0.0.1:${app.server.address().port}` });
