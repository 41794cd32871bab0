"""Resolution: one pass from user input to a resolved scenario. The model and GPU come from the
catalog, recipe fills and Megatron's effective defaults are applied and recorded, and the
assumptions that move a verdict are stated (:func:`moeplan.resolve.load.load_scenario`)."""
