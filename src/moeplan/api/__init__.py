"""One function per request: what each ``moeplan`` command answers, as plain data (JSON-ready dicts,
or small result objects holding them). The CLI parses flags, calls one of these, renders the result
(``--json`` prints the same document) and maps :class:`moeplan.InputError` to exit code 2; a web API
can serve the same documents.

- :func:`check_report`, :func:`params_report`, :func:`models_report`, :func:`gpus_report`,
  :func:`rules_report` (:mod:`moeplan.api.check`)
- :func:`estimate_report` → :class:`EstimateReport`, :func:`export_report` → :class:`ExportResult`
  (:mod:`moeplan.api.estimate`)
- :func:`plan_report`, :func:`fit_report`, :func:`recipes_report`, :func:`sweep_report`, and the request
  helpers :func:`plan_request`, :func:`batch_for_tokens` (:mod:`moeplan.api.plan`)
- :func:`log_report`, :func:`compare_report`, :func:`oom_report`, :func:`doctor_report`
  (:mod:`moeplan.api.diagnose`); :func:`calibrate_report`, :func:`calibrate_memory_report`, :func:`runs_from_logs` (:mod:`moeplan.api.calibrate`)
- :func:`vlm_stats_report` (:mod:`moeplan.api.vlm`)

Scenario flags are :class:`moeplan.inputs.overrides.ScenarioFlags`. Every function raises
:class:`moeplan.InputError` (or its subclass ``UnknownNameError``) for bad input, naming the field.
"""

from moeplan.api.calibrate import calibrate_memory_report, calibrate_report, runs_from_logs
from moeplan.api.check import check_report, gpus_report, models_report, params_report, rules_report
from moeplan.api.diagnose import compare_report, doctor_report, log_report, oom_report
from moeplan.api.estimate import EstimateReport, ExportResult, estimate_report, export_report
from moeplan.api.plan import batch_for_tokens, fit_report, plan_report, plan_request, recipes_report, sweep_report
from moeplan.api.side_inputs import load_step_constants, load_workload
from moeplan.api.vlm import vlm_stats_report
from moeplan.inputs.overrides import ScenarioFlags

__all__ = [
    "EstimateReport",
    "ExportResult",
    "ScenarioFlags",
    "batch_for_tokens",
    "calibrate_memory_report",
    "calibrate_report",
    "check_report",
    "compare_report",
    "doctor_report",
    "estimate_report",
    "export_report",
    "fit_report",
    "gpus_report",
    "load_step_constants",
    "load_workload",
    "log_report",
    "models_report",
    "oom_report",
    "params_report",
    "plan_report",
    "plan_request",
    "recipes_report",
    "rules_report",
    "runs_from_logs",
    "sweep_report",
    "vlm_stats_report",
]
