#!/usr/bin/env python3
"""monitoring_names.py -- every metric the deploy/ dashboard and alert rules
use is one the daemons export.

    monitoring_names.py SOURCE_DIR SCRAPE...

Reads the PromQL of deploy/prometheus/o3m-alerts.yml (each rule's expr) and
deploy/grafana/o3m-dashboard.json (each panel target's expr), takes every
o3m_* and process_* name in them, and fails naming those that no SCRAPE (a
/metrics text of a running daemon, tests/ops_e2e.sh) has among its samples.
`up` is Prometheus' own series and the only other name allowed. Exit 0 and
a count when every name is exported.
"""
import json
import re
import sys

import yaml

NAME = re.compile(r"\b((?:o3m|process)_[a-z0-9_]+)\b")


def exprs(src):
    with open(src + "/deploy/prometheus/o3m-alerts.yml", encoding="utf-8") as f:
        rules = yaml.safe_load(f)
    for group in rules["groups"]:
        for rule in group["rules"]:
            yield "alert " + rule["alert"], rule["expr"]
    with open(src + "/deploy/grafana/o3m-dashboard.json", encoding="utf-8") as f:
        dash = json.load(f)
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            yield "panel " + panel["title"], target["expr"]


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: monitoring_names.py SOURCE_DIR SCRAPE...")
    exported = set()
    for path in sys.argv[2:]:
        with open(path, encoding="utf-8") as f:
            for line in f:
                m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)", line)
                if m and not line.startswith("#"):
                    exported.add(m.group(1))
    used, bad = set(), []
    n = 0
    for where, expr in exprs(sys.argv[1]):
        n += 1
        names = set(NAME.findall(expr))
        if not names and not re.search(r"\bup\{", expr):
            bad.append(f"{where}: no metric in '{expr}'")
        for name in sorted(names - exported):
            bad.append(f"{where}: {name} is in no scrape of the daemons")
        used |= names
    for b in bad:
        print("monitoring_names: FAIL: " + b)
    if bad:
        sys.exit(1)
    print(f"monitoring_names: {n} expressions use {len(used)} metric names, all exported by the daemons")


if __name__ == "__main__":
    main()
