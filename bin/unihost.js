#!/usr/bin/env node
// Entry point of the `unihost` command: runs the compiled CLI from dist/.
import { main } from '../dist/cli/index.js';

await main();
