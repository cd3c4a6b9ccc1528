#!/usr/bin/env bash
# alert_rules.sh -- the deploy/ monitoring files are well formed:
# `promtool check rules` on deploy/prometheus/o3m-alerts.yml, `promtool test
# rules` with o3m-alerts.test.yml (synthetic series that fire alerts), and
# the Grafana dashboard is JSON whose every panel target has an expression.
# That every metric they name is exported is checked against the running
# daemons by tests/ops_e2e.sh (monitoring_names.py).
#
#   alert_rules.sh SOURCE_DIR
set -euo pipefail
SRC=${1:?usage: alert_rules.sh SOURCE_DIR}
command -v promtool >/dev/null ||
  { echo "alert_rules: promtool is missing (Debian package prometheus; scripts/setup-deps.sh)" >&2; exit 1; }
promtool check rules "$SRC/deploy/prometheus/o3m-alerts.yml"
(cd "$SRC/deploy/prometheus" && promtool test rules o3m-alerts.test.yml)
python3 - "$SRC/deploy/grafana/o3m-dashboard.json" <<'PY'
import json, sys
dash = json.load(open(sys.argv[1], encoding="utf-8"))
n = 0
for p in dash["panels"]:
    if p["type"] == "row":
        continue
    assert p.get("targets"), f"panel {p['title']!r} has no query"
    for t in p["targets"]:
        assert t.get("expr", "").strip(), f"panel {p['title']!r}: a target without expr"
        assert t["datasource"]["uid"] == "${datasource}", f"panel {p['title']!r}: datasource"
        n += 1
print(f"alert_rules: the dashboard has {n} queries in {sum(p['type'] != 'row' for p in dash['panels'])} panels")
PY
echo "alert_rules: ok"
