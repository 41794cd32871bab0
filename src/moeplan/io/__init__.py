"""Export to and import from what Megatron Bridge and Megatron-LM run."""
