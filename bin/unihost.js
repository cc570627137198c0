#!/usr/bin/env node
// Entry point of the `unihost` command: runs the compiled CLI from dist/ (`npm run build`).
import '../dist/cli/main.js';
