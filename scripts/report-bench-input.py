#!/usr/bin/env python3
"""Writes an N-line NDJSON stream for benchmarking `relay-metrics report`: the lines of a real
`run`/`watch` stream (SEED), cycled, with timestamps 1 ms apart (a 1 kHz run).

    relay-metrics run --interval-ms 10 --output seed.ndjson -- python3 -c '...'
    scripts/report-bench-input.py seed.ndjson 600000 /dev/shm/run600k.ndjson
"""

import datetime
import re
import sys


def main() -> None:
    seed, count, output = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    lines = [line if line.endswith("\n") else line + "\n" for line in open(seed) if line.strip()]
    if not lines:
        sys.exit(f"{seed}: no snapshot")
    stamp = re.compile(r'^\{"timestamp":"[^"]+"')
    start = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    with open(output, "w") as out:
        for i in range(count):
            at = start + datetime.timedelta(milliseconds=i)
            text = '{"timestamp":"' + at.strftime("%Y-%m-%dT%H:%M:%S.%f") + '000Z"'
            out.write(stamp.sub(text, lines[i % len(lines)], count=1))


if __name__ == "__main__":
    main()
