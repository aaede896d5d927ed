"""Reads parliament's --json findings on stdin; fails on any not accepted in iam-lint-accepted.json."""

import json
import sys
from pathlib import Path

accepted = json.loads((Path(__file__).parent / "iam-lint-accepted.json").read_text())
failed = False
for line in sys.stdin:
    if not line.strip():
        continue
    finding = json.loads(line)
    issue = finding["issue"]
    where = finding.get("location", {}).get("filepath", "")
    detail = json.dumps(finding.get("detail"))
    if any(a["issue"] == issue and a["filepath"] == where and a["detail"] in detail for a in accepted):
        print(f"lint-iam: accepted {issue} in {where} (scripts/iam-lint-accepted.json)", file=sys.stderr)
        continue
    failed = True
    print(
        f"lint-iam: {finding['severity']} {issue} in {where}: {finding['title']}: "
        f"{finding.get('detail')} at {finding.get('location')}",
        file=sys.stderr,
    )
sys.exit(1 if failed else 0)
