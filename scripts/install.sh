#!/usr/bin/env bash
# Installs what unihost needs on a Debian machine: system packages, npm
# dependencies, the compiled CLI. Idempotent: each step is skipped when done.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(python3-minimal qemu-system-x86 qemu-utils e2fsprogs iproute2 nftables busybox-static cpio gzip zstd lz4 xz-utils binutils curl ca-certificates pebble haproxy libjemalloc2)
# What only the test command needs (`install.sh --test`): a throwaway PostgreSQL server per test run;
# skopeo and docker-registry, the real registry clients and the registry the registry tests use;
# chromium, the browser the web console's tests drive (playwright-core; browser downloads are not used).
TEST_PACKAGES=(postgresql skopeo docker-registry chromium)
if [ "${1:-}" = --test ]; then
  APT_PACKAGES+=("${TEST_PACKAGES[@]}")
  # Debian's package would create and start a default cluster; the tests start their own servers.
  if ! dpkg-query -W -f='${Status}' postgresql-common 2>/dev/null | grep -q "install ok installed"; then
    mkdir -p /etc/postgresql-common
    grep -qs '^create_main_cluster' /etc/postgresql-common/createcluster.conf ||
      echo 'create_main_cluster = false' >> /etc/postgresql-common/createcluster.conf
  fi
fi

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "==> installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  # No package may start a service of its own (docker-registry would listen on :5000): tests start what they use.
  policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    policy=/usr/sbin/policy-rc.d
    trap '$SUDO rm -f "$policy"' EXIT
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null && $SUDO chmod 755 "$policy"
  fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  if [ -n "$policy" ]; then $SUDO rm -f "$policy"; trap - EXIT; fi
fi

# npm dependencies: reinstall only when package-lock.json changed since the last install.
stamp=node_modules/.unihost-lock.sha256
want=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "==> installing npm dependencies (better-sqlite3 may compile from source: a minute or two)"
  npm ci --no-audit --no-fund --loglevel=error
  echo "$want" > "$stamp"
fi

echo "==> compiling TypeScript"
npx tsc -p tsconfig.build.json
echo "==> building the web console (web/dist)"
npm run --silent build:web
