"""What a checkpoint carries: the configuration and modeling files of the three families and the attention
mathematics they import. `save_pretrained` copies a model's modeling file and every file of this folder that it
imports with `from .sibling import Name` into the checkpoint, so these files are flat siblings that import only the
standard library, torch, transformers' public API and each other. This `__init__.py` is the one file here that no
checkpoint carries.
"""
