#!/usr/bin/env python3
"""Picks the few fuzzer-found inputs worth committing as seeds.

Reads a libFuzzer merge control file (written by
`fuzz_<target> -merge=1 -merge_control_file=CTL OUT SEEDS NEW...`) and
prints, one path a line, at most --keep inputs from outside --seeds chosen
greedily by the coverage edges (COV lines) each adds to what the seeds and
the inputs already picked cover; ties go to the smaller file. Stops early
when no input adds an edge. The control file lists, per input, only the
edges no earlier input (in libFuzzer's processing order) covered, so the
coverage it reports on stderr is a lower bound.

  scripts/fuzz_select.py CTL --seeds tests/fuzz/corpus/frame [--keep 32]
"""
import argparse
import hashlib
import os
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("control_file")
    ap.add_argument("--seeds", required=True, help="directory of the committed seeds")
    ap.add_argument("--keep", type=int, default=32, help="most inputs to pick (default 32)")
    args = ap.parse_args()
    if args.keep < 0:
        ap.error("--keep must be >= 0")

    with open(args.control_file) as f:
        lines = f.read().split("\n")
    try:
        n = int(lines[0])
        files = lines[2 : 2 + n]
    except (ValueError, IndexError):
        print(f"fuzz_select: {args.control_file} is not a libFuzzer merge control file",
              file=sys.stderr)
        return 1
    cov = {}
    for line in lines[2 + n :]:
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "COV":
            cov[int(parts[1])] = set(map(int, parts[2:]))

    seed_dir = os.path.realpath(args.seeds)
    digest = lambda p: hashlib.sha1(open(p, "rb").read()).hexdigest()
    seed_digests = {digest(os.path.join(seed_dir, f)) for f in os.listdir(seed_dir)}
    # A copy of a seed (scripts/fuzz.sh fuzzes copies) counts as the seed.
    is_seed = lambda p: (os.path.realpath(os.path.dirname(p)) == seed_dir
                         or digest(p) in seed_digests)
    covered = set()
    candidates = []
    for i, path in enumerate(files):
        if not os.path.isfile(path):
            continue
        if is_seed(path):
            covered |= cov.get(i, set())
        else:
            candidates.append(i)
    total = set(covered)
    for i in candidates:
        total |= cov.get(i, set())
    seeds_cover = len(covered)

    picked = []
    while len(picked) < args.keep and candidates:
        best = max(candidates,
                   key=lambda i: (len(cov.get(i, set()) - covered), -os.path.getsize(files[i])))
        if not cov.get(best, set()) - covered:
            break
        picked.append(best)
        covered |= cov[best]
        candidates.remove(best)

    share = 100.0 * len(covered) / len(total) if total else 100.0
    print(f"fuzz_select: seeds cover {seeds_cover} of {len(total)} edges; with {len(picked)} "
          f"picked inputs at least {len(covered)} ({share:.1f}%)", file=sys.stderr)
    for i in picked:
        print(files[i])
    return 0


if __name__ == "__main__":
    sys.exit(main())
