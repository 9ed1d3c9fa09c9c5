"""The notes a command gets before its first job: what a job sets that nothing reads, or past what the model
has. A note is not a problem: the job runs."""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from .job_checks import model_shape, picked_model, run_folders


def _unwritten(cfg: DictConfig, switches: list[str]) -> list[str]:
    """Notes on ``save_requests``, ``step_log`` (of ``switches``) set true where no run of the job writes such a
    file (``run_folders``)."""
    makes = run_folders(cfg)
    no_steps = "engine=hf" if cfg.engine == "hf" else f"workload={cfg.workload.name}"
    why = {"save_requests": ("requests", f"workload={cfg.workload.name} has no per-request file (a serve workload "
                                         f"has one, e.g. workload=serve)"),
           "step_log": ("steps", f"{no_steps} runs no engine steps to log")}
    return [f"note: {why[k][1]}: nothing reads {k}" for k in switches if cfg[k] and why[k][0] not in makes]


def job_notes(job: list[str], compose) -> list[str]:
    """Notes on what ``job`` sets that nothing reads, or past what the model has: ``llm.*`` under engine=hf,
    ``workload.cpu.*`` on a workload that does not scale on CPU, a file no run of the job writes (``_unwritten``),
    ``workload.max_token_id`` past the model's vocabulary (draws stop at its last id)."""
    keys = [a.lstrip("+").split("=", 1)[0] for a in job]
    llm = [k for k in keys if k.startswith("llm.")]
    cpu = [k for k in keys if k.startswith("workload.cpu.")]
    switches = [k for k in ("save_requests", "step_log") if k in keys]
    if not (llm or cpu or switches or "workload.max_token_id" in keys):
        return []
    cfg = compose(job)
    notes = _unwritten(cfg, switches)
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
