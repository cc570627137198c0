#!/usr/bin/env bash
# Quick start: installs what unihost needs, builds the test guest images,
# starts the daemon with its embedded defaults, imports the test images,
# creates a user and prints what to try next. Safe to run again: a running
# daemon is kept, images re-import to the same digests, the user gets a
# fresh token.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
  echo "unihost needs root (QEMU, taps, bridges): run it as root or with sudo" >&2
  exit 1
fi
DATA=${UNIHOST_DATA_DIR:-/var/lib/unihost}
LISTEN=${UNIHOST_LISTEN:-127.0.0.1:7878}
URL="http://${LISTEN}"
USER_NAME=${UNIHOST_USER:-demo}
export UNIHOST_DATA_DIR=$DATA

./scripts/install.sh
echo "==> building test guest images (cached after the first run)"
./guest/build-images.sh
# From here on files hold tenants' data (database, volume images, console
# logs, tokens): root only. Not earlier: apt and the image build create files
# others must read. The daemon and the admin commands also set this umask.
umask 077
mkdir -p "$DATA"

echo "==> importing the test images as official images"
node bin/unihost.js image import-guest guest/out | grep -E '^imported' || true

# Real Unikraft kernels (helloworld, the lwIP HTTP server), when they are at hand: each is
# test-booted on the candidate QEMU machines at import and keeps the fastest reliable one.
UK_DIR=${UNIHOST_UNIKRAFT_DIR:-../shared/unikraft}
UK_IMAGES=""
if [ -f "$UK_DIR/helloworld_qemu-x86_64" ] && [ -f "$UK_DIR/c-http_qemu-x86_64" ]; then
  echo "==> importing the Unikraft kernels of $UK_DIR (test-booted to choose their machine)"
  if node bin/unihost.js image import helloworld:latest --kernel "$UK_DIR/helloworld_qemu-x86_64" >/dev/null &&
    node bin/unihost.js image import c-http:latest --kernel "$UK_DIR/c-http_qemu-x86_64" --port 8080 >/dev/null; then
    UK_IMAGES=", helloworld:latest, c-http:latest (Unikraft)"
  else
    echo "    (skipped: the import failed; the test images above still work)" >&2
  fi
fi

LOG="$DATA/logs/current.log"
alive() { curl -s -o /dev/null -w '%{http_code}' "$URL/" 2>/dev/null | grep -q 401; }
if [ -f "$DATA/unihost.pid" ] && kill -0 "$(cat "$DATA/unihost.pid")" 2>/dev/null && alive; then
  echo "==> the daemon is already running (pid $(cat "$DATA/unihost.pid"))"
else
  echo "==> starting the daemon on $URL (log: $LOG, rolled every 20 MB)"
  # the log rolls itself (--log-file); what the process prints outside it (a crash) goes to unihost.out
  # jemalloc is the daemon's allocator (its own; QEMU and HAProxy get glibc's): docs/operations.md, "Memory"
  JEMALLOC=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2
  PRELOAD=""; [ -f "$JEMALLOC" ] && PRELOAD="$JEMALLOC"
  # its options: src/cli/admin/service.ts, JEMALLOC_CONF
  LD_PRELOAD="$PRELOAD" MALLOC_CONF=lg_extent_max_active_fit:10 setsid nohup node bin/unihost.js serve --listen "$LISTEN" --log-file "$DATA/logs/unihost.log" \
    >>"$DATA/unihost.out" 2>&1 </dev/null &
  echo $! >"$DATA/unihost.pid"
  for _ in $(seq 1 100); do alive && break; sleep 0.2; done
  alive || {
    echo "the daemon did not come up; see $LOG and $DATA/unihost.out" >&2
    tail -20 "$LOG" "$DATA/unihost.out" >&2 2>/dev/null
    exit 1
  }
fi

if node bin/unihost.js admin user list | cut -f1 | grep -qx "$USER_NAME"; then
  TOKEN=$(node bin/unihost.js admin user token "$USER_NAME")
else
  TOKEN=$(node bin/unihost.js admin user create "$USER_NAME" --developer --quiet)
fi
echo "$TOKEN" >"$DATA/$USER_NAME.token"

cat <<MSG

unihost is running at $URL  (data: $DATA, log: $LOG, stop: kill \$(cat $DATA/unihost.pid))
User '$USER_NAME' token (also in $DATA/$USER_NAME.token):

  export UKC_METRO=$URL
  export UKC_TOKEN=$TOKEN

Images to boot: echo:latest, exit:latest, http:latest, fetch:latest, burn:latest, panic:latest$UK_IMAGES
Gateway: published services listen on 127.0.0.1 (80/443); TLS uses the metro wildcard
certificate signed by the local CA $DATA/ca/ca.pem (trust it, or pass --cacert).
Web console: open $URL/ in a browser and sign in with the token above.

Next, boot an instance and read its console with the unihost CLI (after the exports above):

  node bin/unihost.js instance create echo:latest --name hello --start -- hello world
  node bin/unihost.js instance logs hello        # --help on every command; npm link installs 'unihost'

or with curl:

  curl -s -X POST \$UKC_METRO/v1/instances -H "Authorization: Bearer \$UKC_TOKEN" \\
    -d '{"name":"hello","image":"echo:latest","args":["hello","world"],"autostart":true,"wait_timeout_ms":60000}'
  curl -s "\$UKC_METRO/v1/instances/log?name=hello" -H "Authorization: Bearer \$UKC_TOKEN" \\
    | node -e 'const r=JSON.parse(require("fs").readFileSync(0));console.log(Buffer.from(r.data.instances[0].output,"base64").toString())'

Then publish a web server under a domain, with TLS:

  curl -s -X POST \$UKC_METRO/v1/instances -H "Authorization: Bearer \$UKC_TOKEN" \\
    -d '{"name":"web","image":"http:latest","autostart":true,"wait_timeout_ms":60000,
         "service_group":{"services":[{"port":443,"destination_port":8080,"handlers":["tls","http"]}]}}'
  # then, with the fqdn from the answer (…unihost.localhost resolves to 127.0.0.1):
  curl --cacert $DATA/ca/ca.pem https://<fqdn>/

MSG
if [ -n "$UK_IMAGES" ]; then
  cat <<'MSG'
And a real Unikraft kernel (it prints "Hello from Unikraft!" and halts):

  node bin/unihost.js instance create helloworld:latest --name uk --start
  node bin/unihost.js instance logs uk

MSG
fi
