"""What the user writes, read and validated: the scenario schema and its sections (model, system,
training, layout, PEFT, versions, allocator settings), the strict YAML / JSON readers and the input
policy every reader follows, and the resolved-scenario type. Nothing here reads the catalog."""
