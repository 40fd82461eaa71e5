#!/usr/bin/env python3
"""
The skipped tests of a CTest run and why, printed after CTest's own output by
`make test`: CTest says only "***Skipped" (its reason shows with `ctest -V`), so a
newcomer would not know what the machine lacks.

    skip_summary.py JUNIT_XML

JUNIT_XML is what `ctest --output-junit` wrote: one <testcase> per test, a <skipped>
child for each test that exited with its SKIP_RETURN_CODE (77), and the test's whole
output in <system-out>. A skipping test prints one line "SKIP[ name]: reason"
(test/lib/e2e_lib.sh's need, gpu_test_utils.cuh's gpu_test_require_device); the
reason is that line's text after the colon. A skip without such a line is shown
with its last line of output, or as having said nothing: never blank, so that a
test that skips without a reason shows up here.

Prints "skipped: none", or "skipped: N test(s), each with its reason:" and one line
per test, "  NAME  REASON", names padded to one column. Exits 0 (CTest's exit status
is make's; this only reports), 1 on a file it cannot read.
"""
import re
import sys
import xml.etree.ElementTree as ET

SKIP_LINE = re.compile(r"^SKIP(?:\s+[^\s:]+)?\s*:\s*(.*)$")


def reason(output):
    lines = [line.strip() for line in (output or "").splitlines()]
    skips = [m.group(1).strip() for m in map(SKIP_LINE.match, lines) if m]
    if skips and skips[-1]:
        return skips[-1]
    said = [line for line in lines if line]
    if said:
        return "(no SKIP line; its last line:) " + said[-1]
    return "(the test printed nothing: a skip must say why)"


def main(argv):
    if len(argv) != 2:
        print("usage: skip_summary.py JUNIT_XML", file=sys.stderr)
        return 1
    try:
        cases = ET.parse(argv[1]).getroot().iter("testcase")
    except (OSError, ET.ParseError) as e:
        print(f"skip summary: cannot read CTest's report {argv[1]}: {e}", file=sys.stderr)
        return 1
    skipped = [(case.get("name"), reason(case.findtext("system-out")))
               for case in cases if case.find("skipped") is not None]
    if not skipped:
        print("skipped: none")
        return 0
    print(f"skipped: {len(skipped)} test(s), each with its reason:")
    width = max(len(name) for name, _ in skipped)
    for name, why in skipped:
        print(f"  {name:<{width}}  {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
