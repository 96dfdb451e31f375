"""What a training script of your own reuses: collators and pretraining data, `MaskedLMTrainer` and its callbacks,
task metrics, classification and question-answering pre- and post-processing, tokenizers and vocabularies, data
loading, model set-up and output folders. Nothing here imports the hub wing (`hf_attn_variants.hub`), and no
checkpoint carries it.
"""
