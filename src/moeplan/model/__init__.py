"""Cost models: per-GPU memory (this package) and, later, step time. Pure functions of a resolved
:class:`~moeplan.resolve.load.Scenario`."""
