"""One entry point for the measurements, run from the project folder:

    python -m bench speed SECTION ...   # benchmark.py: extract, ingest, search, formats, audio
    python -m bench scale N ...         # scale_bench.py: N chunks beside rank_bm25 + Chroma
    python -m bench quality SET ...     # evaluate.py: nDCG/recall on the team's eval sets
    python -m bench code ...            # code_eval.py: hit@k/MRR on installed packages' code
    python -m bench startup ...         # startup_bench.py: spawn -> tools/list, first answers
    python -m bench citations ...       # citations.py: verify_citation on real PDFs
    python -m bench closeness ...       # closeness.py: right chunks' cosines vs off-topic
    python -m bench crosslingual ...    # crosslingual.py: English questions, a Korean book

Each command hands the rest of the command line to that script's own parser (`--help` there).

Layer: measurement (bench/): the one entry point.
"""

from __future__ import annotations

import sys

USAGE = ("usage: python -m bench speed SECTION ... | scale N ... | quality SET ... | code ... "
         "| startup ... | citations ... | closeness ... | crosslingual ... (--help after)")


def main(argv: list[str] | None = None) -> int:
    """Dispatch to the script the first word names; 2 (with the usage) for anything else."""
    args = sys.argv[1:] if argv is None else argv
    command, rest = (args[0], args[1:]) if args else ("", [])
    sys.argv[0] = f"python -m bench {command}"  # what the scripts' --help and errors show
    if command == "speed":
        from bench import benchmark

        return benchmark.main(rest)
    if command == "scale":
        from bench import benchmark

        return benchmark.main(["scale", *rest])
    if command == "quality":
        from bench import evaluate

        return evaluate.main(rest)
    if command == "code":
        from bench import code_eval

        return code_eval.main(rest)
    if command == "startup":
        from bench import startup_bench

        return startup_bench.main(rest)
    if command == "citations":
        from bench import citations

        return citations.main(rest)
    if command == "closeness":
        from bench import closeness

        return closeness.main(rest)
    if command == "crosslingual":
        from bench import crosslingual

        return crosslingual.main(rest)
    print(USAGE, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
