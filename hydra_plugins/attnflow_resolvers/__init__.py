"""Registers conf/'s custom resolver ``${methods:study}`` when Hydra scans for plugins.

``dvc exp run`` composes conf/ with Hydra in its own process (``dvc config hydra.enabled``) and
loads the ``hydra_plugins`` packages of the repository root first. The resolver returns a
ListConfig here: dvc resolves the composed config without the study's schema, and OmegaConf only
puts a container on an untyped node.
"""

from omegaconf import OmegaConf

from pipelines._config import method_names

OmegaConf.register_new_resolver("methods", lambda which: OmegaConf.create(method_names(which)), replace=True)
