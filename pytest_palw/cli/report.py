"""`palw report CERT.json [-o OUT]`: the certificate as one self-contained HTML page."""

from __future__ import annotations


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "report", help="render a certificate as one self-contained HTML page",
        description="Writes the verdict, failures, facts, the 361-launch map and the claims of a "
                    "`palw certify` certificate to one HTML file (no network fetches). A certificate that "
                    "states CERTIFIED and does not check as `palw verify` checks it (edited, or of another "
                    "suite version) is not rendered.")
    parser.add_argument("certificate", help="the certificate JSON `palw certify` wrote")
    parser.add_argument("-o", "--output", help="where to write the page (default: CERT.html beside the JSON)")
    parser.set_defaults(func=run)


def run(args) -> int:
    from pytest_palw.certificate.html import write_report

    problems = checked_before_rendering(args.certificate)
    out = write_report(args.certificate, args.output)
    if problems:
        print(f"palw: {args.certificate} does not agree with itself or with this installed suite ({problems[0]}; "
              "`palw verify` lists every inconsistency)")
    print(f"palw: report {out}")
    return 0


def checked_before_rendering(path) -> list[str]:
    """What the certificate at ``path`` states against itself or this installed suite; PalwError when
    it states CERTIFIED all the same (a page would speak for a run it does not describe)."""
    from pytest_palw.certificate import load
    from pytest_palw.certificate.consistency import inconsistencies
    from pytest_palw.certificate.inventory import suite_digest
    from pytest_palw.cli.verify import checked
    from pytest_palw.errors import PalwError

    document = load(path)
    problems = checked(document, path, lambda: inconsistencies(document, suite_digest()))
    if problems and (document.get("verdict") or {}).get("certified") is True:
        raise PalwError(f"{path} states CERTIFIED but does not check ({problems[0]}): not rendered; run `palw "
                        "verify` on it, and certify this suite version with `palw certify`")
    return problems
