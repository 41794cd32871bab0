"""Vision-language workloads: image tokens per sample from real image sizes (Qwen-VL dynamic
resolution), dataset statistics (``moeplan vlm-stats``) and the workload a scenario carries."""
