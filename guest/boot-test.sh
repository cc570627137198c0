#!/usr/bin/env bash
# Boot the unihost test guest images with raw qemu-system-x86_64 and check
# the guest boot contract (docs/guest-contract.md): control-channel lines,
# QEMU exit status, and the stop_reason / exit_code / stop_code a host derives
# from them.
#
#   guest/boot-test.sh                    one boot per scenario (all images)
#   guest/boot-test.sh --reliability 20   boot `echo` 20 times sequentially,
#                                         stop each gracefully, report failures,
#                                         boot time median/p95 and QEMU RSS
# Options: --tb-size MB (TCG code buffer, default 32; 0 = QEMU default),
#          --mem MB (default 128), --keep (keep the work dir), -v (print logs)
# Env: UNIHOST_GUEST_OUT (images, default guest/out), QEMU (binary).
#
# Runs as root on Debian 12; installs socat/e2fsprogs/iproute2 if missing.
# Network traffic only inside a network namespace created (and deleted) here.
set -uo pipefail
export LC_ALL=C

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT=${UNIHOST_GUEST_OUT:-$HERE/out}
QEMU=${QEMU:-qemu-system-x86_64}
RELIABILITY=0
TB_SIZE=32
MEM=128
KEEP=0
VERBOSE=0
while [ $# -gt 0 ]; do
	case $1 in
	--reliability) RELIABILITY=$2; shift ;;
	--tb-size) TB_SIZE=$2; shift ;;
	--mem) MEM=$2; shift ;;
	--keep) KEEP=1 ;;
	-v) VERBOSE=1 ;;
	*) echo "usage: $0 [--reliability N] [--tb-size MB] [--mem MB] [--keep] [-v]" >&2; exit 2 ;;
	esac
	shift
done

say() { echo "boot-test: $*"; }
die() { say "ERROR: $*"; exit 2; }
[ "$(id -u)" = 0 ] || die "must run as root"
for i in vmlinux {exit,panic,echo,burn,http}.initrd {exit,panic,echo,burn,http}.json; do
	[ -s "$OUT/$i" ] || die "$OUT/$i missing: run guest/build-images.sh first"
done
pk=()
command -v "$QEMU" >/dev/null || pk+=(qemu-system-x86)
command -v socat >/dev/null || pk+=(socat)
command -v debugfs >/dev/null || pk+=(e2fsprogs)
command -v ip >/dev/null || pk+=(iproute2)
if [ ${#pk[@]} -gt 0 ]; then
	apt-get install -y --no-install-recommends "${pk[@]}" >/dev/null || die "apt-get install ${pk[*]} failed"
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/unihost-boot-test.XXXXXX")
NETNS=
PIDS=()
cleanup() {
	local p
	for p in "${PIDS[@]}"; do
		kill -0 "$p" 2>/dev/null && { kill -KILL "$p" 2>/dev/null; wait "$p" 2>/dev/null; }
	done
	[ -n "$NETNS" ] && ip netns del "$NETNS" 2>/dev/null
	if [ $KEEP = 1 ]; then say "work dir kept: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- host TSC frequency for tsc_early_khz (see docs/guest-contract.md) ----
host_tsc_khz() {
	local mhz
	mhz=$(dmesg 2>/dev/null | grep -oE 'tsc: Refined TSC clocksource calibration: [0-9.]+ MHz' | tail -1 | grep -oE '[0-9.]+ MHz')
	[ -n "$mhz" ] || mhz=$(dmesg 2>/dev/null | grep -oE 'tsc: Detected [0-9.]+ MHz' | tail -1 | grep -oE '[0-9.]+ MHz')
	[ -n "$mhz" ] || mhz=$(awk -F: '/^cpu MHz/ { print $2 " MHz"; exit }' /proc/cpuinfo)
	awk -v m="${mhz% MHz}" 'BEGIN { printf "%d\n", m * 1000 + 0.5 }'
}
TSC_KHZ=$(host_tsc_khz)
[ "${TSC_KHZ:-0}" -gt 0 ] || die "cannot determine the host TSC frequency"
# image kernel_args from the metadata written by build-images.sh
image_kargs() { sed -n 's/^  "kernel_args": "\(.*\)",$/\1/p' "$OUT/$1.json"; }
ACCEL="tcg"
[ "$TB_SIZE" != 0 ] && ACCEL="tcg,tb-size=$TB_SIZE"

# Polling without forking (the guest's vCPU shares 2 host cores with us):
# $EPOCHREALTIME for time, `read -t` on a never-ready pipe as sleep.
exec {SLEEPFD}<> <(:)
_sleep() { read -rt "$1" -u "$SLEEPFD" _ 2>/dev/null; }
now_us() { echo "${EPOCHREALTIME/./}"; }

# start_vm NAME IMAGE "<platform args>" "<app args (already quoted)>" [extra qemu args...]
# Sets VM_PID, VM_T0 (µs). Files: $WORK/NAME.{con,ctl,qmp,qemu}.
start_vm() {
	local name=$1 image=$2 pargs=$3 aargs=$4; shift 4
	local d=$WORK/$name
	rm -f "$d".con "$d".ctl "$d".qmp "$d".qemu
	local append="$(image_kargs "$image") tsc_early_khz=$TSC_KHZ${pargs:+ $pargs} --${aargs:+ $aargs}"
	local argv=(
		"$QEMU" -name "unihost-test-$name"
		-M microvm -accel "$ACCEL" -cpu max -smp 1 -m "$MEM"
		-nodefaults -no-user-config -nographic -no-reboot
		-kernel "$OUT/vmlinux" -initrd "$OUT/$image.initrd" -append "$append"
		-serial "file:$d.con"
		-chardev "file,id=ctl,path=$d.ctl" -device isa-serial,chardev=ctl,index=1
		-device pvpanic -action panic=exit-failure
		-qmp "unix:$d.qmp,server=on,wait=off"
		"$@"
	)
	printf '%q ' "${argv[@]}" >"$d.argv"
	VM_T0=${EPOCHREALTIME/./}
	if [ -n "${VM_NETNS:-}" ]; then
		ip netns exec "$VM_NETNS" "${argv[@]}" </dev/null >"$d.qemu" 2>&1 &
	else
		"${argv[@]}" </dev/null >"$d.qemu" 2>&1 &
	fi
	VM_PID=$!
	PIDS+=("$VM_PID")
}

# wait_file FILE REGEX TIMEOUT_S: wait until a line of FILE matches REGEX
# (bash regex); sets LINE_T (µs) to when it was seen. Fails early if QEMU exited.
wait_file() {
	local f=$1 re=$2 deadline=$(( ${EPOCHREALTIME/./} + $3 * 1000000 )) fd line pending="" dead=0
	while [ ! -f "$f" ]; do
		kill -0 "$VM_PID" 2>/dev/null || return 1
		[ "${EPOCHREALTIME/./}" -lt $deadline ] || return 1
		_sleep 0.005
	done
	exec {fd}<"$f"
	while :; do
		if IFS= read -r line <&"$fd"; then
			line=$pending$line; pending=""
			if [[ ${line%$'\r'} =~ $re ]]; then LINE_T=${EPOCHREALTIME/./}; exec {fd}<&-; return 0; fi
			continue
		fi
		pending+=$line
		if [ $dead = 1 ] || [ "${EPOCHREALTIME/./}" -ge $deadline ]; then
			[[ $pending =~ $re ]] && { LINE_T=${EPOCHREALTIME/./}; exec {fd}<&-; return 0; }
			exec {fd}<&-; return 1
		fi
		kill -0 "$VM_PID" 2>/dev/null || dead=1   # one more pass after QEMU exited
		_sleep 0.005
	done
}
wait_ctl() { wait_file "$WORK/$1.ctl" "$2" "$3"; }
wait_con() { wait_file "$WORK/$1.con" "$2" "$3"; }
# wait_exit TIMEOUT_S: wait for QEMU to exit; sets VM_RC (124 = timeout, VM killed).
wait_exit() {
	local deadline=$(( ${EPOCHREALTIME/./} + $1 * 1000000 ))
	while kill -0 "$VM_PID" 2>/dev/null && [ "${EPOCHREALTIME/./}" -lt $deadline ]; do _sleep 0.01; done
	if kill -0 "$VM_PID" 2>/dev/null; then
		kill -KILL "$VM_PID"; wait "$VM_PID" 2>/dev/null; VM_RC=124
	else
		wait "$VM_PID"; VM_RC=$?
	fi
}
# qmp NAME JSON...: run QMP commands (after qmp_capabilities), print replies.
qmp() {
	local sock=$WORK/$1.qmp; shift
	{ echo '{"execute":"qmp_capabilities"}'; printf '%s\n' "$@"; _sleep "${QMP_WAIT:-0.3}"; } |
		timeout 5 socat - "UNIX-CONNECT:$sock" 2>/dev/null
}

# graceful_stop NAME: QMP system_powerdown, repeated every second until the
# guest acknowledges with STOP (a press before acpid runs is lost).
graceful_stop() {
	local i
	for i in 1 2 3 4 5 6 7 8 9 10; do
		qmp "$1" '{"execute":"system_powerdown"}' >/dev/null
		wait_ctl "$1" '^UNIHOST (STOP|SHUTDOWN)' 1 && return 0
		kill -0 "$VM_PID" 2>/dev/null || return 1
	done
	return 1
}

# ---- reference mapping: guest events -> stop_reason / exit_code / stop_code ----
# derive NAME QEMU_RC INITIATOR(none|user|platform)  -> sets STOP_REASON EXIT_CODE STOP_CODE
crash_cause() {  # console log -> "reason errno"
	local c=$1
	if grep -qE 'Out of memory|System is deadlocked on memory' "$c"; then echo "1 12"
	elif grep -qE 'divide error' "$c"; then echo "2 0"
	elif grep -qE 'invalid opcode' "$c"; then echo "3 0"
	elif grep -qE 'BUG: unable to handle page fault|BUG: kernel NULL pointer dereference|unable to handle kernel paging request' "$c"; then echo "4 14"
	elif grep -qE 'general protection fault|stack segment' "$c"; then echo "5 0"
	elif grep -qE 'Machine check|\[Hardware Error\]' "$c"; then echo "6 0"
	elif grep -qE 'stack-protector|Kernel stack is corrupted|Kernel memory overwrite attempt' "$c"; then echo "7 0"
	else echo "1 0"; fi
}
signal_cause() {  # app signal [oom] -> "reason errno"
	case $1 in
	11) echo "5 14" ;;          # SIGSEGV -> SEGFAULT, EFAULT
	7) echo "4 14" ;;           # SIGBUS  -> PGFAULT, EFAULT
	4) echo "3 0" ;;            # SIGILL  -> INVLOP
	8) echo "2 0" ;;            # SIGFPE  -> MATH
	31) echo "7 0" ;;           # SIGSYS  -> SECERR
	9) [ "${2:-}" = oom ] && echo "1 12" || echo "1 0" ;;
	*) echo "1 0" ;;
	esac
}
derive() {
	local ctl=$WORK/$1.ctl con=$WORK/$1.con rc=$2 who=$3
	local bits=0 init=0 ready=0 stop=0 shutdown=0 ex="" killed=0 sig="" oom="" errno=""
	local w a b rest
	while read -r w a b rest; do
		[ "$w" = UNIHOST ] || continue
		case $a in
		INIT) init=1 ;; READY) ready=1 ;; STOP) stop=1 ;; SHUTDOWN) shutdown=1 ;;
		EXIT) ex=$b ;; KILLED) killed=1 ;; SIGNAL) sig=$b; [[ "$rest" == *oom* ]] && oom=oom ;;
		ERROR) errno=$b ;;
		esac
	done < <(tr -d '\r' <"$ctl" 2>/dev/null)
	case $who in user) bits=$((8 | 4)) ;; platform) bits=4 ;; esac
	EXIT_CODE=""; STOP_CODE=0
	local crashed=0
	[ "$rc" = 1 ] && crashed=1          # -action panic=exit-failure (GUEST_PANICKED)
	[ $shutdown = 0 ] && crashed=1      # QEMU gone without a clean SHUTDOWN line
	if [ $crashed = 1 ]; then
		local reason e lvl=0 sbit=0
		read -r reason e < <(crash_cause "$con")
		[ -n "$errno" ] && { reason=1; e=$errno; }
		[ $init = 1 ] && lvl=1
		[ $ready = 1 ] && lvl=127
		{ [ $stop = 1 ] || [ -n "$ex" ] || [ $killed = 1 ] || [ -n "$sig" ]; } && sbit=1
		STOP_CODE=$(( (e << 16) | (sbit << 15) | (lvl << 8) | reason ))
		bits=$((bits | 1))
		[ -n "$ex" ] && { bits=$((bits | 2)); EXIT_CODE=$ex; }
	elif [ -n "$sig" ]; then
		local reason e
		read -r reason e < <(signal_cause "$sig" "$oom")
		STOP_CODE=$(( (e << 16) | (127 << 8) | reason ))
		bits=$((bits | 1))
	else
		bits=$((bits | 1))
		[ -n "$ex" ] && { bits=$((bits | 2)); EXIT_CODE=$ex; }
	fi
	STOP_REASON=$bits
}

FAILS=0
PASSES=0
check() {  # check DESC CONDITION...
	local desc=$1; shift
	if "$@"; then PASSES=$((PASSES + 1)); [ $VERBOSE = 1 ] && say "  ok: $desc"; return 0; fi
	FAILS=$((FAILS + 1)); say "  FAIL: $desc"; return 1
}
has_ctl() { grep -qxE "UNIHOST $2" "$WORK/$1.ctl" 2>/dev/null; }
no_ctl() { ! grep -qE "UNIHOST $2" "$WORK/$1.ctl" 2>/dev/null; }
has_con() { grep -qE "$2" "$WORK/$1.con" 2>/dev/null; }
eq() { [ "$1" = "$2" ]; }
show() {
	local n=$1
	if [ $VERBOSE = 1 ] || [ "${2:-}" = force ]; then
		echo "---- $n: control channel"; tr -d '\r' <"$WORK/$n.ctl" 2>/dev/null
		echo "---- $n: console (tail)"; tail -n 25 "$WORK/$n.con" 2>/dev/null
		echo "---- $n: qemu"; cat "$WORK/$n.qemu" 2>/dev/null
	fi
}
expect_stop() {  # NAME RC WHO REASON EXIT_CODE STOP_CODE
	derive "$1" "$2" "$3"
	check "$1: stop_reason=$4 exit_code=${5:-none} stop_code=$6 (got $STOP_REASON/${EXIT_CODE:-none}/$STOP_CODE)" \
		eq "$STOP_REASON/${EXIT_CODE:-none}/$STOP_CODE" "$4/${5:-none}/$6"
}
result() {  # NAME boot_ms
	say "$1: boot ${2}ms, qemu rc=$VM_RC -> stop_reason=$STOP_REASON exit_code=${EXIT_CODE:-none} stop_code=$STOP_CODE"
}

boot_ms() { echo $(( (LINE_T - VM_T0) / 1000 )); }

# ---- reliability mode -------------------------------------------------------
if [ "$RELIABILITY" -gt 0 ]; then
	say "reliability: $RELIABILITY sequential boots of echo (-accel $ACCEL, -m $MEM, tsc_early_khz=$TSC_KHZ)"
	times=()
	fails=0
	rss=""
	for i in $(seq 1 "$RELIABILITY"); do
		n=rel$i
		start_vm $n echo "" "run $i"
		ok=1
		if wait_ctl $n '^UNIHOST READY' 60; then
			t=$(boot_ms)
			if [ -z "$rss" ]; then
				sleep 1
				rss=$(awk '/^VmRSS/ { print $2 }' /proc/$VM_PID/status)
				pss=$(awk '/^Pss:/ { s += $2 } END { print s }' /proc/$VM_PID/smaps 2>/dev/null)
				priv=$(awk '/^Private_(Clean|Dirty):/ { s += $2 } END { print s }' /proc/$VM_PID/smaps 2>/dev/null)
			fi
			graceful_stop $n
			wait_exit 30
			derive $n "$VM_RC" user
			if [ "$VM_RC" != 0 ] || [ "$STOP_REASON/${EXIT_CODE:-}" != 15/0 ]; then ok=0; fi
		else
			t=""
			ok=0
			wait_exit 1
		fi
		if [ $ok = 1 ]; then
			times+=("$t")
			g=$(sed -n 's/^UNIHOST READY uptime_ms=\([0-9]*\).*/\1/p' "$WORK/$n.ctl")
			say "  boot $i: ${t} ms to READY (guest uptime ${g} ms), graceful stop ok"
		else
			fails=$((fails + 1))
			say "  boot $i: FAILED (qemu rc=${VM_RC:-?}, boot=${t:-none} ms)"; show $n force
		fi
	done
	sorted=$(printf '%s\n' "${times[@]}" | sort -n)
	cnt=${#times[@]}
	if [ "$cnt" -gt 0 ]; then
		med=$(echo "$sorted" | awk -v n="$cnt" 'NR == int((n + 1) / 2) { print }')
		p95=$(echo "$sorted" | awk -v n="$cnt" 'BEGIN { k = int(n * 0.95 + 0.999999); if (k < 1) k = 1 } NR == k { print }')
		min=$(echo "$sorted" | head -1); max=$(echo "$sorted" | tail -1)
	fi
	say "reliability: $((RELIABILITY - fails))/$RELIABILITY ok, $fails failed"
	say "boot to READY (QEMU spawn -> control line): median ${med:-?} ms, p95 ${p95:-?} ms, min ${min:-?} ms, max ${max:-?} ms"
	say "QEMU of a running ${MEM} MB guest: VmRSS ${rss:-?} kB, Pss ${pss:-?} kB, private ${priv:-?} kB (-accel $ACCEL)"
	[ $fails = 0 ] && exit 0 || exit 1
fi

# ---- scenarios ----------------------------------------------------------------
say "host TSC ${TSC_KHZ} kHz, -accel $ACCEL, -m $MEM, images in $OUT"

# 1. exit: app exits with the given code -> A|K = 3
start_vm exit exit "" "3"
wait_ctl exit '^UNIHOST READY' 60; t=$(boot_ms)
wait_exit 30
check "exit: lines INIT READY EXIT 3 SHUTDOWN" eval 'has_ctl exit "INIT.*" && has_ctl exit "READY.*" && has_ctl exit "EXIT 3" && has_ctl exit SHUTDOWN'
check "exit: qemu exit status 0" eq "$VM_RC" 0
expect_stop exit "$VM_RC" none 3 3 0; result exit "$t"; show exit

# 2. panic: real kernel panic -> pvpanic -> QEMU exits 1, K = 1, stop_code EXP + initlvl 127
start_vm panic panic "" ""
wait_ctl panic '^UNIHOST READY' 60; t=$(boot_ms)
wait_exit 30
check "panic: READY, no EXIT/SHUTDOWN" eval 'has_ctl panic "READY.*" && no_ctl panic "EXIT|SHUTDOWN"'
check "panic: qemu exit status 1 (guest panicked)" eq "$VM_RC" 1
check "panic: console shows the kernel panic" has_con panic 'Kernel panic - not syncing: sysrq triggered crash'
expect_stop panic "$VM_RC" none 1 "" $(( (127 << 8) | 1 )); result panic "$t"; show panic

# 3. panic segv: the application dies of SIGSEGV -> crash, SEGFAULT/EFAULT, initlvl 127
start_vm segv panic "" "segv"
wait_ctl segv '^UNIHOST READY' 60; t=$(boot_ms)
wait_exit 30
check "segv: lines SIGNAL 11, SHUTDOWN" eval 'has_ctl segv "SIGNAL 11.*" && has_ctl segv SHUTDOWN'
check "segv: qemu exit status 0" eq "$VM_RC" 0
expect_stop segv "$VM_RC" none 1 "" $(( (14 << 16) | (127 << 8) | 5 )); result segv "$t"; show segv

# 4. echo: args with spaces/quotes, env.vars, rw volume; graceful stop -> 15, exit 0
mkdir -p "$WORK/voldata"; echo "seed" >"$WORK/voldata/file.txt"
mkfs.ext4 -q -F -b 4096 -d "$WORK/voldata" "$WORK/vol.img" 16M || die "mkfs.ext4 failed"
start_vm echo echo \
	'env.vars=[ "GREETING=hello world" "ECHO_FILE=/data/file.txt" "Q=it'"'"'s" ] vfs.fstab=[ "vol0:/data:ext4:::" ]' \
	'hello "big   world" '"'"'say "hi"'"'"' --x' \
	-drive "file=$WORK/vol.img,if=none,id=vol0,format=raw" -device virtio-blk-device,drive=vol0,serial=vol0
wait_ctl echo '^UNIHOST READY' 60; t=$(boot_ms)
wait_con echo 'echo: running' 10
t_stop=${EPOCHREALTIME/./}
graceful_stop echo; stop_ack_ms=$(( (LINE_T - t_stop) / 1000 ))
wait_exit 30
stop_ms=$(( ($(now_us) - t_stop) / 1000 ))
check "echo: argv printed (spaces and quotes kept)" eval 'has_con echo "argv\[2\]=<big   world>" && has_con echo "argv\[3\]=<say \"hi\">" && has_con echo "argv\[4\]=<--x>" && has_con echo "argc=4"'
check "echo: env printed" eval 'has_con echo "env <GREETING=hello world>" && has_con echo "env <Q=it'"'"'s>"'
check "echo: volume mounted rw" has_con echo 'echo: wrote to /data/file.txt'
check "echo: lines STOP EXIT 0 SHUTDOWN" eval 'has_ctl echo STOP && has_ctl echo "EXIT 0" && has_ctl echo SHUTDOWN'
check "echo: qemu exit status 0" eq "$VM_RC" 0
check "echo: volume written and clean after power-off" eval 'debugfs -R "cat /file.txt" "$WORK/vol.img" 2>/dev/null | grep -q "hello big   world" && e2fsck -fn "$WORK/vol.img" >/dev/null 2>&1'
expect_stop echo "$VM_RC" user 15 0 0; result echo "$t"; show echo
say "echo: system_powerdown -> STOP line ${stop_ack_ms} ms, -> QEMU exit ${stop_ms} ms"

# 5. echo ignoring SIGTERM + read-only volume: kernel kills the app -> 13, no exit code
start_vm killed echo \
	'env.vars=[ "IGNORE_SIGTERM=1" "ECHO_FILE=/ro/file.txt" ] vfs.fstab=[ "vol0:/ro:ext4:1::" ] unihost.stop_timeout=1' "x" \
	-drive "file=$WORK/vol.img,if=none,id=vol0,format=raw,readonly=on" -device virtio-blk-device,drive=vol0,serial=vol0
wait_ctl killed '^UNIHOST READY' 60; t=$(boot_ms)
wait_con killed 'echo: running' 10
graceful_stop killed
wait_exit 30
check "killed: read-only volume refused the write" has_con killed 'echo: cannot write /ro/file.txt'
check "killed: lines STOP KILLED 9 SHUTDOWN" eval 'has_ctl killed STOP && has_ctl killed "KILLED 9" && has_ctl killed SHUTDOWN && no_ctl killed EXIT'
check "killed: qemu exit status 0" eq "$VM_RC" 0
expect_stop killed "$VM_RC" user 13 "" 0; result killed "$t"; show killed

# 6. burn 2 s, then exit 0 -> 3
start_vm burn burn "" "2"
wait_ctl burn '^UNIHOST READY' 60; t=$(boot_ms); t_r=$LINE_T
wait_ctl burn '^UNIHOST EXIT' 60; burn_ms=$(( (LINE_T - t_r) / 1000 ))
wait_exit 30
check "burn: EXIT 0 after >= 2 s (took ${burn_ms} ms)" eval '[ $burn_ms -ge 1900 ] && has_ctl burn "EXIT 0"'
check "burn: qemu exit status 0" eq "$VM_RC" 0
expect_stop burn "$VM_RC" none 3 0 0; result burn "$t"; show burn

# 7. boot error: volume tag without a disk -> ERROR 19 -> init dies -> kernel panic -> crash
start_vm bootfail echo 'vfs.fstab=[ "nosuch:/data:ext4:::" ]' ""
wait_exit 60
check "bootfail: ERROR 19 line, no READY" eval 'has_ctl bootfail "ERROR 19 .*" && no_ctl bootfail READY'
check "bootfail: kernel panicked (Attempted to kill init), qemu exit status 1" eval 'has_con bootfail "Attempted to kill init" && [ "$VM_RC" = 1 ]'
expect_stop bootfail "$VM_RC" none 1 "" $(( (19 << 16) | (1 << 8) | 1 )); result bootfail "-"; show bootfail

# 8. http: tap NIC in a private network namespace, netdev.ip, curl from the namespace
NETNS=unihost-bt-$$
if ip netns add "$NETNS" 2>/dev/null; then
	ip -n "$NETNS" link set lo up
	ip -n "$NETNS" tuntap add dev tap0 mode tap
	ip -n "$NETNS" addr add 10.213.0.1/24 dev tap0
	ip -n "$NETNS" link set tap0 up
	VM_NETNS=$NETNS start_vm http http 'netdev.ip=10.213.0.2/24:10.213.0.1:10.213.0.1' "" \
		-netdev tap,id=net0,ifname=tap0,script=no,downscript=no \
		-device virtio-net-device,netdev=net0,mac=02:00:0a:d5:00:02
	wait_ctl http '^UNIHOST READY' 60; t=$(boot_ms)
	body=""
	for _ in $(seq 100); do
		body=$(ip netns exec "$NETNS" curl -s -m 2 http://10.213.0.2:8080/ 2>/dev/null) && [ -n "$body" ] && break
		sleep 0.1
	done
	first_byte_ms=$(( ($(now_us) - VM_T0) / 1000 ))
	check "http: page served ($body)" eval '[[ "$body" == "hello from unihost http"* ]]'
	check "http: address printed" has_con http 'http: listening on 10.213.0.2:8080'
	graceful_stop http
	wait_exit 30
	check "http: lines EXIT 0 SHUTDOWN, qemu 0" eval 'has_ctl http "EXIT 0" && has_ctl http SHUTDOWN && [ "$VM_RC" = 0 ]'
	expect_stop http "$VM_RC" user 15 0 0; result http "$t"; show http
	say "http: first HTTP response ${first_byte_ms} ms after QEMU spawn"
	ip netns del "$NETNS"; NETNS=
else
	check "http: network namespace (ip netns add)" false
fi

# 9. stop requested during boot (as soon as init runs). A power-button press
# before acpid runs is lost, so graceful_stop repeats it: depending on timing
# the app never starts (INIT STOP SHUTDOWN -> 13) or is stopped normally (15).
start_vm early echo "" ""
wait_ctl early '^UNIHOST INIT' 60
for _ in $(seq 100); do   # press every 100 ms until acknowledged
	QMP_WAIT=0.05 qmp early '{"execute":"system_powerdown"}' >/dev/null
	has_ctl early '(STOP|SHUTDOWN)' && break
	kill -0 "$VM_PID" 2>/dev/null || break
	_sleep 0.1
done
wait_exit 30
if no_ctl early READY; then
	check "early: lines INIT STOP SHUTDOWN, no READY/EXIT, qemu 0" eval 'has_ctl early "INIT.*" && has_ctl early STOP && has_ctl early SHUTDOWN && no_ctl early "EXIT|KILLED" && [ "$VM_RC" = 0 ]'
	expect_stop early "$VM_RC" user 13 "" 0; result early "-"; say "early: stop arrived before READY"
else
	check "early: lines READY STOP EXIT 0 SHUTDOWN, qemu 0" eval 'has_ctl early STOP && has_ctl early "EXIT 0" && has_ctl early SHUTDOWN && [ "$VM_RC" = 0 ]'
	expect_stop early "$VM_RC" user 15 0 0; result early "-"; say "early: stop arrived after READY (first press lost before acpid ran)"
fi
show early

# 10. forced stop: QMP quit -> 28 (host-side only)
start_vm forced echo "" ""
wait_ctl forced '^UNIHOST READY' 60; t=$(boot_ms)
qmp forced '{"execute":"quit"}' >/dev/null
wait_exit 10
check "forced: no SHUTDOWN line, qemu exit status 0" eval 'no_ctl forced SHUTDOWN && [ "$VM_RC" = 0 ]'
STOP_REASON=28; EXIT_CODE=""; STOP_CODE=""
say "forced: boot ${t}ms, qemu rc=$VM_RC -> stop_reason=28 (host knows it forced the stop; no exit_code/stop_code)"

say "$PASSES checks passed, $FAILS failed"
[ $FAILS = 0 ]
