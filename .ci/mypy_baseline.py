"""Compare ``mypy`` output (on stdin) with the accepted baseline, so the baseline can only shrink.

Usage: ``mypy | python .ci/mypy_baseline.py mypy-baseline.txt [--update]``. Errors are compared without line
numbers (edits above an accepted error do not make it new). Exit 1 on an error the baseline does not list; entries
that no longer occur are reported (remove them with ``--update``: the baseline shrinks with each fix) but do not
fail the check, so a fix, or a stub package that resolves an error, never breaks the build.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

ERROR = re.compile(r"^(?P<path>[^:\s]+):\d+(?::\d+)?: error: (?P<message>.*?)\s*$")


def errors(lines: list[str]) -> Counter[str]:
    """mypy's error lines as ``path: message [code]`` (the baseline's format), counted."""
    return Counter(f"{m['path']}: {m['message']}" for m in map(ERROR.match, lines) if m)


def main(argv: list[str]) -> int:
    baseline_path = Path(argv[0])
    now = errors(sys.stdin.readlines())
    if "--update" in argv[1:]:
        baseline_path.write_text("".join(f"{e}\n" for e in sorted(now.elements())))
        print(f"{baseline_path}: {sum(now.values())} accepted mypy error(s)")
        return 0
    accepted = Counter(line for line in baseline_path.read_text().splitlines() if line.strip())
    new, gone = now - accepted, accepted - now
    for e in sorted(new.elements()):
        print(f"new mypy error: {e}")
    if gone:
        print(f"{sum(gone.values())} baseline error(s) are fixed: shrink the baseline with `make mypy-baseline`")
    if not new and not gone:
        print(f"mypy: no new errors ({sum(accepted.values())} in the baseline)")
    return 1 if new else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
