"""`safetensors.torch`'s functions over archives: change the import, keep the calls.

    import brevis.torch as b          # was: import safetensors.torch as b
    state = b.load_file("model.safetensors.brv", device="cpu")   # dict name -> torch.Tensor
    b.save_file(state, "model.safetensors.brv")

Tensors of GGUF quant types (Q4_0, Q8_0, ...) are uint8 tensors of their raw blocks, one row
per row of the tensor.
"""

from . import _arrays

__all__ = ["load_file", "save_file", "load", "save", "safe_open", "load_folder"]


def load_file(filename, device="cpu"):
    """Every tensor of the archive (or plain safetensors file) `filename`, on `device`."""
    return _arrays.load_file(filename, "pt", device)


def load(data, device="cpu"):
    """Every tensor of the archive bytes `data`."""
    return _arrays.load_bytes(data, "pt", device)


def save(tensors, metadata=None, **options):
    """The archive of the safetensors bytes `safetensors.torch.save(tensors, metadata)` returns.
    `options`: those of brevis.compress (threads, level, ...)."""
    return _arrays.save_bytes(tensors, metadata, "pt", **options)


def save_file(tensors, filename, metadata=None, **options):
    """Writes `save(tensors, metadata)` to `filename` (atomically: a temporary file, then a rename)."""
    _arrays.save_file(tensors, filename, metadata, "pt", **options)


def safe_open(filename, framework="pt", device="cpu"):
    return _arrays.SafeOpen(filename, framework, device)


def load_folder(path, device="cpu"):
    """Every tensor of a model folder's archives (see brevis.load_folder), on `device`."""
    return _arrays.load_folder(path, "pt", device)
