#!/usr/bin/env bash
# The whole test suite: installs what it needs, then type check, lint, import
# rules, format check, the OpenAPI freshness check, unit, API and VM tests. Safe to rerun.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install.sh --test
if [ -x guest/build-images.sh ]; then
  echo "==> building test guest images (cached)"
  ./guest/build-images.sh
fi

echo "==> type check";   npx tsc -p tsconfig.json --noEmit && npx tsc -p web/tsconfig.json
echo "==> lint";         npx eslint .
echo "==> import rules"; npx depcruise src --config .dependency-cruiser.cjs  # layers and no cycles (.dependency-cruiser.cjs)
echo "==> format check"; npx prettier --check . >/dev/null || { npx prettier --check . ; exit 1; }
echo "==> OpenAPI document"; npx tsx scripts/gen-openapi.ts --check

echo "==> tests"
# A bound on each test and each file (the longest file takes about 2 min here): one that hangs, or a
# file whose process cannot end (a server left open), fails by name instead of eating CI's 90 minutes.
limit=--test-timeout=900000
files=$(ls src/*.test.ts src/*/*.test.ts src/*/*/*.test.ts test/meta/*.test.ts test/store/*.test.ts test/api/*.test.ts test/cli/*.test.ts test/acme/*.test.ts test/web/*.test.ts test/vm/*.test.ts test/crash/*.test.ts 2>/dev/null || true)
# shellcheck disable=SC2086
node --import tsx --test $limit --test-concurrency=2 --test-reporter=spec --test-reporter-destination=stdout $files

# One contract, two stores: the API suite again on PostgreSQL (a throwaway server per test
# process on a unix socket, test/helpers/postgres.ts); SQLite ran above.
echo "==> API tests on PostgreSQL"
UNIHOST_TEST_STORE=postgres node --import tsx --test $limit --test-concurrency=2 --test-reporter=spec \
  --test-reporter-destination=stdout test/api/*.test.ts
