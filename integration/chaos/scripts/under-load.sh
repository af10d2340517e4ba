#!/usr/bin/env bash
# Runs the fault-injection short form N times (default 5) while other test packages run over
# and over beside it on the same cores, as CI's machine may; stops at the first failure and
# keeps each run's logs and records under DIR (default /tmp/weave-chaos-load/runN).
#
#   integration/chaos/scripts/under-load.sh [N] [DIR]
#   WEAVE_CHAOS_FAULTS=node,coordinator integration/chaos/scripts/under-load.sh
set -u
cd "$(dirname "$0")/../../.."
n=${1:-5}
dir=${2:-/tmp/weave-chaos-load}
mkdir -p "$dir"
for i in $(seq 1 "$n"); do
	run="$dir/run$i"
	rm -rf "$run" && mkdir -p "$run"
	# The load in a session of its own, so that it is stopped as a whole (go test and its test
	# binaries) afterwards.
	setsid bash -c 'while true; do go test -count=1 ./integration/ ./dispatcher/ >/dev/null 2>&1; done' &
	load=$!
	WEAVE_CHAOS_DIR="$run" go test -count=1 -timeout 15m -run '^TestChaos$' -v ./integration/chaos/ >"$run/test.log" 2>&1
	rc=$?
	kill -- -"$load" 2>/dev/null
	wait "$load" 2>/dev/null
	echo "run $i: $([ $rc = 0 ] && echo passed || echo FAILED) ($run/test.log)"
	[ $rc = 0 ] || exit 1
done
