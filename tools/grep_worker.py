"""The Python regex engine of `grep`, run as a child process (`python -I -S grep_worker.py`).

Why a process: Python's `re` holds the GIL for the whole of one `search` call, so a
catastrophic pattern (nested quantifiers, backreferences, lookarounds rg refuses) in a worker
thread would still freeze the event loop; a separate process can be killed at a deadline.

Protocol: the parent opens the files itself (confined, see tools.workspace) and passes the
descriptors (`pass_fds`); stdin carries one JSON object {"pattern", "ignore_case", "limit",
"max_bytes", "max_chars", "files": [[fd, index], ...]}; stdout gets one JSON line per matching
line, [index, line_number, text clipped to max_chars, full length in characters], at most
`limit` of them. Files containing a NUL byte are binary and skipped. Standard library only, so
it starts in milliseconds.

Must not: import anything of ours.
"""

from __future__ import annotations

import json
import os
import re
import sys


def main() -> int:
    request = json.loads(sys.stdin.read())
    flags = re.IGNORECASE if request["ignore_case"] else 0
    regex = re.compile(request["pattern"], flags)
    limit = int(request["limit"])
    max_bytes = int(request["max_bytes"])
    max_chars = int(request["max_chars"])
    out = sys.stdout
    found = 0
    for fd, index in request["files"]:
        try:
            with os.fdopen(fd, "rb") as handle:
                data = handle.read(max_bytes + 1)
        except OSError:
            continue
        if len(data) > max_bytes or b"\x00" in data:
            continue
        text = data.decode("utf-8", "replace")
        for number, line in enumerate(text.split("\n"), start=1):
            line = line.removesuffix("\r")
            if regex.search(line):
                out.write(json.dumps([index, number, line[:max_chars], len(line)]) + "\n")
                found += 1
                if found >= limit:
                    out.flush()
                    return 0
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
