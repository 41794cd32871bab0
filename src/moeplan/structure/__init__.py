"""The model's structure under a layout, computed from the inputs alone: exact parameter counts,
model FLOPs as Megatron Bridge counts them, the pipeline split into stages, per-rank placement and
the numeric policy (bytes per element, routed-token factor, shard degrees)."""
