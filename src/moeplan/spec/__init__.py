"""Input specifications: model, system, training, layout, scenario."""
