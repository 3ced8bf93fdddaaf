"""`safetensors.numpy`'s functions over archives: change the import, keep the calls.

    import brevis.numpy as b          # was: import safetensors.numpy as b
    tensors = b.load_file("model.safetensors.brv")       # dict name -> np.ndarray
    b.save_file(tensors, "model.safetensors.brv", metadata={"format": "np"})

bf16 and fp8 tensors are ml_dtypes arrays (ml_dtypes.bfloat16, float8_e5m2, float8_e4m3fn;
`a.view(np.uint16)` gives the raw bits). Tensors of GGUF quant types (Q4_0, Q8_0, ...) are uint8
arrays of their raw blocks, one row per row of the tensor.
"""

from . import _arrays

__all__ = ["load_file", "save_file", "load", "save", "safe_open", "load_folder"]


def load_file(filename):
    """Every tensor of the archive (or plain safetensors file) `filename`: dict name -> array."""
    return _arrays.load_file(filename, "np")


def load(data):
    """Every tensor of the archive bytes `data`."""
    return _arrays.load_bytes(data, "np")


def save(tensor_dict, metadata=None, **options):
    """The archive of the safetensors bytes `safetensors.numpy.save(tensor_dict, metadata)`
    returns. `options`: those of brevis.compress (threads, level, ...)."""
    return _arrays.save_bytes(tensor_dict, metadata, "np", **options)


def save_file(tensor_dict, filename, metadata=None, **options):
    """Writes `save(tensor_dict, metadata)` to `filename` (atomically: a temporary file, then a rename)."""
    _arrays.save_file(tensor_dict, filename, metadata, "np", **options)


def safe_open(filename, framework="np", device="cpu"):
    return _arrays.SafeOpen(filename, framework, device)


def load_folder(path):
    """Every tensor of a model folder's archives (see brevis.load_folder)."""
    return _arrays.load_folder(path, "np")
