"""The Hydra configuration of ``python -m harness`` (YAML files only). Installed as the package ``tpcp_conf``
so that a non-editable install finds it (``harness/conf_paths.py``: ``CONF_DIR``)."""
