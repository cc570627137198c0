// The `unihost` command's entry module: bin/unihost.js runs its compiled form; tests run it through tsx.
import { main } from './index.js';

await main();
