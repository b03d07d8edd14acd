"""The modules of scripts/python/u3d_model.py (import that one): the networks of src/model/ in PyTorch
with the LibTorch names, the export readers and the inference."""
