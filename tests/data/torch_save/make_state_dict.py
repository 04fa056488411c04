#!/usr/bin/env python3
"""Writes state_dict.bin as torch.save(state_dict) writes it, without torch (standard library only).

The pickle is made by Python's own pickle module at protocol 2 with a persistent_id hook, as torch.save
does; stand-ins registered under torch's module names make it emit the same globals. The zip is stored,
with each record's data 64-byte aligned through an "FB" padding extra field, as torch's writer lays it
out. Run: python3 make_state_dict.py [OUT]  (default: state_dict.bin beside this script).
"""
import collections
import os
import pickle
import struct
import sys
import types
import zipfile


def _module(name, **members):
    module = types.ModuleType(name)
    for key, value in members.items():
        value.__module__ = name
        value.__qualname__ = key
        value.__name__ = key
        setattr(module, key, value)
    sys.modules[name] = module
    return module


def _rebuild_tensor_v2(*args):
    raise AssertionError("only pickled, never called")


def _rebuild_parameter(*args):
    raise AssertionError("only pickled, never called")


STORAGE_CLASSES = {name: type(name, (), {}) for name in ("FloatStorage", "HalfStorage", "BFloat16Storage",
                                                         "LongStorage")}
_module("torch", **STORAGE_CLASSES)
_module("torch._utils", _rebuild_tensor_v2=_rebuild_tensor_v2, _rebuild_parameter=_rebuild_parameter)


class Storage:
    def __init__(self, key, storage_class, data, element_size):
        self.key, self.storage_class, self.data = key, storage_class, data
        self.numel = len(data) // element_size


class Tensor:
    """Reduces as torch.Tensor.__reduce_ex__ does for a plain CPU tensor."""

    def __init__(self, storage, offset, size, stride):
        self.args = (storage, offset, tuple(size), tuple(stride), False, collections.OrderedDict())

    def __reduce_ex__(self, protocol):
        return (_rebuild_tensor_v2, self.args)


class Parameter:
    """Reduces as torch.nn.Parameter.__reduce_ex__ does (a checkpoint saved with keep_vars=True)."""

    def __init__(self, tensor):
        self.tensor = tensor

    def __reduce_ex__(self, protocol):
        return (_rebuild_parameter, (self.tensor, True, collections.OrderedDict()))


class TorchPickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, Storage):
            return ("storage", STORAGE_CLASSES[obj.storage_class], obj.key, "cpu", obj.numel)
        return None


def bf16(values):
    return b"".join(struct.pack("<f", v)[2:] for v in values)  # exact for these values


def state_dict():
    weight = Storage("0", "FloatStorage", struct.pack("<12f", *[i / 4 for i in range(12)]), 4)
    half = Storage("1", "HalfStorage", struct.pack("<3e", 1.5, -2.0, 65504.0), 2)
    brain = Storage("2", "BFloat16Storage", bf16([3.0, -0.5, 256.0, 1.0]), 2)
    ids = Storage("3", "LongStorage", struct.pack("<2q", 1 << 40, -7), 8)
    empty = Storage("4", "FloatStorage", b"", 4)
    sd = collections.OrderedDict()
    sd["shared.weight"] = Tensor(weight, 0, (3, 4), (4, 1))
    sd["lm_head.weight"] = Tensor(weight, 0, (3, 4), (4, 1))  # tied: the same storage again
    sd["row"] = Tensor(weight, 8, (4,), (1,))
    sd["transposed"] = Tensor(weight, 0, (4, 3), (1, 4))
    sd["half"] = Tensor(half, 0, (3,), (1,))
    sd["bf16"] = Tensor(brain, 0, (2, 2), (2, 1))
    sd["ids"] = Tensor(ids, 0, (2,), (1,))
    sd["empty"] = Tensor(empty, 0, (0, 5), (5, 1))
    sd["param"] = Parameter(Tensor(weight, 4, (4,), (1,)))
    sd._metadata = collections.OrderedDict([("", {"version": 1}), ("shared", {"version": 1})])
    storages = [weight, half, brain, ids, empty]
    return sd, storages


def write(path):
    sd, storages = state_dict()
    buffer = __import__("io").BytesIO()
    TorchPickler(buffer, protocol=2).dump(sd)
    records = [("archive/data.pkl", buffer.getvalue()), ("archive/byteorder", b"little")]
    records += [("archive/data/" + s.key, s.data) for s in storages]
    records += [("archive/version", b"3\n"), ("archive/.data/serialization_id", b"0" * 40)]
    with open(path, "wb") as raw, zipfile.ZipFile(raw, "w", zipfile.ZIP_STORED) as archive:
        for name, data in records:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            unpadded = raw.tell() + 30 + len(name.encode()) + 4
            padding = -unpadded % 64
            info.extra = b"FB" + struct.pack("<H", padding) + b"Z" * padding
            archive.writestr(info, data)


if __name__ == "__main__":
    write(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "state_dict.bin"))
