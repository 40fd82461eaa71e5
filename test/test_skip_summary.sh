#!/usr/bin/env bash
# test/lib/skip_summary.py, the list of skipped tests and their reasons that `make
# test` prints after CTest's output:
#   1. a CTest JUnit report written here by hand (a passed, a failed and four skipped
#      tests: a SKIP line among other lines and XML escapes, a "SKIP:" line without a
#      name, a skip that printed only other lines, one that printed nothing) gives
#      exactly the lines written out below, in the report's order
#   2. a report without skips: "skipped: none"; a missing report: one line on stderr, exit 1
#   3. every skip of the suite says why in a SKIP line: each `exit 77` of test/'s
#      scripts is on the line of, or the line after, one printing "SKIP"
#
#   bash test/test_skip_summary.sh      (env: BUILD_DIR, scratch)
set -euo pipefail
cd "${REPO_ROOT:-$(pwd)}"
WORK=${BUILD_DIR:-build}/test_skip_summary
rm -rf "$WORK"
mkdir -p "$WORK"
command -v python3 > /dev/null || { echo "SKIP test_skip_summary: no python3 (scripts/install_deps.sh test installs it)"; exit 77; }
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# ---- 1. skips among a pass and a failure
cat > "$WORK/skips.xml" <<'EOF'
<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="(empty)" tests="6" failures="1" disabled="0" skipped="4" hostname="" time="0">
	<testcase name="unit_passes" classname="unit_passes" time="0.1" status="run">
		<system-out>SKIP: not a skip, the test passed
</system-out>
	</testcase>
	<testcase name="e2e_daemon" classname="e2e_daemon" time="1.5" status="notrun">
		<skipped message="SKIP_RETURN_CODE=77"/>
		<system-out>trainer: ./train_gpt2cp_cpu
SKIP e2e_daemon: slurmd cannot start here: error: cgroup &lt;v2&gt; &amp; "No filesystem mounted on /sys/fs/cgroup"
teardown: nothing left running
</system-out>
	</testcase>
	<testcase name="fails" classname="fails" time="0.2" status="fail">
		<failure message=""/>
		<system-out>FAIL: a value
</system-out>
	</testcase>
	<testcase name="gpu_kernels_np4" classname="gpu_kernels_np4" time="0.3" status="notrun">
		<skipped message="SKIP_RETURN_CODE=77"/>
		<system-out>SKIP: no CUDA device (this test needs a GPU)
</system-out>
	</testcase>
	<testcase name="says_other" classname="says_other" time="0.3" status="notrun">
		<skipped message="SKIP_RETURN_CODE=77"/>
		<system-out>first line
  the last line said  

</system-out>
	</testcase>
	<testcase name="silent" classname="silent" time="0.0" status="notrun">
		<skipped message="SKIP_RETURN_CODE=77"/>
		<system-out></system-out>
	</testcase>
</testsuite>
EOF
cat > "$WORK/expected.txt" <<'EOF'
skipped: 4 test(s), each with its reason:
  e2e_daemon       slurmd cannot start here: error: cgroup <v2> & "No filesystem mounted on /sys/fs/cgroup"
  gpu_kernels_np4  no CUDA device (this test needs a GPU)
  says_other       (no SKIP line; its last line:) the last line said
  silent           (the test printed nothing: a skip must say why)
EOF
rc=0
python3 test/lib/skip_summary.py "$WORK/skips.xml" > "$WORK/summary.txt" 2>&1 || rc=$?
if [[ $rc -eq 0 ]] && cmp -s "$WORK/expected.txt" "$WORK/summary.txt"; then
    echo "ok   four skips among a pass and a failure: each listed once with its reason, in order"
else
    fail "the summary of four skips (exit $rc) differs from the expected lines:"
    diff "$WORK/expected.txt" "$WORK/summary.txt" || true
fi

# ---- 2. no skip; no report
sed -e '/<testcase name="e2e_daemon"/,$d' "$WORK/skips.xml" > "$WORK/none.xml"
echo '</testsuite>' >> "$WORK/none.xml"
out=$(python3 test/lib/skip_summary.py "$WORK/none.xml" 2>&1) && [[ $out == "skipped: none" ]] &&
    echo "ok   a run without skips: 'skipped: none'" || fail "a run without skips gave '$out'"
rc=0
out=$(python3 test/lib/skip_summary.py "$WORK/absent.xml" 2>&1) || rc=$?
if [[ $rc -eq 1 && $(wc -l <<< "$out") -eq 1 && $out == *"absent.xml"* ]]; then
    echo "ok   a missing report: one line naming it, exit 1"
else
    fail "a missing report gave exit $rc and '$out'"
fi

# ---- 3. every `exit 77` of the suite's scripts prints a SKIP line with it
# (the pattern written so that it does not match these lines themselves)
skip_exit='exit 7[7]([^0-9]|$)'
silent=$(awk -v pat="$skip_exit" '$0 ~ pat && !/^[[:space:]]*#/ && !/SKIP/ && prev !~ /SKIP/ { print FILENAME ":" FNR ": " $0 }
              { prev = $0 }' test/*.sh test/lib/*.sh test/fuzz/*.sh)
sites=$(grep -hE "$skip_exit" test/*.sh test/lib/*.sh test/fuzz/*.sh | grep -vc '^[[:space:]]*#')
if [[ -z $silent && $sites -gt 10 ]]; then
    echo "ok   each of the $sites 'exit 77' of test/'s scripts prints a SKIP line"
else
    fail "a skip without a SKIP line (or too few skips found: $sites):"
    echo "$silent"
fi

if [[ $failures -eq 0 ]]; then echo PASS; else echo "FAILED: $failures"; exit 1; fi
