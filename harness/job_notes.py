"""The notes a command gets before its first job: what a job sets that nothing reads, or past what the model
has. A note is not a problem: the job runs."""

from __future__ import annotations

from omegaconf import OmegaConf

from .job_checks import model_shape, picked_model


def job_notes(job: list[str], compose) -> list[str]:
    """Notes on what ``job`` sets that nothing reads, or past what the model has: ``llm.*`` under engine=hf,
    ``workload.cpu.*`` on a workload that does not scale on CPU, ``workload.max_token_id`` past the model's
    vocabulary (draws stop at its last id)."""
    keys = [a.lstrip("+").split("=", 1)[0] for a in job]
    llm = [k for k in keys if k.startswith("llm.")]
    cpu = [k for k in keys if k.startswith("workload.cpu.")]
    if not (llm or cpu or "workload.max_token_id" in keys):
        return []
    cfg = compose(job)
    notes = []
    if llm and cfg.engine == "hf":
        notes.append(f"note: engine=hf runs transformers' generate, which does not read {', '.join(llm)}")
    if cpu and not cfg.workload.get("scale_on_cpu"):
        notes.append(f"note: workload={cfg.workload.name} does not scale on CPU (scale_on_cpu=false): nothing reads "
                     f"{', '.join(cpu)}")
    if "workload.max_token_id" in keys:
        model = OmegaConf.to_container(picked_model(cfg.model, cfg.device))
        top = cfg.workload.max_token_id
        vocab = model_shape(model)["vocab_size"]
        if top >= vocab:
            notes.append(f"note: workload.max_token_id={top} is past the vocabulary of model={model['name']} "
                         f"({vocab} ids): token ids go up to {vocab - 1}")
    return notes
