#!/usr/bin/env bash
# Refreshes the web console's screenshots in docs/console/: the browser test
# (test/vm/console.test.ts) saves one of each main view as it goes, against a
# real daemon booting real guests. Needs what the test command installs
# (./scripts/install.sh --test, guest/build-images.sh); run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
npm run --silent build:web
rm -rf docs/console && mkdir -p docs/console
UNIHOST_CONSOLE_SCREENSHOTS="$PWD/docs/console" node --import tsx --test --test-reporter=spec test/vm/console.test.ts
ls docs/console
