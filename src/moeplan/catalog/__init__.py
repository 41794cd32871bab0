"""Packaged reference data (model configs, GPU catalog) and their lazy loaders."""

from moeplan.catalog.gpus import GPU_IDS, get_gpu, list_gpus
from moeplan.catalog.models import COUNTING_CONVENTIONS, get_model, list_models, resolve_model_name

__all__ = [
    "COUNTING_CONVENTIONS",
    "GPU_IDS",
    "get_gpu",
    "get_model",
    "list_gpus",
    "list_models",
    "resolve_model_name",
]
