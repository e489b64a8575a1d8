"""Reports: the audit against baselines, the privacy–utility frontier, and the HTML page.

Plain library functions; the ``infoshape audit`` / ``report`` / ``frontier`` commands and the end
of ``simulate`` are thin calls to them:

- :func:`audit_bundle` — attacker suite, MI estimates and log-rank privacy of an encoder next to
  raw data, gaussian noise and a random encoder (ROC curves included); :func:`write_audit`.
- :func:`run_frontier` — sweep λ and σ, mark the Pareto front, write ``frontier.json/.png``.
- :func:`write_report` — ``RUN_DIR/report.html`` (self-contained) and ``figures/*.png``.

Nothing here imports flwr (sites and auditors use it offline); ``figures`` uses matplotlib's Agg
backend only, so no display is needed.
"""

from shared.report.audit import AUDIT_FORMAT, SETTINGS, audit_bundle, resolve_encoder
from shared.report.build import (
    AUDIT_JSON,
    FIGURES_DIR,
    REPORT_HTML,
    environment_info,
    reproducibility_record,
    write_audit,
    write_report,
)
from shared.report.frontier import (
    FRONTIER_JSON,
    FRONTIER_PNG,
    pareto_front,
    run_frontier,
    write_frontier,
)
from shared.report.html import render_report, verdict

__all__ = [
    "AUDIT_FORMAT",
    "AUDIT_JSON",
    "FIGURES_DIR",
    "FRONTIER_JSON",
    "FRONTIER_PNG",
    "REPORT_HTML",
    "SETTINGS",
    "audit_bundle",
    "environment_info",
    "pareto_front",
    "render_report",
    "reproducibility_record",
    "resolve_encoder",
    "run_frontier",
    "verdict",
    "write_audit",
    "write_frontier",
    "write_report",
]
