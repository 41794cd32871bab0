"""Run diagnostics: OOM messages, run comparison, memory fixes, the environment doctor. A run's log
is read by :mod:`moeplan.io.run_logs`."""
