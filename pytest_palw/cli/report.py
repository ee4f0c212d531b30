"""`palw report CERT.json [-o OUT]`: the certificate as one self-contained HTML page."""

from __future__ import annotations


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "report", help="render a certificate as one self-contained HTML page",
        description="Writes the verdict, failures, facts, the 361-launch map and the claims of a "
                    "`palw certify` certificate to one HTML file (no network fetches).")
    parser.add_argument("certificate", help="the certificate JSON `palw certify` wrote")
    parser.add_argument("-o", "--output", help="where to write the page (default: CERT.html beside the JSON)")
    parser.set_defaults(func=run)


def run(args) -> int:
    from pytest_palw.certificate.html import write_report

    out = write_report(args.certificate, args.output)
    print(f"palw: report {out}")
    return 0
