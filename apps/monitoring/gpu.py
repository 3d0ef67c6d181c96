"""GPU figures through NVML, only where the NVML bindings (nvidia-ml-py) are installed and a
GPU answers. No Django import: the worker reporter calls it, and it runs on a bare GPU host."""


def gpu_sample() -> list[dict]:
    """One dict per GPU (index, name, utilization %, memory used and total in bytes); an empty
    list when NVML is not installed, no driver is loaded or no GPU is present."""
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return []
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            gpus.append({"index": index, "name": name.decode() if isinstance(name, bytes) else name,
                         "utilization_percent": pynvml.nvmlDeviceGetUtilizationRates(handle).gpu,
                         "memory_used_bytes": memory.used, "memory_total_bytes": memory.total})
        return gpus
    except pynvml.NVMLError:
        return []
    finally:
        pynvml.nvmlShutdown()
