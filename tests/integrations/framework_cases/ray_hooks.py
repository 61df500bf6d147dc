"""Ray ``worker_process_setup_hook`` entries the Ray cases need on a CPU machine."""

from __future__ import annotations


def openrlhf_on_cpu() -> object:
    """OpenRLHF's experience maker imports flash_attn and vllm (GPU only): stub them, then attach from the env."""
    from grpo_monitor.integrations import openrlhf

    openrlhf.stub_gpu_modules()
    return openrlhf.attach_from_env()
