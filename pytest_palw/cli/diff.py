"""`palw diff OLD.json NEW.json`: what changed between two certificates (a CI gate's step)."""

from __future__ import annotations


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "diff", help="compare two certificates; exit 1 on a regression",
        description="One line per change between OLD and NEW (`palw certify` certificates, .json or "
                    ".json.gz): the verdict, the expected inventory, cases that passed before and not now, "
                    "fingerprints, and the runtime's facts (pin, patches, toolchain, library digest, "
                    "device, model). Exit 0 without a regression, 1 with one, 2 when a file is no certificate.")
    parser.add_argument("old", help="the last certified certificate (the baseline)")
    parser.add_argument("new", help="the certificate of the change")
    parser.set_defaults(func=run)


def run(args) -> int:
    from pytest_palw.certificate import load
    from pytest_palw.certificate.compare import compare

    differences = compare(load(args.old), load(args.new))
    for difference in differences:
        print(difference.render())
    regressions = sum(d.regression for d in differences)
    if not differences:
        print(f"palw diff: no change between {args.old} and {args.new}")
    else:
        print(f"palw diff: {regressions} regression(s), {len(differences) - regressions} other change(s)")
    return 1 if regressions else 0
