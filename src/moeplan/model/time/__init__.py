"""The step-time model, one module per cost term, assembled by :func:`moeplan.model.step.estimate_step`.

- :mod:`.context` — what every term needs, derived once per scenario (:class:`StepContext`);
- :mod:`.compute` — a layer's GEMMs, attention kernels and memory-bound work;
- :mod:`.exchange` — a layer's TP, CP and EP communication and what overlap hides of it;
- :mod:`.launch` — kernel-launch overhead, MoE host syncs and what CUDA graphs remove;
- :mod:`.recompute` — one more forward of what recompute dropped;
- :mod:`.offload` — fine-grained activation offload over the host link;
- :mod:`.layer` — the terms of one decoder layer together (:class:`LayerTime`);
- :mod:`.stage` — one pipeline stage's microbatch: its layers, MTP blocks, output layer, vision tower;
- :mod:`.pipeline` — the bubble and the stage-boundary sends;
- :mod:`.data_parallel` — gradient reduce-scatter, parameter all-gather, Megatron-FSDP, their overlap;
- :mod:`.optimizer` — the optimizer step (on the GPU, or offloaded to the host);
- :mod:`.notes` — the assumptions an estimate states.
"""
