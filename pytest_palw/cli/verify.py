"""`palw verify CERT.json`: does a certificate agree with itself and with this installed suite?"""

from __future__ import annotations


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "verify", help="check a certificate against itself and this installed suite; exit 1 if it does not",
        description="For whoever receives a certificate: recomputes its verdict from its own cases and "
                    "expected inventory (the inventory's ids expand to its stated sha256, each case's outcome "
                    "is the one its reports give, every required id passed as itself, the stated verdict is "
                    "the recomputed one) and compares its suite digest with this installed suite's. One line "
                    "per inconsistency, naming the field. Exit 0 when it agrees, 1 when it does not, 2 when "
                    "the file is no certificate. Without a signature it cannot prove who ran the suite, on "
                    "what, or that the cases ran as stated: a document written by hand to agree with itself "
                    "passes.")
    parser.add_argument("certificate", help="the certificate JSON `palw certify` wrote (.json or .json.gz)")
    parser.set_defaults(func=run)


def run(args) -> int:
    from pytest_palw.certificate import load
    from pytest_palw.certificate.consistency import inconsistencies
    from pytest_palw.certificate.inventory import suite_digest

    document = load(args.certificate)
    problems = checked(document, args.certificate, lambda: inconsistencies(document, suite_digest()))
    for problem in problems:
        print(f"palw verify: {problem}")
    verdict = document.get("verdict") or {}
    if problems:
        print(f"palw verify: {args.certificate} does not agree with itself or with this installed suite "
              f"({len(problems)} inconsistency(ies))")
        return 1
    print(f"palw verify: {args.certificate} agrees with itself and with this installed suite (suite "
          f"{document['suite']['sha256'][:16]}): {'CERTIFIED' if verdict.get('certified') else 'not certified'}, "
          f"{verdict.get('passed')} of {verdict.get('expected')} expected cases passed; without a signature "
          "this cannot prove who ran it")
    return 0


def checked(document, path, check) -> list[str]:
    """``check()``, or PalwError (exit 2) when the document lacks what a certificate has."""
    from pytest_palw.errors import PalwError

    try:
        return check()
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise PalwError(f"{path} is not a complete pytest-palw certificate ({type(error).__name__}: {error}): "
                        "pass the JSON file `palw certify` wrote") from None
