#!/usr/bin/env python3
"""Compares two runs of tests/c/verbs_diff.c: the kernel's (reference) and ours.

    verbs_diff.py KERNEL_OUT RXE_OUT DIVERGENCES_MD

Each line of a run is "CASE-ID: RESULT". A case whose result differs, or
that one run has and the other lacks, is a difference. A difference is
accepted when its case id matches a pattern of the table under the heading
"Differences the verbs harness shows on purpose" in docs/divergences.md
(first column: one or more `glob` patterns in backticks). In the random
mode the ids are rand.SEED.STEP and a run stops being comparable after its
first difference (the sequences part), so only the first difference of each
seed is reported, and it is accepted when the step's call (the result's
first word) matches a listed pattern of the form `rand:CALL`.

Prints every difference as "DIFF id: kernel=... rxe=..." (accepted ones as
"diverges (documented) id ...") and a summary line "verbs_diff: N cases,
D differences, A documented, U undocumented"; exits 1 when U > 0 or either
run did not reach its END line.
"""
import fnmatch
import re
import sys

HEADING = "Differences the verbs harness shows on purpose"


def read_run(path):
    cases, order, ended = {}, [], False
    with open(path, errors="replace") as f:
        for raw in f:
            s = raw.rstrip("\n")
            if s == "END":
                ended = True
                continue
            m = re.match(r"^([^\s:][^:]*): (.*)$", s)
            if not m:
                continue
            k, v = m.group(1), m.group(2)
            if k not in cases:
                order.append(k)
            cases[k] = v
    return cases, order, ended


def documented(md_path):
    pats, inside = [], False
    with open(md_path) as f:
        for s in f:
            if s.startswith("## "):
                inside = s[3:].strip() == HEADING
                continue
            if inside and s.startswith("|"):
                first = s.split("|")[1]
                pats += re.findall(r"`([^`]+)`", first)
    return pats


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    ker, ker_order, ker_end = read_run(sys.argv[1])
    rxe, rxe_order, rxe_end = read_run(sys.argv[2])
    pats = documented(sys.argv[3])
    ok_pat = lambda s: any(fnmatch.fnmatchcase(s, p) for p in pats)
    diffs = docd = 0
    seen_seed = set()
    ids = ker_order + [k for k in rxe_order if k not in ker]
    for k in ids:
        a, b = ker.get(k, "<missing>"), rxe.get(k, "<missing>")
        if a == b:
            continue
        if k.startswith("rand."):
            seed = k.split(".")[1]
            if seed in seen_seed:
                continue
            seen_seed.add(seed)
            call = (a.split() or [""])[0].split("[")[0]
            accepted = ok_pat("rand:" + call)
        else:
            accepted = ok_pat(k)
        diffs += 1
        if accepted:
            docd += 1
            print(f"diverges (documented) {k}: kernel={a!r} rxe={b!r}")
        else:
            print(f"DIFF {k}: kernel={a!r} rxe={b!r}")
    for name, ended in (("kernel", ker_end), ("rxe", rxe_end)):
        if not ended:
            print(f"verbs_diff: the {name} run did not reach its END line (crash or hang)")
    und = diffs - docd
    print(f"verbs_diff: {len(ids)} cases, {diffs} differences, {docd} documented, {und} undocumented")
    return 1 if und or not (ker_end and rxe_end) else 0


if __name__ == "__main__":
    sys.exit(main())
